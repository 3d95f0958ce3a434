package nsysdb

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/sglprof/runner/reports/trace"
)

// This file delivers an export's GPU ops one at a time in time order (OpStream), so that a
// consumer that keeps only per-name and per-stream state (the triage) needs memory that does
// not grow with the number of kernels. Nothing per kernel or per runtime call is kept:
//
//   - The kernel table is scanned once, in table order, by the direct file reader (its pages
//     read and records decoded on a goroutine of their own where two CPUs may be used; see
//     streamdecode.go). Exports write it in start order or nearly so, so a fixed reorder
//     window (OpStream.limits.reorder ops) puts it in (Start, End, seq) order; an op that
//     would have to go before one already delivered ends the pass with ErrNotStreamable.
//   - The memory operations are few: they are read up front into Trace.GPUOps (the memory
//     summary needs them anyway) and merged into the kernel stream by (Start, End, seq).
//   - Launch names come from a merge join on correlation ids. CUPTI numbers API calls in call
//     order, and the runtime table is in call order or nearly so; it is scanned on its own
//     goroutine (summing the API table as the lean read does) and handed over in batches as
//     the kernels need them. The consumer keeps (correlation id → call name and start) in a
//     ring indexed by id that covers a fixed range around the largest kernel id seen; see
//     join. CUPTI numbers each process's calls on its own, so an export of several processes
//     (a server's TP ranks) gets one join per process; their places in the hand-over are
//     counted over every process's calls.
//   - Each op is handed over with its launch call's start, which the one launch per API name
//     the pass keeps does not carry (the idle breakdown's host wait needs it).
//
// Every way the window assumptions can fail is detected and reported as ErrNotStreamable, so
// a caller that then reads the export with ReadCapture never gets a silently different answer.

// ErrNotStreamable (wrapped, with the reason) says an export cannot be delivered as an ordered
// stream; the caller reads it with ReadCapture instead.
var ErrNotStreamable = errors.New("nsys: export cannot be streamed")

func notStreamable(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrNotStreamable}, args...)...)
}

// streamLimits are the fixed windows of a pass (tests shrink them).
type streamLimits struct {
	reorder  int   // kernels held back to put the table in start order
	ring     int   // correlation ids the join ring covers (a power of two)
	back     int64 // how far below the largest kernel id a kernel's id may be
	slack    int64 // calls the runtime scan must be past a missing id's place before "no call has it"
	batch    int   // runtime calls per hand-over
	outliers int   // calls kept whose ids are far above the kernels' (a second id sequence)
	judged   int   // ids remembered as having no call, before they are kept as a range
	joins    int   // processes a pass keeps a join for (each about 2 MB with the default ring)
	ranges   int   // NVTX ranges a pass holds (Trace.Annotations, about 100 bytes each)
	depth    int   // NVTX ranges nested on one thread
	kbatch   int   // decoded kernel rows per hand-over (kernelsDecoded)
}

func defaultLimits() streamLimits {
	return streamLimits{reorder: 1 << 14, ring: 1 << 16, back: 1 << 15, slack: 4096, batch: 2048, outliers: 1 << 16, judged: 1 << 16, joins: 64, ranges: 1 << 19, depth: 1 << 12, kbatch: kernelBatch}
}

// ahead is how far above the largest kernel id a call's id may be and still go in the ring.
func (l streamLimits) ahead() int64 { return int64(l.ring) - l.back - 1 }

// OpStream is an export opened for one ordered pass over its GPU ops.
type OpStream struct {
	// Capture is what ReadCapture with SummariseAPI, SkipKernelInfo and OneLaunchPerName would
	// return, except that Trace.GPUOps holds only the memory operations (Capture.Memops indexes
	// them as usual, so MemorySummary works; their Launch is set as Each delivers them) and no
	// kernel, and Trace.Launches holds one call per API name and graph flag (created as the
	// ops that link to them go by). APIStats, APICalls, APIRaw, Threads, Trace.Events,
	// Trace.Processes, kernel-only devices in Trace.Devices, the link warning and, for an
	// export without ANALYSIS_DETAILS, the window are complete only after Each returned nil.
	Capture *Capture

	r       *reader
	db      *sql.DB
	kernels *directPlan // the kernel table's plan (cols as kernelColumns returns them)
	runtime *directPlan // nil without a runtime table
	kN      int64       // kernels: the kernel table's last rowid, checked during the pass
	memSort []int32     // indices of the memory ops in (Start, End, index) order
	limits  streamLimits
	used    bool
	closed  bool
	onBatch func(*rtBatch) // tests: pass.onBatch
}

// runtimeCols are the runtime table's columns a pass reads.
var runtimeCols = []string{"start", "end", "globalTid", "correlationId", "nameId"}

const kernelTable = "CUPTI_ACTIVITY_KIND_KERNEL"
const runtimeTable = "CUPTI_ACTIVITY_KIND_RUNTIME"

// OpenStream reads the export's small tables (schema, strings, devices, memory ops, NVTX,
// session) and prepares the pass; SummariseAPI, SkipKernelInfo and OneLaunchPerName are
// implied, KernelNames and Logger are honoured. It returns ErrNotStreamable (wrapped) up front
// when the export has more than streamLimits.ranges NVTX ranges (they are held, with the
// other small tables: each op's scope is found from them), when the direct file reader declines the file or the kernel or runtime table, when the
// kernel table's rowids are not its row numbers, and for an export without kernels when
// AllowNoKernels asks for it to be read anyway. Other errors are ReadCapture's (not SQLite,
// not an export, ErrNoKernels, ...), with the same messages.
func OpenStream(ctx context.Context, path string, opts ReadOptions) (*OpStream, error) {
	return openStream(ctx, path, opts, defaultLimits())
}

// openStream is OpenStream with the pass's windows (tests shrink them).
func openStream(ctx context.Context, path string, opts ReadOptions, lim streamLimits) (_ *OpStream, err error) {
	opts.SummariseAPI, opts.SkipKernelInfo, opts.OneLaunchPerName = true, true, true
	r, warnings, err := openReader(ctx, path, opts)
	if err != nil {
		return nil, err
	}
	log := r.log
	s := &OpStream{Capture: r.c, r: r, db: r.db, limits: lim}
	// The pass's launches are one per API name, with no call's time (see launch).
	r.t.LaunchTimesDropped = true
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := r.tables(); err != nil {
		return nil, err
	}
	if err := r.schema(); err != nil {
		return nil, err
	}
	if r.has("StringIds") {
		if r.strStmt, err = r.db.PrepareContext(ctx, `SELECT value FROM StringIds WHERE id = ?`); err != nil {
			return nil, r.wrap("StringIds", err)
		}
	}
	if !r.has(kernelTable) {
		return nil, s.noKernels(r.noKernelTable(kernelTable))
	}
	cols, err := r.kernelColumns(kernelTable, opts.KernelNames)
	if err != nil {
		return nil, err
	}
	if len(warnings) > 0 || opts.noDirect {
		return nil, notStreamable("%s: only the direct file reader streams, and it does not read a database a writer has touched (%v)", path, warnings)
	}
	if r.file, err = openSQLFile(path); err != nil {
		return nil, notStreamable("%s: the direct file reader declines the file: %v", path, err)
	}
	if s.kernels, err = s.plan(kernelTable, cols); err != nil {
		return nil, err
	}
	last, err := r.file.lastRowid(s.kernels.root)
	if err != nil {
		if errors.Is(err, errFileLayout) {
			return nil, notStreamable("%s: %s: %v", path, kernelTable, err)
		}
		return nil, r.wrap(kernelTable, err)
	}
	if last <= 0 {
		return nil, s.noKernels(r.emptyKernelTable(kernelTable))
	}
	if last > int64(r.file.pages)*int64(r.file.pageSize)/32 {
		return nil, notStreamable("%s: %s: the last rowid %d is not the row count (the file could not hold that many rows)", path, kernelTable, last)
	}
	s.kN = last
	if err := r.memops(); err != nil {
		return nil, err
	}
	r.maxRanges = lim.ranges
	r.nvIdx, r.keepRange = newNVTXIndex(), opts.KeepRange
	r.c.nvtx = r.nvIdx
	if r.has("NVTX_EVENTS") {
		// The table's rows bound its ranges: one allocation for the index instead of a
		// growing slice's copies (at 500k ranges those were most of the pass's heap).
		if p, err := r.planDirect("NVTX_EVENTS", []string{"start"}); err == nil {
			if n, err := r.file.lastRowid(p.root); err == nil && n > 0 {
				r.nvIdx.ranges = make([]nvRange, 0, min(n, int64(lim.ranges)))
				// Written front to back now, on the open's one goroutine: mapped in at once.
				trace.Prefault(r.nvIdx.ranges, 0, cap(r.nvIdx.ranges))
			}
		}
	}
	if err := r.nvtx(); err != nil {
		if errors.Is(err, errTooManyRanges) {
			return nil, notStreamable("%s has more than %d NVTX ranges, the most a streamed pass holds", path, lim.ranges)
		}
		return nil, err
	}
	r.c.apiSummarised = true
	if r.has(runtimeTable) {
		if s.runtime, err = s.plan(runtimeTable, runtimeCols); err != nil {
			return nil, err
		}
	} else {
		r.t.Warnings = append(r.t.Warnings, noRuntimeWarning)
	}
	if err := r.devices(); err != nil {
		return nil, err
	}
	if err := r.session(); err != nil {
		return nil, err
	}
	ops := r.t.GPUOps
	s.memSort = make([]int32, len(ops))
	for i := range s.memSort {
		s.memSort[i] = int32(i)
	}
	slices.SortFunc(s.memSort, func(a, b int32) int {
		x, y := &ops[a], &ops[b]
		return cmp.Or(cmp.Compare(x.Start, y.Start), cmp.Compare(x.End, y.End), cmp.Compare(a, b))
	})
	log.Debug("nsys: export opened for streaming", "path", path, "kernels", s.kN, "memops", len(ops), "runtime", s.runtime != nil)
	return s, nil
}

// noKernels is err (ErrNoKernels) as ReadCapture returns it, or, when AllowNoKernels asks
// for such an export to be read anyway, ErrNotStreamable wrapping it.
func (s *OpStream) noKernels(err error) error {
	if s.r.opts.AllowNoKernels {
		return fmt.Errorf("%w: %w", ErrNotStreamable, err)
	}
	return err
}

// plan is planDirect with a decline turned into ErrNotStreamable.
func (s *OpStream) plan(table string, cols []string) (*directPlan, error) {
	p, err := s.r.planDirect(table, cols)
	if err != nil {
		if errors.Is(err, errFileLayout) {
			return nil, notStreamable("%s: %s: %v", s.r.path, table, err)
		}
		return nil, s.r.wrap(table, err)
	}
	return p, nil
}

// Close releases the file and database handles.
func (s *OpStream) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	r := s.r
	if r.strStmt != nil {
		r.strStmt.Close()
	}
	var err error
	if r.file != nil {
		err = r.file.Close()
	}
	return errors.Join(err, s.db.Close())
}

// Each calls fn once for every kernel, memcpy and memset of the export, in nondecreasing
// (Start, End, seq) order, where seq is the op's index in the Trace.GPUOps of ReadCapture
// with the same options: kernels in table order, then the memory ops in Capture.Memops
// order. The op is a trace.GPUOp as ReadCapture would have it, except that op.Launch indexes
// Capture.Trace.Launches (one per API name and graph flag) or is NoID where ReadCapture's is
// NoID, and op.Correlation is the id as stored (ReadCapture makes the ids of an export of
// several processes unique as (pid<<32)|id, which the pass cannot know before its end; the
// memory ops the capture holds get that form). launchStart is the start of the op's launch
// call (the first call with its id in its process), or trace.NoID where op.Launch is NoID.
// *op is valid only during the call. When the pass finds the export does not keep to
// the windows (a kernel too far out of start order, a correlation id that left the join
// window, a launch call that came after its op was delivered without one, more than
// streamLimits.joins processes, a table the direct reader declines halfway) Each returns ErrNotStreamable (wrapped) and fn
// may have seen some ops: the caller discards them and reads the export with ReadCapture.
// ctx cancellation is honoured. Each may be called once.
func (s *OpStream) Each(ctx context.Context, fn func(op *trace.GPUOp, seq, launchStart int64)) error {
	return s.EachScoped(ctx, func(op *trace.GPUOp, seq, launchStart int64, _ int32) { fn(op, seq, launchStart) })
}

// EachScoped is Each that also hands over the op's NVTX scope: the key (Capture.RangeKey: its
// name and domain) of the innermost NVTX range open on the launching thread when the launch
// call started, the range Scopes gives for the held trace (trace.NoID outside every range or
// without a launch). When the pass ends (nil error) NVTXSummary of the capture has each
// range's GPU time inside as it has from the held trace. An export whose ranges
// overlap without nesting around a launch, or whose calls on a thread with ranges are out of
// start order, ends the pass with ErrNotStreamable (see streamnvtx.go).
func (s *OpStream) EachScoped(ctx context.Context, fn func(op *trace.GPUOp, seq, launchStart int64, scope int32)) error {
	if s.closed {
		return errors.New("nsys: OpStream.Each after Close")
	}
	if s.used {
		return errors.New("nsys: OpStream.Each called twice; open the export again for a second pass")
	}
	s.used = true
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.r.ctx = ctx
	p := newPass(s, fn)
	if s.runtime != nil {
		p.startRuntime(ctx)
	}
	err := p.run(ctx)
	if err != nil {
		cancel()
		p.stopRuntime()
		return err
	}
	return p.finish()
}

// seqOp is an op with its seq and its launch call's start (NoID without one), in the reorder
// window.
type seqOp struct {
	op    trace.GPUOp
	seq   int64
	ls    int64
	scope int32 // the launch call's NVTX scope (annotation index) or NoID
}

func lessOp(a, b *seqOp) bool {
	if a.op.Start != b.op.Start {
		return a.op.Start < b.op.Start
	}
	if a.op.End != b.op.End {
		return a.op.End < b.op.End
	}
	return a.seq < b.seq
}

// rtCall is one runtime call with a correlation id, as the runtime scan hands it over (its
// process is its batch's run's: rtBatch.runs).
type rtCall struct {
	id    int64
	start int64 // the call's start, the launch time of the ops it launched
	raw   int32 // StringIds id of the call's name
	scope int32 // the call's NVTX scope (annotation index) or NoID
}

// pidRun says that the calls of a batch from at on (to the next run's at) are of process pid:
// correlation ids are numbered per process.
type pidRun struct {
	at  int32
	pid int32
}

// rtBatch is a hand-over of runtime calls. Their processes come as runs rather than one per
// call: the runtime scan's store of each call into the batch was its costliest line (the
// batch's cache lines were last read by the other core), and a 24-byte call takes three
// lines where a 32-byte one took four; the consumer looks the join up once a run. A runtime
// table lists a thread's calls in runs (a kernel's three calls of each process in turn in
// the benchmark exports, a buffer's worth of one thread in nsys's); calls of processes in
// strict turn cost 8 bytes more each, as much as the process field did.
type rtBatch struct {
	_     cacheLinePad // its length is written per call by the runtime scan
	calls []rtCall
	runs  []pidRun
	_     cacheLinePad
}

// pass is the state of one Each.
type pass struct {
	s   *OpStream
	r   *reader
	t   *trace.Trace
	fn  func(*trace.GPUOp, int64, int64, int32)
	lim streamLimits
	nv  *nvtxIndex // nil without NVTX ranges

	// Kernels.
	next      int64          // kernels scanned so far (the next one's seq)
	kPIDs     map[int32]bool // the kernels' processes
	seenPIDs  idCache        // the processes already in kPIDs and the reader's set
	devs      map[int32]bool // devices kernels ran on
	seenDevs  idCache        // the devices already in devs
	first     int64          // earliest start and latest end of the kernels
	last      int64
	unmatched int64 // ops delivered without a launch

	// Reorder window: pool holds the ops, order[head:tail] their pool slots in key order.
	pool       []seqOp
	free       []int32
	order      []int32
	head, tail int
	prev       seqOp // the op delivered last
	delivered  bool
	memNext    int // next entry of OpStream.memSort to deliver
	scratch    trace.GPUOp

	// Join: one per process, as each numbers its correlation ids on its own. calls counts
	// the runtime calls handed over (of every process): the joins measure "how far the scan
	// is past a place" in it.
	joins map[int32]*join
	// The first joins created, searched before the map: the calls and kernels of several
	// processes interleave, so the last process's join (j) alone missed on most rows.
	recentJoins []pidJoin
	jPID        int32 // the process of j
	j           *join // the join used last
	calls       int64
	memPID      []int32 // per memory op (index into Trace.GPUOps): its process

	// Runtime scan.
	batches chan *rtBatch
	spare   chan *rtBatch
	done    bool // batches is closed and drained
	rt      *rtScan
	onBatch func(*rtBatch) // tests: sees each hand-over as the consumer takes it

	// Launches: raw StringIds id → launch index+1 (dense below 2^16), and the launch of each
	// (name, graph, driver).
	launchDense []int32
	launchMap   map[int32]int32
	reps        map[apiName]int32
}

func newPass(s *OpStream, fn func(*trace.GPUOp, int64, int64, int32)) *pass {
	lim := s.limits
	if lim.depth <= 0 {
		lim.depth = defaultLimits().depth
	}
	if lim.kbatch <= 0 {
		lim.kbatch = kernelBatch
	}
	p := &pass{
		s: s, r: s.r, t: s.r.t, fn: fn, lim: lim, nv: s.r.c.nvtx.startPass(lim.depth),
		devs:      map[int32]bool{},
		kPIDs:     map[int32]bool{},
		joins:     map[int32]*join{},
		pool:      make([]seqOp, lim.reorder+1),
		free:      make([]int32, lim.reorder+1),
		order:     make([]int32, 2*(lim.reorder+1)),
		launchMap: map[int32]int32{},
		reps:      map[apiName]int32{},
		onBatch:   s.onBatch,
	}
	// The reorder window's pool is written whole once the window first fills (1.7 MB with
	// the default window): mapped in at once, as the join rings are.
	trace.Prefault(p.pool, 0, len(p.pool))
	for i := range p.free {
		p.free[i] = int32(len(p.free) - 1 - i)
	}
	p.memPID = make([]int32, len(s.r.t.GPUOps))
	for _, m := range s.r.c.Memops {
		if m.Op >= 0 && int(m.Op) < len(p.memPID) {
			p.memPID[m.Op] = m.PID
		}
	}
	return p
}

// pidJoin is a process's join, as pass.recentJoins holds it.
type pidJoin struct {
	pid int32
	j   *join
}

// joinOf returns the join of process pid, creating it on first use.
func (p *pass) joinOf(pid int32) (*join, error) {
	if p.j != nil && pid == p.jPID {
		return p.j, nil
	}
	for _, e := range p.recentJoins {
		if e.pid == pid {
			p.j, p.jPID = e.j, pid
			return e.j, nil
		}
	}
	j := p.joins[pid]
	if j == nil {
		if len(p.joins) >= p.lim.joins {
			return nil, notStreamable("%s: kernels or runtime calls of more than %d processes", p.r.path, p.lim.joins)
		}
		j = &join{now: &p.calls}
		j.init(p.lim, p.t.GPUOps, p.memPID, pid)
		p.joins[pid] = j
	}
	if len(p.recentJoins) < 16 {
		p.recentJoins = append(p.recentJoins, pidJoin{pid, j})
	}
	p.j, p.jPID = j, pid
	return j, nil
}

// run scans the kernel table, delivers every op and drains the runtime scan.
func (p *pass) run(ctx context.Context) error {
	s, r := p.s, p.r
	var err error
	if scanParts() >= 2 && !r.opts.noParallel {
		err = p.kernelsDecoded(ctx)
	} else {
		ts := &tableScan{s: r.file, rowidAt: -1, ints: make([]sql.NullInt64, len(s.kernels.cols)), fnRow: p.kernel}
		err = ts.run(ctx, s.kernels.root, s.kernels.cols)
	}
	if err != nil {
		if errors.Is(err, errFileLayout) {
			return notStreamable("%s: %s: %v", r.path, kernelTable, err)
		}
		return err
	}
	if p.next != s.kN {
		return notStreamable("%s: %s: %d rows where the last rowid is %d", r.path, kernelTable, p.next, s.kN)
	}
	for p.head < p.tail {
		if err := p.deliverFront(); err != nil {
			return err
		}
	}
	if err := p.deliverMemops(nil); err != nil {
		return err
	}
	// The rest of the runtime table: only to find calls that contradict what was delivered.
	for _, j := range p.joins {
		j.draining = true
	}
	for !p.done {
		if err := p.pull(); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// kernel takes the kernel table's row rowid (its columns v as OpStream.kernels plans them)
// into the pass: its name, process and device, its launch from the join, and the reorder
// window.
func (p *pass) kernel(rowid int64, v []sql.NullInt64) error {
	s, r := p.s, p.r
	seq := p.next
	if rowid != seq+1 || seq >= s.kN {
		return notStreamable("%s: %s: rowid %d where %d was expected (a kernel's place in the table is its seq)", r.path, kernelTable, rowid, seq+1)
	}
	p.next++
	start, end, corr, gpid := v[0], v[1], v[4], v[5]
	if !v[2].Valid || !v[3].Valid {
		return r.wrap(kernelTable, errors.New("a kernel without deviceId or streamId"))
	}
	style := r.opts.KernelNames
	name, err := r.name(kernelNameID(style, v[6], v[7]))
	if err != nil {
		return err
	}
	if style == Mangled && len(v) > 8 && v[8].Valid {
		m, err := r.name(v[8].Int64)
		if err != nil {
			return err
		}
		if m != 0 {
			name = m
		}
	}
	_, pid, _ := SplitGlobalID(gpid.Int64)
	if seq == 0 {
		p.first, p.last = start.Int64, end.Int64
	}
	if !p.seenPIDs.seen(pid) {
		p.kPIDs[pid] = true
		r.addPID(pid)
	}
	p.first, p.last = min(p.first, start.Int64), max(p.last, end.Int64)
	device := int32(v[2].Int64)
	if !p.seenDevs.seen(device) {
		p.devs[device] = true
	}
	x := seqOp{seq: seq, ls: trace.NoID, scope: trace.NoID, op: trace.GPUOp{
		Start: start.Int64, End: end.Int64, Correlation: trace.NoID, ExternalID: trace.NoID,
		Name: name, Device: device, Stream: int32(v[3].Int64), Kind: trace.OpKernel, Launch: trace.NoID, CPUOp: trace.NoID,
	}}
	if corr.Valid {
		x.op.Correlation = corr.Int64
	}
	if x.op.Correlation != trace.NoID { // a stored -1 is no id to ReadCapture's link either
		if x.op.Launch, x.ls, x.scope, err = p.kernelLaunch(pid, corr.Int64); err != nil {
			return err
		}
	}
	return p.push(&x)
}

// push adds a kernel to the reorder window and delivers the earliest op once the window is
// full.
func (p *pass) push(x *seqOp) error {
	if p.delivered && lessOp(x, &p.prev) {
		return notStreamable("%s: %s: the kernel in row %d starts at %d ns, before an op already delivered (%d ns): the table is further out of start order than the %d-kernel reorder window",
			p.r.path, kernelTable, x.seq+1, x.op.Start, p.prev.op.Start, p.lim.reorder)
	}
	slot := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	p.pool[slot] = *x
	if p.tail == len(p.order) {
		n := copy(p.order, p.order[p.head:p.tail])
		p.head, p.tail = 0, n
	}
	pos := p.tail
	if p.tail > p.head && lessOp(x, &p.pool[p.order[p.tail-1]]) {
		// Out of order: binary search for the first op after x, then shift the rest up.
		lo, hi := p.head, p.tail-1
		for lo < hi {
			mid := int(uint(lo+hi) >> 1)
			if lessOp(x, &p.pool[p.order[mid]]) {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		pos = lo
		copy(p.order[pos+1:p.tail+1], p.order[pos:p.tail])
	}
	p.order[pos] = slot
	p.tail++
	if p.tail-p.head > p.lim.reorder {
		return p.deliverFront()
	}
	return nil
}

// deliverFront delivers the earliest kernel of the window, after the memory ops before it.
func (p *pass) deliverFront() error {
	slot := p.order[p.head]
	p.head++
	x := &p.pool[slot]
	if err := p.deliverMemops(x); err != nil {
		return err
	}
	if x.op.Launch == trace.NoID {
		p.unmatched++
	}
	p.prev, p.delivered = *x, true
	if err := p.credit(x); err != nil {
		return err
	}
	p.fn(&x.op, x.seq, x.ls, p.keyOf(x.scope))
	p.free = append(p.free, slot)
	return nil
}

// deliverMemops delivers the memory ops that go before x (all that are left when x is nil).
func (p *pass) deliverMemops(x *seqOp) error {
	ops, order := p.t.GPUOps, p.s.memSort
	for p.memNext < len(order) {
		i := order[p.memNext]
		m := seqOp{op: ops[i], seq: p.s.kN + int64(i), scope: trace.NoID}
		if x != nil && !lessOp(&m, x) {
			return nil
		}
		p.memNext++
		li, ls := int32(trace.NoID), int64(trace.NoID)
		if c := m.op.Correlation; c != trace.NoID {
			var err error
			if li, ls, m.scope, err = p.memopLaunch(p.memPID[i], c); err != nil {
				return err
			}
		}
		if li == trace.NoID {
			p.unmatched++
		}
		ops[i].Launch = li
		m.op.Launch = li
		p.prev, p.delivered = m, true
		if err := p.credit(&m); err != nil {
			return err
		}
		p.scratch = m.op
		p.fn(&p.scratch, m.seq, ls, p.keyOf(m.scope))
	}
	return nil
}

// join is the consumer's side of the merge join of GPU ops and runtime calls on correlation
// id. Let kmax be the largest kernel id looked up so far. The ring holds, per id in
// [kmax-back, kmax+ahead], the first call with that id the runtime scan handed over: two ids
// of that range never share a slot, and an id leaves only when kmax has moved more than back
// past it, after which a kernel asking for it ends the pass. Calls above the range (a second
// id sequence, as generated exports may have) are kept in a capped map; calls whose id a
// memory op has go to that op's entry. A kernel whose id is not found is declared without a
// launch only once the runtime scan has handed over slack calls after the call of the nearest
// lower id that has one (or after the miss, or the scan finished): that is where its call
// would be. The id is remembered, and a call with it arriving later ends the pass, so a wrong
// NoID is never kept. The place is counted in calls, not ids, because an export may
// interleave a second id sequence (generated ones give copies ids after every kernel's), and
// such ids prove nothing about the first. Repeated ids (a runtime call and the driver call it
// makes) keep the first call, as ReadCapture does.
type join struct {
	ring         []joinSlot
	mask         int64
	back, ahead  int64
	slack        int64
	kmax         int64
	haveK        bool
	now          *int64 // calls the scan handed over (of every process: pass.calls)
	outliers     map[int64]outlier
	outHeap      []int64 // the outliers' ids, a min-heap: they move to the ring as kmax nears
	outLimit     int
	judged       map[int64]bool // ids declared without a call
	judgedLimit  int
	jLo, jHi     int64 // range of judged ids, forgotten ones included
	nJudged      int   // judged ids, forgotten ones included
	forgot       bool  // ids in [fLo, fHi] were judged and forgotten
	fLo, fHi     int64
	mem          []memJoin       // per distinct memory op id
	memIdx       map[int64]int32 // memory op correlation id → mem index
	memLo, memHi int64
	draining     bool // the ops are all delivered: only contradictions matter
}

type joinSlot struct {
	id    int64
	pos1  int64 // the call's place in the hand-over plus one; 0 for an empty slot
	start int64 // the call's start
	raw   int32
	scope int32 // 32 bytes a slot: a ring is 2 MB, one per process
}

type memJoin struct {
	pos          int64
	start        int64
	raw          int32
	scope        int32
	seen, judged bool
}

// init sets the join up for the memory ops (Trace.GPUOps) whose process (pids, per op) is pid.
func (j *join) init(lim streamLimits, memops []trace.GPUOp, pids []int32, pid int32) {
	// On huge pages: ingest writes a slot per call, at ids a ring apart from the slot's last
	// use, and with 4 KiB pages the four rings of a four-process export (8 MB) missed the TLB
	// too (ingest and pull 7.0-8.3 % and 8.7-9.9 % of the triage's CPU samples, 5.3-5.5 % and
	// 7.0-7.2 % on huge pages; the 1M four-process NVTX export, load 5).
	j.ring = trace.MakeHuge[joinSlot](lim.ring)
	// The ring (2 MB with the default window) is written all over within the process's first
	// ring-size of ids: mapped in with one call rather than a page fault per 4 KiB page, which
	// were most of a streamed pass's page faults (512 a process) and cost several
	// microseconds each on a VM.
	trace.Prefault(j.ring, 0, len(j.ring))
	j.mask = int64(lim.ring - 1)
	j.back, j.ahead, j.slack = lim.back, lim.ahead(), lim.slack
	j.outliers = map[int64]outlier{}
	j.outLimit = lim.outliers
	j.judged = map[int64]bool{}
	j.judgedLimit = lim.judged
	for i := range memops {
		c := memops[i].Correlation
		if c == trace.NoID || pids[i] != pid {
			continue
		}
		if j.memIdx == nil {
			j.memIdx = map[int64]int32{}
			j.memLo, j.memHi = c, c
		}
		if _, ok := j.memIdx[c]; !ok {
			j.memIdx[c] = int32(len(j.mem))
			j.mem = append(j.mem, memJoin{})
		}
		j.memLo, j.memHi = min(j.memLo, c), max(j.memHi, c)
	}
}

// memOf returns the memory-op entry of id c, or nil.
func (j *join) memOf(c int64) *memJoin {
	if j.memIdx == nil || c < j.memLo || c > j.memHi {
		return nil
	}
	if k, ok := j.memIdx[c]; ok {
		return &j.mem[k]
	}
	return nil
}

// find returns the name, start and NVTX scope of the first call seen with id c.
func (j *join) find(c int64) (raw int32, start int64, scope int32, ok bool) {
	if c >= j.kmax-j.back && c <= j.kmax+j.ahead {
		if sl := &j.ring[c&j.mask]; sl.pos1 != 0 && sl.id == c {
			return sl.raw, sl.start, sl.scope, true
		}
	}
	if len(j.outliers) > 0 {
		if o, ok := j.outliers[c]; ok {
			return o.call.raw, o.call.start, o.call.scope, true
		}
	}
	if m := j.memOf(c); m != nil && m.seen {
		return m.raw, m.start, m.scope, true
	}
	return 0, 0, trace.NoID, false
}

// isJudged says id c was declared without a call (exactly: forgotten ids are not).
func (j *join) isJudged(c int64) bool {
	if m := j.memOf(c); m != nil {
		return m.judged
	}
	return j.judged[c]
}

// judge declares id c without a call.
func (j *join) judge(c int64) {
	if m := j.memOf(c); m != nil {
		m.judged = true
		return
	}
	if len(j.judged) >= j.judgedLimit {
		// Too many to remember one by one: keep their range, and treat any call in it as a
		// contradiction from now on.
		for id := range j.judged {
			if !j.forgot {
				j.fLo, j.fHi, j.forgot = id, id, true
			}
			j.fLo, j.fHi = min(j.fLo, id), max(j.fHi, id)
		}
		clear(j.judged)
	}
	j.judged[c] = true
	if j.nJudged == 0 {
		j.jLo, j.jHi = c, c
	}
	j.jLo, j.jHi = min(j.jLo, c), max(j.jHi, c)
	j.nJudged++
}

// ingest takes one runtime call from the scan.
func (j *join) ingest(c rtCall) error {
	id := c.id
	if j.nJudged > 0 && id >= j.jLo && id <= j.jHi && (j.judged[id] || (j.forgot && id >= j.fLo && id <= j.fHi)) {
		return notStreamable("the runtime call with correlation id %d comes after a GPU op with that id was delivered without a launch (the runtime table is out of call order by more than %d calls)", id, j.slack)
	}
	pos := *j.now
	inRange := id >= j.kmax-j.back && id <= j.kmax+j.ahead
	if m := j.memOf(id); m != nil {
		if m.judged && !m.seen {
			return notStreamable("the runtime call with correlation id %d comes after the memory op with that id was delivered without a launch", id)
		}
		if !m.seen {
			m.raw, m.start, m.scope, m.pos, m.seen = c.raw, c.start, c.scope, pos, true
		}
		return nil
	}
	if j.draining {
		return nil
	}
	switch {
	case id > j.kmax+j.ahead:
		if _, ok := j.outliers[id]; ok {
			return nil
		}
		if len(j.outliers) >= j.outLimit {
			return notStreamable("more than %d runtime calls have correlation ids over %d above the kernels' (%d)", j.outLimit, j.ahead, j.kmax)
		}
		j.outliers[id] = outlier{call: c, pos: pos}
		heapPush(&j.outHeap, id)
	case inRange:
		if len(j.outliers) > 0 {
			if _, ok := j.outliers[id]; ok {
				return nil // an earlier call with this id
			}
		}
		j.put(c, pos)
	}
	// Below the range: no kernel may ask for it any more (only the judged check matters).
	return nil
}

// put records call c (its id in the ring's range) unless an earlier call had that id.
func (j *join) put(c rtCall, pos int64) {
	sl := &j.ring[c.id&j.mask]
	if sl.pos1 != 0 && sl.id == c.id {
		return
	}
	*sl = joinSlot{id: c.id, pos1: pos + 1, start: c.start, raw: c.raw, scope: c.scope}
}

// outlier is a call whose id was above the ring's range when it came.
type outlier struct {
	call rtCall
	pos  int64
}

// nearIDs is how far around a missing id passed looks for its neighbours' calls.
const nearIDs = 64

// posOf is the place of the first call with id c the scan handed over.
func (j *join) posOf(c int64) (int64, bool) {
	if sl := &j.ring[c&j.mask]; sl.pos1 != 0 && sl.id == c {
		return sl.pos1 - 1, true
	}
	if m := j.memOf(c); m != nil && m.seen {
		return m.pos, true
	}
	return 0, false
}

// passed says the scan is far enough past where a call with id k would be (the id was
// missed when the scan had handed over missPos calls). Ids follow call order, so k's call
// comes near those of its neighbours: once the call of a near higher id came, and slack calls
// more, k has none. A higher id whose call came before the nearest lower id's belongs to
// another id sequence and proves nothing. Without a near higher id (ids that jump), 4*slack
// calls past the miss do.
func (j *join) passed(k, missPos int64) bool {
	lo, hi := max(k-nearIDs, j.kmax-j.back), min(k+nearIDs, j.kmax+j.ahead)
	pred := int64(-1)
	for id := k - 1; id >= lo; id-- {
		if pos, ok := j.posOf(id); ok {
			pred = pos
			break
		}
	}
	for id := k + 1; id <= hi; id++ {
		if pos, ok := j.posOf(id); ok && pos > pred {
			return *j.now >= pos+j.slack
		}
	}
	return *j.now >= missPos+4*j.slack
}

// raise makes k the largest kernel id and moves the outliers its range now covers to the
// ring, where they count as handed over in sequence.
func (j *join) raise(k int64) {
	j.kmax, j.haveK = k, true
	for len(j.outHeap) > 0 && j.outHeap[0] <= k+j.ahead {
		id := heapPop(&j.outHeap)
		o := j.outliers[id]
		delete(j.outliers, id)
		if id >= k-j.back {
			j.put(o.call, o.pos)
		}
	}
}

// heapPush and heapPop keep a min-heap of ids.
func heapPush(h *[]int64, x int64) {
	a := append(*h, x)
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if a[p] <= a[i] {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
	*h = a
}

func heapPop(h *[]int64) int64 {
	a := *h
	top := a[0]
	n := len(a) - 1
	a[0] = a[n]
	a = a[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && a[l] < a[m] {
			m = l
		}
		if l+1 < n && a[l+1] < a[m] {
			m = l + 1
		}
		if m == i {
			break
		}
		a[i], a[m] = a[m], a[i]
		i = m
	}
	*h = a
	return top
}

// kernelLaunch is the launch of a kernel of process pid with correlation id k, the launch
// call's start and its NVTX scope (NoID without a call).
func (p *pass) kernelLaunch(pid int32, k int64) (int32, int64, int32, error) {
	j, err := p.joinOf(pid)
	if err != nil {
		return trace.NoID, trace.NoID, trace.NoID, err
	}
	if !j.haveK || k > j.kmax {
		j.raise(k)
	}
	missPos := p.calls
	for {
		if raw, start, scope, ok := j.find(k); ok {
			li, err := p.launch(raw)
			return li, start, scope, err
		}
		if j.isJudged(k) {
			return trace.NoID, trace.NoID, trace.NoID, nil
		}
		if k < j.kmax-j.back {
			return trace.NoID, trace.NoID, trace.NoID, notStreamable("%s: a kernel's correlation id %d is more than %d below another kernel's (%d), out of the join window", p.r.path, k, j.back, j.kmax)
		}
		// Should a call with id k still come after this, ingest says so.
		if p.done || j.passed(k, missPos) {
			break
		}
		if err := p.pull(); err != nil {
			return trace.NoID, trace.NoID, trace.NoID, err
		}
	}
	j.judge(k)
	return trace.NoID, trace.NoID, trace.NoID, nil
}

// memopLaunch is the launch of a memory op of process pid with correlation id c, at its
// delivery, the launch call's start and its NVTX scope (NoID without a call).
func (p *pass) memopLaunch(pid int32, c int64) (int32, int64, int32, error) {
	j, err := p.joinOf(pid)
	if err != nil {
		return trace.NoID, trace.NoID, trace.NoID, err
	}
	m := j.memOf(c)
	missPos := p.calls
	for !m.seen && !m.judged {
		// An id far above the kernels' is not waited for: the scan would have to hold
		// everything up to it. Its call normally came with the kernels of its time.
		if p.done || !j.haveK || c > j.kmax+j.ahead || j.passed(c, missPos) {
			break
		}
		if err := p.pull(); err != nil {
			return trace.NoID, trace.NoID, trace.NoID, err
		}
	}
	if m.seen {
		li, err := p.launch(m.raw)
		return li, m.start, m.scope, err
	}
	m.judged = true
	return trace.NoID, trace.NoID, trace.NoID, nil
}

// launch returns the launch for a call name (StringIds id), creating it on first use: one per
// API name, graph flag and driver flag, as ReadOptions.OneLaunchPerName keeps them.
func (p *pass) launch(raw int32) (int32, error) {
	if raw >= 0 && int(raw) < len(p.launchDense) && p.launchDense[raw] != 0 {
		return p.launchDense[raw] - 1, nil
	}
	if li, ok := p.launchMap[raw]; ok {
		return li, nil
	}
	r, t := p.r, p.t
	id, err := r.name(int64(raw))
	if err != nil {
		return trace.NoID, err
	}
	text := t.Names.String(id)
	an := apiNameOf(t.Names, text)
	r.c.APIRaw[an.name] = text
	li, ok := p.reps[an]
	if !ok {
		li = int32(len(t.Launches))
		p.reps[an] = li
		t.Launches = append(t.Launches, trace.Launch{Correlation: trace.NoID, ExternalID: trace.NoID, Name: an.name, Graph: an.graph, Frame: trace.NoID})
		r.c.Driver = append(r.c.Driver, an.driver)
	}
	if raw >= 0 && raw < 1<<16 {
		if int(raw) >= len(p.launchDense) {
			p.launchDense = append(p.launchDense, make([]int32, int(raw)+1-len(p.launchDense))...)
		}
		p.launchDense[raw] = li + 1
	} else {
		p.launchMap[raw] = li
	}
	return li, nil
}

// rtScan is the runtime scan's own state: the API sums (as the parallel lean read keeps
// them per part) and its error, read by the consumer once the batch channel is closed.
type rtScan struct {
	_    cacheLinePad
	part rtPart
	err  error
	_    cacheLinePad
}

// cacheLinePad, one before and one after, keeps what one goroutine of a pass writes or reads
// per row (the runtime scan's sums, a batch being filled, a table scan's state) off the cache
// lines of objects another goroutine uses per row: the allocator packs objects of one size
// class next to each other, and a line written by one core and read by the other moves between
// them each time. rtScan and the triage's traceCtx are both 224 bytes: unpadded, the runtime
// scan's per-name sums (rtPart.stat) and the triage's per-op scope read (traceCtx.scoped) each
// took about 4 % of the streamed triage's CPU, padded under 1 % (CPU profiles of twelve
// triages of the 1M four-process NVTX export).
type cacheLinePad [64]byte

// rtBatches is how many hand-overs of runtime calls a pass cycles through, oldest first. The
// runtime scan writes each call into a batch the consumer read before; with only the batches
// in flight to reuse (four queued, one being read), it took back the one the consumer had
// just read, whose cache lines were still in the other core's cache, and its first store into
// each line waited for that core to give the line up: about a fifth of the streamed triage's
// CPU in a profile of the 1M four-process NVTX export sat on that one store. Taking the
// batch released longest ago instead (24 of 48 KiB of calls, allocated and mapped in at the
// pass's start: 1.2 MB) leaves about a megabyte of other data between its reading and its
// reuse.
const rtBatches = 24

// startRuntime starts the runtime scan on its own goroutine.
func (p *pass) startRuntime(ctx context.Context) {
	p.batches = make(chan *rtBatch, 4)
	p.spare = make(chan *rtBatch, rtBatches)
	for range rtBatches {
		b := &rtBatch{calls: make([]rtCall, 0, p.lim.batch)}
		trace.Prefault(b.calls, 0, cap(b.calls))
		p.spare <- b
	}
	p.rt = &rtScan{part: rtPart{sparse: map[int64]int32{}, pids: map[int32]bool{}}}
	go p.scanRuntime(ctx)
}

func (p *pass) scanRuntime(ctx context.Context) {
	rt, out := p.rt, p.batches
	defer close(out)
	pt := &rt.part
	path, file, plan, size, nv := p.r.path, p.r.file, p.s.runtime, p.lim.batch, p.nv
	get := func() *rtBatch {
		// The pool's batches are never all out (at most four queued, one read, one
		// filled), so this takes the oldest released; a new batch is only a safeguard.
		select {
		case b := <-p.spare:
			b.calls, b.runs = b.calls[:0], b.runs[:0]
			return b
		default:
			return &rtBatch{calls: make([]rtCall, 0, size)}
		}
	}
	send := func(b *rtBatch) error { return handOver(ctx, out, b) }
	b := get()
	var runPID int32 // the process of b's last run
	ts := &tableScan{s: file, rowidAt: -1, ints: make([]sql.NullInt64, len(plan.cols))}
	ts.fnInts = func(v []sql.NullInt64) error {
		start, end, gtid, corr, nameID := v[0], v[1], v[2], v[3], v[4]
		pid, tid := pt.add(start.Int64, end.Int64, gtid.Int64, nameID.Int64)
		if !corr.Valid {
			return nil
		}
		if nameID.Int64 < 0 || nameID.Int64 > math.MaxInt32 {
			return notStreamable("%s: %s: name id %d out of range", path, runtimeTable, nameID.Int64)
		}
		scope := int32(trace.NoID)
		if nv != nil {
			var err error
			if scope, err = nv.scope(pid, tid, start.Int64); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
		}
		if len(b.runs) == 0 || pid != runPID {
			b.runs = append(b.runs, pidRun{at: int32(len(b.calls)), pid: pid})
			runPID = pid
		}
		b.calls = append(b.calls, rtCall{id: corr.Int64, start: start.Int64, raw: int32(nameID.Int64), scope: scope})
		if len(b.calls) == size {
			if err := send(b); err != nil {
				return err
			}
			b = get()
		}
		return nil
	}
	err := ts.run(ctx, plan.root, plan.cols)
	if err == nil && len(b.calls) > 0 {
		err = send(b)
	}
	if errors.Is(err, errFileLayout) {
		err = notStreamable("%s: %s: %v", path, runtimeTable, err)
	}
	rt.err = err
}

// pull takes the next batch of runtime calls into the join; at the end of the table it
// marks the scan done and returns the scan's error.
func (p *pass) pull() error {
	if p.done {
		return nil
	}
	if p.batches == nil {
		p.done = true
		return nil
	}
	b, ok := <-p.batches
	if !ok {
		p.done = true
		return p.rt.err
	}
	if p.onBatch != nil {
		p.onBatch(b)
	}
	for i, run := range b.runs {
		end := len(b.calls)
		if i+1 < len(b.runs) {
			end = int(b.runs[i+1].at)
		}
		j, err := p.joinOf(run.pid)
		if err != nil {
			return err
		}
		for _, c := range b.calls[run.at:end] {
			if err := j.ingest(c); err != nil {
				return err
			}
			p.calls++
		}
	}
	select {
	case p.spare <- b:
	default:
	}
	return nil
}

// keyOf is the key (Capture.RangeKey) of NVTX range r, or NoID.
func (p *pass) keyOf(r int32) int32 {
	if r == trace.NoID {
		return trace.NoID
	}
	return p.nv.ranges[r].key
}

// credit adds a delivered op's GPU time to the NVTX ranges around its launch. gpuTimeInside
// leaves out a launch whose ops sum to less than nothing, which a pass cannot know before its
// end: an op that ends before it starts inside a range ends the pass instead.
func (p *pass) credit(x *seqOp) error {
	if p.nv == nil || x.scope == trace.NoID {
		return nil
	}
	d := x.op.Dur()
	if d < 0 {
		return notStreamable("%s: a GPU op inside an NVTX range ends before it starts (%d ns)", p.r.path, d)
	}
	p.nv.credit(x.scope, d)
	return nil
}

// stopRuntime waits for a cancelled runtime scan to end.
func (p *pass) stopRuntime() {
	if p.batches == nil || p.done {
		return
	}
	for range p.batches {
	}
	p.done = true
}

// finish fills in what the pass counted: the API table, processes, devices, window, the
// link warning and the event count, as ReadCapture computes them.
func (p *pass) finish() error {
	r, t, c := p.r, p.t, p.r.c
	if rt := p.rt; rt != nil {
		pt := &rt.part
		for pid := range pt.pids {
			r.pids[pid] = true
			r.rtPIDs[pid] = true
		}
		statOf := map[trace.NameID]int{}
		for i, raw := range pt.order {
			id, err := r.name(raw)
			if err != nil {
				return err
			}
			text := t.Names.String(id)
			name := t.Names.InternString(StripAPIVersion(text))
			k, ok := statOf[name]
			if !ok {
				k = len(c.APIStats)
				statOf[name] = k
				c.APIStats = append(c.APIStats, APIStat{Name: name})
			}
			c.APIRaw[name] = text
			c.APIStats[k].merge(pt.stats[i])
		}
		c.APICalls = pt.calls
		r.rtFirst, r.rtEnd = pt.first, pt.end
		c.OneLaunchPerName = true
	}
	r.streamed, r.streamFirst, r.streamLast = p.next, p.first, p.last
	// The held memory ops' ids as ReadCapture makes them unique across processes (the
	// delivered kernels keep their stored ids: nothing downstream of the pass reads them).
	maps.Copy(r.kPIDs, p.kPIDs)
	r.kN, r.kOp0 = 0, 0 // no kernel is held
	r.uniqueCorrelations()
	addDevices(t, maps.Keys(p.devs))
	if err := r.processes(); err != nil {
		return err
	}
	if err := r.session(); err != nil {
		return err
	}
	ops := p.next + int64(len(t.GPUOps))
	if p.unmatched > 0 && c.APICalls > 0 {
		t.Warnings = append(t.Warnings, trace.UnlinkedWarning(p.unmatched, ops))
	}
	t.Events = ops + int64(c.APICalls+c.NVTXEvents)
	r.log.Debug("nsys: export streamed", "path", r.path, "kernels", p.next, "memops", len(t.GPUOps), "launches", len(t.Launches))
	return nil
}
