package triage

import (
	"cmp"
	"slices"
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
	// Bucket by stream (a counting sort: streams are few), then sort each bucket by start only
	// when it is not already in order — trace ops mostly arrive in stream order, so this is
	// linear on real input. Keys are values, not indices into iv, so comparisons stay in cache.
	type key struct {
		start, end int64
		idx        int32
	}
	slot := map[int32]int{}
	var streams []int32
	var counts []int
	for i := range iv {
		j, ok := slot[iv[i].Stream]
		if !ok {
			j = len(streams)
			slot[iv[i].Stream] = j
			streams = append(streams, iv[i].Stream)
			counts = append(counts, 0)
		}
		counts[j]++
	}
	// Buckets in stream-id order, so Order is sorted by (stream, start, end, index).
	rank := make([]int, len(streams))
	for i := range rank {
		rank[i] = i
	}
	slices.SortFunc(rank, func(a, b int) int { return cmp.Compare(streams[a], streams[b]) })
	offset := make([]int, len(streams))
	o := 0
	for _, j := range rank {
		offset[j] = o
		o += counts[j]
	}
	keys := make([]key, n)
	fill := append([]int{}, offset...)
	for i := range iv {
		j := slot[iv[i].Stream]
		keys[fill[j]] = key{iv[i].Start, iv[i].End, int32(i)}
		fill[j]++
	}
	cmpKey := func(x, y key) int {
		if x.start != y.start {
			return cmp.Compare(x.start, y.start)
		}
		if x.end != y.end {
			return cmp.Compare(x.end, y.end)
		}
		return cmp.Compare(x.idx, y.idx)
	}
	for j := range streams {
		b := keys[offset[j] : offset[j]+counts[j]]
		if !slices.IsSortedFunc(b, cmpKey) {
			slices.SortFunc(b, cmpKey)
		}
	}
	for p, k := range keys {
		sw.Order[p] = k.idx
		sw.Pos[k.idx] = int32(p)
	}
	keys = nil
	// Per-stream unions as edges. Each stream's edges come out sorted by time, so the global
	// edge order is a k-way merge of k sorted runs (k = streams), O(n log k), not a sort.
	edges := make([]edge, 0, 2*n)
	var runs [][2]int // [start, end) of each stream's run in edges
	for p := 0; p < n; {
		s := iv[sw.Order[p]].Stream
		sw.Streams++
		r0 := len(edges)
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
		runs = append(runs, [2]int{r0, len(edges)})
	}
	edges = mergeRuns(edges, runs)
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

// edgeLess orders edges by time, ends before starts at equal times so that touching intervals
// do not count as overlapping.
func edgeLess(a, b edge) bool {
	if a.t != b.t {
		return a.t < b.t
	}
	return a.d < b.d
}

// mergeRuns merges the sorted runs of edges into one sorted slice with a binary heap of run
// cursors.
func mergeRuns(edges []edge, runs [][2]int) []edge {
	if len(runs) <= 1 {
		return edges
	}
	out := make([]edge, 0, len(edges))
	h := make([][2]int, 0, len(runs)) // cursor, end
	for _, r := range runs {
		if r[0] < r[1] {
			h = append(h, r)
		}
	}
	less := func(i, j int) bool { return edgeLess(edges[h[i][0]], edges[h[j][0]]) }
	down := func(i int) {
		for {
			l := 2*i + 1
			if l >= len(h) {
				return
			}
			m := l
			if r := l + 1; r < len(h) && less(r, l) {
				m = r
			}
			if !less(m, i) {
				return
			}
			h[i], h[m] = h[m], h[i]
			i = m
		}
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		down(i)
	}
	for len(h) > 0 {
		out = append(out, edges[h[0][0]])
		h[0][0]++
		if h[0][0] == h[0][1] {
			h[0] = h[len(h)-1]
			h = h[:len(h)-1]
		}
		down(0)
	}
	return out
}
