// Package stats holds every sample statistic of the project: percentiles, medians, means and
// standard deviations, with no I/O and no knowledge of where the samples came from (the model
// of golang.org/x/perf's benchmath, which the A/B tests of reports/compare use directly).
// Each statistic agrees with the tool users compare the runner against: Percentile is
// numpy.percentile's default ("linear") method, which SGLang's bench_serving uses for every
// p50/p90/p99 it prints, so serve-cell latencies and the LLM benchmark report the same number
// bench_serving would on the same samples; StdDev takes numpy's ddof so the same function
// serves bench_serving's population form and nsys's sample form. ttest.go holds the t-tests
// and the power formula the comparisons use, changepoint.go the step-change search of the
// history. It is a leaf: it imports nothing of the project (only go-moremath's t
// distribution, the one golang.org/x/perf's benchmath builds on).
package stats

import (
	"math"
	"slices"
)

// Number is a sample type Percentile accepts: nanosecond durations or float milliseconds.
type Number interface {
	~int64 | ~float64
}

// Percentile is numpy.percentile(sorted, p) with the default "linear" method: the value at
// rank p/100·(n−1), interpolated between its two neighbours. sorted must be in ascending
// order; p is clamped to [0, 100]. NaN for no samples.
func Percentile[T Number](sorted []T, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	r := min(max(p, 0), 100) / 100 * float64(n-1)
	lo := int(math.Floor(r))
	if lo >= n-1 {
		return float64(sorted[n-1])
	}
	f := r - float64(lo)
	a, b := float64(sorted[lo]), float64(sorted[lo+1])
	return a + (b-a)*f
}

// Median is the middle of sorted (the mean of the two middle values for an even count, which
// is Percentile(sorted, 50)); NaN for no samples.
func Median[T Number](sorted []T) float64 { return Percentile(sorted, 50) }

// LowerMedian is the lower middle value of sorted (sorted[(n-1)/2]): always one of the
// samples, so that with two samples the smaller is the reference and a gap to it is the whole
// difference. The zero value for no samples.
func LowerMedian[T Number](sorted []T) T {
	if len(sorted) == 0 {
		var zero T
		return zero
	}
	return sorted[(len(sorted)-1)/2]
}

// Sorted returns an ascending copy of xs, leaving xs as it was.
func Sorted[T Number](xs []T) []T {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s
}

// Mean is the arithmetic mean of xs; NaN for no samples.
func Mean[T Number](xs []T) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	var sum float64
	for _, x := range xs {
		sum += float64(x)
	}
	return sum / float64(len(xs))
}

// StdDev is the standard deviation of xs with ddof delta degrees of freedom, as numpy.std
// counts them: 0 is the population form numpy (and so bench_serving) uses by default, 1 the
// sample form of nsys's stdev(). NaN when len(xs) ≤ ddof.
func StdDev[T Number](xs []T, ddof int) float64 {
	if len(xs) <= ddof {
		return math.NaN()
	}
	m := Mean(xs)
	var ss float64
	for _, x := range xs {
		d := float64(x) - m
		ss += d * d
	}
	return math.Sqrt(ss / float64(len(xs)-ddof))
}
