package plans

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// CompareMetrics are the metric names [compare.tolerances] accepts, in documentation order.
// They follow the metric classes of SGLang's perf baselines (e2e, denoise stage, non-denoise
// stage, denoise step, denoise aggregate, peak memory) plus the serve metrics.
var CompareMetrics = []string{
	"e2e",               // end-to-end time of one request or generate call
	"stage",             // any pipeline stage (the fallback for the two below)
	"denoise_stage",     // the denoising stage as a whole
	"non_denoise_stage", // text encoding, VAE decode, ...
	"denoise_step",      // one denoising step (each step is a sample)
	"denoise_mean",      // the mean denoising step of a run
	"peak_memory",       // peak GPU memory (floor in MB)
	"request_latency",   // serve: client-side latency of one request
	"throughput",        // serve: images/s or tokens/s (relative only); higher is better
	"ttft",              // LLM serve: time to first token of one request
	"tpot",              // LLM serve: time per output token after the first, of one request
	"itl",               // LLM serve: one inter-token latency
	"goodput",           // LLM serve: requests/s that met [load] slo_ttft/slo_tpot (relative only); higher is better
}

// MaxTolerancePercent bounds the relative part of a tolerance: beyond 1000% a tolerance no
// longer catches anything, and such a number is almost always a typo ("10000%" for "10.000%").
const MaxTolerancePercent = 1000

// ParseTolerance parses "<rel>%" or "<rel>% or <abs>": rel is a number of percent in
// [0, MaxTolerancePercent]; abs is a Go duration ("120ms") or a size with MB, GB, MiB or GiB
// ("256MB"), and must be > 0. Sizes are kept in MB, the unit of sglang's *_mb fields (which
// count 2^20 bytes): MB and MiB are both one unit and GB and GiB both 1024, so "256MB" is 256
// of the numbers a report shows. Which metrics take which floor is checked by Parse, not here.
func ParseTolerance(s string) (Tolerance, error) {
	t := Tolerance{Text: s}
	const form = `write it as "10%" or "10% or 120ms" (a duration) or "2% or 256MB" (a size)`
	num, rest, ok := strings.Cut(s, "%")
	if !ok {
		return t, fmt.Errorf("tolerance %q has no percentage; %s", s, form)
	}
	num = strings.TrimSpace(num)
	rel, err := strconv.ParseFloat(num, 64)
	if err != nil || num == "" || strings.ContainsAny(num, "eEinIN_xXpP+") {
		return t, fmt.Errorf("tolerance %q: %q is not a number of percent; %s", s, num+"%", form)
	}
	if math.IsNaN(rel) || rel < 0 || rel > MaxTolerancePercent {
		return t, fmt.Errorf("tolerance %q: %s%% is outside 0%%..%d%%; a regression is a change beyond it, so use e.g. \"10%%\"", s, num, MaxTolerancePercent)
	}
	t.Rel = rel / 100
	rest = strings.TrimSpace(rest)
	if rest == "" {
		return t, nil
	}
	abs, ok := strings.CutPrefix(rest, "or")
	if !ok || (abs != "" && abs[0] != ' ' && abs[0] != '\t') {
		return t, fmt.Errorf("tolerance %q: %q after the percentage is not \"or <floor>\"; %s", s, rest, form)
	}
	abs = strings.TrimSpace(abs)
	if abs == "" {
		return t, fmt.Errorf("tolerance %q: nothing after \"or\"; %s", s, form)
	}
	if mb, isSize, err := parseSizeMB(abs); isSize {
		if err != nil {
			return t, fmt.Errorf("tolerance %q: %v", s, err)
		}
		t.AbsMB = mb
		return t, nil
	}
	dur, err := time.ParseDuration(abs)
	if err != nil {
		return t, fmt.Errorf("tolerance %q: %q is neither a duration (\"120ms\") nor a size (\"256MB\", \"1GiB\"); %s", s, abs, form)
	}
	if dur <= 0 {
		return t, fmt.Errorf("tolerance %q: the absolute floor %v must be > 0; drop \" or %s\" for no floor", s, dur, abs)
	}
	t.AbsNS = int64(dur)
	return t, nil
}

// sizeUnits maps size suffixes to MB (see ParseTolerance); longest suffixes first.
var sizeUnits = []struct {
	suffix string
	mb     float64
}{{"MiB", 1}, {"GiB", 1024}, {"MB", 1}, {"GB", 1024}}

// parseSizeMB parses "<number><unit>". isSize is false when s has no size unit at all (so
// the caller tries a duration); err says what is wrong with a size that has one.
func parseSizeMB(s string) (mb float64, isSize bool, err error) {
	for _, u := range sizeUnits {
		num, ok := strings.CutSuffix(s, u.suffix)
		if !ok {
			continue
		}
		num = strings.TrimSpace(num)
		v, perr := strconv.ParseFloat(num, 64)
		if perr != nil || num == "" || strings.ContainsAny(num, "eEinIN_xXpP+") || math.IsNaN(v) {
			return 0, true, fmt.Errorf("%q is not a size; write a number and a unit such as \"256MB\" or \"1GiB\"", s)
		}
		if v <= 0 || v > 1<<30 {
			return 0, true, fmt.Errorf("the absolute floor %q must be > 0 (and sensible); drop \" or %s\" for no floor", s, s)
		}
		return v * u.mb, true, nil
	}
	return 0, false, nil
}

// fits checks that the absolute floor suits the metric: a memory floor for peak_memory, a
// time floor for the latency metrics, and none for throughput (a rate has no floor in either).
func (t Tolerance) fits(metric string) error {
	switch {
	case (metric == "throughput" || metric == "goodput") && (t.AbsNS != 0 || t.AbsMB != 0):
		return fmt.Errorf("tolerance %q: %s takes a relative tolerance only (a rate has no time or size floor); write e.g. \"10%%\"", t.Text, metric)
	case metric == "peak_memory" && t.AbsNS != 0:
		return fmt.Errorf("tolerance %q: peak_memory needs a size floor such as \"2%% or 256MB\", not a duration", t.Text)
	case metric != "peak_memory" && t.AbsMB != 0:
		return fmt.Errorf("tolerance %q: %s is a time; its floor is a duration such as \"10%% or 120ms\", not a size", t.Text, metric)
	}
	return nil
}
