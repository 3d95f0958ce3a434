// Package compare decides whether a new run is slower than a baseline, metric by metric, in the
// manner of benchstat, with the run as the unit of evidence:
//
//   - The samples of a test are per-run values (perf.Config.Runs: one per cell, the median of
//     its denoising steps or requests where it has many). Steps of one run share that run's
//     machine state, so 150 steps of three runs are three samples of run-to-run noise, not 150.
//   - The test is Welch's t-test on the logarithms of those values (a ratio test: noise and
//     changes of latency are multiplicative). Unlike Mann-Whitney U, which cannot go below
//     p = 0.1 with three values a side however far apart, it decides at n = 2 or 3 when the
//     values are tight, and says nothing when they are not.
//   - Every row states its minimum detectable change (MDC): the smallest true change that the
//     test finds with 80% probability at the configured alpha, from the two sample sizes and the
//     measured spread. A change below it may read "~" although something changed.
//   - A regression must be significant (p < alpha) and beyond the metric's tolerance,
//     max(relative, absolute floor), with per-metric defaults taken from SGLang's long_term
//     nightly tolerances; statistical significance alone would flag a 0.5% change on a quiet GPU.
//
// With one run a side there is no run-to-run spread to test against: a metric with many samples
// in each run (steps, requests) is then tested on those, and the row says that it compares the
// two runs only, not what a rerun would measure; others get no test ("n too small").
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
	"github.com/sglprof/runner/reports/stats"
)

// Row statuses.
const (
	StatusOK           = "ok"           // no significant change, or within tolerance
	StatusRegression   = "regression"   // significant and beyond tolerance, slower or bigger
	StatusImprovement  = "improvement"  // significant and beyond tolerance, faster or smaller
	StatusInsufficient = "insufficient" // one run a side and nothing to test: no claim
	StatusWarning      = "warning"      // history mode: a violation not yet repeated Consecutive times
	StatusNoHistory    = "insufficient_data"
)

// Tests a row can be judged by (Row.Test).
const (
	// TestRuns is Welch's t-test on the logs of the per-run values (two or more runs a side).
	TestRuns = "welch_log_runs"
	// TestWithinRun is Welch's t-test on the logs of the samples inside one run a side (steps,
	// requests): it says whether the two runs differ, not whether a rerun would.
	TestWithinRun = "welch_log_within_run"
	// TestNone: too few values to test (one run a side and one value in it).
	TestNone = "none"
	// TestHistory: the history baseline, a rolling median and a noise-calibrated tolerance.
	TestHistory = "history"
)

// DefaultPower is the probability with which a change of the minimum detectable size is found.
const DefaultPower = 0.8

// AssumedRunCV is the run-to-run coefficient of variation assumed for a plan's power before any
// run measured it (runner plan without a history): about what an unprofiled diffusion run on
// a dedicated GPU with unlocked clocks shows.
const AssumedRunCV = 0.02

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
	// Power of the minimum detectable change; 0 means DefaultPower.
	Power float64
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
	if o.Power <= 0 || o.Power >= 1 {
		o.Power = DefaultPower
	}
}

// Defaults returns o with its zero fields set to their defaults.
func (o Options) Defaults() Options {
	o.defaults()
	return o
}

// Explicit returns the tolerance of metric that the plan or a flag set (by metric name, class,
// "stage" or SGLang alias), and false when only the built-in default would apply: a history
// baseline calibrates those to the measured noise, but never overrides a tolerance someone
// wrote down.
func (o *Options) Explicit(metric string) (Tolerance, bool) {
	if t, ok := o.Tolerances[metric]; ok {
		return t, true
	}
	class := perf.Class(metric)
	if t, ok := o.Tolerances[class]; ok {
		return t, true
	}
	// "stage" covers both stage classes (the plan's fallback); SGLang's names are aliases.
	if class == "denoise_stage" || class == "non_denoise_stage" {
		if t, ok := o.Tolerances["stage"]; ok {
			return t, true
		}
	}
	if alias, ok := sglangAliases[class]; ok {
		if t, ok := o.Tolerances[alias]; ok {
			return t, true
		}
	}
	return Tolerance{}, false
}

// ToleranceFor returns the tolerance of one metric: the explicit one, else the default of its
// class.
func (o *Options) ToleranceFor(metric string) Tolerance {
	if t, ok := o.Explicit(metric); ok {
		return t
	}
	if t, ok := DefaultTolerances()[perf.Class(metric)]; ok {
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
	// Test names how the row was judged (Test* constants).
	Test string `json:"test"`
	// P is the two-sided p-value of the test; -1 when there was none (history mode, where the
	// baseline is a rolling median, or too few values).
	P           float64 `json:"p"`
	Significant bool    `json:"significant"`
	// MDCPct is the minimum detectable change in percent: the smallest true change the row's
	// test finds with Result.Power probability at Result.Alpha, from its sample sizes and the
	// measured spread (history mode: the tolerance plus the run-to-run noise it must clear on
	// Consecutive runs). -1 when it cannot be stated (no test, or no measured noise).
	MDCPct float64 `json:"mdc_pct"`
	// NoisePct is the run-to-run noise a history tolerance was calibrated to (a robust standard
	// deviation, in percent); nil in samples mode and before the history has enough runs.
	NoisePct  *float64 `json:"noise_pct,omitempty"`
	Tolerance string   `json:"tolerance"`
	// Limit is the allowed change in the metric's unit (max of the relative and the absolute
	// tolerance at the base median).
	Limit  float64 `json:"limit"`
	Status string  `json:"status"`
	// Violations counts consecutive runs beyond tolerance, the current one included (history
	// mode only).
	Violations int `json:"violations,omitempty"`
	// Change is where the step change that a violating history row belongs to began (history
	// mode only): the run to start a bisection from.
	Change *ChangePoint `json:"change,omitempty"`
	Note   string       `json:"note,omitempty"`
}

// ChangePoint is the first run of a step change in a metric's history.
type ChangePoint struct {
	RunID string    `json:"run_id"`
	Time  time.Time `json:"time,omitzero"`
	// RunsAgo counts the runs after it up to the judged run (0: the judged run itself).
	RunsAgo int `json:"runs_ago"`
	// ShiftPct is the change of the median level, in percent; P the p-value of Student's t-test
	// of the runs before against the runs from it on (log medians).
	ShiftPct float64 `json:"shift_pct"`
	P        float64 `json:"p"`
}

// History reports whether the row compares with a history baseline.
func (r Row) History() bool { return r.Test == TestHistory }

// Result is a whole comparison.
type Result struct {
	Mode         string      `json:"mode"` // samples | history
	Base         string      `json:"base"`
	New          string      `json:"new"`
	Alpha        float64     `json:"alpha"`
	Power        float64     `json:"power"`
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
			s := row.Config + " " + row.Metric
			if row.Change != nil {
				s += " (began at run " + row.Change.RunID + ")"
			}
			out = append(out, s)
		}
	}
	return out
}

// ErrNothingInCommon is returned (wrapped) when the two sides share no configuration.
var ErrNothingInCommon = errors.New("no configuration in common")

// Compare compares every metric of every configuration that both sides have.
func Compare(base, cur *perf.Set, opts Options) (*Result, error) {
	opts.defaults()
	res := &Result{Mode: "samples", Base: base.Source, New: cur.Source, Alpha: opts.Alpha, Power: opts.Power, SkippedBase: base.Skipped, SkippedNew: cur.Skipped}
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
			if len(bv) == 0 {
				continue
			}
			res.Rows = append(res.Rows, compareMetric(key, m, bc, nc, &opts))
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
	return summarize(values, 0.95)
}

func summarize(values []float64, conf float64) Stat {
	s := benchmath.NewSample(append([]float64(nil), values...), &benchmath.DefaultThresholds)
	sum := benchmath.AssumeNothing.Summary(s, conf)
	st := Stat{N: len(s.Values), Median: sum.Center}
	if !math.IsInf(sum.Lo, 0) && !math.IsInf(sum.Hi, 0) && len(sum.Warnings) == 0 {
		st.Lo, st.Hi, st.CI = sum.Lo, sum.Hi, true
	}
	return st
}

// compareMetric is the rule of the package doc for one metric.
func compareMetric(key, metric string, bc, nc *perf.Config, opts *Options) Row {
	base, cur := bc.RunValues(metric), nc.RunValues(metric)
	test := TestRuns
	if len(base) == 1 && len(cur) == 1 && len(bc.Metrics[metric]) >= 2 && len(nc.Metrics[metric]) >= 2 {
		base, cur, test = bc.Metrics[metric], nc.Metrics[metric], TestWithinRun
	}
	tol := opts.ToleranceFor(metric)
	row := Row{Config: key, Metric: metric, Class: perf.Class(metric), Unit: perf.Unit(metric),
		Base: summarize(base, opts.Confidence), New: summarize(cur, opts.Confidence), Tolerance: tol.Text,
		Status: StatusOK, Test: test, P: -1, MDCPct: -1, Delta: "~"}
	row.Limit = tol.Limit(row.Base.Median)
	if row.Base.Median != 0 {
		row.DeltaPct = (row.New.Median/row.Base.Median - 1) * 100
	}
	lb, okb := stats.Logs(base)
	ln, okn := stats.Logs(cur)
	if !okb || !okn {
		// A zero (a stage sglang timed at 0 ms) has no logarithm: test the values themselves.
		lb, ln = base, cur
	}
	t, ok := stats.Welch(lb, ln)
	if !ok {
		row.Test, row.Status = TestNone, StatusInsufficient
		row.Note = fmt.Sprintf("%d and %d run(s) with one value each: no run-to-run spread to test against, so no claim; repeats = 3 or more a side let the t-test decide", len(base), len(cur))
		return row
	}
	row.P = t.P
	row.MDCPct = mdcPct(t, okb && okn, row.Base.Median, opts)
	row.Significant = t.P < opts.Alpha
	if test == TestWithinRun {
		row.Note = fmt.Sprintf("one run a side: tested on the %d and %d samples inside the two runs, which says these two runs differ, not that a rerun would; repeats = 3 or more a side test run-to-run", len(base), len(cur))
	}
	if !row.Significant {
		return row
	}
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
	return row
}

// mdcPct turns the test's standard error into the minimum detectable change in percent: on
// the log scale the detectable shift is a ratio; on the raw scale (values with a zero) it is
// relative to the base median.
func mdcPct(t stats.TTest, logs bool, base float64, opts *Options) float64 {
	d := stats.DetectableShift(t.SE, t.DF, opts.Alpha, opts.Power)
	if math.IsNaN(d) || math.IsInf(d, 0) {
		return -1
	}
	if logs {
		return (math.Exp(d) - 1) * 100
	}
	if base == 0 {
		return -1
	}
	return d / math.Abs(base) * 100
}

// PlannedMDC is the minimum detectable change (a fraction) of a comparison of runs a side,
// each run's value having coefficient of variation cv: Welch's t-test with equal spread and n
// a side has 2(n−1) degrees of freedom and a standard error of cv·sqrt(2/n) on the log scale.
// ok is false with fewer than two runs a side, where no run-to-run test exists.
func PlannedMDC(runs int, cv, alpha, power float64) (float64, bool) {
	if runs < 2 {
		return 0, false
	}
	o := Options{Alpha: alpha, Power: power}
	o.defaults()
	d := stats.DetectableShift(cv*math.Sqrt(2/float64(runs)), float64(2*(runs-1)), o.Alpha, o.Power)
	return math.Exp(d) - 1, true
}

// RunsFor is the smallest number of runs a side whose PlannedMDC is at most target (up to 100),
// and 0 when even 100 are not enough.
func RunsFor(target, cv, alpha, power float64) int {
	for n := 2; n <= 100; n++ {
		if m, ok := PlannedMDC(n, cv, alpha, power); ok && m <= target {
			return n
		}
	}
	return 0
}

// SortRows orders rows by configuration and then by the metric order of perf.Config.
func SortRows(rows []Row) {
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Config < rows[j].Config })
}
