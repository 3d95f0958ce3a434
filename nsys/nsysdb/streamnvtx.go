package nsysdb

import (
	"cmp"
	"math"
	"slices"

	"github.com/sglprof/runner/reports/trace"
)

// This file gives a streamed pass its NVTX scopes and NVTX table without holding launches or
// trace annotations. OpenStream reads the NVTX table into a compact index (nvtxIndex: 24 bytes
// a range and 8 more for the pass, where a held trace.Annotation with its RangeInfo takes 80):
// per range its bounds and its key (name, domain); per key the duration sums of the NVTX
// table. The runtime scan walks each thread's calls in start order beside that thread's
// ranges, sorted as Scopes sorts them, keeping the ranges open at the call on a stack. NVTX
// push/pop ranges nest per thread, so the stack is exactly the set of the thread's ranges
// around the call: its top is the call's scope (what Scopes gives its launch), and the whole
// stack, reached from the top through parent links, is what gpuTimeInside credits with the
// call's GPU time (summed per key, as the table shows it). A pass refuses more than
// streamLimits.ranges ranges.
//
// Two ranges of a thread that overlap without nesting (nvtxRangeStart/End crossing a push/pop
// range, or a range ending exactly where the next starts, at a call) around one call would
// make the stack wrong: a pass that meets that ends with ErrNotStreamable and the caller reads
// the export whole (Scopes and gpuTimeInside handle both). Calls a little out of start order
// on a thread (a call is recorded when it returns) are looked up through the parent links.

// domainKey is an NVTX domain as the table names it: domain ids are per process.
type domainKey struct {
	pid int32
	id  int64
}

// nvtxThread is a thread as the NVTX ranges and runtime calls name it.
type nvtxThread struct{ pid, tid int32 }

// nvRange is one NVTX range of the index.
type nvRange struct {
	start, end int64
	key        int32
	lane       int32 // index into nvtxIndex.threads
}

// nvKey is what the NVTX table groups ranges by (the domain's name is resolved once the table
// is read).
type nvKey struct {
	name trace.NameID
	dk   domainKey
}

// nvAgg is one key's duration sums.
type nvAgg struct {
	count             int
	total, minD, maxD int64
}

// nvtxLane is one thread's ranges and the stack of those open at its latest call.
type nvtxLane struct {
	ranges []int32 // nvtxIndex.ranges indices by start, the longer first on equal starts (as Scopes)
	next   int     // ranges[next:] have not started yet
	stack  []int32
	last   int64 // the latest call start so far
	seen   bool
	// crossed is the latest end of a range dropped from the stack because a later range
	// overlapped it without nesting (before any call saw both); a late call at or before it
	// could be inside both, which the parent links cannot say.
	crossed int64
	// Until fastHi (inclusive) the answer stays fastR: no range starts before then (the next
	// one starts later) and the innermost open range (fastR) ends no earlier. A call in
	// [last, fastHi] takes it without touching the ranges: most calls of a thread fall
	// between two range starts, and the ranges' reads were most of scope's time.
	fastHi int64
	fastR  int32
}

// nvtxIndex is a streamed export's NVTX ranges and a pass's state over them. The runtime scan
// owns lanes and writes parent; the consumer reads parent for calls handed over to it (the
// channel orders the two) and owns inside.
type nvtxIndex struct {
	ranges  []nvRange
	keys    []nvKey
	keyIdx  map[nvKey]int32
	aggs    []nvAgg
	domains []string     // per key, once the table is read
	threads []nvtxThread // the ranges' threads, in first-seen order
	laneIdx map[nvtxThread]int32
	lanes   map[nvtxThread]*nvtxLane // built by finish
	// The lanes scope looked up (nil: a thread without ranges), up to laneCache threads:
	// the map lookup per runtime call was a tenth of a streamed triage's CPU, and the calls
	// of several processes interleave, so one remembered thread is not enough.
	recent  [laneCache]recentLane
	nRecent int
	parent  []int32 // per range: the range under it on its thread's stack, or NoID
	inside  []int64 // per key: the GPU time of the ops launched inside its ranges
	depth   int     // most ranges a stack may hold
}

func newNVTXIndex() *nvtxIndex {
	return &nvtxIndex{keyIdx: map[nvKey]int32{}, laneIdx: map[nvtxThread]int32{}}
}

// reset forgets what was read (the reader starts the table again through SQLite).
func (n *nvtxIndex) reset() {
	rs := n.ranges[:0]
	*n = *newNVTXIndex()
	n.ranges = rs
}

// add takes one range of the NVTX table.
func (n *nvtxIndex) add(start, end int64, name trace.NameID, pid, tid int32, dk domainKey) {
	k := nvKey{name, dk}
	ki, ok := n.keyIdx[k]
	if !ok {
		ki = int32(len(n.keys))
		n.keyIdx[k] = ki
		n.keys = append(n.keys, k)
		n.aggs = append(n.aggs, nvAgg{minD: end - start})
	}
	d := end - start
	g := &n.aggs[ki]
	g.count++
	g.total += d
	g.minD, g.maxD = min(g.minD, d), max(g.maxD, d)
	th := nvtxThread{pid, tid}
	li, ok := n.laneIdx[th]
	if !ok {
		li = int32(len(n.threads))
		n.laneIdx[th] = li
		n.threads = append(n.threads, th)
	}
	n.ranges = append(n.ranges, nvRange{start: start, end: end, key: ki, lane: li})
}

// finish resolves the keys' domains and sorts each thread's ranges for a pass.
func (n *nvtxIndex) finish(domains map[domainKey]string) {
	n.nRecent = 0
	n.domains = make([]string, len(n.keys))
	for i, k := range n.keys {
		n.domains[i] = domains[k.dk]
	}
	// Each thread's ranges, in slices of their exact size (an export may hold hundreds of
	// thousands).
	count := make([]int, len(n.threads))
	for i := range n.ranges {
		count[n.ranges[i].lane]++
	}
	lanes := make([]nvtxLane, len(n.threads))
	n.lanes = make(map[nvtxThread]*nvtxLane, len(n.threads))
	for i, th := range n.threads {
		lanes[i].ranges = make([]int32, 0, count[i])
		n.lanes[th] = &lanes[i]
	}
	for i := range n.ranges {
		ln := &lanes[n.ranges[i].lane]
		ln.ranges = append(ln.ranges, int32(i))
	}
	for i := range lanes {
		ln := &lanes[i]
		// The order Scopes sorts a thread's ranges in (the same comparator on the same input,
		// in table order, so ranges with equal bounds come out in the same order).
		slices.SortFunc(ln.ranges, func(a, b int32) int {
			x, y := &n.ranges[a], &n.ranges[b]
			if c := cmp.Compare(x.start, y.start); c != 0 {
				return c
			}
			return cmp.Compare(y.end, x.end)
		})
	}
}

// startPass prepares the per-pass state; nil when there is no range.
func (n *nvtxIndex) startPass(depth int) *nvtxIndex {
	if n == nil || len(n.ranges) == 0 {
		return nil
	}
	n.parent = make([]int32, len(n.ranges))
	n.inside = make([]int64, len(n.keys))
	n.depth = depth
	return n
}

// laneCache is how many threads' lanes nvtxIndex.lane remembers.
const laneCache = 16

// recentLane is one remembered thread's lane.
type recentLane struct {
	th nvtxThread
	ln *nvtxLane
}

// lane is n.lanes[th], from the remembered threads when it is one (beyond laneCache threads
// the others are looked up every time).
func (n *nvtxIndex) lane(th nvtxThread) *nvtxLane {
	for i := range n.recent[:n.nRecent] {
		if n.recent[i].th == th {
			return n.recent[i].ln
		}
	}
	ln := n.lanes[th]
	if n.nRecent < laneCache {
		n.recent[n.nRecent] = recentLane{th, ln}
		n.nRecent++
	}
	return ln
}

// scope returns the innermost range of thread (pid, tid) open at a call starting at at
// (inclusive bounds, as Scopes), or NoID.
func (n *nvtxIndex) scope(pid, tid int32, at int64) (int32, error) {
	ln := n.lane(nvtxThread{pid, tid})
	if ln == nil {
		return trace.NoID, nil
	}
	if ln.seen && at >= ln.last && at <= ln.fastHi {
		ln.last = at
		return ln.fastR, nil
	}
	if ln.seen && at < ln.last {
		return n.late(ln, pid, tid, at)
	}
	ln.seen, ln.last = true, at
	ln.fastHi = math.MinInt64 // set again below unless the scope fails
	rs := n.ranges
	for ln.next < len(ln.ranges) && rs[ln.ranges[ln.next]].start <= at {
		r := ln.ranges[ln.next]
		ln.next++
		a := &rs[r]
		// Ranges that ended before this one started are closed; one this range outlasts
		// overlaps it without nesting, which is harmless only if it ended before the call.
		for len(ln.stack) > 0 {
			top := &rs[ln.stack[len(ln.stack)-1]]
			if top.end >= a.start && a.end <= top.end {
				break
			}
			if top.end >= at {
				return trace.NoID, notStreamable("NVTX ranges of thread %d of process %d overlap without nesting around a call at %d ns", tid, pid, at)
			}
			if top.end >= a.start {
				ln.crossed = max(ln.crossed, top.end)
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
	for len(ln.stack) > 0 && rs[ln.stack[len(ln.stack)-1]].end < at {
		ln.stack = ln.stack[:len(ln.stack)-1]
	}
	ln.fastHi, ln.fastR = int64(math.MaxInt64), trace.NoID
	if ln.next < len(ln.ranges) {
		ln.fastHi = rs[ln.ranges[ln.next]].start - 1
	}
	if len(ln.stack) == 0 {
		return trace.NoID, nil
	}
	top := ln.stack[len(ln.stack)-1]
	ln.fastHi, ln.fastR = min(ln.fastHi, rs[top].end), top
	return top, nil
}

// late is scope for a call that starts before an earlier call of its thread. Every range that
// started by then is on the stack or was, with its parent link: the innermost range around
// at is the latest-starting one that started by at, or the first of its parents still open
// at at (with nesting, a range around at that started earlier holds that one too).
func (n *nvtxIndex) late(ln *nvtxLane, pid, tid int32, at int64) (int32, error) {
	if at <= ln.crossed {
		return trace.NoID, notStreamable("NVTX ranges of thread %d of process %d overlap without nesting near a call at %d ns that came out of start order", tid, pid, at)
	}
	rs := n.ranges
	i, _ := slices.BinarySearchFunc(ln.ranges[:ln.next], at, func(r int32, t int64) int {
		if rs[r].start <= t {
			return -1
		}
		return 1
	})
	if i == 0 {
		return trace.NoID, nil
	}
	r := ln.ranges[i-1]
	for r != trace.NoID && rs[r].end < at {
		r = n.parent[r]
	}
	return r, nil
}

// credit adds an op's GPU time to its scope and every range around it.
func (n *nvtxIndex) credit(scope int32, dur int64) {
	for a := scope; a != trace.NoID; a = n.parent[a] {
		n.inside[n.ranges[a].key] += dur
	}
}

// summary is NVTXSummary's rows before sorting: one per (domain, name), in the order of each
// one's first range, with the GPU time inside the pass summed.
func (n *nvtxIndex) summary(t *trace.Trace) []NVTXRange {
	type key struct {
		domain string
		name   trace.NameID
	}
	idx := map[key]int{}
	var rows []NVTXRange
	for ki, k := range n.keys {
		rk := key{n.domains[ki], k.name}
		j, ok := idx[rk]
		g := &n.aggs[ki]
		if !ok {
			j = len(rows)
			idx[rk] = j
			rows = append(rows, NVTXRange{Range: t.Name(k.name), Domain: rk.domain, MinNS: g.minD})
		}
		r := &rows[j]
		r.Count += g.count
		r.TotalNS += g.total
		r.MinNS = min(r.MinNS, g.minD)
		r.MaxNS = max(r.MaxNS, g.maxD)
		if n.inside != nil {
			r.GPUTimeNS += n.inside[ki]
		}
	}
	return rows
}
