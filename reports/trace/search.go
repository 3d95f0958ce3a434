package trace

import "sort"

// SearchNear is sort.Search started at hint: the smallest i in [0, n) at which f(i) is true
// (n when none), for f false then true over [0, n). It gallops from hint (steps of 1, 2, 4, ...
// towards the answer) and then searches the last step by halves, so it costs O(log d) calls of
// f for an answer d places from hint instead of O(log n): a caller whose successive queries
// move through sorted data in order (a trace's ops against sorted flows or intervals) pays
// little more than a merge walk. Any hint gives the same answer.
func SearchNear(n, hint int, f func(int) bool) int {
	hint = min(max(hint, 0), n)
	within := func(lo, hi int) int { // the answer, known to lie in [lo, hi]; f(hi) true or hi == n
		return lo + sort.Search(hi-lo, func(i int) bool { return f(lo + i) })
	}
	if hint < n && !f(hint) {
		lo := hint // f(lo) false: the answer lies above it
		for step := 1; ; step *= 2 {
			hi := lo + step
			if hi >= n {
				return within(lo+1, n)
			}
			if f(hi) {
				return within(lo+1, hi)
			}
			lo = hi
		}
	}
	hi := hint // f(hi) true or hi == n: the answer is at most hi
	for step := 1; ; step *= 2 {
		lo := hi - step
		if lo < 0 {
			return within(0, hi)
		}
		if !f(lo) {
			return within(lo+1, hi)
		}
		hi = lo
	}
}
