package trace

import (
	"cmp"
	"fmt"
	"slices"
)

// UnlinkedWarning is the trace warning for GPU ops that no launch call's correlation id
// matched (every reader words it the same).
func UnlinkedWarning(unmatched, ops int64) string {
	return fmt.Sprintf("link: %d of %d GPU ops have no launch call with their correlation id (launch outside the profiled window?)", unmatched, ops)
}

// Link fills the cross-references of a freshly read trace and appends a warning for each kind
// of inconsistency it finds. It is idempotent and works on any reader's output: whatever a
// reader did not provide (no CPU ops, no frames, no flows, as in an nsys export without Python
// data) simply leaves the corresponding links NoID.
//
// The rules, in order:
//
//  1. GPUOp.Launch: the runtime/driver call with the same correlation id. Correlation ids are
//     unique per launch, so a CUDA/HIP graph replay (one cudaGraphLaunch, many GPU ops sharing
//     its correlation) maps every replayed op to that one call, whose Graph flag is set. When
//     several launches share an id (merged traces) the first one read wins.
//  2. Flows cross-check: a flow finish ("f") written on the GPU side carries the launch's
//     correlation id and the op's start time. A GPU op that has flow finishes at its exact start
//     time none of which carries its correlation is counted as a disagreement (warning). The
//     correlation join is kept: flows only confirm it.
//  3. GPUOp.CPUOp: the cpu_op whose External id equals the op's own External id, else the
//     launch's External id. When several CPU ops share the id, the innermost one (latest start,
//     then earliest end) among those enclosing the launch call; if none encloses it, the
//     innermost of all. External ids that name an annotation rather than a CPU op (typical for
//     graph replays) leave CPUOp NoID.
//  4. CPUOp.Frame and Launch.Frame: the innermost Python frame on the same pid/tid whose
//     interval contains the op's start (start inclusive, end exclusive), found by one sorted
//     sweep per thread (O(n log n)). For a graph replay the launch's frame is the replay site.
//  5. Frame.Parent: the frame whose "Python id" equals this frame's "Python parent id" on the
//     same pid; when the parent id is absent or names no recorded frame, the innermost frame of
//     the same thread enclosing this frame's start (time containment).
//
// The Python-frame sweep (rule 4 and 5) reads only times and threads and writes only the Frame
// and Parent fields, which rules 1 to 3 never touch, and the flow cross-check (rule 2) only
// reads, so on a large trace each runs on a goroutine of its own beside rules 1 and 3; the
// flow warning is appended after rule 1's, where the sequential order puts it.
func Link(t *Trace) {
	if len(t.Frames)+len(t.CPUOps)+len(t.Launches) < parallelLinkMin {
		linkLaunches(t)
		linkCPUOps(t)
		linkFrames(t)
		return
	}
	done := make(chan struct{}, 2)
	go func() {
		defer func() { done <- struct{}{} }()
		linkFrames(t)
	}()
	var flowWarn string
	go func() {
		defer func() { done <- struct{}{} }()
		flowWarn = flowWarning(t)
	}()
	linkLaunchIDs(t)
	linkCPUOps(t)
	<-done
	<-done
	if flowWarn != "" {
		t.Warnings = append(t.Warnings, flowWarn)
	}
}

// parallelLinkMin is the record count from which Link sweeps frames on a second goroutine.
const parallelLinkMin = 1 << 14

// linkLaunches applies rules 1 and 2.
func linkLaunches(t *Trace) {
	linkLaunchIDs(t)
	if w := flowWarning(t); w != "" {
		t.Warnings = append(t.Warnings, w)
	}
}

// linkLaunchIDs applies rule 1: GPUOp.Launch, and the warning for ops without a launch.
func linkLaunchIDs(t *Trace) {
	byCorr := launchIndex(t.Launches)
	unmatched := 0
	for i := range t.GPUOps {
		op := &t.GPUOps[i]
		op.Launch = NoID
		if op.Correlation == NoID {
			unmatched++
			continue
		}
		if li := byCorr.find(op.Correlation); li != NoID {
			op.Launch = li
		} else {
			unmatched++
		}
	}
	if unmatched > 0 && len(t.Launches) > 0 {
		t.Warnings = append(t.Warnings, UnlinkedWarning(int64(unmatched), int64(len(t.GPUOps))))
	}
}

// flowWarning applies rule 2, the flow cross-check: it returns the warning for GPU ops whose
// flow finishes disagree with their correlation, or "". It reads GPU ops' Start and
// Correlation and the flows only.
func flowWarning(t *Trace) string {
	if len(t.Flows) == 0 {
		return ""
	}
	// GPU-side flow finishes sorted by (ts, id): a binary search finds those at an op's start.
	type fin struct{ ts, id int64 }
	nf := 0
	for i := range t.Flows {
		if !t.Flows[i].Start {
			nf++
		}
	}
	fins := make([]fin, 0, nf)
	for _, f := range t.Flows {
		if !f.Start {
			fins = append(fins, fin{f.TS, f.ID})
		}
	}
	byTime := func(a, b fin) int {
		if c := cmp.Compare(a.ts, b.ts); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	}
	if !slices.IsSortedFunc(fins, byTime) { // a reader's flows mostly come in time order
		slices.SortFunc(fins, byTime)
	}
	// The ops mostly come in time order too, so each search starts where the last one ended.
	disagree, checked, at := 0, 0, 0
	for i := range t.GPUOps {
		op := &t.GPUOps[i]
		if op.Correlation == NoID {
			continue
		}
		k := SearchNear(len(fins), at, func(j int) bool { return fins[j].ts >= op.Start })
		at = k
		if k >= len(fins) || fins[k].ts != op.Start {
			continue
		}
		checked++
		match := false
		for ; k < len(fins) && fins[k].ts == op.Start; k++ {
			if fins[k].id == op.Correlation {
				match = true
				break
			}
		}
		if !match {
			disagree++
		}
	}
	if disagree > 0 {
		return fmt.Sprintf("link: flows disagree with correlation ids for %d of %d GPU ops that have a flow arrow (correlation was used)", disagree, checked)
	}
	return ""
}

// corrIndex finds the first launch (index into Trace.Launches) with a correlation id. CUPTI
// numbers correlations densely from where profiling started, so when the ids span at most
// denseSpan times the launches (plus a little), one slot per id in that span replaces a hash
// map, whose insert and lookup per launch and GPU op were a large part of Link's time
// (docs/performance.md); ids spread wider (merged or edited traces) keep the map.
type corrIndex struct {
	lo    int64
	dense []int32 // slot c-lo: the first launch with correlation c, or NoID
	m     map[int64]int32
}

// denseSpan bounds the dense table to this many slots per launch.
const denseSpan = 4

func launchIndex(ls []Launch) corrIndex {
	if lo, slots, ok := CorrelationSpan(ls, func(l *Launch) int64 { return l.Correlation }, denseSpan, 1024); ok {
		x := corrIndex{lo: lo, dense: make([]int32, slots)}
		for i := range x.dense {
			x.dense[i] = NoID
		}
		for i := range ls {
			c := ls[i].Correlation
			if c == NoID {
				continue
			}
			if slot := &x.dense[c-lo]; *slot == NoID {
				*slot = int32(i)
			}
		}
		return x
	}
	n := 0
	for i := range ls {
		if ls[i].Correlation != NoID {
			n++
		}
	}
	x := corrIndex{m: make(map[int64]int32, n)}
	for i := range ls {
		c := ls[i].Correlation
		if c == NoID {
			continue
		}
		if _, ok := x.m[c]; !ok {
			x.m[c] = int32(i)
		}
	}
	return x
}

// CorrelationSpan is the layout of a flat table indexed by correlation id for the records xs
// (ids equal to NoID left out): the least id lo and the number of slots, id-lo for each id.
// ok is false when there is no id, or when the ids span more than perID slots an id plus
// extra (ids from merged or edited files, or hostile ones far apart, whose difference may even
// overflow): a map serves those. CUPTI numbers correlations densely, so real traces fit.
func CorrelationSpan[T any](xs []T, id func(*T) int64, perID, extra int) (lo int64, slots int, ok bool) {
	hi, n := int64(0), 0
	for i := range xs {
		c := id(&xs[i])
		if c == NoID {
			continue
		}
		if n == 0 || c < lo {
			lo = c
		}
		if n == 0 || c > hi {
			hi = c
		}
		n++
	}
	// A negative difference is an overflow.
	if span := hi - lo; n > 0 && span >= 0 && span < int64(perID)*int64(n)+int64(extra) {
		return lo, int(span) + 1, true
	}
	return 0, 0, false
}

// find returns the first launch with correlation c, or NoID.
func (x *corrIndex) find(c int64) int32 {
	if x.m != nil {
		if li, ok := x.m[c]; ok {
			return li
		}
		return NoID
	}
	if d := c - x.lo; c >= x.lo && d >= 0 && d < int64(len(x.dense)) { // d < 0: overflow
		return x.dense[d]
	}
	return NoID
}

func linkCPUOps(t *Trace) {
	for i := range t.GPUOps {
		t.GPUOps[i].CPUOp = NoID
	}
	if len(t.CPUOps) == 0 {
		return
	}
	// CPU op indices sorted by (External id, Start): a binary search finds an id's run.
	idx := make([]int32, 0, len(t.CPUOps))
	for i := range t.CPUOps {
		if t.CPUOps[i].ExternalID != NoID {
			idx = append(idx, int32(i))
		}
	}
	byExt := func(a, b int32) int {
		x, y := &t.CPUOps[a], &t.CPUOps[b]
		if c := cmp.Compare(x.ExternalID, y.ExternalID); c != 0 {
			return c
		}
		return cmp.Compare(x.Start, y.Start)
	}
	// A reader's CPU ops mostly come in id order already (the sort would leave them as they
	// are), and the GPU ops ask for ids mostly in order: each search starts at the last one's
	// answer.
	if !slices.IsSortedFunc(idx, byExt) {
		slices.SortFunc(idx, byExt)
	}
	near := 0
	find := func(ext int64, at int64, hasAt bool) int32 {
		lo := SearchNear(len(idx), near, func(k int) bool { return t.CPUOps[idx[k]].ExternalID >= ext })
		near = lo
		if lo >= len(idx) || t.CPUOps[idx[lo]].ExternalID != ext {
			return NoID
		}
		hi := lo + 1
		for hi < len(idx) && t.CPUOps[idx[hi]].ExternalID == ext {
			hi++
		}
		return pickCPUOp(t, idx[lo:hi], at, hasAt)
	}
	assignCPUOps(t, find)
}

// pickCPUOp chooses among the CPU ops of one external id (run) the one a GPU op belongs to:
// the innermost (latest start, then earliest end) of those spanning the launch time at when
// the GPU op has a launch, else the innermost of them all.
func pickCPUOp(t *Trace, run []int32, at int64, hasAt bool) int32 {
	if len(run) == 1 {
		return run[0]
	}
	best, bestAny := int32(NoID), int32(NoID)
	inner := func(cur int32, cand int32) bool {
		if cur == NoID {
			return true
		}
		c, d := &t.CPUOps[cand], &t.CPUOps[cur]
		return c.Start > d.Start || c.Start == d.Start && c.End < d.End
	}
	for _, ci := range run {
		if inner(bestAny, ci) {
			bestAny = ci
		}
		c := &t.CPUOps[ci]
		if hasAt && c.Start <= at && at <= c.End && inner(best, ci) {
			best = ci
		}
	}
	if best != NoID {
		return best
	}
	return bestAny
}

// assignCPUOps sets each GPU op's CPU op through find (the CPU op of an external id, given
// the launch time when there is a launch): by the GPU op's own external id, else by its
// launch's when that differs.
func assignCPUOps(t *Trace, find func(ext, at int64, hasAt bool) int32) {
	for i := range t.GPUOps {
		op := &t.GPUOps[i]
		var at int64
		hasAt := false
		var launchExt int64 = NoID
		if op.Launch != NoID {
			l := &t.Launches[op.Launch]
			at, hasAt, launchExt = l.Start, true, l.ExternalID
		}
		ci := int32(NoID)
		if op.ExternalID != NoID {
			ci = find(op.ExternalID, at, hasAt)
		}
		if ci == NoID && launchExt != NoID && launchExt != op.ExternalID {
			ci = find(launchExt, at, hasAt)
		}
		op.CPUOp = ci
	}
}

// sweepItem is one interval or query point of the per-thread sweep.
type sweepItem struct {
	start, end int64
	pid, tid   int32
	kind       uint8 // 0 frame, 1 CPU op query, 2 launch query
	idx        int32
}

// cmpSweep is the sweep's order: per thread, by start; at equal starts frames come first,
// longer (outer) frames before shorter ones, so a frame starting with its op still encloses it.
// It is a total order (idx breaks the last ties), so every way of sorting gives one result.
func cmpSweep(a, b sweepItem) int {
	if c := cmp.Compare(a.pid, b.pid); c != 0 {
		return c
	}
	if c := cmp.Compare(a.tid, b.tid); c != 0 {
		return c
	}
	if c := cmp.Compare(a.start, b.start); c != 0 {
		return c
	}
	if c := cmp.Compare(a.kind, b.kind); c != 0 {
		return c
	}
	if c := cmp.Compare(b.end, a.end); c != 0 {
		return c
	}
	return cmp.Compare(a.idx, b.idx)
}

// threadKey packs a pid and tid into one map key.
func threadKey(pid, tid int32) uint64 { return uint64(uint32(pid))<<32 | uint64(uint32(tid)) }

// sweepThreads numbers the threads (pid, tid) of the records; consecutive records mostly share
// a thread, so the last one is remembered in front of the map.
type sweepThreads struct {
	ids     map[uint64]int32
	keys    []uint64
	last    uint64
	lastID  int32
	counts  [][3]int // per thread id, records of each sweep kind
	started bool
}

func (th *sweepThreads) id(pid, tid int32) int32 {
	k := threadKey(pid, tid)
	if th.started && k == th.last {
		return th.lastID
	}
	id, ok := th.ids[k]
	if !ok {
		id = int32(len(th.keys))
		th.ids[k] = id
		th.keys = append(th.keys, k)
		th.counts = append(th.counts, [3]int{})
	}
	th.started, th.last, th.lastID = true, k, id
	return id
}

func linkFrames(t *Trace) {
	if len(t.Frames) == 0 {
		for i := range t.CPUOps {
			t.CPUOps[i].Frame = NoID
		}
		for i := range t.Launches {
			t.Launches[i].Frame = NoID
		}
		return
	}
	// Otherwise the sweep sets every CPU op's and launch's Frame (each lies in one thread's
	// run) and frameParents every frame's Parent: clearing them first would be two more
	// passes over the largest record arrays.
	// The sweep visits the records of each thread in cmpSweep order. Sorting all of them at
	// once was the largest part of Link's time (docs/performance.md); instead each thread's frames, CPU ops and
	// launches are laid out as three runs, each sorted on its own (a reader's records are
	// mostly in time order per thread already, so the check usually finds them sorted), and
	// the sweep merges the three runs as it goes: the same order, without the full sort.
	th := sweepThreads{ids: map[uint64]int32{}}
	for i := range t.Frames {
		th.counts[th.id(t.Frames[i].PID, t.Frames[i].TID)][0]++
	}
	for i := range t.CPUOps {
		th.counts[th.id(t.CPUOps[i].PID, t.CPUOps[i].TID)][1]++
	}
	for i := range t.Launches {
		th.counts[th.id(t.Launches[i].PID, t.Launches[i].TID)][2]++
	}
	// Threads in (pid, tid) order; runs[id][k] is the start of thread id's run of kind k in
	// items, runs[id][3] its end.
	order := make([]int32, len(th.keys))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		ka, kb := th.keys[a], th.keys[b]
		if c := cmp.Compare(int32(ka>>32), int32(kb>>32)); c != 0 {
			return c
		}
		return cmp.Compare(int32(uint32(ka)), int32(uint32(kb)))
	})
	runs := make([][4]int, len(th.keys))
	at := 0
	for _, id := range order {
		for k := 0; k < 3; k++ {
			runs[id][k] = at
			at += th.counts[id][k]
		}
		runs[id][3] = at
	}
	// Each run holds record indexes, not sweep items: 4 bytes a record instead of 32. The
	// array is fresh memory, and on a large trace first touches of fresh pages cost more
	// than the copy (docs/performance.md); the runs' order and the sweep read each record's
	// times in place (item).
	items := make([]int32, at)
	AdviseHuge(items)
	Prefault(items, 0, len(items))
	next := make([][3]int, len(runs)) // write position of each run
	for id := range runs {
		next[id] = [3]int{runs[id][0], runs[id][1], runs[id][2]}
	}
	th.started = false
	for i := range t.Frames {
		f := &t.Frames[i]
		p := &next[th.id(f.PID, f.TID)][0]
		items[*p] = int32(i)
		*p++
	}
	for i := range t.CPUOps {
		c := &t.CPUOps[i]
		p := &next[th.id(c.PID, c.TID)][1]
		items[*p] = int32(i)
		*p++
	}
	for i := range t.Launches {
		l := &t.Launches[i]
		p := &next[th.id(l.PID, l.TID)][2]
		items[*p] = int32(i)
		*p++
	}
	containing := make([]int32, len(t.Frames)) // time-containment parent of each frame
	var stack []int32
	for _, id := range order {
		r := runs[id]
		var run [3][]int32
		var head [3]sweepItem
		for k := range run {
			run[k] = items[r[k]:r[k+1]]
			kind := uint8(k)
			byItem := func(a, b int32) int { return cmpSweep(t.item(kind, a), t.item(kind, b)) }
			if !slices.IsSortedFunc(run[k], byItem) {
				slices.SortFunc(run[k], byItem)
			}
			if len(run[k]) > 0 {
				head[k] = t.item(kind, run[k][0])
			}
		}
		stack = stack[:0]
		for {
			// The least head of the three runs.
			k := -1
			for j := range run {
				if len(run[j]) > 0 && (k < 0 || cmpSweep(head[j], head[k]) < 0) {
					k = j
				}
			}
			if k < 0 {
				break
			}
			stack = t.sweepStep(stack, containing, head[k])
			if run[k] = run[k][1:]; len(run[k]) > 0 {
				head[k] = t.item(uint8(k), run[k][0])
			}
		}
	}
	t.frameParents(containing)
}

// item is record i of a sweep kind (0 frame, 1 CPU op, 2 launch) as the sweep orders it.
func (t *Trace) item(kind uint8, i int32) sweepItem {
	switch kind {
	case 0:
		f := &t.Frames[i]
		return sweepItem{f.Start, f.End, f.PID, f.TID, 0, i}
	case 1:
		c := &t.CPUOps[i]
		return sweepItem{c.Start, c.End, c.PID, c.TID, 1, i}
	}
	l := &t.Launches[i]
	return sweepItem{l.Start, l.End, l.PID, l.TID, 2, i}
}

// sweepStep takes the next record of one thread's sweep (in cmpSweep order): frames that ended
// at or before its start leave the stack of open frames, the innermost open frame becomes its
// frame (a CPU op's or launch's Frame, a frame's time-containment parent in containing), and a
// frame goes on the stack. It returns the stack.
func (t *Trace) sweepStep(stack, containing []int32, it sweepItem) []int32 {
	for len(stack) > 0 && t.Frames[stack[len(stack)-1]].End <= it.start {
		stack = stack[:len(stack)-1]
	}
	// A frame that started earlier but ended before an outer one did (improper nesting) may
	// hide under the top; the top is still the innermost open frame that we know of.
	top := int32(NoID)
	if len(stack) > 0 {
		top = stack[len(stack)-1]
	}
	switch it.kind {
	case 0:
		containing[it.idx] = top
		stack = append(stack, it.idx)
	case 1:
		t.CPUOps[it.idx].Frame = top
	case 2:
		t.Launches[it.idx].Frame = top
	}
	return stack
}

// frameParents sets each frame's Parent: the frame of its Python parent id in the same process
// where there is one, its time-containment parent (containing, from the sweep) otherwise.
func (t *Trace) frameParents(containing []int32) {
	type pyKey struct {
		pid int32
		id  int64
	}
	byID := make(map[pyKey]int32, len(t.Frames))
	for i := range t.Frames {
		f := &t.Frames[i]
		if f.ID != NoID {
			byID[pyKey{f.PID, f.ID}] = int32(i)
		}
	}
	for i := range t.Frames {
		f := &t.Frames[i]
		if f.ParentID != NoID {
			if p, ok := byID[pyKey{f.PID, f.ParentID}]; ok && p != int32(i) {
				f.Parent = p
				continue
			}
		}
		f.Parent = containing[i]
	}
}

// Stack returns the Python call stack of a frame, innermost first, by following Frame.Parent
// (so Link must have run). It stops at a repeated frame, so a corrupt parent chain cannot loop.
func (t *Trace) Stack(frame int32) []int32 {
	var out []int32
	for f := frame; f != NoID && int(f) < len(t.Frames); f = t.Frames[f].Parent {
		if len(out) > len(t.Frames) || slices.Contains(out, f) {
			break
		}
		out = append(out, f)
	}
	return out
}

// OpFrame returns the innermost Python frame responsible for GPU op i: the frame of its CPU op,
// else the frame around its launch call (for a graph replay, the replay site), else NoID.
func (t *Trace) OpFrame(i int) int32 {
	op := &t.GPUOps[i]
	if op.CPUOp != NoID && t.CPUOps[op.CPUOp].Frame != NoID {
		return t.CPUOps[op.CPUOp].Frame
	}
	if op.Launch != NoID {
		return t.Launches[op.Launch].Frame
	}
	return NoID
}

// IsGraphReplay reports whether GPU op i was replayed by a CUDA/HIP graph launch.
func (t *Trace) IsGraphReplay(i int) bool {
	op := &t.GPUOps[i]
	return op.Launch != NoID && t.Launches[op.Launch].Graph
}

// StreamKey identifies one GPU stream.
type StreamKey struct {
	Device, Stream int32
}

// OpsByStream groups GPU op indices by stream, each group sorted by (Start, End, index), the
// order every per-stream sweep (overlap, lanes) needs.
func (t *Trace) OpsByStream(kinds ...OpKind) map[StreamKey][]int32 {
	out := map[StreamKey][]int32{}
	for i := range t.GPUOps {
		op := &t.GPUOps[i]
		if len(kinds) > 0 && !slices.Contains(kinds, op.Kind) {
			continue
		}
		k := StreamKey{op.Device, op.Stream}
		out[k] = append(out[k], int32(i))
	}
	for _, ids := range out {
		slices.SortFunc(ids, func(a, b int32) int {
			x, y := &t.GPUOps[a], &t.GPUOps[b]
			if c := cmp.Compare(x.Start, y.Start); c != 0 {
				return c
			}
			if c := cmp.Compare(x.End, y.End); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
	}
	return out
}

// KernelTime returns the number of kernels and their summed duration, over all devices when
// device is NoID, else on that device only.
func (t *Trace) KernelTime(device int32) (count int, totalNS int64) {
	for i := range t.GPUOps {
		op := &t.GPUOps[i]
		if op.Kind != OpKernel || device != NoID && op.Device != device {
			continue
		}
		count++
		totalNS += op.End - op.Start
	}
	return count, totalNS
}
