package stats

import (
	"math"
	"testing"
)

// The expected values are numpy.percentile's (numpy 1.26 and 2.x, method="linear").
func TestPercentileMatchesNumpy(t *testing.T) {
	cases := []struct {
		xs   []float64
		p    float64
		want float64
	}{
		{[]float64{1}, 99, 1},
		{[]float64{1, 2}, 50, 1.5},
		{[]float64{1, 2}, 99, 1.99},
		{[]float64{1, 2, 3, 4}, 99, 3.97},
		{[]float64{1, 2, 3, 4}, 90, 3.7},
		{[]float64{5, 5, 5, 9}, 50, 5},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 95, 9.55},
		{[]float64{10, 20, 30}, 0, 10},
		{[]float64{10, 20, 30}, 100, 30},
		{[]float64{10, 20, 30}, 150, 30},
		{[]float64{10, 20, 30}, -5, 10},
	}
	for _, c := range cases {
		if got := Percentile(c.xs, c.p); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("Percentile(%v, %g) = %v, want %v", c.xs, c.p, got, c.want)
		}
	}
	if !math.IsNaN(Percentile([]float64(nil), 50)) {
		t.Error("no samples must be NaN")
	}
}

// Integer samples (nanoseconds) interpolate like floats: numpy.percentile([100, 200], 99) is
// 199.0, where nearest rank would say 200.
func TestPercentileInt64(t *testing.T) {
	if got := Percentile([]int64{100, 200}, 99); got != 199 {
		t.Fatalf("Percentile([100 200], 99) = %v, want 199", got)
	}
	v := make([]int64, 100)
	for i := range v {
		v[i] = int64(i + 1)
	}
	// numpy.percentile(range(1, 101), [50, 90, 99]) = [50.5, 90.1, 99.01]
	for p, want := range map[float64]float64{50: 50.5, 90: 90.1, 99: 99.01} {
		if got := Percentile(v, p); math.Abs(got-want) > 1e-9 {
			t.Errorf("Percentile(1..100, %g) = %v, want %v", p, got, want)
		}
	}
}

func FuzzPercentile(f *testing.F) {
	f.Add(3.0, 7.0, 11.0, 50.0)
	f.Fuzz(func(t *testing.T, a, b, c, p float64) {
		xs := []float64{a, b, c}
		for _, x := range append(xs, p) {
			if math.IsNaN(x) || math.IsInf(x, 0) || math.Abs(x) > 1e300 {
				return
			}
		}
		if xs[0] > xs[1] {
			xs[0], xs[1] = xs[1], xs[0]
		}
		if xs[1] > xs[2] {
			xs[1], xs[2] = xs[2], xs[1]
		}
		if xs[0] > xs[1] {
			xs[0], xs[1] = xs[1], xs[0]
		}
		got := Percentile(xs, p)
		if got < xs[0] || got > xs[2] {
			t.Fatalf("Percentile(%v, %g) = %v, outside the samples", xs, p, got)
		}
	})
}

func TestMedianMeanStdDev(t *testing.T) {
	odd := []float64{1, 2, 10}
	even := []int64{1, 2, 4, 10}
	if got := Median(odd); got != 2 {
		t.Errorf("Median(odd) = %v, want 2", got)
	}
	if got := Median(even); got != 3 {
		t.Errorf("Median(even) = %v, want 3 (mean of the middle two)", got)
	}
	if got := LowerMedian(even); got != 2 {
		t.Errorf("LowerMedian(even) = %v, want 2", got)
	}
	if got := LowerMedian([]int64{}); got != 0 {
		t.Errorf("LowerMedian(empty) = %v, want 0", got)
	}
	if got := Mean(even); got != 4.25 {
		t.Errorf("Mean = %v, want 4.25", got)
	}
	// numpy.std([1, 2, 10]) = 4.0277..., numpy.std([1, 2, 10], ddof=1) = 4.9328...
	if got := StdDev(odd, 0); math.Abs(got-4.027681991198191) > 1e-12 {
		t.Errorf("StdDev ddof=0 = %v", got)
	}
	if got := StdDev(odd, 1); math.Abs(got-4.932882862316247) > 1e-12 {
		t.Errorf("StdDev ddof=1 = %v", got)
	}
	if !math.IsNaN(StdDev([]float64{3}, 1)) || !math.IsNaN(Mean([]float64{})) || !math.IsNaN(Median([]float64{})) {
		t.Error("too few samples must give NaN")
	}
	in := []int64{3, 1, 2}
	if s := Sorted(in); s[0] != 1 || in[0] != 3 {
		t.Errorf("Sorted = %v and changed its input to %v", s, in)
	}
}
