package stats

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Reference quantiles are those of printed t tables (and scipy.stats.t.ppf).
func TestTQuantile(t *testing.T) {
	for _, c := range []struct{ p, df, want float64 }{
		{0.975, 1, 12.706205},
		{0.975, 4, 2.776445},
		{0.975, 10, 2.228139},
		{0.8, 4, 0.940965},
		{0.8, 10, 0.879058},
		{0.025, 4, -2.776445},
		{0.975, math.Inf(1), 1.959964},
	} {
		if got := TQuantile(c.p, c.df); math.Abs(got-c.want) > 1e-5 {
			t.Errorf("TQuantile(%v, %v) = %v, want %v", c.p, c.df, got, c.want)
		}
	}
	if !math.IsNaN(TQuantile(1, 3)) || !math.IsNaN(TQuantile(0.5, 0)) {
		t.Error("out-of-range arguments must give NaN")
	}
}

func TestWelch(t *testing.T) {
	// Equal variances 2.5, n = 5 a side: t = 2/sqrt(0.5+0.5) = 2 on 8 df, p = 0.08052.
	r, ok := Welch([]float64{1, 2, 3, 4, 5}, []float64{3, 4, 5, 6, 7})
	if !ok || math.Abs(r.T-2) > 1e-12 || math.Abs(r.DF-8) > 1e-9 || math.Abs(r.P-0.080516) > 1e-5 {
		t.Fatalf("Welch = %+v", r)
	}
	// Three tight values a side, 20 % apart: a rank test cannot go below p = 0.1 here; the
	// t-test decides.
	base := []float64{100, 101, 99.5}
	slow := []float64{120, 121.2, 119.4}
	if r, _ := Welch(base, slow); !(r.P < 0.001) {
		t.Fatalf("separated samples: p = %v", r.P)
	}
	if _, ok := Welch([]float64{1}, []float64{1, 2}); ok {
		t.Fatal("one value on a side has no variance: no test")
	}
	// No spread anywhere: equal means p = 1, different means p = 0 (the difference is exact).
	if r, _ := Welch([]float64{5, 5}, []float64{5, 5, 5}); r.P != 1 {
		t.Fatalf("identical: %+v", r)
	}
	if r, _ := Welch([]float64{5, 5}, []float64{6, 6}); r.P != 0 || !math.IsInf(r.T, 1) {
		t.Fatalf("constant sides that differ: %+v", r)
	}
}

func TestPooled(t *testing.T) {
	// Variance 1 from {1,2,3}, one value 10: t = 8/sqrt(4/3) on 2 df; the t(2) CDF is
	// 1/2 + t/(2·sqrt(2+t²)), so p = 1 − t/sqrt(2+t²).
	r, ok := Pooled([]float64{1, 2, 3}, []float64{10})
	tt := 8 / math.Sqrt(4.0/3)
	want := 1 - tt/math.Sqrt(2+tt*tt)
	if !ok || r.DF != 2 || math.Abs(r.T-tt) > 1e-12 || math.Abs(r.P-want) > 1e-9 {
		t.Fatalf("Pooled = %+v, want t %v p %v", r, tt, want)
	}
	if _, ok := Pooled([]float64{1}, []float64{2}); ok {
		t.Fatal("two values in all: no variance, no test")
	}
}

func TestDetectableShift(t *testing.T) {
	if got := DetectableShift(1, 4, 0.05, 0.8); math.Abs(got-(2.776445+0.940965)) > 1e-5 {
		t.Fatalf("DetectableShift = %v", got)
	}
	// The shift it names is detected about power of the time: simulate Welch tests of
	// normal samples shifted by exactly the detectable amount.
	rng := rand.New(rand.NewPCG(1, 2))
	const n, sd, trials = 5, 1.0, 4000
	shift := DetectableShift(sd*math.Sqrt(2.0/n), 2*(n-1), 0.05, 0.8)
	hits := 0
	for i := 0; i < trials; i++ {
		a, b := make([]float64, n), make([]float64, n)
		for j := range a {
			a[j] = rng.NormFloat64() * sd
			b[j] = rng.NormFloat64()*sd + shift
		}
		if r, _ := Welch(a, b); r.P < 0.05 {
			hits++
		}
	}
	if p := float64(hits) / trials; p < 0.74 || p > 0.86 {
		t.Fatalf("power at the detectable shift = %.3f, want about 0.8", p)
	}
}

func TestMAD(t *testing.T) {
	if got := MAD([]float64{1, 2, 3, 4, 100}); got != 1 {
		t.Fatalf("MAD = %v, want 1 (the outlier does not count)", got)
	}
	if !math.IsNaN(MAD(nil)) {
		t.Fatal("MAD of nothing must be NaN")
	}
	if _, ok := Logs([]float64{1, 0}); ok {
		t.Fatal("zero has no logarithm")
	}
}

func TestStepChanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	series := func(n, at int, shift float64) []float64 {
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = rng.NormFloat64() * 0.005
			if at >= 0 && i >= at {
				xs[i] += shift
			}
		}
		return xs
	}
	// Five quiet runs, then two 8 % slower: the change begins at index 5.
	cs := StepChanges(series(7, 5, math.Log(1.08)), 0.05, 0.02)
	if len(cs) != 1 || cs[0].Index != 5 || cs[0].Shift <= 0 {
		t.Fatalf("changes = %+v, want one at 5", cs)
	}
	// The newest run alone can begin a change.
	cs = StepChanges(series(6, 5, math.Log(1.2)), 0.05, 0.02)
	if len(cs) != 1 || cs[0].Index != 5 {
		t.Fatalf("changes = %+v, want one at 5", cs)
	}
	// Two changes: an improvement at 6, a regression at 14.
	xs := series(20, 6, -0.1)
	for i := 14; i < 20; i++ {
		xs[i] += 0.15
	}
	cs = StepChanges(xs, 0.05, 0.02)
	if len(cs) != 2 || cs[0].Index != 6 || cs[1].Index != 14 || cs[0].Shift >= 0 || cs[1].Shift <= 0 {
		t.Fatalf("changes = %+v, want 6 (down) and 14 (up)", cs)
	}
	// Noise alone, however long, is no change: minShift is above it.
	for seed := uint64(0); seed < 50; seed++ {
		rng = rand.New(rand.NewPCG(seed, 9))
		if cs := StepChanges(series(30, -1, 0), 0.05, 0.02); len(cs) != 0 {
			t.Fatalf("seed %d: quiet series has changes %+v", seed, cs)
		}
	}
}
