// Package stats holds the sample statistics that must agree with the tools users compare the
// runner against. Percentile is numpy.percentile's default ("linear") method, which SGLang's
// bench_serving uses for every p50/p90/p99 it prints, so the runner's serve-cell latencies
// (runner/load) and its LLM benchmark (runner/llmbench) report the same number bench_serving
// would on the same samples. It is a leaf: it imports nothing of the project.
package stats

import "math"

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
