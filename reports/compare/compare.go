// Package compare decides whether a new run is slower than a baseline, metric by metric, the
// way benchstat does: each side's samples are summarised by their median with an
// order-statistic confidence interval, the two sides are tested with Mann-Whitney U
// (golang.org/x/perf/benchmath, AssumeNothing), and a difference is only reported when the test
// says it is real (p < alpha). A regression additionally has to exceed the metric's tolerance,
// max(relative, absolute floor), with per-metric defaults taken from SGLang's long_term
// nightly tolerances; statistical significance alone would flag a 0.5% change on a quiet GPU.
package compare

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/perf/benchmath"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/perf"
)

// Row statuses.
const (
	StatusOK           = "ok"           // no significant change, or within tolerance
	StatusRegression   = "regression"   // significant and beyond tolerance, slower or bigger
	StatusImprovement  = "improvement"  // significant and beyond tolerance, faster or smaller
	StatusInsufficient = "insufficient" // too few samples for a confidence interval: no claim
	StatusWarning      = "warning"      // history mode: a violation not yet repeated Consecutive times
	StatusNoHistory    = "insufficient_data"
)

// Tolerance is how far a metric may move before a significant change counts: the larger of
// Rel times the baseline and Abs (in the metric's unit: ns or MB).
type Tolerance struct {
	Rel  float64 `json:"rel"`
	Abs  float64 `json:"abs,omitempty"`
	Text string  `json:"text"`
}

// Limit is the allowed absolute change from base.
func (t Tolerance) Limit(base float64) float64 {
	return math.Max(t.Rel*math.Abs(base), t.Abs)
}

// DefaultTolerances are SGLang's long_term nightly tolerances by metric class (its
// denoise_agg is our denoise_mean, its runtime_peak_vram our peak_memory), with the
// 120 ms absolute floor of its compare_perf.py for stages (a 10% swing of a 30 ms stage is
// noise, not a regression). request_latency follows e2e.
func DefaultTolerances() map[string]Tolerance {
	ms120 := float64(120 * time.Millisecond)
	return map[string]Tolerance{
		"e2e":               {Rel: 0.15, Text: "15%"},
		"denoise_stage":     {Rel: 0.10, Abs: ms120, Text: "10% or 120ms"},
		"non_denoise_stage": {Rel: 0.50, Abs: ms120, Text: "50% or 120ms"},
		"denoise_step":      {Rel: 0.25, Text: "25%"},
		"denoise_mean":      {Rel: 0.15, Text: "15%"},
		"peak_memory":       {Rel: 0.02, Text: "2%"},
		"request_latency":   {Rel: 0.15, Text: "15%"},
		// LLM serving: bench_serving has no tolerances; these keep run-to-run noise of a
		// simulated or quiet GPU below them while catching a 10-15 % shift.
		"ttft":       {Rel: 0.15, Text: "15%"},
		"tpot":       {Rel: 0.10, Text: "10%"},
		"itl":        {Rel: 0.10, Text: "10%"},
		"throughput": {Rel: 0.10, Text: "10%"},
		"goodput":    {Rel: 0.10, Text: "10%"},
	}
}

// sglangAliases are SGLang's perf-baseline names of our metric classes, accepted by
// --tolerance so a tolerance copied from perf_baselines.json works.
var sglangAliases = map[string]string{"denoise_mean": "denoise_agg", "peak_memory": "runtime_peak_vram"}

// ParseTolerance reads "10%", "10% or 120ms" or "2% or 256MB" (the plan's [compare]
// tolerances and the --tolerance flag).
func ParseTolerance(s string) (Tolerance, error) {
	t := Tolerance{Text: strings.TrimSpace(s)}
	relText, absText, hasAbs := strings.Cut(t.Text, " or ")
	relText = strings.TrimSpace(relText)
	pct, ok := strings.CutSuffix(relText, "%")
	if !ok {
		return t, fmt.Errorf("tolerance %q: want \"<rel>%%\" or \"<rel>%% or <abs>\" such as \"10%% or 120ms\"", s)
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(pct), 64)
	if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return t, fmt.Errorf("tolerance %q: %q is not a non-negative percentage", s, relText)
	}
	t.Rel = v / 100
	if hasAbs {
		absText = strings.TrimSpace(absText)
		if mb, ok := strings.CutSuffix(absText, "MB"); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(mb), 64)
			if err != nil || f < 0 {
				return t, fmt.Errorf("tolerance %q: %q is not a size in MB", s, absText)
			}
			t.Abs = f
		} else {
			d, err := time.ParseDuration(absText)
			if err != nil || d < 0 {
				return t, fmt.Errorf("tolerance %q: %q is neither a duration (\"120ms\") nor a size (\"256MB\")", s, absText)
			}
			t.Abs = float64(d)
		}
	}
	return t, nil
}

// Options configure a comparison.
type Options struct {
	// Alpha is the significance level; 0 means 0.05.
	Alpha float64
	// Confidence of the median's interval; 0 means 0.95.
	Confidence float64
	// Tolerances override DefaultTolerances; keys are metric classes ("denoise_stage") or
	// metric names ("stage/DecodingStage"), a metric name winning over its class.
	Tolerances map[string]Tolerance
}

// FromPlan converts the plan's [compare] table into Options (zero values keep the defaults).
func FromPlan(c plans.Compare) Options {
	o := Options{Alpha: c.Alpha}
	for k, t := range c.Tolerances {
		if o.Tolerances == nil {
			o.Tolerances = map[string]Tolerance{}
		}
		abs := float64(t.AbsNS)
		if t.AbsMB > 0 {
			abs = t.AbsMB
		}
		o.Tolerances[k] = Tolerance{Rel: t.Rel, Abs: abs, Text: t.Text}
	}
	return o
}

func (o *Options) defaults() {
	if o.Alpha <= 0 || o.Alpha >= 1 {
		o.Alpha = 0.05
	}
	if o.Confidence <= 0 || o.Confidence >= 1 {
		o.Confidence = 0.95
	}
}

// ToleranceFor returns the tolerance of one metric.
func (o *Options) ToleranceFor(metric string) Tolerance {
	if t, ok := o.Tolerances[metric]; ok {
		return t
	}
	class := perf.Class(metric)
	if t, ok := o.Tolerances[class]; ok {
		return t
	}
	// "stage" covers both stage classes (the plan's fallback); SGLang's names are aliases.
	if class == "denoise_stage" || class == "non_denoise_stage" {
		if t, ok := o.Tolerances["stage"]; ok {
			return t
		}
	}
	if alias, ok := sglangAliases[class]; ok {
		if t, ok := o.Tolerances[alias]; ok {
			return t
		}
	}
	if t, ok := DefaultTolerances()[class]; ok {
		return t
	}
	return Tolerance{Rel: 0.15, Text: "15%"}
}

// Stat summarises one side of a row.
type Stat struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	// Lo and Hi bound the confidence interval of the median; both are 0 when the sample is
	// too small for one (CI false).
	Lo float64 `json:"lo"`
	Hi float64 `json:"hi"`
	CI bool    `json:"ci"`
}

// Row is one (configuration, metric) comparison.
type Row struct {
	Config string `json:"config"`
	Metric string `json:"metric"`
	Class  string `json:"class"`
	Unit   string `json:"unit"`
	Base   Stat   `json:"base"`
	New    Stat   `json:"new"`
	// DeltaPct is the change of the median in percent; Delta is its benchstat rendering:
	// "+4.58%" when significant, "~" otherwise.
	DeltaPct float64 `json:"delta_pct"`
	Delta    string  `json:"delta"`
	// P is the Mann-Whitney p-value; -1 in history mode, where the baseline is a rolling
	// median and there is no test.
	P           float64 `json:"p"`
	Significant bool    `json:"significant"`
	Tolerance   string  `json:"tolerance"`
	// Limit is the allowed change in the metric's unit (max of the relative and the absolute
	// tolerance at the base median).
	Limit  float64 `json:"limit"`
	Status string  `json:"status"`
	// Violations counts consecutive runs beyond tolerance, the current one included (history
	// mode only).
	Violations int    `json:"violations,omitempty"`
	Note       string `json:"note,omitempty"`
}

// Result is a whole comparison.
type Result struct {
	Mode         string      `json:"mode"` // samples | history
	Base         string      `json:"base"`
	New          string      `json:"new"`
	Alpha        float64     `json:"alpha"`
	Profilers    []string    `json:"profilers"`
	Rows         []Row       `json:"rows"`
	Regressions  int         `json:"regressions"`
	Warnings     int         `json:"warnings"`
	Improvements int         `json:"improvements"`
	OnlyBase     []string    `json:"only_base,omitempty"`
	OnlyNew      []string    `json:"only_new,omitempty"`
	SkippedBase  []perf.Skip `json:"skipped_base,omitempty"`
	SkippedNew   []perf.Skip `json:"skipped_new,omitempty"`
	Notes        []string    `json:"notes,omitempty"`
	// Env is the env diff of the two runs (envdiff.go); nil when not checked.
	Env *EnvDiff `json:"env_diff,omitempty"`
	// KernelDiffs explain the regressed configurations at the kernel level (kerneldiff.go);
	// the runner attaches them, one per regressed configuration.
	KernelDiffs []KernelDiff `json:"kernel_diff,omitempty"`
}

// Regressed reports whether any row is a regression.
func (r *Result) Regressed() bool { return r.Regressions > 0 }

// RegressedMetrics names the (configuration, metric) pairs that regressed.
func (r *Result) RegressedMetrics() []string {
	var out []string
	for _, row := range r.Rows {
		if row.Status == StatusRegression {
			out = append(out, row.Config+" "+row.Metric)
		}
	}
	return out
}

// ErrNothingInCommon is returned (wrapped) when the two sides share no configuration.
var ErrNothingInCommon = errors.New("no configuration in common")

// Compare compares every metric of every configuration that both sides have.
func Compare(base, cur *perf.Set, opts Options) (*Result, error) {
	opts.defaults()
	res := &Result{Mode: "samples", Base: base.Source, New: cur.Source, Alpha: opts.Alpha, SkippedBase: base.Skipped, SkippedNew: cur.Skipped}
	for _, side := range []*perf.Set{base, cur} {
		if len(side.Configs) == 0 && len(side.Skipped) > 0 {
			return res, fmt.Errorf("%w: every cell of %s was left out (%d cells; the first: %s: %s)", ErrNothingInCommon, side.Source, len(side.Skipped), side.Skipped[0].Cell, side.Skipped[0].Reason)
		}
	}
	keys := commonKeys(base, cur, res)
	if len(keys) == 0 {
		return res, fmt.Errorf("%w between %s (%d configurations) and %s (%d configurations); compare runs of the same plan, or pass cell directories or perf dumps explicitly", ErrNothingInCommon, base.Source, len(base.Configs), cur.Source, len(cur.Configs))
	}
	if base.GPU != "" && cur.GPU != "" && base.GPU != cur.GPU {
		res.Notes = append(res.Notes, fmt.Sprintf("the GPU models differ (base %q, new %q): differences may be the hardware's, not the software's", base.GPU, cur.GPU))
	}
	th := &benchmath.Thresholds{CompareAlpha: opts.Alpha}
	for _, key := range keys {
		bc, nc := base.Configs[key], cur.Configs[key]
		for _, n := range bc.Notes {
			res.Notes = append(res.Notes, "base: "+n)
		}
		for _, n := range nc.Notes {
			res.Notes = append(res.Notes, "new: "+n)
		}
		for _, m := range nc.MetricNames() {
			bv, ok := bc.Metrics[m]
			if !ok {
				continue
			}
			res.Rows = append(res.Rows, compareMetric(key, m, bv, nc.Metrics[m], th, &opts))
		}
	}
	res.count()
	return res, nil
}

func commonKeys(base, cur *perf.Set, res *Result) []string {
	var keys []string
	// A single perf dump on either side matches whatever single configuration the other side
	// has: a perf dump carries no cell key.
	if (base.Kind == "perf-dump" || cur.Kind == "perf-dump" || base.Kind == "cell" || cur.Kind == "cell") && len(base.Configs) == 1 && len(cur.Configs) == 1 {
		bk, nk := base.Keys()[0], cur.Keys()[0]
		if bk != nk {
			c := *cur.Configs[nk]
			c.Key = bk
			cur.Configs = map[string]*perf.Config{bk: &c}
		}
		return []string{bk}
	}
	for _, k := range cur.Keys() {
		if _, ok := base.Configs[k]; ok {
			keys = append(keys, k)
		} else {
			res.OnlyNew = append(res.OnlyNew, k)
		}
	}
	for _, k := range base.Keys() {
		if _, ok := cur.Configs[k]; !ok {
			res.OnlyBase = append(res.OnlyBase, k)
		}
	}
	return keys
}

func (r *Result) count() {
	r.Regressions, r.Warnings, r.Improvements = 0, 0, 0
	for _, row := range r.Rows {
		switch row.Status {
		case StatusRegression:
			r.Regressions++
		case StatusWarning:
			r.Warnings++
		case StatusImprovement:
			r.Improvements++
		}
	}
}

// Count recomputes the totals after rows were added or changed.
func (r *Result) Count() { r.count() }

// Summarize is the median and 95% order-statistic interval of values (the interval only from
// 6 samples on).
func Summarize(values []float64) Stat {
	return summarize(benchmath.NewSample(append([]float64(nil), values...), &benchmath.DefaultThresholds), 0.95)
}

func summarize(s *benchmath.Sample, conf float64) Stat {
	sum := benchmath.AssumeNothing.Summary(s, conf)
	st := Stat{N: len(s.Values), Median: sum.Center}
	if !math.IsInf(sum.Lo, 0) && !math.IsInf(sum.Hi, 0) && len(sum.Warnings) == 0 {
		st.Lo, st.Hi, st.CI = sum.Lo, sum.Hi, true
	}
	return st
}

// compareMetric is the rule of the package doc for one metric.
func compareMetric(key, metric string, base, cur []float64, th *benchmath.Thresholds, opts *Options) Row {
	bs := benchmath.NewSample(append([]float64(nil), base...), th)
	ns := benchmath.NewSample(append([]float64(nil), cur...), th)
	tol := opts.ToleranceFor(metric)
	row := Row{Config: key, Metric: metric, Class: perf.Class(metric), Unit: perf.Unit(metric),
		Base: summarize(bs, opts.Confidence), New: summarize(ns, opts.Confidence), Tolerance: tol.Text, Status: StatusOK}
	row.Limit = tol.Limit(row.Base.Median)
	if row.Base.Median != 0 {
		row.DeltaPct = (row.New.Median/row.Base.Median - 1) * 100
	}
	if !row.Base.CI || !row.New.CI {
		// Without an interval on both sides a U-test verdict would rest on a handful of
		// samples; print the medians and say why nothing is claimed.
		_, need := medianSamples(opts.Confidence)
		row.P, row.Delta, row.Status = 1, "~", StatusInsufficient
		row.Note = fmt.Sprintf("need >= %d samples per side for a %.0f%% confidence interval (have %d and %d); no claim", need, opts.Confidence*100, row.Base.N, row.New.N)
		return row
	}
	c := benchmath.AssumeNothing.Compare(bs, ns)
	row.P = c.P
	row.Significant = c.P < opts.Alpha
	row.Delta = "~"
	if row.Significant {
		row.Delta = fmt.Sprintf("%+.2f%%", row.DeltaPct)
		diff := row.New.Median - row.Base.Median
		if perf.HigherIsBetter(metric) {
			diff = -diff // a drop of throughput is the regression
		}
		switch {
		case diff > row.Limit:
			row.Status = StatusRegression
		case -diff > row.Limit:
			row.Status = StatusImprovement
		}
	}
	if len(c.Warnings) > 0 && !strings.Contains(c.Warnings[0].Error(), "all samples are equal") {
		// Identical samples (a stage that takes a constant time) are not worth a footnote.
		row.Note = c.Warnings[0].Error()
	}
	return row
}

// medianSamples is the smallest sample with a finite order-statistic interval of the median at
// the given confidence: the interval [x(1), x(n)] covers the median with probability
// 1 - 2·0.5^n.
func medianSamples(conf float64) (string, int) {
	for n := 1; n < 1000; n++ {
		if 1-2*math.Pow(0.5, float64(n)) >= conf {
			return ">=", n
		}
	}
	return ">", 1000
}

// SortRows orders rows by configuration and then by the metric order of perf.Config.
func SortRows(rows []Row) {
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Config < rows[j].Config })
}
