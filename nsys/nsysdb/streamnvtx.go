package nsysdb

import (
	"cmp"
	"slices"

	"github.com/sglprof/runner/reports/trace"
)

// This file gives a streamed pass its NVTX scopes without holding launches: the runtime scan
// walks each thread's calls in start order beside that thread's ranges, sorted as Scopes sorts
// them, keeping the ranges open at the call on a stack. NVTX push/pop ranges nest per thread,
// so the stack is exactly the set of the thread's ranges around the call: its top is the
// call's scope (what Scopes gives its launch), and the whole stack, reached from the top
// through parent links, is what gpuTimeInside credits with the call's GPU time. The ranges
// themselves are few next to the kernels (Trace.Annotations holds them, as ReadCapture does);
// a pass refuses more than streamLimits.ranges of them.
//
// Two ranges of a thread that overlap without nesting (nvtxRangeStart/End crossing a push/pop
// range) around one call would make the stack wrong; a pass that meets that, or a thread whose
// calls are out of start order, ends with ErrNotStreamable and the caller reads the export
// whole (Scopes and gpuTimeInside handle both).

// nvtxThread is a thread as the NVTX ranges and runtime calls name it.
type nvtxThread struct{ pid, tid int32 }

// nvtxLane is one thread's ranges and the stack of those open at its latest call.
type nvtxLane struct {
	ranges []int32 // annotation indices by start, the longer first on equal starts (as Scopes)
	next   int     // ranges[next:] have not started yet
	stack  []int32
	last   int64 // the latest call start so far
	seen   bool
	// crossed is the latest end of a range dropped from the stack because a later range
	// overlapped it without nesting (before any call saw both); a late call at or before it
	// could be inside both, which the parent links cannot say.
	crossed int64
}

// nvtxScopes is a pass's NVTX state. The runtime scan owns lanes and writes parent; the
// consumer reads parent for calls handed over to it (the channel orders the two) and owns
// inside.
type nvtxScopes struct {
	anns   []trace.Annotation
	lanes  map[nvtxThread]*nvtxLane
	parent []int32 // per annotation: the range under it on its thread's stack, or NoID
	inside []int64 // per annotation: the GPU time of the ops launched inside it (gpuTimeInside)
	depth  int     // most ranges a stack may hold
}

// newNVTXScopes indexes t's CPU-side ranges per thread; nil when there is none.
func newNVTXScopes(t *trace.Trace, depth int) *nvtxScopes {
	n := &nvtxScopes{anns: t.Annotations, lanes: map[nvtxThread]*nvtxLane{}, depth: depth}
	for i := range t.Annotations {
		a := &t.Annotations[i]
		if a.GPU {
			continue
		}
		k := nvtxThread{a.PID, a.TID}
		ln := n.lanes[k]
		if ln == nil {
			ln = &nvtxLane{}
			n.lanes[k] = ln
		}
		ln.ranges = append(ln.ranges, int32(i))
	}
	if len(n.lanes) == 0 {
		return nil
	}
	for _, ln := range n.lanes {
		// The order Scopes sorts a thread's ranges in (the same comparator on the same input,
		// so ranges with equal bounds come out in the same order).
		slices.SortFunc(ln.ranges, func(a, b int32) int {
			x, y := &t.Annotations[a], &t.Annotations[b]
			if c := cmp.Compare(x.Start, y.Start); c != 0 {
				return c
			}
			return cmp.Compare(y.End, x.End)
		})
	}
	n.parent = make([]int32, len(t.Annotations))
	n.inside = make([]int64, len(t.Annotations))
	return n
}

// scope returns the innermost range of thread (pid, tid) open at a call starting at at
// (inclusive bounds, as Scopes), or NoID. Calls of a thread must come in start order.
func (n *nvtxScopes) scope(pid, tid int32, at int64) (int32, error) {
	ln := n.lanes[nvtxThread{pid, tid}]
	if ln == nil {
		return trace.NoID, nil
	}
	if ln.seen && at < ln.last {
		return n.late(ln, pid, tid, at)
	}
	ln.seen, ln.last = true, at
	anns := n.anns
	for ln.next < len(ln.ranges) && anns[ln.ranges[ln.next]].Start <= at {
		r := ln.ranges[ln.next]
		ln.next++
		a := &anns[r]
		// Ranges that ended before this one started are closed; one this range outlasts
		// overlaps it without nesting, which is harmless only if it ended before the call.
		for len(ln.stack) > 0 {
			top := &anns[ln.stack[len(ln.stack)-1]]
			if top.End >= a.Start && a.End <= top.End {
				break
			}
			if top.End >= at {
				return trace.NoID, notStreamable("NVTX ranges of thread %d of process %d overlap without nesting around a call at %d ns", tid, pid, at)
			}
			if top.End >= a.Start {
				ln.crossed = max(ln.crossed, top.End)
			}
			ln.stack = ln.stack[:len(ln.stack)-1]
		}
		n.parent[r] = trace.NoID
		if len(ln.stack) > 0 {
			n.parent[r] = ln.stack[len(ln.stack)-1]
		}
		if len(ln.stack) >= n.depth {
			return trace.NoID, notStreamable("more than %d NVTX ranges nested on thread %d of process %d", n.depth, tid, pid)
		}
		ln.stack = append(ln.stack, r)
	}
	for len(ln.stack) > 0 && anns[ln.stack[len(ln.stack)-1]].End < at {
		ln.stack = ln.stack[:len(ln.stack)-1]
	}
	if len(ln.stack) == 0 {
		return trace.NoID, nil
	}
	return ln.stack[len(ln.stack)-1], nil
}

// late is scope for a call that starts before an earlier call of its thread (runtime tables
// are in call order only nearly: a call is recorded when it returns). Every range that
// started by then is on the stack or was, with its parent link: the innermost range around
// at is the latest-starting one that started by at, or the first of its parents still open
// at at (with nesting, a range around at that started earlier holds that one too).
func (n *nvtxScopes) late(ln *nvtxLane, pid, tid int32, at int64) (int32, error) {
	if at <= ln.crossed {
		return trace.NoID, notStreamable("NVTX ranges of thread %d of process %d overlap without nesting near a call at %d ns that came out of start order", tid, pid, at)
	}
	anns := n.anns
	i, _ := slices.BinarySearchFunc(ln.ranges[:ln.next], at, func(r int32, t int64) int {
		if anns[r].Start <= t {
			return -1
		}
		return 1
	})
	if i == 0 {
		return trace.NoID, nil
	}
	r := ln.ranges[i-1]
	for r != trace.NoID && anns[r].End < at {
		r = n.parent[r]
	}
	return r, nil
}

// credit adds an op's GPU time to its scope and every range around it.
func (n *nvtxScopes) credit(scope int32, dur int64) {
	for a := scope; a != trace.NoID; a = n.parent[a] {
		n.inside[a] += dur
	}
}
