package triage

import (
	"cmp"
	"slices"

	"github.com/sglprof/runner/reports/trace"
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
	// MinActNS: a headroom kernel needs at least this much summed time (and SkipShareBelowPct)
	// to be P1 or P2; below it, it is P3 "defer" however large its share of a small stage.
	MinActNS = 10_000
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

// spans is what the sweep reads its intervals from: iv itself, or a stage's ops read in place
// from the trace (interval i is ops[idx[i]]), so that the triage keeps no 24-byte copy per op.
type spans struct {
	iv  []Interval
	ops []trace.GPUOp
	idx []int32
}

func (s *spans) len() int {
	if s.idx != nil {
		return len(s.idx)
	}
	return len(s.iv)
}

func (s *spans) at(i int32) Interval {
	if s.idx == nil {
		return s.iv[i]
	}
	o := &s.ops[s.idx[i]]
	return Interval{Start: o.Start, End: o.End, Stream: o.Stream}
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
	// giving each interval's same-stream neighbours for the dependency signal. The triage's
	// own sweep leaves Hidden and Pos nil (see sweep).
	Order []int32
	Pos   []int32

	// idle, when set, is handed the busy union's edges in time order (idle.go): gapOp gives
	// the launch start and trace index of the interval starting a stream's busy span.
	idle  *idleAcc
	gapOp func(i int32) (launch int64, oi int32)
}

// SweepOverlap computes, in O(n log n), each interval's hidden time (overlapped by a different
// stream) plus the union busy time, the 2+-stream time and the peak number of busy streams.
// Same-stream concurrency never counts as hidden: each stream is first merged into its busy
// union, and time is hidden exactly where at least two stream unions are active.
func SweepOverlap(iv []Interval) Sweep {
	sw := Sweep{Hidden: make([]int64, len(iv)), Pos: make([]int32, len(iv))}
	sw.sweep(&spans{iv: iv}, func(i int32, ns int64) { sw.Hidden[i] = ns })
	for p, i := range sw.Order {
		sw.Pos[i] = int32(p)
	}
	return sw
}

// sweep is SweepOverlap without the per-interval arrays the triage does not keep: it fills
// Order and the totals and hands each interval's nonzero hidden time to hidden, so that a
// stage sums it into its kernel rows instead of holding 8 bytes per op; Pos is left nil
// (posOf finds the few positions the dependency signal asks for). It allocates Order and the
// 2+-stream intervals only: each stream's busy union is walked in place and the streams'
// edges are merged as they are consumed, never stored.
func (sw *Sweep) sweep(iv *spans, hidden func(i int32, ns int64)) {
	n := iv.len()
	sw.Order = make([]int32, n)
	// Bucket by stream (a counting sort: streams are few), then sort each bucket by start only
	// when it is not already in order — trace ops mostly arrive in stream order, so this is
	// linear on real input. The per-stream slices stay in this frame (small ones on the stack).
	slot := map[int32]int{}
	var streams []int32
	var counts []int
	lastSlot, lastStream := -1, int32(0) // consecutive ops mostly share a stream
	for i := range int32(n) {
		st := iv.at(i).Stream
		if lastSlot >= 0 && st == lastStream {
			counts[lastSlot]++
			continue
		}
		j, ok := slot[st]
		if !ok {
			j = len(streams)
			slot[st] = j
			streams = append(streams, st)
			counts = append(counts, 0)
		}
		counts[j]++
		lastSlot, lastStream = j, st
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
	fillBuckets(iv, sw.Order, slot, offset, counts)
	// Per-stream unions as edges, each stream's in time order; the global edge order is a k-way
	// merge of k sorted runs (k = streams), O(n log k), not a sort.
	runs := make([]unionRun, 0, len(streams))
	for _, j := range rank {
		r := unionRun{iv: iv, order: sw.Order[offset[j] : offset[j]+counts[j]]}
		if r.next() {
			runs = append(runs, r)
		}
	}
	sw.Streams = len(streams)
	mStart, mEnd := sw.sweepEdges(runs)
	if len(mStart) == 0 {
		return // nothing is hidden
	}
	hiddenIn(iv, mStart, mEnd, hidden)
}

// fillBuckets writes each interval's index into its stream's bucket of order (bucket j at
// offset[j], counts[j] long, stream → bucket by slot) in input order, then sorts the buckets
// that are not already in (start, end, index) order.
func fillBuckets(iv *spans, order []int32, slot map[int32]int, offset, counts []int) {
	fill := append([]int{}, offset...)
	lastSlot, lastStream := -1, int32(0)
	for i := range int32(iv.len()) {
		j := lastSlot
		if st := iv.at(i).Stream; j < 0 || st != lastStream {
			j = slot[st]
			lastSlot, lastStream = j, st
		}
		order[fill[j]] = i
		fill[j]++
	}
	cmpIdx := func(x, y int32) int { return cmpInterval(iv, x, y) }
	var buf []int32
	for j := range offset {
		b := order[offset[j] : offset[j]+counts[j]]
		if slices.IsSortedFunc(b, cmpIdx) {
			continue
		}
		if buf == nil {
			buf = make([]int32, slices.Max(counts))
		}
		mergeRuns32(b, buf, cmpIdx)
	}
}

// hiddenIn hands each interval's nonzero overlap with the 2+-stream intervals [mStart, mEnd)
// to hidden, from prefix sums of their lengths: hidden(op) = |op ∩ M|.
func hiddenIn(iv *spans, mStart, mEnd []int64, hidden func(i int32, ns int64)) {
	cum := make([]int64, len(mStart)+1)
	for i := range mStart {
		cum[i+1] = cum[i] + mEnd[i] - mStart[i]
	}
	// Ops mostly come in time order, so each op's searches start where the last op's ended.
	var near [2]int
	for i := range int32(iv.len()) {
		x := iv.at(i)
		if h := measureNear(x.Start, x.End, mStart, mEnd, cum, &near); h != 0 {
			hidden(i, h)
		}
	}
}

// sweepEdges merges the streams' union edges in time order into BusyNS, MultiNS and Peak and
// returns the 2+-stream intervals (coalesced where they touch).
func (sw *Sweep) sweepEdges(runs []unionRun) (mStart, mEnd []int64) {
	c := 0
	var prev int64
	mergeRuns(runs, func(e edge) {
		if c >= 1 {
			sw.BusyNS += e.t - prev
		}
		if a := sw.idle; a != nil {
			switch {
			case e.d > 0 && (c == 0 || a.pend && e.t == a.pTo):
				// a gap ends here (or a second op ends the same one)
				l, oi := sw.gapOp(e.i)
				a.startAt(e.t, l, int64(oi), c > 0, oi, siteKey{}, false)
			case e.d > 0:
				a.flush() // busy already: nothing opens, a pending gap has all its ops
			case c == 1:
				a.endAt(e.t)
			}
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
	})
	return mStart, mEnd
}

// mergeRuns32 sorts b by cmp with a bottom-up merge of its ascending runs, using buf (at least
// as long as b). A stream's ops come as a few sorted runs (the kernel table, then the memcpy
// and memset tables, each in time order), so this is a few linear passes instead of a sort by
// comparisons through the op indices, which is costly at a million ops (docs/performance.md,
// "Figures that were in code comments"). Input with many runs is left to slices.SortFunc,
// which needs no buffer of run starts.
func mergeRuns32(b, buf []int32, cmp func(x, y int32) int) {
	starts := []int{0}
	for i := 1; i < len(b); i++ {
		if cmp(b[i-1], b[i]) > 0 {
			starts = append(starts, i)
			if len(starts) > 64 {
				slices.SortFunc(b, cmp)
				return
			}
		}
	}
	src, dst := b, buf[:len(b)]
	for len(starts) > 1 {
		next := starts[:0]
		for k := 0; k < len(starts); k += 2 {
			lo, mid, hi := starts[k], len(b), len(b)
			if k+1 < len(starts) {
				mid = starts[k+1]
			}
			if k+2 < len(starts) {
				hi = starts[k+2]
			}
			x, y, o := lo, mid, lo
			for x < mid && y < hi {
				if cmp(src[y], src[x]) < 0 {
					dst[o] = src[y]
					y++
				} else {
					dst[o] = src[x]
					x++
				}
				o++
			}
			o += copy(dst[o:], src[x:mid])
			copy(dst[o:], src[y:hi])
			next = append(next, lo)
		}
		starts = next
		src, dst = dst, src
	}
	if &src[0] != &b[0] {
		copy(b, src)
	}
}

// cmpInterval orders interval indices by (start, end, index), the order within a stream.
func cmpInterval(iv *spans, x, y int32) int {
	a, b := iv.at(x), iv.at(y)
	if a.Start != b.Start {
		return cmp.Compare(a.Start, b.Start)
	}
	if a.End != b.End {
		return cmp.Compare(a.End, b.End)
	}
	return cmp.Compare(x, y)
}

// posOf is the position of interval i in sw.Order (Sweep.Pos[i]), found by binary search:
// Order is sorted by (stream, start, end, index).
func (sw *Sweep) posOf(iv *spans, i int32) int32 {
	me := iv.at(i)
	p, _ := slices.BinarySearchFunc(sw.Order, i, func(x, _ int32) int {
		if s := iv.at(x).Stream; s != me.Stream {
			return cmp.Compare(s, me.Stream)
		}
		return cmpInterval(iv, x, i)
	})
	return int32(p)
}

type edge struct {
	t int64
	d int8
	i int32 // for a start edge, the first interval of the span
}

// unionRun walks one stream's busy union (its ops merged where they overlap, empty spans
// dropped) as edges: a start edge, then an end edge, then the next span's start.
type unionRun struct {
	iv     *spans
	order  []int32 // the stream's ops in (start, end, index) order, not yet merged
	cs, ce int64   // the current span
	first  int32   // the current span's first interval
	atEnd  bool    // the next edge is the current span's end
}

// next moves to the next nonempty span; false when the stream has none left.
func (r *unionRun) next() bool {
	for len(r.order) > 0 {
		x := r.iv.at(r.order[0])
		r.cs, r.ce, r.first = x.Start, x.End, r.order[0]
		r.order = r.order[1:]
		for len(r.order) > 0 {
			y := r.iv.at(r.order[0])
			if y.Start >= r.ce {
				break
			}
			if y.End > r.ce {
				r.ce = y.End
			}
			r.order = r.order[1:]
		}
		if r.ce > r.cs {
			r.atEnd = false
			return true
		}
	}
	return false
}

func (r *unionRun) edge() edge {
	if r.atEnd {
		return edge{r.ce, -1, 0}
	}
	return edge{r.cs, 1, r.first}
}

// advance steps past the current edge; false when the stream is done.
func (r *unionRun) advance() bool {
	if !r.atEnd {
		r.atEnd = true
		return true
	}
	return r.next()
}

// measureNear returns |[s,e) ∩ ∪[ms[i],me[i])| for sorted disjoint intervals with prefix sums
// cum. Its two searches start at near's positions (those of the previous call), which it
// updates: a fraction of the cost of searching from scratch when successive intervals lie
// close in time, and the same result wherever they lie.
func measureNear(s, e int64, ms, me, cum []int64, near *[2]int) int64 {
	if e <= s || len(ms) == 0 {
		return 0
	}
	i := trace.SearchNear(len(me), near[0], func(k int) bool { return me[k] > s })
	j := trace.SearchNear(len(ms), near[1], func(k int) bool { return ms[k] >= e }) - 1
	near[0], near[1] = i, j+1
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

// mergeRuns hands the edges of every run to fn in edgeLess order, with a binary heap of the
// runs (edges of equal time and direction may come in any run order: the sweep's sums do not
// depend on it).
func mergeRuns(h []unionRun, fn func(edge)) {
	if len(h) == 1 {
		r := &h[0]
		for ok := true; ok; ok = r.advance() {
			fn(r.edge())
		}
		return
	}
	less := func(i, j int) bool { return edgeLess(h[i].edge(), h[j].edge()) }
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
		fn(h[0].edge())
		if !h[0].advance() {
			h[0] = h[len(h)-1]
			h = h[:len(h)-1]
		}
		down(0)
	}
}
