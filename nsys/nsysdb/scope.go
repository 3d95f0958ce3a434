package nsysdb

import (
	"cmp"
	"regexp"
	"slices"

	"github.com/sglprof/runner/reports/trace"
)

// Scopes returns, for every GPU op of t (same index), the index into t.Annotations of the op's
// scope: the innermost CPU-side annotation (NVTX range, record_function) on the op's launching
// thread that is open when the launch call starts. Ops without a linked launch, or launched
// outside every range, get trace.NoID. match, when not nil, restricts which annotations count
// (e.g. only the ranges that define stages).
//
// "Innermost" is the latest-starting range still open at the launch, which is the nesting
// parent for push/pop ranges and a sensible choice for overlapping start/end ranges. The
// computation is one sorted sweep per thread, O((ranges + launches) log n), not a pairwise test.
func Scopes(t *trace.Trace, match func(name string) bool) []int32 {
	type key struct{ pid, tid int32 }
	ranges := map[key][]int32{}
	for i := range t.Annotations {
		a := &t.Annotations[i]
		if a.GPU || (match != nil && !match(t.Name(a.Name))) {
			continue
		}
		k := key{a.PID, a.TID}
		ranges[k] = append(ranges[k], int32(i))
	}
	if len(ranges) == 0 { // nothing to be inside of (an export without NVTX)
		out := make([]int32, len(t.GPUOps))
		for i := range out {
			out[i] = trace.NoID
		}
		return out
	}
	launchScope := make([]int32, len(t.Launches))
	for i := range launchScope {
		launchScope[i] = trace.NoID
	}
	launches := map[key][]int32{}
	for i := range t.Launches {
		l := &t.Launches[i]
		k := key{l.PID, l.TID}
		if _, ok := ranges[k]; ok {
			launches[k] = append(launches[k], int32(i))
		}
	}
	for k, rs := range ranges {
		ls := launches[k]
		if len(ls) == 0 {
			continue
		}
		// Ranges by start; on equal starts the longer one first, so the shorter (inner) one is
		// pushed later and wins.
		slices.SortFunc(rs, func(a, b int32) int {
			x, y := &t.Annotations[a], &t.Annotations[b]
			if c := cmp.Compare(x.Start, y.Start); c != 0 {
				return c
			}
			return cmp.Compare(y.End, x.End)
		})
		byStart := func(a, b int32) int { return cmp.Compare(t.Launches[a].Start, t.Launches[b].Start) }
		if !slices.IsSortedFunc(ls, byStart) { // calls are mostly stored in time order
			slices.SortFunc(ls, byStart)
		}
		var stack []int32
		next := 0
		for _, li := range ls {
			at := t.Launches[li].Start
			for next < len(rs) && t.Annotations[rs[next]].Start <= at {
				stack = append(stack, rs[next])
				next++
			}
			// Ranges that closed before the launch leave the stack; one buried under a still
			// open range is removed when it surfaces, which is all the top needs.
			for len(stack) > 0 && t.Annotations[stack[len(stack)-1]].End < at {
				stack = stack[:len(stack)-1]
			}
			if len(stack) > 0 {
				launchScope[li] = stack[len(stack)-1]
			}
		}
	}
	out := make([]int32, len(t.GPUOps))
	for i := range t.GPUOps {
		out[i] = trace.NoID
		if l := t.GPUOps[i].Launch; l != trace.NoID && int(l) < len(launchScope) {
			out[i] = launchScope[l]
		}
	}
	return out
}

// StageScopes is Scopes restricted to the annotations whose name matches re: with
// `--nvtx-stage REGEX` those ranges define the stages and every kernel is attributed to the
// innermost matching range around its launch. A nil re matches every range.
func StageScopes(t *trace.Trace, re *regexp.Regexp) []int32 {
	if re == nil {
		return Scopes(t, nil)
	}
	return Scopes(t, re.MatchString)
}
