package stats

import (
	"math"
	"sort"
)

// Change is one step change found by StepChanges.
type Change struct {
	// Index is the first value of the new level (the run to start a bisection from).
	Index int
	// Shift is median(after) − median(before) over the two segments the change separates.
	Shift float64
	// P is the two-sided p-value of Student's t-test of the two segments.
	P float64
}

// StepChanges finds the step changes of xs (a series in time order, such as log run medians):
// the starts of segments whose level differs from the segment before. It is binary
// segmentation with a robust cost, the simpler relative of the E-divisive means that Apache
// Otava (Hunter) and MongoDB run on performance history: the split of a segment that most
// lowers the sum of absolute deviations from the two halves' medians is kept when Student's
// t-test of the halves gives p < alpha and their medians differ by more than minShift (so a
// split that is significant but smaller than the noise-calibrated tolerance is not a change),
// and both halves are searched again. A segment that ends the series may be a single value (the
// latest run can begin a change); other segments need two. Changes are returned in order.
func StepChanges(xs []float64, alpha, minShift float64) []Change {
	var out []Change
	var split func(lo, hi int)
	split = func(lo, hi int) {
		minLast := 2
		if hi == len(xs) {
			minLast = 1
		}
		best, bestCost := -1, math.Inf(1)
		for tau := lo + 2; tau <= hi-minLast; tau++ {
			c := absDev(xs[lo:tau]) + absDev(xs[tau:hi])
			if c < bestCost {
				best, bestCost = tau, c
			}
		}
		if best < 0 {
			return
		}
		before, after := xs[lo:best], xs[best:hi]
		shift := Median(Sorted(after)) - Median(Sorted(before))
		t, ok := Pooled(before, after)
		if !ok || !(t.P < alpha) || !(math.Abs(shift) > minShift) {
			return
		}
		out = append(out, Change{Index: best, Shift: shift, P: t.P})
		split(lo, best)
		split(best, hi)
	}
	split(0, len(xs))
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out
}

// absDev is the sum of absolute deviations of xs from their median.
func absDev(xs []float64) float64 {
	m := Median(Sorted(xs))
	s := 0.0
	for _, x := range xs {
		s += math.Abs(x - m)
	}
	return s
}
