package history

import (
	"fmt"
	"math"
	"strings"

	"github.com/sglprof/runner/reports/compare"
	"github.com/sglprof/runner/reports/stats"
)

// The noise calibration of history tolerances. A configuration's run-to-run noise is the
// robust standard deviation of the changes between its consecutive run medians (on the log
// scale): MADScale·MAD(Δ)/√2. Differences rather than the values, because a step change in the
// window (an accepted regression, a driver upgrade) is one large difference that the MAD
// ignores, where it would double the spread of the values themselves.
const (
	// NoiseK is how many robust standard deviations a run may move before it violates: with
	// the noise known, a clean run crosses 5σ about once in three million; the margin pays for
	// estimating σ from a handful of runs.
	NoiseK = 5.0
	// NoiseFloor is the least calibrated tolerance (a fraction): a metric that has not moved
	// at all (memory, a constant stage) still needs a real change to violate.
	NoiseFloor = 0.02
	// NoiseRuns is how many earlier runs the noise is measured over.
	NoiseRuns = 20
	// MinNoiseRuns is how many earlier runs a calibration needs; before that the defaults of
	// runner compare apply.
	MinNoiseRuns = 5
	// MinNoiseRunsAlone is how many earlier runs a calibration needs when the runs had one
	// repeat each, so that nothing bounds the noise estimate from below: from five runs it
	// comes out below half the true noise one time in four.
	MinNoiseRunsAlone = 10
	// ChangeRuns is how far back the search for the start of a step change looks.
	ChangeRuns = 30
)

// Tolerance is the tolerance a history comparison applies to one run: the plan's or a flag's
// when set, else one calibrated to the noise of the runs before, else (too few of them) the
// default of runner compare.
type Tolerance struct {
	compare.Tolerance
	// Calibrated is set when the tolerance was derived from Noise.
	Calibrated bool
	// Noise is the measured run-to-run noise (a fraction); HasNoise is false with fewer than
	// MinNoiseRuns earlier runs.
	Noise    float64
	HasNoise bool
}

// NoiseOf is the run-to-run noise (a fraction) of the runs prev (oldest first), measured over
// the last NoiseRuns of them: the larger of two estimates. One is the robust spread of the
// changes between consecutive run medians, which sees every source of noise but, from a few
// runs, can come out near zero by chance (four changes that happen to agree). The other is what
// the repeats inside each run imply for a run's median (sqrt(π/2)·spread/sqrt(n), the median
// of the runs' values), well determined from few runs because every run holds several repeats;
// a night adds its own noise on top of its repeats', never less, so the night-to-night noise
// is at least that. false with fewer than MinNoiseRuns runs or a median that is not positive.
func NoiseOf(prev []RunPoint) (float64, bool) {
	if len(prev) > NoiseRuns {
		prev = prev[len(prev)-NoiseRuns:]
	}
	if len(prev) < MinNoiseRuns {
		return 0, false
	}
	logs, ok := stats.Logs(medians(prev))
	if !ok {
		return 0, false
	}
	d := make([]float64, len(logs)-1)
	for i := range d {
		d[i] = logs[i+1] - logs[i]
	}
	sigma := math.Min(stats.MADScale*stats.MAD(d)/math.Sqrt2, stats.MADScale*stats.MAD(logs))
	var within []float64
	for _, p := range prev {
		if p.N > 1 && !math.IsNaN(p.Spread) && p.Spread >= 0 {
			within = append(within, math.Sqrt(math.Pi/2)*p.Spread/math.Sqrt(float64(p.N)))
		}
	}
	if len(within) > 0 {
		return math.Max(sigma, stats.Median(stats.Sorted(within))), true
	}
	if len(prev) < MinNoiseRunsAlone {
		return 0, false
	}
	return sigma, true
}

// ToleranceAt is the tolerance for the run that follows the runs prev (oldest first) of
// metric: the explicit one of co, else NoiseK times the noise of prev (at least NoiseFloor, and
// the absolute floor of the metric's default, such as 120 ms for a stage), else the default.
func ToleranceAt(prev []RunPoint, metric string, co *compare.Options) Tolerance {
	t := Tolerance{}
	t.Noise, t.HasNoise = NoiseOf(prev)
	if fixed, ok := co.Explicit(metric); ok {
		t.Tolerance = fixed
		return t
	}
	def := co.ToleranceFor(metric)
	if !t.HasNoise {
		t.Tolerance = def
		return t
	}
	t.Calibrated = true
	rel := math.Max(NoiseK*t.Noise, NoiseFloor)
	t.Tolerance = compare.Tolerance{Rel: rel, Abs: def.Abs}
	why := fmt.Sprintf("%g×%.2f%% noise", NoiseK, t.Noise*100)
	if rel == NoiseFloor {
		why = fmt.Sprintf("floor; noise %.2f%%", t.Noise*100)
	}
	t.Text = fmt.Sprintf("%.1f%%", rel*100)
	if def.Abs > 0 {
		_, abs, _ := strings.Cut(def.Text, " or ")
		t.Text += " or " + abs
	}
	t.Text += " (" + why + ")"
	return t
}

// historyMDC is the smallest sustained step change (a fraction) that the history rule flags
// with probability co.Power: a run violates when its median clears the baseline by the
// tolerance, the run's median and the window's median both being noisy (the median of w runs
// has about π/2·σ²/w variance), and Consecutive runs must violate in a row, so each must with
// probability Power^(1/Consecutive).
func historyMDC(j judgement, opts BaselineOptions, co *compare.Options) float64 {
	if j.base <= 0 || j.window == 0 {
		return -1
	}
	z := stats.NormalQuantile(math.Pow(co.Power, 1/float64(opts.Consecutive)))
	sd := j.tol.Noise * math.Sqrt(1+math.Pi/(2*float64(j.window)))
	return math.Expm1(math.Log1p(j.tol.Limit(j.base)/j.base) + z*sd)
}

// TrendChanges returns the indexes of a run series (oldest first) where step changes began,
// for the report's trend chart: stats.StepChanges over its last ChangeRuns runs at the
// configured alpha, a change having to exceed the tolerance the newest run was judged by.
func TrendChanges(series []RunPoint, metric string, opts BaselineOptions) []int {
	if opts.Runs <= 0 {
		opts.Runs = 5
	}
	co := opts.Compare.Defaults()
	off := max(0, len(series)-ChangeRuns)
	series = series[off:]
	if len(series) < 3 {
		return nil
	}
	logs, ok := stats.Logs(medians(series))
	if !ok {
		return nil
	}
	prev := series[:len(series)-1]
	base := stats.Median(stats.Sorted(medians(prev[max(0, len(prev)-opts.Runs):])))
	tol := ToleranceAt(prev, metric, &co)
	var out []int
	for _, c := range stats.StepChanges(logs, co.Alpha, math.Log1p(tol.Limit(base)/base)) {
		out = append(out, off+c.Index)
	}
	return out
}
