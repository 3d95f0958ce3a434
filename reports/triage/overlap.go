package triage

import (
	"sort"
)

// Overlap thresholds (anchor §6.4–6.6), named so that a reviewer can see every number that
// decides a verdict.
const (
	// MinOverlapKernelNS: kernels with less total time than this are too small to act on.
	MinOverlapKernelNS = 5_000
	// HeadroomExclusiveRatio: a kernel that runs alone (no other stream busy) at least this
	// fraction of its time is a headroom candidate — overlapping or fusing it would shorten the step.
	HeadroomExclusiveRatio = 0.45
	// LowROIHiddenRatio: a light (pointwise/memory) kernel hidden at least this fraction of its
	// time is already overlapped; optimising it gains little ("low-roi-hidden").
	LowROIHiddenRatio = 0.65
	// OverlappedCommRatio: a communication kernel hidden at least this fraction is reported as
	// already overlapping compute, so a single trace shows where overlap works (W8).
	OverlappedCommRatio = 0.5
	// SkipShareBelowPct: rows whose share of the stage's kernel time is below this are P5.
	SkipShareBelowPct = 1.0
	// DeferExclusiveRatio and SkipHiddenRatio drive the generic verdict chain of §6.6.
	DeferExclusiveRatio = 0.85
	SkipHiddenRatio     = 0.70
	// MaxHeadroomRows and MaxLowROIRows bound the table like the anchor's top-5 lists.
	MaxHeadroomRows = 5
	MaxLowROIRows   = 5
	// Tight-gap window for the dependency-risk signal: max(TightGapMinNS, min(TightGapMaxNS,
	// TightGapFraction × kernel duration)). A neighbour that close on the same stream is
	// probably a producer or consumer.
	TightGapMinNS    = 2_000
	TightGapMaxNS    = 20_000
	TightGapFraction = 0.15
)

// Category weights for ranking headroom candidates (anchor §6.4): exposed communication is the
// most valuable to hide, compute the least.
var headroomWeight = map[string]float64{CatCommunication: 1.3, CatMemory: 1.15}

func weightOf(cat string) float64 {
	if w, ok := headroomWeight[cat]; ok {
		return w
	}
	if isCompute(cat) {
		return 0.35
	}
	if isLight(cat) {
		return 1.0
	}
	return 0.8
}

// Interval is one GPU op for the overlap sweep.
type Interval struct {
	Start, End int64
	Stream     int32
}

// Sweep is the result of measuring stream overlap over a set of intervals.
type Sweep struct {
	// Hidden[i] is the time of interval i during which another stream was busy.
	Hidden []int64
	// BusyNS is the union of all intervals; MultiNS the time with 2+ streams busy.
	BusyNS, MultiNS int64
	Peak            int
	Streams         int
	// Order lists interval indices sorted by (stream, start, end, index); Pos is the inverse,
	// giving each interval's same-stream neighbours for the dependency signal.
	Order []int32
	Pos   []int32
}

type edge struct {
	t int64
	d int8
}

// SweepOverlap computes, in O(n log n), each interval's hidden time (overlapped by a different
// stream) plus the union busy time, the 2+-stream time and the peak number of busy streams.
// Same-stream concurrency never counts as hidden: each stream is first merged into its busy
// union, and time is hidden exactly where at least two stream unions are active.
func SweepOverlap(iv []Interval) Sweep {
	n := len(iv)
	sw := Sweep{Hidden: make([]int64, n), Order: make([]int32, n), Pos: make([]int32, n)}
	for i := range sw.Order {
		sw.Order[i] = int32(i)
	}
	sort.Slice(sw.Order, func(a, b int) bool {
		x, y := &iv[sw.Order[a]], &iv[sw.Order[b]]
		if x.Stream != y.Stream {
			return x.Stream < y.Stream
		}
		if x.Start != y.Start {
			return x.Start < y.Start
		}
		if x.End != y.End {
			return x.End < y.End
		}
		return sw.Order[a] < sw.Order[b]
	})
	for p, i := range sw.Order {
		sw.Pos[i] = int32(p)
	}
	// Per-stream unions as edges.
	edges := make([]edge, 0, 2*n)
	for p := 0; p < n; {
		s := iv[sw.Order[p]].Stream
		sw.Streams++
		cs, ce := iv[sw.Order[p]].Start, iv[sw.Order[p]].End
		p++
		for ; p < n && iv[sw.Order[p]].Stream == s; p++ {
			x := &iv[sw.Order[p]]
			if x.Start < ce {
				if x.End > ce {
					ce = x.End
				}
				continue
			}
			if ce > cs {
				edges = append(edges, edge{cs, 1}, edge{ce, -1})
			}
			cs, ce = x.Start, x.End
		}
		if ce > cs {
			edges = append(edges, edge{cs, 1}, edge{ce, -1})
		}
	}
	sort.Slice(edges, func(a, b int) bool {
		if edges[a].t != edges[b].t {
			return edges[a].t < edges[b].t
		}
		return edges[a].d < edges[b].d // ends first: touching intervals do not overlap
	})
	// Sweep, collecting the 2+-stream intervals.
	var mStart, mEnd []int64
	c := 0
	var prev int64
	for _, e := range edges {
		if c >= 1 {
			sw.BusyNS += e.t - prev
		}
		if c >= 2 && e.t > prev {
			sw.MultiNS += e.t - prev
			if k := len(mEnd); k > 0 && mEnd[k-1] == prev {
				mEnd[k-1] = e.t
			} else {
				mStart = append(mStart, prev)
				mEnd = append(mEnd, e.t)
			}
		}
		c += int(e.d)
		if c > sw.Peak {
			sw.Peak = c
		}
		prev = e.t
	}
	// Prefix sums of the multi-stream intervals; hidden(op) = |op ∩ M|.
	cum := make([]int64, len(mStart)+1)
	for i := range mStart {
		cum[i+1] = cum[i] + mEnd[i] - mStart[i]
	}
	for i := range iv {
		sw.Hidden[i] = measureIn(iv[i].Start, iv[i].End, mStart, mEnd, cum)
	}
	return sw
}

// measureIn returns |[s,e) ∩ ∪[ms[i],me[i])| for sorted disjoint intervals with prefix sums cum.
func measureIn(s, e int64, ms, me, cum []int64) int64 {
	if e <= s || len(ms) == 0 {
		return 0
	}
	i := sort.Search(len(me), func(k int) bool { return me[k] > s })
	j := sort.Search(len(ms), func(k int) bool { return ms[k] >= e }) - 1
	if i > j {
		return 0
	}
	tot := cum[j+1] - cum[i]
	if ms[i] < s {
		tot -= s - ms[i]
	}
	if me[j] > e {
		tot -= me[j] - e
	}
	return tot
}
