package triage

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sglprof/runner/reports/trace"
)

// ErrNotStreamable says an input cannot be analysed as a stream (Options.OpenStream): Analyze
// then reads it with Options.Open. A reader wraps it with the reason.
var ErrNotStreamable = errors.New("triage: input cannot be streamed")

// OpStream is one input whose GPU ops are handed over one at a time in time order instead of
// held in Trace.GPUOps, so that analysing it takes memory for its names, per-name aggregates
// and per-stream state only (an nsys export of millions of kernels; see Options.OpenStream).
type OpStream struct {
	// Trace is the input without the ops Each delivers: names, launches (GPUOp.Launch indexes
	// them), processes, devices, warnings. Analyze ignores Trace.GPUOps, which a reader may use
	// for its own tables. It may hold CPU-side annotations only when EachScoped is set: their
	// stage windows are then looked up with each op's launch start, as a held trace's are.
	Trace *trace.Trace
	// Each calls fn once for every GPU op of the input in nondecreasing (Start, End, seq)
	// order, where seq is the op's index in the trace the input's Open would return (it
	// breaks ties between equally long ops of one name as a held trace does). op is valid
	// during the call only. launchStart is the start of the op's own launch call (trace.NoID
	// when unknown), which Trace.Launches need not carry (trace.Trace.LaunchTimesDropped): the
	// idle breakdown's host wait and launch delays read it. An error wrapping ErrNotStreamable
	// (the reader found the order could not be kept) sends Analyze back to Open; fn may have
	// seen some ops by then.
	Each func(ctx context.Context, fn func(op *trace.GPUOp, seq, launchStart int64)) error
	// EachScoped, when set, is used instead of Each: it also hands over the op's scope label,
	// what Options.Scopes would give the op in the held trace (a name in Trace.Names, 0 for
	// none), so that the input may carry annotations (an nsys export's NVTX ranges).
	EachScoped func(ctx context.Context, fn func(op *trace.GPUOp, seq, launchStart int64, scope trace.NameID)) error
	// Close, when set, releases the reader's files; Analyze calls it once it is done with the
	// stream, whether or not Each ran.
	Close func() error
}

// streamOne analyses one streamed input. ok is false when the input is not analysed as a
// stream (OpenStream declined it, or the pass found it out of order): the caller reads it with
// Open instead, and what the pass counted is dropped.
func (a *analyzer) streamOne(ctx context.Context, f Input) (info InputInfo, res []stageResult, ok bool, err error) {
	info = InputInfo{Path: f.Path, Stage: f.Stage, Rank: f.Rank.Primary(), Device: -1}
	s, err := a.opts.OpenStream(ctx, f.Path)
	if err != nil {
		if errors.Is(err, ErrNotStreamable) {
			a.log.Debug("triage: reading the whole trace", "path", f.Path, "why", err)
			return info, nil, false, nil
		}
		return info, nil, false, fmt.Errorf("read %s: %w", f.Path, err)
	}
	if s == nil {
		return info, nil, false, nil
	}
	if s.Close != nil {
		defer func() {
			if cerr := s.Close(); cerr != nil && err == nil && ok {
				err = fmt.Errorf("read %s: %w", f.Path, cerr)
			}
		}()
	}
	if s.Trace == nil || (s.Each == nil && s.EachScoped == nil) {
		return info, nil, false, nil
	}
	t := s.Trace
	gpuAnn := slices.ContainsFunc(t.Annotations, func(x trace.Annotation) bool { return x.GPU })
	if f.Stage == "" && ((len(t.Annotations) > 0 && (s.EachScoped == nil || gpuAnn)) || (a.opts.Stages != nil && a.opts.Stages(t) != nil)) ||
		(a.opts.Scopes != nil && a.opts.Scopes(t) != nil) {
		a.log.Debug("triage: reading the whole trace: its stages or scopes need every op", "path", f.Path)
		return info, nil, false, nil
	}
	c := newTraceCtx(t, a.classifier())
	c.streamStarts = true
	sa := &streamAnalysis{c: c, devs: map[int32]*streamDev{}}
	if f.Stage == "" {
		if _, cpu := stageWindows(t, trace.NoID); len(cpu) > 0 {
			sa.wins, sa.staged, sa.devAll.m = newWindowSet(cpu), map[devStage]*streamDev{}, map[int32]*int64{}
		}
	}
	var err2 error
	if s.EachScoped != nil {
		err2 = s.EachScoped(ctx, func(op *trace.GPUOp, seq, launchStart int64, scope trace.NameID) {
			c.streamScope = scope
			sa.add(op, seq, launchStart)
		})
	} else {
		err2 = s.Each(ctx, sa.add)
	}
	if err := err2; err != nil {
		if errors.Is(err, ErrNotStreamable) {
			a.log.Debug("triage: reading the whole trace", "path", f.Path, "why", err)
			return info, nil, false, nil
		}
		return info, nil, false, fmt.Errorf("read %s: %w", f.Path, err)
	}
	if sa.err != nil {
		a.log.Debug("triage: reading the whole trace", "path", f.Path, "why", sa.err)
		return info, nil, false, nil
	}
	for _, w := range t.Warnings {
		a.warn = append(a.warn, filepath.Base(f.Path)+": "+w)
	}
	per := make(map[int32]int64, len(sa.devs))
	for d, sd := range sa.devs {
		per[d] = sd.all
	}
	if sa.wins != nil {
		clear(per)
		for d, sum := range sa.devAll.m {
			per[d] = *sum
		}
	}
	dev, found := a.pickFrom(per, f.Path)
	if !found {
		a.warn = append(a.warn, fmt.Sprintf("%s: no GPU operations; nothing to triage", f.Path))
		if info.Stage == "" {
			info.Stage = StageAll
		}
		return info, nil, true, nil
	}
	info.Device = int(dev)
	info.GPU, c.peak = devicePeak(t, dev)
	info.Peak = c.peak
	label := f.Stage
	if label == "" {
		label = StageAll
	}
	info.Stage = label
	if err := ctx.Err(); err != nil {
		return info, nil, false, err
	}
	if sa.wins != nil {
		// The stages of the device's ops, in a held trace's order (sortStagesByStart); a held
		// stage holds only ops that do not end before they start.
		var order []string
		first := map[string]int64{}
		for k, d := range sa.staged {
			if k.dev == dev && d.count > 0 {
				order = append(order, k.stage)
				first[k.stage] = d.first
			}
		}
		slices.Sort(order)
		sortStages(order, first)
		info.Stage = strings.Join(order, ",")
		res := make([]stageResult, 0, len(order))
		for _, st := range order {
			res = append(res, a.streamStage(c, st, sa.staged[devStage{dev, st}]))
		}
		return info, res, true, nil
	}
	return info, []stageResult{a.streamStage(c, label, sa.devs[dev])}, true, nil
}

// devStage names one device's stage of a streamed input.
type devStage struct {
	dev   int32
	stage string
}

// streamAnalysis is the state of one streamed input: one streamDev per device, as the device
// to analyse is known only at the end (the one with the largest kernel time).
type streamAnalysis struct {
	c    *traceCtx
	devs map[int32]*streamDev
	// The devices' aggregates looked up so far: the ops of several devices interleave, so a
	// map lookup per op (remembering only the previous op's device missed nearly every time).
	recentDev recentAggs[int32]
	// the previous op's order key, to check the stream's order
	pStart, pEnd, pSeq int64
	n                  int64
	err                error // the first order violation; the rest of the pass is ignored
	// With stage annotations (wins not nil) the ops go to one streamDev per device and stage
	// (staged) instead of devs, and devAll sums each device's op durations.
	wins        *windowSet
	staged      map[devStage]*streamDev
	devAll      devTotals
	recentStage recentAggs[devStage] // as recentDev; hashing the stage name per op was 5 % of the pass
}

// devTotals sums each device's op durations, the last 16 devices' sums found by a scan in front
// of the map: a map assignment per op was about 4 % of the per-op work of a streamed triage
// with stages (11 ms a 1M-kernel export of four processes).
type devTotals struct {
	keys [16]int32
	sums [16]*int64
	n    int
	m    map[int32]*int64 // every device's sum
}

// add adds v to device d's sum.
func (t *devTotals) add(d int32, v int64) {
	for i := range t.n {
		if t.keys[i] == d {
			*t.sums[i] += v
			return
		}
	}
	sum := t.m[d]
	if sum == nil {
		sum = new(int64)
		t.m[d] = sum
	}
	if t.n < len(t.keys) {
		t.keys[t.n], t.sums[t.n] = d, sum
		t.n++
	}
	*sum += v
}

// recentAggs remembers up to 16 keys' aggregates (a device, a device's stage) for the per-op
// path, in front of the map that holds them all; keys beyond the 16th are looked up in the
// map every time.
type recentAggs[K comparable] struct {
	keys [16]K
	aggs [16]*streamDev
	n    int
}

// get is k's aggregates if k is remembered, else nil.
func (r *recentAggs[K]) get(k K) *streamDev {
	for i := range r.n {
		if r.keys[i] == k {
			return r.aggs[i]
		}
	}
	return nil
}

// put remembers k's aggregates while there is room.
func (r *recentAggs[K]) put(k K, d *streamDev) {
	if r.n < len(r.keys) {
		r.keys[r.n], r.aggs[r.n] = k, d
		r.n++
	}
}

// streamDev is one device's stage: its aggregates, the online overlap sweep and, per stream,
// what adjacency and the dependency signal need of the last ops.
type streamDev struct {
	all         int64 // summed durations of every op, what pickDevice compares
	count       int
	total       int64
	first, last int64
	byCanon     []*kagg
	aggs        []*kagg
	reps        []repOps // per canonical id: the longest op and its neighbours
	streams     map[int32]*streamState
	lastStream  int32
	lastState   *streamState
	adj         map[uint64]int64 // per pair of canonical ids (adjKey), how often they ran back to back
	adjSeen     [256]adjSlot     // counts of the pairs seen lately, not yet added to adj
	sweep       onlineSweep
	coll        collAcc
	idle        idleAcc // idle.go
}

// adjSlot is one pair's count in streamDev's cache: key is the adjKey plus one (0 is an empty
// slot), n the back-to-back runs not yet added to the map.
type adjSlot struct {
	key uint64
	n   int64
}

// flushAdj adds the cached pair counts to the map.
func (d *streamDev) flushAdj() {
	for i := range d.adjSeen {
		if sl := &d.adjSeen[i]; sl.key != 0 {
			d.adj[sl.key-1] += sl.n
			*sl = adjSlot{}
		}
	}
}

// streamState is one stream of a device as far as the pass got.
type streamState struct {
	active int     // ops running now (the sweep)
	ns     int64   // summed kernel time, for the main stream
	ring   []int32 // canonical ids of the last AdjacencyWindow ops, oldest first
	prev   opRef   // the last op, the predecessor of the next one
	hasPrv bool
	// wait is the canonical id whose representative is prev (it wants its successor), or -1.
	wait    int32
	waitSeq int64
	queue   streamQueue // idle.go: the stream's launched, unfinished ops
}

// opRef is what the dependency signal needs of an op.
type opRef struct {
	start, end int64
	canon      int32
	site       siteKey
}

// repOps is an aggregate's representative (longest, first of equal) op and its same-stream
// neighbours, recorded as they pass.
type repOps struct {
	seq        int64
	me         opRef
	prev, next opRef
	hasP, hasN bool
}

// add takes one op of the stream (Each's fn).
func (sa *streamAnalysis) add(op *trace.GPUOp, seq, launchStart int64) {
	if sa.err != nil {
		return
	}
	if sa.n > 0 && (op.Start < sa.pStart || op.Start == sa.pStart && (op.End < sa.pEnd || op.End == sa.pEnd && seq <= sa.pSeq)) {
		sa.err = fmt.Errorf("%w: op %d (start %d ns) came after op %d (start %d ns)", ErrNotStreamable, seq, op.Start, sa.pSeq, sa.pStart)
		return
	}
	sa.n++
	sa.pStart, sa.pEnd, sa.pSeq = op.Start, op.End, seq
	sa.c.streamLaunch = launchStart
	if sa.wins != nil {
		sa.addStaged(op, seq, launchStart)
		return
	}
	d := sa.recentDev.get(op.Device)
	if d == nil {
		if d = sa.devs[op.Device]; d == nil {
			d = &streamDev{streams: map[int32]*streamState{}, adj: map[uint64]int64{}}
			sa.devs[op.Device] = d
		}
		sa.recentDev.put(op.Device, d)
	}
	d.add(sa.c, op, seq)
}

// addStaged is add for an input with stage windows: the op's stage is the innermost window
// around its launch call's start (its own start without a launch), as opStages finds it.
func (sa *streamAnalysis) addStaged(op *trace.GPUOp, seq, launchStart int64) {
	ct := op.Start
	if op.Launch >= 0 && launchStart != trace.NoID {
		ct = launchStart
	}
	st := sa.wins.find(ct)
	if st == "" {
		st = StageUnannotated
	}
	sa.devAll.add(op.Device, op.Dur())
	k := devStage{op.Device, st}
	d := sa.recentStage.get(k)
	if d == nil {
		if d = sa.staged[k]; d == nil {
			d = &streamDev{streams: map[int32]*streamState{}, adj: map[uint64]int64{}}
			sa.staged[k] = d
		}
		sa.recentStage.put(k, d)
	}
	d.add(sa.c, op, seq)
}

func (d *streamDev) add(c *traceCtx, op *trace.GPUOp, seq int64) {
	dur := op.Dur()
	d.all += dur
	if dur < 0 {
		return // like a held stage, which drops ops that end before they start
	}
	if d.count == 0 || op.Start < d.first {
		d.first = op.Start
	}
	if d.count == 0 || op.End > d.last {
		d.last = op.End
	}
	d.count++
	d.total += dur
	cid := c.canonID(op.Name)
	for int(cid) >= len(d.byCanon) {
		d.byCanon = append(d.byCanon, nil)
		d.reps = append(d.reps, repOps{})
	}
	g := d.byCanon[cid]
	if g == nil {
		g = c.newAgg(cid)
		d.byCanon[cid] = g
		d.aggs = append(d.aggs, g)
	}
	if g.cat == CatCommunication {
		d.coll.noInsts = true
		d.coll.add(c, op, trace.NoID, g)
	}
	if op.Kind != trace.OpKernel {
		if oc, ok := c.roof.opCost(op, g); ok {
			g.roof.add(oc, dur)
		}
	}
	k := c.siteOf(op, trace.NoID)
	// The representative is the longest op, the first in the input's own order (seq) among
	// equally long ones, as in a held stage; the stream's time order can differ from it.
	isRep := g.add(dur, k) || dur == g.repDur && seq < d.reps[cid].seq
	if isRep {
		g.repStr = op.Stream
	}
	me := opRef{start: op.Start, end: op.End, canon: cid, site: k}

	s := d.lastState
	if s == nil || op.Stream != d.lastStream {
		if s = d.streams[op.Stream]; s == nil {
			s = &streamState{ring: make([]int32, 0, AdjacencyWindow), wait: -1}
			d.streams[op.Stream] = s
		}
		d.lastState, d.lastStream = s, op.Stream
	}
	s.ns += dur
	// Back-to-back pairs: this op with each of the stream's last AdjacencyWindow ops.
	for _, p := range s.ring {
		if p != cid {
			k := adjKey(int(p), int(cid))
			// A direct-mapped cache of the pairs counted lately saves most map updates: the
			// same few pairs recur all along a stream.
			if sl := &d.adjSeen[(k*0x9e3779b97f4a7c15)>>56]; sl.key == k+1 {
				sl.n++
			} else {
				if sl.key != 0 {
					d.adj[sl.key-1] += sl.n
				}
				sl.key, sl.n = k+1, 1
			}
		}
	}
	if len(s.ring) == AdjacencyWindow {
		copy(s.ring, s.ring[1:])
		s.ring = s.ring[:AdjacencyWindow-1]
	}
	s.ring = append(s.ring, cid)
	// Dependency neighbours: this op follows the previous one, which may be a representative.
	if s.wait >= 0 && d.reps[s.wait].seq == s.waitSeq {
		r := &d.reps[s.wait]
		r.next, r.hasN = me, true
	}
	s.wait = -1
	if isRep {
		d.reps[cid] = repOps{seq: seq, me: me, prev: s.prev, hasP: s.hasPrv}
		s.wait, s.waitSeq = cid, seq
	}
	d.addIdle(c, op, seq, s, k)
	s.prev, s.hasPrv = me, true

	d.sweep.add(s, op.Start, op.End, cid, d.hidden)
}

// mainStream is the stream with the most kernel time, the lowest id of equal ones (as a held
// stage's streamTotals.main).
func (d *streamDev) mainStream() int32 {
	var best int32
	var bestNS int64 = -1
	for id, s := range d.streams {
		if s.ns > bestNS || s.ns == bestNS && id < best {
			best, bestNS = id, s.ns
		}
	}
	return best
}

// hidden credits ns of hidden time to canonical id cid.
func (d *streamDev) hidden(cid int32, ns int64) { d.byCanon[cid].hidden += ns }

// streamStage builds the tables of a streamed device's only stage.
func (a *analyzer) streamStage(c *traceCtx, label string, d *streamDev) stageResult {
	d.sweep.finish(d.hidden)
	aggs := d.aggs
	closeAggs(aggs)
	res := stageResult{aggs: aggs, main: d.mainStream(), stage: Stage{Stage: label, KernelCount: d.count, KernelTimeUS: us(d.total)}}
	if d.count > 0 {
		res.stage.WindowUS = us(d.last - d.first)
	}
	sw := &d.sweep
	res.stage.BusyUS = us(sw.busy)
	res.stage.Collectives, res.comms = d.coll.finish()
	if d.count > 0 {
		d.idle.finish(d.last)
		res.stage.IdleFigures = d.idle.figures(c, d.last-d.first, sw.busy)
	}
	res.stage.Summary = OverlapTotals{MultiStreamNS: sw.multi, PeakStreams: sw.peak, Streams: len(d.streams)}
	adj := func() map[uint64]int64 {
		d.flushAdj()
		rows := make(map[uint64]int64, len(d.adj))
		for k, n := range d.adj {
			x, y := int(k>>32), int(uint32(k))
			rows[adjKey(d.byCanon[x].row, d.byCanon[y].row)] += n
		}
		return rows
	}
	ref := func(r opRef) *neighbour {
		return &neighbour{start: r.start, end: r.end, cat: c.cats[r.canon], site: depSite(c, r.site)}
	}
	dep := func(g *kagg) string {
		r := &d.reps[c.byName[g.name]]
		var p, n *neighbour
		if r.hasP {
			p = ref(r.prev)
		}
		if r.hasN {
			n = ref(r.next)
		}
		return depFrom(r.me.start, r.me.end, g.cat, depSite(c, r.me.site), p, n)
	}
	return a.tables(c, res, d.total, adj, dep)
}

// onlineSweep measures stream overlap over ops that arrive in start order, holding only the
// ops still running: with every op that starts before t seen, which streams are busy before t
// is final, so an op's hidden time (its time with another stream busy) is final once the
// sweep passes its end. It gives what Sweep gives (busy, 2+-stream and peak figures, each
// op's hidden time) for the same ops; TestOnlineSweepMatchesBruteForce checks them.
type onlineSweep struct {
	now         int64 // the time the sweep has reached
	busyStreams int   // streams with an op running at now
	busy, multi int64 // time with 1+ and 2+ streams busy, up to now
	peak        int
	running     []runningOp // min-heap by end
	started     bool
}

// runningOp is an op the sweep has passed the start of but not the end.
type runningOp struct {
	end    int64
	multi0 int64 // the 2+-stream time before the op's start
	canon  int32
	s      *streamState
}

// advance moves the sweep to time t (at or after now).
func (w *onlineSweep) advance(t int64) {
	if !w.started {
		w.now, w.started = t, true
		return
	}
	if dt := t - w.now; dt > 0 {
		if w.busyStreams >= 1 {
			w.busy += dt
		}
		if w.busyStreams >= 2 {
			w.multi += dt
		}
		w.now = t
	}
}

// endBefore ends, in time order, every running op that ends at or before t (ends come before
// starts at one time, so touching ops do not overlap), handing each its hidden time.
func (w *onlineSweep) endBefore(t int64, hidden func(cid int32, ns int64)) {
	for len(w.running) > 0 && w.running[0].end <= t {
		r := w.running[0]
		w.pop()
		w.advance(r.end)
		if h := w.multi - r.multi0; h != 0 {
			hidden(r.canon, h)
		}
		if r.s.active--; r.s.active == 0 {
			w.busyStreams--
		}
	}
}

// add starts an op [start, end) of canonical id cid on stream s. An empty op is never busy
// (as in a stream's busy union) and so has no hidden time.
func (w *onlineSweep) add(s *streamState, start, end int64, cid int32, hidden func(cid int32, ns int64)) {
	if end <= start {
		return
	}
	w.endBefore(start, hidden)
	w.advance(start)
	if s.active++; s.active == 1 {
		w.busyStreams++
		if w.busyStreams > w.peak {
			w.peak = w.busyStreams
		}
	}
	w.push(runningOp{end: end, multi0: w.multi, canon: cid, s: s})
}

// finish ends every op still running.
func (w *onlineSweep) finish(hidden func(cid int32, ns int64)) {
	w.endBefore(1<<63-1, hidden)
}

func (w *onlineSweep) push(r runningOp) {
	h := append(w.running, r)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h[p].end <= h[i].end {
			break
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
	w.running = h
}

func (w *onlineSweep) pop() {
	h := w.running
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h[r].end < h[l].end {
			m = r
		}
		if h[i].end <= h[m].end {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	w.running = h
}
