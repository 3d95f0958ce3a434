package compare

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/reports/stats"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// noisy returns n samples around center with ±1% uniform noise, reproducibly.
func noisy(seed uint64, n int, center float64) []float64 {
	r := rand.New(rand.NewPCG(seed, 7))
	out := make([]float64, n)
	for i := range out {
		out[i] = center * (1 + (r.Float64()-0.5)*0.02)
	}
	return out
}

func set(src string, metric string, v []float64) *perf.Set {
	return &perf.Set{Source: src, Kind: "run", Configs: map[string]*perf.Config{
		"cfg": {Key: "cfg", Metrics: map[string][]float64{metric: v}},
	}}
}

func one(t *testing.T, metric string, base, cur []float64) Row {
	t.Helper()
	res, err := Compare(set("a", metric, base), set("b", metric, cur), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 1 {
		t.Fatalf("rows = %d", len(res.Rows))
	}
	return res.Rows[0]
}

func TestNoChange(t *testing.T) {
	r := one(t, perf.MetricE2E, noisy(1, 10, 1e9), noisy(2, 10, 1e9))
	if r.Status != StatusOK || r.Delta != "~" || r.Significant {
		t.Fatalf("no change: %+v", r)
	}
}

func TestShift15PercentIsRegression(t *testing.T) {
	// e2e tolerance is 15%; a 20% shift on 10 samples is significant and beyond it, a 15%
	// shift of denoise_step (tolerance 25%) is significant but within it.
	r := one(t, perf.MetricE2E, noisy(1, 10, 1e9), noisy(2, 10, 1.2e9))
	if r.Status != StatusRegression || !r.Significant || r.Delta[0] != '+' {
		t.Fatalf("+20%% e2e: %+v", r)
	}
	r = one(t, perf.StagePrefix+"DenoisingStage", noisy(1, 10, 1e9), noisy(2, 10, 1.15e9))
	if r.Status != StatusRegression {
		t.Fatalf("+15%% DenoisingStage (tolerance 10%% or 120ms): %+v", r)
	}
	r = one(t, perf.MetricDenoiseStep, noisy(1, 10, 1e8), noisy(2, 10, 1.15e8))
	if r.Status != StatusOK || !r.Significant {
		t.Fatalf("+15%% denoise_step (tolerance 25%%): significant but within tolerance: %+v", r)
	}
	// The absolute floor: a +50% change of a 100 ms stage is 50 ms, under 120 ms.
	r = one(t, perf.StagePrefix+"DecodingStage", noisy(1, 10, 1e8), noisy(2, 10, 1.5e8))
	if r.Status != StatusOK || r.Limit != float64(120e6) {
		t.Fatalf("floor: %+v", r)
	}
	// Faster is an improvement, never a regression.
	r = one(t, perf.MetricE2E, noisy(1, 10, 1e9), noisy(2, 10, 0.7e9))
	if r.Status != StatusImprovement {
		t.Fatalf("faster: %+v", r)
	}
}

func TestOneOutlierIsNoRegression(t *testing.T) {
	cur := noisy(2, 10, 1e9)
	cur[3] = 5e9 // one request hit a GC pause
	r := one(t, perf.MetricE2E, noisy(1, 10, 1e9), cur)
	if r.Status == StatusRegression || r.Significant {
		t.Fatalf("one outlier: %+v", r)
	}
}

// Three runs a side, 20 % apart with 1 % noise: a rank test cannot go below p = 0.1 there and
// printed p=1.000 with "n too small"; the t-test on the runs decides, and the MDC says how small
// a change it could have seen.
func TestThreeRunsDecide(t *testing.T) {
	r := one(t, perf.MetricE2E, noisy(1, 3, 1e9), noisy(2, 3, 1.2e9))
	if r.Status != StatusRegression || !r.Significant || !(r.P < 0.01) || r.Test != TestRuns {
		t.Fatalf("3 vs 3 runs, +20%%: %+v", r)
	}
	if !(r.MDCPct > 0 && r.MDCPct < 10) {
		t.Fatalf("MDC %v%%: 1%% noise and 3 runs a side see a change well under 10%%", r.MDCPct)
	}
	// The same runs without the shift: no claim, and the MDC is still stated.
	r = one(t, perf.MetricE2E, noisy(1, 3, 1e9), noisy(2, 3, 1e9))
	if r.Status != StatusOK || r.Significant || r.Delta != "~" || !(r.MDCPct > 0) {
		t.Fatalf("3 vs 3 runs, no change: %+v", r)
	}
	// Noisy runs (±15 %) cannot see 5 %: the MDC says so, and the row makes no claim.
	r = one(t, perf.MetricE2E, []float64{0.85e9, 1e9, 1.15e9}, []float64{0.9e9, 1.05e9, 1.2e9})
	if r.Significant || !(r.MDCPct > 20) {
		t.Fatalf("noisy runs: %+v", r)
	}
}

// Denoise steps are not samples of run-to-run noise: 150 steps of three runs are three
// samples. Per-step jitter that differs between the two runs makes a tiny shift significant
// on the steps; on the runs it is not.
func TestStepsAreNotIndependentSamples(t *testing.T) {
	mk := func(src string, seed uint64, level float64) *perf.Set {
		c := &perf.Config{Key: "cfg", Metrics: map[string][]float64{}, Runs: map[string][]float64{}}
		for run := range 3 {
			steps := noisy(seed+uint64(run), 50, level*(1+0.01*float64(run-1)))
			c.Metrics[perf.MetricDenoiseStep] = append(c.Metrics[perf.MetricDenoiseStep], steps...)
			c.Runs[perf.MetricDenoiseStep] = append(c.Runs[perf.MetricDenoiseStep], stats.Median(stats.Sorted(steps)))
		}
		return &perf.Set{Source: src, Kind: "run", Configs: map[string]*perf.Config{"cfg": c}}
	}
	res, err := Compare(mk("a", 1, 1e8), mk("b", 10, 1.004e8), Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Rows[0]
	if r.Base.N != 3 || r.New.N != 3 || r.Test != TestRuns || r.Significant {
		t.Fatalf("steps of 3 runs: %+v", r)
	}
}

// One run a side: a metric with many samples inside each run is tested on them and says so.
func TestOneRunASideWithinRun(t *testing.T) {
	mk := func(src string, seed uint64, level float64) *perf.Set {
		steps := noisy(seed, 50, level)
		c := &perf.Config{Key: "cfg", Metrics: map[string][]float64{perf.MetricDenoiseStep: steps, perf.MetricE2E: {level * 50}},
			Runs: map[string][]float64{perf.MetricDenoiseStep: {stats.Median(stats.Sorted(steps))}, perf.MetricE2E: {level * 50}}}
		return &perf.Set{Source: src, Kind: "run", Configs: map[string]*perf.Config{"cfg": c}}
	}
	res, err := Compare(mk("a", 1, 1e8), mk("b", 2, 1.3e8), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := WriteText(&text, res); err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Rows {
		switch r.Metric {
		case perf.MetricE2E:
			if r.Test != TestNone || r.Status != StatusInsufficient || r.P != -1 {
				t.Errorf("e2e, one value a side: %+v", r)
			}
		case perf.MetricDenoiseStep:
			if r.Test != TestWithinRun || r.Status != StatusRegression || r.New.N != 50 {
				t.Errorf("steps, one run a side: %+v", r)
			}
		}
	}
	for _, want := range []string{"(no test n=1)", "in 1 run)", "not that a rerun would"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	if strings.Contains(text.String(), "p=1.000") {
		t.Errorf("p=1.000 printed for values that differ:\n%s", text.String())
	}
}

func TestPlannedMDC(t *testing.T) {
	// 2 % noise: 2 runs a side cannot see 10 %, 3 can; more runs see less.
	m2, _ := PlannedMDC(2, 0.02, 0.05, 0.8)
	m3, _ := PlannedMDC(3, 0.02, 0.05, 0.8)
	m6, _ := PlannedMDC(6, 0.02, 0.05, 0.8)
	if !(m2 > 0.10 && m3 < 0.10 && m6 < m3) {
		t.Fatalf("MDC 2/3/6 runs = %v %v %v", m2, m3, m6)
	}
	if _, ok := PlannedMDC(1, 0.02, 0.05, 0.8); ok {
		t.Fatal("one run a side has no run-to-run test")
	}
	if n := RunsFor(0.10, 0.02, 0.05, 0.8); n != 3 {
		t.Fatalf("RunsFor(10%%) = %d, want 3", n)
	}
}

func TestTooFewSamplesNoClaim(t *testing.T) {
	r := one(t, perf.MetricE2E, []float64{1e9}, []float64{2e9})
	if r.Status != StatusInsufficient || r.Significant || r.Delta != "~" || r.New.CI || r.New.Median != 2e9 || r.Test != TestNone || r.MDCPct != -1 {
		t.Fatalf("n=1: %+v", r)
	}
}

func TestNothingInCommon(t *testing.T) {
	a := set("a", perf.MetricE2E, noisy(1, 6, 1))
	b := &perf.Set{Source: "b", Kind: "run", Configs: map[string]*perf.Config{"other": {Key: "other", Metrics: map[string][]float64{perf.MetricE2E: {1}}}}}
	if _, err := Compare(a, b, Options{}); !errors.Is(err, ErrNothingInCommon) {
		t.Fatalf("err = %v", err)
	}
}

func TestAllCellsSkipped(t *testing.T) {
	a := set("a", perf.MetricE2E, noisy(1, 6, 1))
	b := &perf.Set{Source: "b", Kind: "run", Configs: map[string]*perf.Config{}, Skipped: []perf.Skip{{Cell: "000-torch", Reason: "profiler \"torch\" distorts timings"}}}
	_, err := Compare(a, b, Options{})
	if !errors.Is(err, ErrNothingInCommon) || !strings.Contains(err.Error(), "000-torch") {
		t.Fatalf("err = %v", err)
	}
}

func TestParseTolerance(t *testing.T) {
	for in, want := range map[string]Tolerance{
		"10%":          {Rel: 0.10, Text: "10%"},
		"10% or 120ms": {Rel: 0.10, Abs: 120e6, Text: "10% or 120ms"},
		"2% or 256MB":  {Rel: 0.02, Abs: 256, Text: "2% or 256MB"},
	} {
		got, err := ParseTolerance(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"10", "-5%", "10% or fast", "x%"} {
		if _, err := ParseTolerance(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestOptionOverrides(t *testing.T) {
	o := Options{Tolerances: map[string]Tolerance{"stage/DecodingStage": {Rel: 0.01, Text: "1%"}, "non_denoise_stage": {Rel: 0.3, Text: "30%"}}}
	if got := o.ToleranceFor("stage/DecodingStage").Text; got != "1%" {
		t.Errorf("metric override: %s", got)
	}
	if got := o.ToleranceFor("stage/TextEncodingStage").Text; got != "30%" {
		t.Errorf("class override: %s", got)
	}
	if got := o.ToleranceFor("stage/DenoisingStage").Text; got != "10% or 120ms" {
		t.Errorf("default: %s", got)
	}
	o = Options{Tolerances: map[string]Tolerance{"stage": {Rel: 0.4, Text: "40%"}, "denoise_agg": {Rel: 0.3, Text: "30%"}}}
	if got := o.ToleranceFor("stage/DenoisingStage").Text; got != "40%" {
		t.Errorf("stage fallback: %s", got)
	}
	if got := o.ToleranceFor(perf.MetricDenoiseMean).Text; got != "30%" {
		t.Errorf("SGLang alias denoise_agg: %s", got)
	}
	if got := o.ToleranceFor(perf.MetricPeakMemory).Text; got != "2%" {
		t.Errorf("peak memory default: %s", got)
	}
}

// goldenSets is a fixed two-configuration comparison: one regression, one steady, one with
// too few samples.
func goldenSets() (*perf.Set, *perf.Set) {
	mk := func(src string, scale float64, seed uint64) *perf.Set {
		s := &perf.Set{Source: src, Kind: "run", Configs: map[string]*perf.Config{}}
		s.Configs["qwen/1024x1024"] = &perf.Config{Key: "qwen/1024x1024", Metrics: map[string][]float64{
			perf.MetricE2E:                      noisy(seed, 6, 2e9*scale),
			perf.StagePrefix + "DenoisingStage": noisy(seed+1, 6, 1.5e9*scale),
			perf.StagePrefix + "DecodingStage":  noisy(seed+2, 6, 3e7),
			perf.MetricPeakMemory:               {50000, 50000, 50000, 50000, 50000, 50000},
		}}
		s.Configs["qwen/512x512"] = &perf.Config{Key: "qwen/512x512", Metrics: map[string][]float64{
			perf.MetricE2E: noisy(seed+3, 3, 5e8),
		}}
		return s
	}
	return mk("runs/base", 1, 10), mk("runs/new", 1.3, 20)
}

func TestGoldenFormats(t *testing.T) {
	for _, f := range Formats {
		t.Run(f, func(t *testing.T) {
			base, cur := goldenSets()
			res, err := Compare(base, cur, Options{})
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := Write(&b, f, res, base, cur); err != nil {
				t.Fatal(err)
			}
			golden(t, "compare."+f+".golden", b.Bytes())
			if res.Regressions != 2 {
				t.Errorf("regressions = %d, want 2 (e2e and DenoisingStage)", res.Regressions)
			}
		})
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test ./reports/compare -update to accept):\n%s", name, got)
	}
}

func BenchmarkCompare500Cells(b *testing.B) {
	base, cur := syntheticSets(500, 50)
	b.ResetTimer()
	for range b.N {
		res, err := Compare(base, cur, Options{})
		if err != nil || len(res.Rows) == 0 {
			b.Fatal(err)
		}
	}
}

func syntheticSets(cells, steps int) (*perf.Set, *perf.Set) {
	mk := func(seed uint64) *perf.Set {
		s := &perf.Set{Source: fmt.Sprint(seed), Kind: "run", Configs: map[string]*perf.Config{}}
		for i := range cells / 6 {
			key := fmt.Sprintf("cfg%03d", i)
			c := &perf.Config{Key: key, Metrics: map[string][]float64{}}
			c.Metrics[perf.MetricE2E] = noisy(seed+uint64(i), 6, 1e9)
			c.Metrics[perf.MetricDenoiseStep] = noisy(seed+uint64(i)+1, 6*steps, 1e7)
			s.Configs[key] = c
		}
		return s
	}
	return mk(1), mk(2)
}

// TestMarkdownNastyNames: a "|" or a newline in a configuration or metric name (a stage named
// after a kernel) stays inside its cell: every row of the table is one line with nine cells.
func TestMarkdownNastyNames(t *testing.T) {
	res := &Result{Base: "a", New: "b", Rows: []Row{
		{Config: "cfg|x~<T>", Metric: "stage/a|b\nc", Unit: perf.UnitNS, Delta: "~", Tolerance: "10%", Status: StatusOK,
			Base: Stat{N: 6, Median: 1e6, CI: true, Lo: 1e6, Hi: 1e6}, New: Stat{N: 6, Median: 1e6, CI: true, Lo: 1e6, Hi: 1e6}},
	}}
	var b bytes.Buffer
	if err := WriteMarkdown(&b, res); err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(l, "|") {
			rows = append(rows, l)
		}
	}
	sep := regexp.MustCompile(`(^|[^\\])\|`)
	if len(rows) != 3 {
		t.Fatalf("table has %d lines, want 3:\n%s", len(rows), b.String())
	}
	for _, l := range rows {
		if n := len(sep.FindAllString(l, -1)); n != 10 {
			t.Errorf("%q has %d cell separators, want 10", l, n)
		}
	}
	if !strings.Contains(rows[2], "stage/a\\|b<br>c") {
		t.Errorf("metric cell: %q", rows[2])
	}
	// The config is a code span the table writer makes: "|" escaped for the table, "~" and "<"
	// literal (a "\\~" inside backticks showed its backslash on GitHub).
	if !strings.HasPrefix(rows[2], "| `cfg\\|x~<T>` | ") {
		t.Errorf("config cell: %q", rows[2])
	}
}
