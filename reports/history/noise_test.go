package history

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sglprof/runner/reports/compare"
	"github.com/sglprof/runner/reports/perf"
)

// nightRun is one simulated nightly run of two configurations, six repeats each with 1 %
// run-to-run noise (what the simulator draws), DenoisingStage slowed by slow.
func nightRun(id string, at time.Time, rng *rand.Rand, slow float64) *perf.Set {
	s := &perf.Set{Source: "/runs/nightly/" + id, Kind: "run", RunID: id, Start: at, Plan: "nightly", GPU: "simulated", Configs: map[string]*perf.Config{}}
	for i, key := range []string{"qwen/1024x1024", "flux/1024x1024"} {
		c := &perf.Config{Key: key, Metrics: map[string][]float64{}, Runs: map[string][]float64{}}
		add := func(m string, v float64) {
			c.Metrics[m] = append(c.Metrics[m], v)
			c.Runs[m] = append(c.Runs[m], v)
		}
		for range 6 {
			f := math.Exp(rng.NormFloat64() * 0.01)
			den := (20e9 + float64(i)*4e9) * f * slow
			text, dec := 0.5e9*f, 1.2e9*f
			add(perf.MetricE2E, den+text+dec+3.2e6)
			add(perf.StagePrefix+"TextEncodingStage", text)
			add(perf.StagePrefix+"DenoisingStage", den)
			add(perf.StagePrefix+"DecodingStage", dec)
			add(perf.StagePrefix+"InputValidationStage", 0.08e6)
			add(perf.MetricDenoiseMean, den/50)
			add(perf.MetricPeakMemory, 58000+float64(i)*1000)
		}
		s.Configs[key] = c
	}
	return s
}

// nightly runs the nights (slowdown factors in order) through CompareHistory and Append, as
// `runner run --baseline history` does, and returns each night's comparison (nil for the
// first, which only builds the history).
func nightly(t *testing.T, db *DB, seed uint64, slow []float64, opts BaselineOptions) []*compare.Result {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 24))
	t0 := time.Date(2026, 11, 1, 2, 0, 0, 0, time.UTC)
	var out []*compare.Result
	for n, f := range slow {
		s := nightRun(fmt.Sprintf("night%02d", n+1), t0.Add(time.Duration(n)*24*time.Hour), rng, f)
		res, err := db.CompareHistory(ctx, s, opts)
		if n == 0 {
			if !errors.Is(err, compare.ErrNothingInCommon) {
				t.Fatalf("first night: %v", err)
			}
			res = nil
		} else if err != nil {
			t.Fatal(err)
		}
		out = append(out, res)
		if _, err := db.Append(ctx, FromSet(s, "test")); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// Five clean nights, then DenoisingStage 8 % slower: no regression on a clean night (the
// tolerance follows the ~0.5 % noise of a six-repeat median instead of the fixed 10 %), a
// regression by the second slow night, and its verdict names the first slow night as where
// the change began.
func TestNightlyGateCatchesAStepAndNamesIt(t *testing.T) {
	db := open(t, filepath.Join(t.TempDir(), "h.db"))
	res := nightly(t, db, 1, []float64{1, 1, 1, 1, 1, 1.08, 1.08}, BaselineOptions{})
	for n, r := range res[1:5] {
		if r.Regressed() {
			t.Fatalf("clean night %d regressed: %v", n+2, r.RegressedMetrics())
		}
	}
	slow2 := res[6]
	if !slow2.Regressed() {
		var b strings.Builder
		compare.WriteText(&b, slow2)
		t.Fatalf("second slow night: no regression\n%s", b.String())
	}
	found := false
	for _, row := range slow2.Rows {
		if row.Metric != perf.StagePrefix+"DenoisingStage" {
			continue
		}
		if row.Status != compare.StatusRegression || row.Change == nil || row.Change.RunID != "night06" || row.Change.RunsAgo != 1 {
			t.Fatalf("%s DenoisingStage: %+v change %+v", row.Config, row, row.Change)
		}
		if !(row.Change.ShiftPct > 6 && row.Change.ShiftPct < 10) {
			t.Errorf("shift %.2f%%, want about 8%%", row.Change.ShiftPct)
		}
		if row.NoisePct == nil || !(*row.NoisePct < 1.5) || !strings.Contains(row.Tolerance, "noise") || !(row.MDCPct > 0 && row.MDCPct < 8) {
			t.Errorf("calibration: noise %v tolerance %q MDC %.2f", row.NoisePct, row.Tolerance, row.MDCPct)
		}
		found = true
	}
	if !found {
		t.Fatal("no DenoisingStage row")
	}
	var text strings.Builder
	if err := compare.WriteText(&text, slow2); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"began at run night06", "change: qwen/1024x1024 stage/DenoisingStage: a step change of +", "1 run ago"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
}

// Thirty clean nights in a row raise no regression, for several noise draws.
func TestThirtyCleanNightsNoRegression(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		db := open(t, filepath.Join(t.TempDir(), "h.db"))
		slow := make([]float64, 31)
		for i := range slow {
			slow[i] = 1
		}
		for n, r := range nightly(t, db, 100+seed, slow, BaselineOptions{})[1:] {
			if r.Regressed() {
				t.Fatalf("seed %d night %d: false regression %v", seed, n+2, r.RegressedMetrics())
			}
		}
	}
}

// A tolerance written in the plan wins over the calibration: 50 % lets the 8 % step through.
func TestFixedToleranceWins(t *testing.T) {
	db := open(t, filepath.Join(t.TempDir(), "h.db"))
	co := compare.Options{Tolerances: map[string]compare.Tolerance{"stage": {Rel: 0.5, Text: "50%"}, "e2e": {Rel: 0.5, Text: "50%"}, "denoise_mean": {Rel: 0.5, Text: "50%"}}}
	res := nightly(t, db, 1, []float64{1, 1, 1, 1, 1, 1.08, 1.08}, BaselineOptions{Compare: co})
	last := res[6]
	if last.Regressed() {
		t.Fatalf("fixed 50%%: %v", last.RegressedMetrics())
	}
	for _, row := range last.Rows {
		if row.Metric == perf.StagePrefix+"DenoisingStage" && row.Tolerance != "50%" {
			t.Fatalf("tolerance %q, want the plan's 50%%", row.Tolerance)
		}
		if row.Metric == perf.MetricPeakMemory && !strings.Contains(row.Tolerance, "floor") {
			t.Fatalf("memory (never moves, not fixed): tolerance %q, want the calibrated floor", row.Tolerance)
		}
	}
}

// One odd night among the first few does not blind the gate: the noise estimate ignores it.
func TestOddNightDoesNotInflateTheTolerance(t *testing.T) {
	db := open(t, filepath.Join(t.TempDir(), "h.db"))
	res := nightly(t, db, 7, []float64{1, 1, 1.5, 1, 1, 1, 1.08, 1.08}, BaselineOptions{})
	if !res[7].Regressed() {
		t.Fatal("an 8 % step after one odd night went unflagged")
	}
}

// Too few runs to measure the noise: the defaults of runner compare apply, and say nothing of
// noise.
func TestToleranceBeforeCalibration(t *testing.T) {
	co := compare.Options{}.Defaults()
	prev := []RunPoint{{Median: 1, Spread: 0.01, N: 6}, {Median: 1.01, Spread: 0.01, N: 6}}
	tol := ToleranceAt(prev, perf.MetricE2E, &co)
	if tol.Calibrated || tol.HasNoise || tol.Text != "15%" {
		t.Fatalf("two runs: %+v", tol)
	}
	// One repeat a run: ten runs before the changes alone are trusted.
	var alone []RunPoint
	for i := range 9 {
		alone = append(alone, RunPoint{Median: 1 + 0.001*float64(i%3), Spread: math.NaN(), N: 1})
	}
	if _, ok := NoiseOf(alone); ok {
		t.Fatal("nine single-repeat runs: noise must not be trusted yet")
	}
	if _, ok := NoiseOf(append(alone, RunPoint{Median: 1, Spread: math.NaN(), N: 1})); !ok {
		t.Fatal("ten single-repeat runs: noise measured")
	}
}
