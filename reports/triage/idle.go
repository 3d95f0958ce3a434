package triage

import (
	"math"
	"math/bits"

	"github.com/sglprof/runner/reports/trace"
)

// KernelWaitThresholdNS is the longest idle gap, in ns, that counts as kernel wait (a short
// bubble between kernels that were already launched) rather than other idle time. 30 µs is the
// threshold HTA's idle-time breakdown applies in effect (its default of 30 is compared with
// gaps in µs), so the two tools' splits can be compared.
const KernelWaitThresholdNS int64 = 30_000

// HostBoundIdleShare is the share of the window that must be idle, and HostBoundHostShare the
// share of the idle time that must be host wait, for a stage to read as host-bound: a stage
// that is 98 % busy is not held back by its host whatever its few gaps are.
const (
	HostBoundIdleShare = 10.0
	HostBoundHostShare = 50.0
)

// hostWaitTop is how many of the longest host waits a stage names.
const hostWaitTop = 3

// IdleFigures are a stage's idle-time breakdown, launch delays and queue lengths (absent
// when the stage was not analysed in full, e.g. a kernels-only aggregate). They are computed
// in the pass that measures busy time, so Idle's three parts sum to window minus busy.
type IdleFigures struct {
	Idle *IdleBreakdown `json:"idle,omitempty"`
	// LaunchDelayUS is the distribution of launch-call start to kernel start over the stage's
	// kernels launched one by one (graph replays excluded).
	LaunchDelayUS *Quantiles `json:"launch_delay_us,omitempty"`
	// QueueLength is the distribution, over the same launches, of the ops of the kernel's
	// stream launched before it and not yet finished when its launch call started.
	QueueLength *Quantiles `json:"queue_length,omitempty"`
	// HostBound is the host-bound verdict and the sites before the longest host waits.
	HostBound *HostBound `json:"host_bound,omitempty"`
}

// IdleBreakdown splits the idle time of a stage's window (window minus the union of the busy
// intervals of all streams) by why the GPU was idle. Each gap in the device's busy union is
// classified as a whole by the ops that end it (the first op of each stream starting there):
// host wait when the earliest of their launch calls started after the gap began, else kernel
// wait when the gap is shorter than KernelWaitThresholdNS, else other (including gaps ended
// by ops without a known launch, and a tail after the last busy time).
type IdleBreakdown struct {
	WindowUS     float64 `json:"window_us"`
	BusyUS       float64 `json:"busy_us"`
	HostWaitUS   float64 `json:"host_wait_us"`
	KernelWaitUS float64 `json:"kernel_wait_us"`
	OtherUS      float64 `json:"other_us"`
}

// Quantiles are nearest-rank percentiles of a distribution, from a log-bucketed histogram:
// values under 128 are exact, larger ones within 1/64 (1.6 %) of the true rank value; Max is
// exact. Launch delays are in µs, queue lengths in ops.
type Quantiles struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// HostBound says whether host wait dominates the stage's idle time and names the sites of the
// kernels whose late launches ended the longest host waits (Python sites, or NVTX ranges for
// nsys exports).
type HostBound struct {
	HostBound bool `json:"host_bound"`
	// LaunchTimes says some op's launch call time was known. Without any (an nsys export
	// streamed with one launch call per API name), no gap can be told to be host wait, and
	// HostBound false means "unknown", not "not host-bound".
	LaunchTimes bool `json:"launch_times"`
	// HostWaitPct is host wait as a share of the idle time; IdlePct idle time as a share of
	// the window.
	HostWaitPct float64    `json:"host_wait_pct"`
	IdlePct     float64    `json:"idle_pct"`
	Longest     []HostWait `json:"longest_host_waits"`
}

// HostWait is one long host wait: the gap and the site that launched the kernel ending it.
type HostWait struct {
	GapUS    float64 `json:"gap_us"`
	StartUS  float64 `json:"start_us"` // gap start, in the trace's own clock
	Location string  `json:"location"`
	CPUOp    string  `json:"cpu_op"`
}

// noLaunch marks a pending gap none of whose ending ops has a known launch.
const noLaunch = math.MaxInt64

// hostGap is one of the longest host waits, before its site is resolved.
type hostGap struct {
	from, len int64
	site      siteKey
}

// idleAcc accumulates a stage's idle figures as the busy sweep hands it, in time order, the
// starts of busy stretches (gap ends) and the ops that start them.
type idleAcc struct {
	started bool
	reach   int64 // end of the busy time so far (the window start before any)
	// the gap waiting for all the ops that end it (those starting at pTo) before it is classified
	pend         bool
	pFrom, pTo   int64
	pLaunch      int64 // earliest launch start of its ending ops, noLaunch when none known
	pSeq         int64
	pSite        siteKey
	pHasSite     bool
	pOI          int32
	host, kern   int64
	other        int64
	top          []hostGap // the longest host waits, longest first
	delay, queue hist
	known        bool                   // some op's launch time was known
	siteOf       func(oi int32) siteKey // resolves pOI when pHasSite is false (held stages)
}

// begin sets the window start (the first op's start, empty ops included).
func (a *idleAcc) begin(t int64) {
	if !a.started {
		a.started, a.reach = true, t
	}
}

// startAt is a nonempty op starting at t, launched at launch (noLaunch when unknown), with
// sequence number seq (its index in the trace) for ties; busy is whether another op was
// running at t. The op counts as a gap's ending op only when it is the first nonempty op of
// its stream starting at t (the caller checks).
func (a *idleAcc) startAt(t, launch, seq int64, busy bool, oi int32, site siteKey, hasSite bool) {
	if a.pend && t == a.pTo {
		if launch < a.pLaunch || launch == a.pLaunch && seq < a.pSeq {
			a.pLaunch, a.pSeq, a.pOI, a.pSite, a.pHasSite = launch, seq, oi, site, hasSite
		}
		return
	}
	a.flush()
	if busy || t <= a.reach {
		return
	}
	a.pend, a.pFrom, a.pTo = true, a.reach, t
	a.pLaunch, a.pSeq, a.pOI, a.pSite, a.pHasSite = launch, seq, oi, site, hasSite
}

// endAt says the device's busy time reached t (all streams idle from t, or still busy).
func (a *idleAcc) endAt(t int64) {
	if t > a.reach {
		a.reach = t
	}
}

// flush classifies the pending gap.
func (a *idleAcc) flush() {
	if !a.pend {
		return
	}
	a.pend = false
	g := a.pTo - a.pFrom
	switch {
	case a.pLaunch != noLaunch && a.pLaunch > a.pFrom:
		a.host += g
		if len(a.top) < hostWaitTop || g > a.top[len(a.top)-1].len {
			site := a.pSite
			if !a.pHasSite && a.siteOf != nil {
				site = a.siteOf(a.pOI)
			}
			a.insertTop(hostGap{from: a.pFrom, len: g, site: site})
		}
	case g < KernelWaitThresholdNS:
		a.kern += g
	default:
		a.other += g
	}
}

func (a *idleAcc) insertTop(h hostGap) {
	i := len(a.top)
	for i > 0 && a.top[i-1].len < h.len {
		i--
	}
	if i >= hostWaitTop {
		return
	}
	a.top = append(a.top, hostGap{})
	copy(a.top[i+1:], a.top[i:])
	a.top[i] = h
	if len(a.top) > hostWaitTop {
		a.top = a.top[:hostWaitTop]
	}
}

// finish closes the window at end (the last op's end): what follows the last busy time is
// other idle time.
func (a *idleAcc) finish(end int64) {
	a.flush()
	if end > a.reach {
		a.other += end - a.reach
		a.reach = end
	}
}

// figures builds the stage's IdleFigures.
func (a *idleAcc) figures(c *traceCtx, windowNS, busyNS int64) IdleFigures {
	f := IdleFigures{Idle: &IdleBreakdown{WindowUS: us(windowNS), BusyUS: us(busyNS),
		HostWaitUS: us(a.host), KernelWaitUS: us(a.kern), OtherUS: us(a.other)}}
	if q, ok := a.delay.quantiles(); ok {
		f.LaunchDelayUS = &Quantiles{P50: q.P50 / 1e3, P90: q.P90 / 1e3, P99: q.P99 / 1e3, Max: q.Max / 1e3}
	}
	if q, ok := a.queue.quantiles(); ok {
		f.QueueLength = &q
	}
	idle := a.host + a.kern + a.other
	hb := &HostBound{HostWaitPct: pct(a.host, idle), IdlePct: pct(idle, windowNS), LaunchTimes: a.known}
	hb.HostBound = idle > 0 && hb.HostWaitPct > HostBoundHostShare && hb.IdlePct >= HostBoundIdleShare
	for _, g := range a.top {
		s := c.resolve(g.site)
		hb.Longest = append(hb.Longest, HostWait{GapUS: us(g.len), StartUS: us(g.from), Location: s.loc, CPUOp: s.cpu})
	}
	f.HostBound = hb
	return f
}

// launchOf is the start of the call that launched op (index oi in the trace, or NoID for a
// streamed op), noLaunch when unknown (no call, or the trace kept no call times); single is
// false for a graph replay, whose launch is not its own.
func (c *traceCtx) launchOf(op *trace.GPUOp, oi int32) (start int64, single bool) {
	t := c.t
	if op.Launch < 0 || int(op.Launch) >= len(t.Launches) {
		return noLaunch, false
	}
	single = !t.Launches[op.Launch].Graph
	switch {
	case c.streamStarts && oi < 0:
		if c.streamLaunch == trace.NoID {
			return noLaunch, false
		}
		return c.streamLaunch, single
	case c.launchStarts != nil:
		if oi < 0 || int(oi) >= len(c.launchStarts) || c.launchStarts[oi] == trace.NoID {
			return noLaunch, false
		}
		return c.launchStarts[oi], single
	case t.LaunchTimesDropped:
		return noLaunch, false
	}
	return t.Launches[op.Launch].Start, single
}

// gapLaunch is the launch time that decides a gap ended by op: a graph replay's first kernel
// waits for its graph launch as a single kernel waits for its own.
func (c *traceCtx) gapLaunch(op *trace.GPUOp, oi int32) int64 {
	s, _ := c.launchOf(op, oi)
	return s
}

// streamQueue is one stream's ops launched one by one and not yet known to have finished, as
// a queue of their ends (a stream runs its ops in launch order, so ends come in order).
type streamQueue struct {
	ends []int64
	head int
}

// maxQueue bounds a streamQueue: CUDA's launch queue holds 1024 ops per stream (a launch into
// a full queue blocks the CPU), so a longer one means the launch times are not the ops' own;
// it reads as maxQueue.
const maxQueue = 1024

// launched records an op launched at launch and ending at end: the stream's queue length at
// the launch and its launch delay (start − launch, 0 when the clocks disagree).
func (a *idleAcc) launched(q *streamQueue, launch, start, end int64) {
	for q.head < len(q.ends) && q.ends[q.head] <= launch {
		q.head++
	}
	if q.head > 0 && q.head*2 >= len(q.ends) {
		n := copy(q.ends, q.ends[q.head:])
		q.ends, q.head = q.ends[:n], 0
	}
	a.queue.add(int64(len(q.ends) - q.head))
	if len(q.ends)-q.head >= maxQueue {
		q.head++
	}
	q.ends = append(q.ends, end)
	a.delay.add(max(start-launch, 0))
}

// hist is a log-bucketed histogram of non-negative int64 values: values under 128 have their
// own bucket, larger ones 64 buckets per power of two (HDR histogram style), so a rank value
// is known within 1/64 at a fixed few kB per distribution whatever the number of ops.
type hist struct {
	n     int64
	max   int64
	count []int64
}

const histSub = 64

func histIndex(v int64) int {
	if v < 2*histSub {
		return int(v)
	}
	e := bits.Len64(uint64(v)) - 7 // v>>e is in [64, 128)
	return e*histSub + int(v>>e)
}

// histLow is the smallest value of bucket i; histHigh the largest.
func histLow(i int) int64 {
	if i < 2*histSub {
		return int64(i)
	}
	e := i/histSub - 1
	m := int64(i - e*histSub)
	return m << e
}

func (h *hist) add(v int64) {
	i := histIndex(v)
	if h.count == nil {
		// every bucket at once (29 kB): growing it as larger values come would allocate more
		// the longer the trace (a streamed analysis allocates nothing per op)
		h.count = make([]int64, histIndex(math.MaxInt64)+1)
	}
	h.count[i]++
	h.n++
	if v > h.max {
		h.max = v
	}
}

// quantiles are the nearest-rank p50/p90/p99 (each the middle of its bucket, at most Max)
// and Max; false when the histogram is empty.
func (h *hist) quantiles() (Quantiles, bool) {
	if h.n == 0 {
		return Quantiles{}, false
	}
	at := func(p float64) float64 {
		rank := int64(math.Ceil(p / 100 * float64(h.n)))
		rank = max(rank, 1)
		var cum int64
		for i, c := range h.count {
			if cum += c; cum >= rank {
				lo := histLow(i)
				hi := histLow(i+1) - 1
				if i < 2*histSub {
					hi = lo
				}
				return float64(min(lo+(hi-lo)/2, h.max))
			}
		}
		return float64(h.max)
	}
	return Quantiles{P50: at(50), P90: at(90), P99: at(99), Max: float64(h.max)}, true
}

// heldIdle prepares the idle figures of a held stage, to be filled by sw's sweep over iv.
func heldIdle(c *traceCtx, iv *spans, sw *Sweep, first int64) *idleAcc {
	a := &idleAcc{siteOf: c.opSite}
	a.begin(first)
	t := c.t
	sw.idle = a
	sw.gapOp = func(i int32) (int64, int32) {
		oi := iv.idx[i]
		return c.gapLaunch(&t.GPUOps[oi], oi), oi
	}
	return a
}

// heldDone finishes a held stage's idle figures once sw has swept it: the window ends at last,
// and the launch delays and queue lengths are taken stream by stream in sw.Order.
func (a *idleAcc) heldDone(c *traceCtx, iv *spans, sw *Sweep, first, last int64) IdleFigures {
	a.finish(last)
	t := c.t
	var q streamQueue
	var cur int32
	for k, i := range sw.Order {
		oi := iv.idx[i]
		op := &t.GPUOps[oi]
		if k == 0 || op.Stream != cur {
			q, cur = streamQueue{ends: q.ends[:0]}, op.Stream
		}
		if l, single := c.launchOf(op, oi); l != noLaunch {
			a.known = true
			if single {
				a.launched(&q, l, op.Start, op.End)
			}
		}
	}
	return a.figures(c, last-first, sw.BusyNS)
}

// addIdle hands a streamed op to the device's idle figures, before s.prev moves on to it: ops
// arrive in (start, end, seq) order, so the stream's first nonempty op at a time is the one
// whose predecessor on the stream is empty or started earlier.
func (d *streamDev) addIdle(c *traceCtx, op *trace.GPUOp, seq int64, s *streamState, k siteKey) {
	a := &d.idle
	if !a.started {
		a.started, a.reach = true, op.Start
	}
	l, single := c.launchOf(op, trace.NoID)
	if l != noLaunch {
		a.known = true
		if single {
			a.launched(&s.queue, l, op.Start, op.End)
		}
	}
	if op.End <= op.Start {
		return
	}
	// Most ops start while the device is busy and no gap waits for its ops: nothing to do
	// then but move the busy end.
	if (a.pend || op.Start > a.reach) && (!s.hasPrv || s.prev.start != op.Start || s.prev.end <= s.prev.start) {
		a.startAt(op.Start, l, seq, false, trace.NoID, k, true)
	}
	if op.End > a.reach {
		a.reach = op.End
	}
}
