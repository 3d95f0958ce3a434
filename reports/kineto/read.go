// Package kineto reads PyTorch profiler (Kineto) Chrome-trace JSON into the profiler-neutral
// model of reports/trace, and rewrites such traces for viewing (Fix, Slim).
//
// The reader streams: a hand-written splitter finds traceEvents at the top level (keys in any
// order, metadata before or after it, or a bare event array), hands out one element's raw bytes
// at a time, and a hand-written strict-JSON event scanner (fastevent.go) takes the used fields
// into compact pointer-free records with interned names; what it declines (metadata, escaped
// keys or values, invalid JSON) goes through a reused fastjson parser, with identical results. Times are parsed from the decimal text as fixed point into int64
// nanoseconds. Damaged input (truncated files, gzip streams cut short, invalid UTF-8, unescaped
// quotes from old Kineto versions) yields what could be read plus warnings naming byte offsets.
// A large plain-JSON file is read in two halves, one per core, merged in file order
// (split.go); a gzip stream is inflated and split on a second goroutine (pipeline.go).
package kineto

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/klauspost/compress/gzip"
	"github.com/valyala/fastjson"

	"github.com/sglprof/runner/plans/infile"
	"github.com/sglprof/runner/reports/trace"
)

// Options tune what the reader keeps. The zero value keeps everything.
type Options struct {
	// SkipFrames drops python_function events. They are most of a with_stack trace's events, so
	// callers that need no Python attribution save most of the memory.
	SkipFrames bool
	// SkipCPUOps drops cpu_op events (kernels then cannot be attributed to an operator).
	SkipCPUOps bool
	// SkipFlows drops ac2g flow events (Link then cannot cross-check correlations).
	SkipFlows bool
	// MaxWarningsPerKind caps the detailed warnings of one kind; the rest are counted in one
	// summary line. 0 means 5.
	MaxWarningsPerKind int
	// Logger, when not nil, receives a debug line per warning.
	Logger *slog.Logger
	// Sequential reads on the calling goroutine only. By default (when GOMAXPROCS > 1) a
	// plain-JSON file (io.ReaderAt, read from its start) of splitMin bytes or more is read in
	// two halves on two goroutines (split.go), and other input is inflated if needed and split
	// into events on a second goroutine while this one parses them, which hides the inflate
	// cost of .json.gz (docs/performance.md). The results are identical either way.
	Sequential bool
	// Pipeline forces the two-goroutine pipeline even with GOMAXPROCS 1 and for plain JSON
	// that would be read in two halves (for measurements).
	Pipeline bool

	// noFast sends every event through fastjson (tests compare both paths).
	noFast bool
	// splitOff, when positive, reads plain JSON of any size in two halves with this offset as
	// the guessed split point instead of splitAt's (tests try every offset).
	splitOff int64
	// preparseAll makes the pipeline's splitting goroutine decode every batch, not only those
	// it would otherwise wait to hand over (tests compare both).
	preparseAll bool
}

// maxEventDurNS is the duration above which an event is treated as a CUPTI overflow record
// (HTA uses the same 7-day bound) and dropped.
const maxEventDurNS = 7 * 24 * 3600 * 1_000_000_000

// syntheticPIDBase is the first id given to a non-numeric pid or tid ("Spans", "[TP00] 9").
// Real OS pids and stream ids stay far below it.
const syntheticPIDBase = 1 << 30

// ReadFile reads a Kineto trace file, plain or gzip-compressed (detected by its magic bytes).
func ReadFile(ctx context.Context, path string, opts Options) (*trace.Trace, error) {
	f, err := infile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open Kineto trace: %w", err)
	}
	defer f.Close()
	return Read(ctx, f, path, opts)
}

// Read reads a Kineto trace from r; name is recorded as Trace.Path and used in messages.
// Damage that leaves part of the trace readable is reported in Trace.Warnings; an error is
// returned only when nothing usable could be read (not JSON, not a trace, empty) or ctx ends.
func Read(ctx context.Context, r io.Reader, name string, opts Options) (*trace.Trace, error) {
	atStart := false
	if sk, ok := r.(io.Seeker); ok {
		pos, err := sk.Seek(0, io.SeekCurrent)
		atStart = err == nil && pos == 0
	}
	total := sizeHint(r)
	in, closeFn, err := openMaybeGzip(r, total)
	if err != nil {
		return nil, fmt.Errorf("read Kineto trace %s: %w", name, err)
	}
	defer closeFn()
	d := newDecoder(ctx, name, opts)
	d.total = total
	var s *scanner
	var werr error
	_, plain := in.(*bufio.Reader)
	ra, _ := r.(io.ReaderAt)
	split := false
	if plain && atStart && ra != nil && !opts.Pipeline && !opts.Sequential && d.total > 0 &&
		(runtime.GOMAXPROCS(0) >= 2 && d.total >= splitMin || opts.splitOff > 0) {
		at := opts.splitOff
		if at <= 0 {
			at = splitAt(ra, d.total)
		}
		if at > 0 && at < d.total {
			s, werr = readSplit(ctx, ra, d.total, at, d)
			split = true
		}
	}
	switch {
	case split: // read in two halves
	case !opts.Pipeline && (opts.Sequential || runtime.GOMAXPROCS(0) < 2):
		s = newScanner(in)
		werr = walk(s, d, nil)
	default:
		s, werr = pipelinedWalk(ctx, in, d, !opts.noFast, opts.preparseAll)
	}
	if d.ctxErr != nil {
		return nil, fmt.Errorf("read Kineto trace %s: %w", name, d.ctxErr)
	}
	var se *syntaxError
	if werr != nil {
		if !errors.As(werr, &se) {
			return nil, fmt.Errorf("read Kineto trace %s: %w", name, werr)
		}
		if d.t.Events == 0 && !d.sawEvents && !errors.Is(se.Err, errTruncated) {
			return nil, fmt.Errorf("read Kineto trace %s: not a Kineto/Chrome trace (%v); pass a .json or .json.gz written by the PyTorch profiler", name, werr)
		}
		switch {
		case s.readErr != nil:
			d.warnf("truncated", "input ends early at byte %d of the uncompressed JSON (%v): the gzip stream is cut short; kept the %d events read before it", se.Offset, s.readErr, d.t.Events)
		case errors.Is(se.Err, errTruncated):
			d.warnf("truncated", "trace is truncated at byte %d (no closing ']}': the profiler probably died before finishing the file); kept the %d events read before it", se.Offset, d.t.Events)
		default:
			d.warnf("syntax", "stopped at malformed JSON (%v); kept the %d events read before it", werr, d.t.Events)
		}
	} else if s.readErr != nil {
		d.warnf("truncated", "reading stopped at byte %d of the uncompressed JSON: %v", s.offset(), s.readErr)
	}
	if !d.sawEvents && d.t.Events == 0 && werr == nil {
		d.warnf("empty", "the trace has no traceEvents")
	}
	d.finish()
	return d.t, nil
}

// openMaybeGzip returns a reader of the uncompressed bytes: gzip when the stream starts with
// the gzip magic bytes, r itself otherwise. hint is sizeHint's (0: unknown); a small input
// gets a small read buffer.
func openMaybeGzip(r io.Reader, hint int64) (io.Reader, func(), error) {
	size := 256 << 10
	if hint > 0 {
		size = int(min(max(hint, 4<<10), 256<<10))
	}
	br := bufio.NewReaderSize(r, size)
	magic, err := br.Peek(2)
	if err != nil && len(magic) < 2 {
		if errors.Is(err, io.EOF) {
			return br, func() {}, nil // empty or 1-byte input: the scanner reports it
		}
		return nil, nil, err
	}
	if magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("gzip header: %w", err)
		}
		return zr, func() { zr.Close() }, nil
	}
	return br, func() {}, nil
}

// decoder turns raw events into trace records.
type decoder struct {
	ctx    context.Context
	ctxErr error
	opts   Options
	t      *trace.Trace
	p      fastjson.Parser
	tp     fastjson.Parser // for top-level values
	num    []byte

	sawEvents bool
	warnCount map[string]int
	warnOrder []string

	synth    map[string]int32 // non-numeric pid/tid text -> synthetic id
	synthTxt []string
	procs    map[int32]*trace.Process
	graph    []int8 // per NameID: 0 unknown, 1 graph launch, 2 not

	nOverflow, nNegative, nBadTime int
	rank                           int32

	ev      rawEvent
	scratch [6][]byte // number texts of the fastjson path: pid, tid, ts, dur, id, an args value
	shapeJS [3][]byte // the fastjson path's shape args (Input Dims, Input type, Concrete Inputs)
	shape   []byte    // the Trace.Shapes text being built

	total int64 // the input's uncompressed size when known (sizeHint), else 0
	res   [resKinds]reservation

	// The second half of a split read (split.go) logs what it would do to process records
	// (procLog) instead of doing it, and notes the lowest number it stored as a pid, tid,
	// device or stream at or above syntheticPIDBase (highID, 0 for none): where that lies
	// among its synthetic ids, absorb could not tell the two apart.
	half     bool
	procLog  []procEv
	procSeen map[int32]bool
	highID   int32
}

// noteID records a numeric id for highID.
func (d *decoder) noteID(n int32) {
	if n >= syntheticPIDBase && (d.highID == 0 || n < d.highID) {
		d.highID = n
	}
}

// procEv is one change to a process record: created (procTouch), named, or labelled.
type procEv struct {
	kind    uint8
	syn     bool
	hasArgs bool
	pid     int32
	val     string
}

const (
	procTouch uint8 = iota
	procName
	procLabels
)

// The record slices reserve() sizes, by index into decoder.res.
const (
	resGPUOps = iota
	resLaunches
	resCPUOps
	resFrames
	resAnnotations
	resFlows
	resComms
	resKinds
)

// rawEvent holds the fields of one event while it is decoded; byte slices alias the input
// or the parser.
type rawEvent struct {
	ph, cat, name []byte
	pid, tid      jv
	ts, dur, id   jv
	a             argsFields      // the used args of the last "args" key
	args          *fastjson.Value // the fastjson path only (metadata reads its strings)
}

// jv is a scalar field value as the decoder uses it: a string (b is its unescaped content), a
// number (b is its text), another type, or absent.
type jv struct {
	t uint8 // jvAbsent, jvString, jvNumber, jvOther (jvEscaped only inside the fast path)
	b []byte
}

// jvOf converts a fastjson value; a number's text goes into *scratch (reused, so the
// fastjson path allocates nothing per event either).
func jvOf(v *fastjson.Value, scratch *[]byte) jv {
	if v == nil {
		return jv{}
	}
	switch v.Type() {
	case fastjson.TypeNumber:
		*scratch = v.MarshalTo((*scratch)[:0])
		return jv{t: jvNumber, b: *scratch}
	case fastjson.TypeString:
		b, _ := v.StringBytes()
		return jv{t: jvString, b: b}
	}
	return jv{t: jvOther}
}

func newDecoder(ctx context.Context, name string, opts Options) *decoder {
	if opts.MaxWarningsPerKind <= 0 {
		opts.MaxWarningsPerKind = 5
	}
	return &decoder{
		ctx:       ctx,
		opts:      opts,
		t:         trace.New(name, "kineto"),
		warnCount: map[string]int{},
		synth:     map[string]int32{},
		procs:     map[int32]*trace.Process{},
		rank:      trace.NoID,
	}
}

// warnf records a warning of a kind, keeping the first few of each kind verbatim.
func (d *decoder) warnf(kind, format string, args ...any) {
	n := d.warnCount[kind]
	if n == 0 {
		d.warnOrder = append(d.warnOrder, kind)
	}
	d.warnCount[kind] = n + 1
	if n < d.opts.MaxWarningsPerKind {
		msg := fmt.Sprintf(format, args...)
		d.t.Warnings = append(d.t.Warnings, msg)
		if d.opts.Logger != nil {
			d.opts.Logger.Debug("kineto warning", "trace", d.t.Path, "kind", kind, "msg", msg)
		}
	}
}

func (d *decoder) malformed(off int64) {
	d.t.Events++
	d.warnf("quote", "event near byte %d lost its string structure (a raw newline inside a string: an unescaped quote from an old Kineto version?); skipped it", off)
}

func (d *decoder) startEvents()     {}
func (d *decoder) endEvents() error { return nil }

func (d *decoder) finish() {
	t := d.t
	if d.nOverflow > 0 {
		d.warnf("overflow", "dropped %d events with durations over 7 days (CUPTI overflow records)", d.nOverflow)
	}
	if d.nNegative > 0 {
		d.warnf("negative", "dropped %d events with negative durations", d.nNegative)
	}
	if d.nBadTime > 0 {
		d.warnf("time", "dropped %d duration events whose ts or dur is not a number", d.nBadTime)
	}
	// Dangling flows: finishes whose start is missing are normal for runtime calls Kineto does
	// not draw arrows for; starts without a finish mean the GPU side was lost. Sorted id lists
	// cost far less than sets for millions of flows.
	if len(t.Flows) > 0 {
		nStarts := 0
		for _, f := range t.Flows {
			if f.Start {
				nStarts++
			}
		}
		starts, ends := make([]int64, 0, nStarts), make([]int64, 0, len(t.Flows)-nStarts)
		for _, f := range t.Flows {
			if f.Start {
				starts = append(starts, f.ID)
			} else {
				ends = append(ends, f.ID)
			}
		}
		slices.Sort(starts)
		slices.Sort(ends)
		starts, ends = slices.Compact(starts), slices.Compact(ends)
		var dangling []int64 // flow starts without a finish, in id order
		noStart := 0
		i, j := 0, 0
		for i < len(starts) || j < len(ends) {
			switch {
			case j >= len(ends) || i < len(starts) && starts[i] < ends[j]:
				dangling = append(dangling, starts[i])
				i++
			case i >= len(starts) || ends[j] < starts[i]:
				noStart++
				j++
			default:
				i++
				j++
			}
		}
		// Finishes without a start are written for every runtime call Kineto draws no arrow
		// for, so they are only counted; starts without a finish mean lost GPU records, except
		// on waits and synchronisations (waitCalls).
		noEnd := len(dangling) - waitCalls(t, dangling)
		t.Meta["kineto.flow_starts_without_finish"] = strconv.Itoa(noEnd)
		t.Meta["kineto.flow_finishes_without_start"] = strconv.Itoa(noStart)
		if noEnd > 0 {
			d.warnf("flows", "dangling flows: %d flow starts (launches) have no finish on the GPU side: GPU records were lost or fell outside the window", noEnd)
		}
	}
	// Processes in pid order of first appearance is not stable across maps: sort by pid.
	for _, p := range d.procs {
		if p.Rank == trace.NoID && d.rank != trace.NoID {
			p.Rank = d.rank
		}
		t.Processes = append(t.Processes, *p)
	}
	sortProcesses(t.Processes)
	// Summaries for capped warning kinds.
	for _, k := range d.warnOrder {
		if n := d.warnCount[k]; n > d.opts.MaxWarningsPerKind {
			t.Warnings = append(t.Warnings, fmt.Sprintf("... and %d more warnings of this kind (%s)", n-d.opts.MaxWarningsPerKind, k))
		}
	}
}

func sortProcesses(ps []trace.Process) {
	slices.SortFunc(ps, func(a, b trace.Process) int { return int(int64(a.PID) - int64(b.PID)) })
}

// top handles one top-level key other than traceEvents.
func (d *decoder) top(key, raw []byte, off int64) {
	t := d.t
	k := string(key)
	v, err := d.tp.ParseBytes(raw)
	if err != nil {
		d.warnf("meta", "top-level key %q at byte %d is not valid JSON: %v", k, off, err)
		return
	}
	switch k {
	case "baseTimeNanoseconds":
		if n, ok := parseInt(v.MarshalTo(d.num[:0])); ok {
			t.BaseNS = n
		}
		t.Meta[k] = string(raw)
		return
	case "deviceProperties":
		arr, _ := v.Array()
		for _, dv := range arr {
			id := dv.GetInt64("id")
			t.Devices = append(t.Devices, trace.Device{ID: int32(id), Name: string(dv.GetStringBytes("name"))})
		}
		return
	case "distributedInfo":
		o, err := v.Object()
		if err != nil {
			return
		}
		o.Visit(func(k2 []byte, v2 *fastjson.Value) {
			switch v2.Type() {
			case fastjson.TypeNumber, fastjson.TypeString:
				t.Meta["distributedInfo."+string(k2)] = scalarText(v2)
			}
		})
		if r, err := v.Get("rank").Int64(); err == nil && v.Get("rank") != nil {
			d.rank = int32(r)
		}
		return
	}
	switch v.Type() {
	case fastjson.TypeString, fastjson.TypeNumber, fastjson.TypeTrue, fastjson.TypeFalse:
		if len(raw) <= 4096 {
			t.Meta[k] = scalarText(v)
		}
	}
}

func scalarText(v *fastjson.Value) string {
	if v.Type() == fastjson.TypeString {
		b, _ := v.StringBytes()
		return string(b)
	}
	return v.String()
}

// event decodes one traceEvents element.
func (d *decoder) event(raw []byte, off int64) error {
	return d.eventPre(raw, off, nil, false)
}

// eventPre decodes one traceEvents element that the pipeline's splitting goroutine may have
// run through fastEvent already: pre holds its result when it succeeded; declined says it
// was tried and declined (then only the fastjson path is left).
func (d *decoder) eventPre(raw []byte, off int64, pre *rawEvent, declined bool) error {
	d.sawEvents = true
	d.t.Events++
	if d.t.Events&4095 == 0 {
		if err := d.ctx.Err(); err != nil {
			d.ctxErr = err
			return err
		}
	}
	if pre != nil {
		return d.dispatch(pre, off)
	}
	ev := &d.ev
	if !declined && !d.opts.noFast && fastEvent(raw, ev) {
		return d.dispatch(ev, off)
	}
	if !utf8.Valid(raw) {
		bad := firstInvalidUTF8(raw)
		d.warnf("utf8", "event at byte %d has invalid UTF-8 at byte %d; skipped it", off, off+int64(bad))
		return nil
	}
	v, err := d.p.ParseBytes(raw)
	if err != nil {
		d.warnf("json", "event at byte %d is not valid JSON (%v; an unescaped quote from an old Kineto version?); skipped it", off, err)
		return nil
	}
	o, err := v.Object()
	if err != nil {
		d.warnf("json", "element at byte %d of traceEvents is not an object; skipped it", off)
		return nil
	}
	*ev = rawEvent{}
	o.Visit(func(k []byte, v *fastjson.Value) {
		switch string(k) {
		case "ph":
			ev.ph, _ = v.StringBytes()
		case "cat":
			ev.cat, _ = v.StringBytes()
		case "name":
			ev.name, _ = v.StringBytes()
		case "pid":
			ev.pid = jvOf(v, &d.scratch[0])
		case "tid":
			ev.tid = jvOf(v, &d.scratch[1])
		case "ts":
			ev.ts = jvOf(v, &d.scratch[2])
		case "dur":
			ev.dur = jvOf(v, &d.scratch[3])
		case "id":
			ev.id = jvOf(v, &d.scratch[4])
		case "args":
			ev.args = v
		}
	})
	d.readArgs(ev.args, &ev.a)
	return d.dispatch(ev, off)
}

// dispatch stores a decoded event by its phase.
func (d *decoder) dispatch(ev *rawEvent, off int64) error {
	if len(ev.ph) != 1 {
		return nil
	}
	switch ev.ph[0] {
	case 'X':
		d.complete(ev, off)
	case 'M':
		d.metadata(ev)
	case 's', 'f':
		if d.opts.SkipFlows {
			return nil
		}
		if c := string(ev.cat); c != "ac2g" && c != "async_cpu_to_gpu" {
			return nil
		}
		ts, ok := micros(ev.ts)
		if !ok || ev.id.t == jvAbsent {
			return nil
		}
		id, ok := intVal(ev.id)
		if !ok {
			return nil
		}
		pid, _ := d.idOf(ev.pid)
		tid, _ := d.idOf(ev.tid)
		d.t.Flows = reserve(d.t.Flows, &d.res[resFlows], off, d.total)
		d.t.Flows = append(d.t.Flows, trace.Flow{TS: ts, ID: id, PID: pid, TID: tid, Start: ev.ph[0] == 's'})
	}
	return nil
}

func firstInvalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return 0
}

// micros parses a ts/dur number into nanoseconds (strings are not times: Chrome's format
// and every Kineto version write numbers).
func micros(v jv) (int64, bool) {
	if v.t == jvNumber {
		return parseMicrosNS(v.b)
	}
	return 0, false
}

// intVal parses an integer-valued number (or numeric string).
func intVal(v jv) (int64, bool) {
	if v.t == jvNumber || v.t == jvString {
		return parseInt(v.b)
	}
	return 0, false
}

// idOf maps a pid or tid to an int32: numbers as they are (wrapping like C), numeric strings
// parsed, other strings to synthetic ids from syntheticPIDBase up. synthetic is true for those.
func (d *decoder) idOf(v jv) (id int32, synthetic bool) {
	switch v.t {
	case jvNumber:
		if n, ok := parseInt(v.b); ok {
			d.noteID(int32(n))
			return int32(n), false
		}
		return 0, false
	case jvString:
		b := v.b
		if n, ok := parseInt(b); ok {
			d.noteID(int32(n))
			return int32(n), false
		}
		if id, ok := d.synth[string(b)]; ok {
			return id, true
		}
		id := int32(syntheticPIDBase + len(d.synthTxt))
		s := string(b)
		d.synth[s] = id
		d.synthTxt = append(d.synthTxt, s)
		return id, true
	}
	return 0, false
}

// proc returns the process record of a pid, creating it (with label and rank derived from a
// string pid such as "[TP00-DP01] 9") on first use.
func (d *decoder) proc(pid int32, synthetic bool) *trace.Process {
	if p, ok := d.procs[pid]; ok {
		return p
	}
	p := &trace.Process{PID: pid, Rank: trace.NoID}
	if synthetic && pid >= syntheticPIDBase && int(pid-syntheticPIDBase) < len(d.synthTxt) {
		txt := d.synthTxt[pid-syntheticPIDBase]
		p.Label = txt
		if lab, rank, ok := parseMergedPID(txt); ok {
			p.Label = lab
			p.Rank = rank
		}
	}
	d.procs[pid] = p
	return p
}

// parseMergedPID splits an SGLang merged-trace pid "[TP00-DP01-PP02-EP03] 1234" into its
// bracketed label and the TP rank.
func parseMergedPID(s string) (label string, rank int32, ok bool) {
	if !strings.HasPrefix(s, "[") {
		return "", 0, false
	}
	end := strings.IndexByte(s, ']')
	if end < 0 {
		return "", 0, false
	}
	label = s[:end+1]
	rank = trace.NoID
	for _, part := range strings.Split(s[1:end], "-") {
		if strings.HasPrefix(part, "TP") {
			if n, err := strconv.Atoi(part[2:]); err == nil {
				rank = int32(n)
			}
		}
	}
	return label, rank, true
}

// trailingInt returns the integer at the end of a string pid ("[TP00] 9" -> 9).
func trailingInt(s string) (int32, bool) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	if i == len(s) {
		return 0, false
	}
	n, err := strconv.Atoi(s[i:])
	if err != nil {
		return 0, false
	}
	return int32(n), true
}

// argsFields are the args the reader uses.
type argsFields struct {
	external, correlation, stream, device, bytes, pyID, pyParent int64
	hasStream, hasDevice                                         bool
	comm                                                         commFields
	// shape holds the JSON texts of "Input Dims", "Input type" and "Concrete Inputs" (nil when
	// absent; the fast path's may hold white space, which shapeText removes).
	shape [3][]byte
}

// commFields are the collective's arguments that PyTorch's NCCL profiling records on a
// communication kernel (and on its record_param_comms CPU op): what triage's Collectives table
// needs. The byte slices point into the event and live as long as it does.
type commFields struct {
	name, dtype, inSplit, outSplit []byte
	inElems, outElems, group       int64
}

// shapeArg returns the index in argsFields.shape of a record_shapes key, or -1.
func shapeArg(k []byte) int {
	switch string(k) {
	case "Input Dims":
		return 0
	case "Input type":
		return 1
	case "Concrete Inputs":
		return 2
	}
	return -1
}

// shapeText appends the Trace.Shapes text of a's shape args to dst: each JSON text without
// white space outside strings (the fast path declines escaped ones, so a quote always opens
// or closes a string), joined by trace.ShapeSep.
func shapeText(dst []byte, a *argsFields) []byte {
	for i, js := range a.shape {
		if i > 0 {
			dst = append(dst, trace.ShapeSep)
		}
		in := false
		for _, c := range js {
			if c == '"' {
				in = !in
			} else if !in && wsByte[c] {
				continue
			}
			dst = append(dst, c)
		}
	}
	return dst
}

// argKind names an args key the reader uses.
type argKind uint8

const (
	argNone argKind = iota
	argExternal
	argCorrelation
	argStream
	argDevice
	argBytes
	argPyID
	argPyParent
	// The collective's arguments (commFields); the first four are strings.
	argCollName
	argDType
	argInSplit
	argOutSplit
	argInElems
	argOutElems
	argGroupSize
)

func argKey(k []byte) argKind {
	switch string(k) {
	case "External id":
		return argExternal
	case "correlation":
		return argCorrelation
	case "stream":
		return argStream
	case "device":
		return argDevice
	case "bytes":
		return argBytes
	case "Python id":
		return argPyID
	case "Python parent id":
		return argPyParent
	case "Collective name":
		return argCollName
	case "dtype":
		return argDType
	case "In split size":
		return argInSplit
	case "Out split size":
		return argOutSplit
	case "In msg nelems":
		return argInElems
	case "Out msg nelems":
		return argOutElems
	case "Group size":
		return argGroupSize
	}
	return argNone
}

// setVal stores one args value of a key argKey knows: a string for the collective's name,
// dtype and split sizes, an integer (or numeric string) for the rest.
func (a *argsFields) setVal(k argKind, v jv) {
	switch k {
	case argCollName, argDType, argInSplit, argOutSplit:
		if v.t != jvString {
			return
		}
		switch k {
		case argCollName:
			a.comm.name = v.b
		case argDType:
			a.comm.dtype = v.b
		case argInSplit:
			a.comm.inSplit = v.b
		case argOutSplit:
			a.comm.outSplit = v.b
		}
		return
	}
	if n, ok := intVal(v); ok {
		a.set(k, n)
	}
}

func (a *argsFields) reset() { *a = noArgs }

// noArgs is what an event without args has.
var noArgs = argsFields{external: trace.NoID, correlation: trace.NoID, pyID: trace.NoID, pyParent: trace.NoID}

// set stores one parsed args value; a later valid duplicate key wins, an invalid one is ignored.
func (a *argsFields) set(k argKind, n int64) {
	switch k {
	case argExternal:
		a.external = n
	case argCorrelation:
		a.correlation = n
	case argStream:
		a.stream, a.hasStream = n, true
	case argDevice:
		a.device, a.hasDevice = n, true
	case argBytes:
		a.bytes = n
	case argPyID:
		a.pyID = n
	case argPyParent:
		a.pyParent = n
	case argInElems:
		a.comm.inElems = n
	case argOutElems:
		a.comm.outElems = n
	case argGroupSize:
		a.comm.group = n
	}
}

func (d *decoder) readArgs(v *fastjson.Value, a *argsFields) {
	a.reset()
	if v == nil {
		return
	}
	o, err := v.Object()
	if err != nil {
		return
	}
	o.Visit(func(k []byte, v *fastjson.Value) {
		if ak := argKey(k); ak != argNone {
			a.setVal(ak, jvOf(v, &d.scratch[5]))
		} else if si := shapeArg(k); si >= 0 {
			d.shapeJS[si] = v.MarshalTo(d.shapeJS[si][:0])
			a.shape[si] = d.shapeJS[si]
		}
	})
}

// complete handles a ph "X" event.
func (d *decoder) complete(ev *rawEvent, off int64) {
	cat := string(ev.cat)
	var kind trace.OpKind
	switch cat {
	case "kernel":
		kind = trace.OpKernel
	case "gpu_memcpy":
		kind = trace.OpMemcpy
	case "gpu_memset":
		kind = trace.OpMemset
	case "cuda_runtime", "cuda_driver", "cpu_op", "python_function", "user_annotation", "gpu_user_annotation":
	default:
		return
	}
	if cat == "python_function" && d.opts.SkipFrames || cat == "cpu_op" && d.opts.SkipCPUOps {
		return
	}
	ts, ok1 := micros(ev.ts)
	dur, ok2 := micros(ev.dur)
	if ok1 && !ok2 && ev.dur.t == jvNumber && len(ev.dur.b) > 0 && ev.dur.b[0] != '-' {
		// A duration too large for int64 ns: CUPTI's wrapped end-before-start records.
		d.nOverflow++
		return
	}
	if !ok1 || !ok2 {
		d.nBadTime++
		if d.nBadTime <= 3 {
			d.warnf("time-detail", "event at byte %d has a ts or dur that is not a decimal number; skipped it", off)
		}
		return
	}
	if dur < 0 {
		d.nNegative++
		return
	}
	if dur > maxEventDurNS {
		d.nOverflow++
		return
	}
	a := &ev.a
	if a.hasDevice {
		d.noteID(int32(a.device))
	}
	if a.hasStream {
		d.noteID(int32(a.stream))
	}
	pid, psyn := d.idOf(ev.pid)
	tid, _ := d.idOf(ev.tid)
	t := d.t
	name := t.Names.Intern(ev.name)
	switch cat {
	case "kernel", "gpu_memcpy", "gpu_memset":
		dev := pid
		if a.hasDevice {
			dev = int32(a.device)
		} else if psyn {
			if n, ok := trailingInt(d.synthTxt[pid-syntheticPIDBase]); ok {
				dev = n
				d.noteID(n)
			}
		}
		stream := tid
		if a.hasStream {
			stream = int32(a.stream)
		}
		op := trace.GPUOp{Start: ts, End: ts + dur, Correlation: a.correlation, ExternalID: a.external,
			Name: name, Device: dev, Stream: stream, Kind: kind, Launch: trace.NoID, CPUOp: trace.NoID}
		if kind != trace.OpKernel {
			op.Bytes = a.bytes
		} else if len(a.comm.name) > 0 {
			c := &a.comm
			t.Comms = reserve(t.Comms, &d.res[resComms], off, d.total)
			t.Comms = append(t.Comms, trace.Comm{Op: int32(len(t.GPUOps)), Name: t.Names.Intern(c.name),
				DType: t.Names.Intern(c.dtype), InElems: c.inElems, OutElems: c.outElems, GroupSize: int32(c.group),
				InSplit: t.Names.Intern(c.inSplit), OutSplit: t.Names.Intern(c.outSplit)})
		}
		t.GPUOps = reserve(t.GPUOps, &d.res[resGPUOps], off, d.total)
		t.GPUOps = append(t.GPUOps, op)
		if psyn {
			d.procOp(procEv{kind: procTouch, pid: pid, syn: true})
		}
	case "cuda_runtime", "cuda_driver":
		t.Launches = reserve(t.Launches, &d.res[resLaunches], off, d.total)
		t.Launches = append(t.Launches, trace.Launch{Start: ts, End: ts + dur, Correlation: a.correlation,
			ExternalID: a.external, Name: name, PID: pid, TID: tid, Graph: d.isGraph(name), Frame: trace.NoID})
	case "cpu_op":
		t.CPUOps = reserve(t.CPUOps, &d.res[resCPUOps], off, d.total)
		if t.CPUOpShapes != nil && cap(t.CPUOpShapes) < cap(t.CPUOps) {
			t.CPUOpShapes = append(make([]trace.NameID, 0, cap(t.CPUOps)), t.CPUOpShapes...)
		}
		if a.shape[0] != nil || a.shape[1] != nil || a.shape[2] != nil {
			if t.Shapes == nil {
				t.Shapes = trace.NewNames()
				t.CPUOpShapes = make([]trace.NameID, len(t.CPUOps), cap(t.CPUOps))
			}
			d.shape = shapeText(d.shape[:0], a)
			t.CPUOpShapes = append(t.CPUOpShapes, t.Shapes.Intern(d.shape))
		} else if t.CPUOpShapes != nil {
			t.CPUOpShapes = append(t.CPUOpShapes, 0)
		}
		t.CPUOps = append(t.CPUOps, trace.CPUOp{Start: ts, End: ts + dur, ExternalID: a.external, Name: name,
			PID: pid, TID: tid, Frame: trace.NoID})
	case "python_function":
		t.Frames = reserve(t.Frames, &d.res[resFrames], off, d.total)
		t.Frames = append(t.Frames, trace.Frame{Start: ts, End: ts + dur, ID: a.pyID, ParentID: a.pyParent,
			Name: name, PID: pid, TID: tid, Parent: trace.NoID})
	case "user_annotation", "gpu_user_annotation":
		an := trace.Annotation{Start: ts, End: ts + dur, Name: name, PID: pid, TID: tid, Device: trace.NoID,
			ExternalID: a.external}
		if cat == "gpu_user_annotation" {
			an.GPU = true
			an.Device = pid
			if a.hasDevice {
				an.Device = int32(a.device)
			}
		}
		t.Annotations = reserve(t.Annotations, &d.res[resAnnotations], off, d.total)
		t.Annotations = append(t.Annotations, an)
	}
}

// isGraph reports whether a runtime call name replays a CUDA or HIP graph.
func (d *decoder) isGraph(name trace.NameID) bool {
	for int(name) >= len(d.graph) {
		d.graph = append(d.graph, 0)
	}
	switch d.graph[name] {
	case 1:
		return true
	case 2:
		return false
	}
	g := strings.Contains(d.t.Names.String(name), "GraphLaunch")
	if g {
		d.graph[name] = 1
	} else {
		d.graph[name] = 2
	}
	return g
}

// metadata handles a ph "M" event (process and thread names, labels).
func (d *decoder) metadata(ev *rawEvent) {
	pid, psyn := d.idOf(ev.pid) // first: a string pid takes its synthetic id whatever the event
	m := procEv{pid: pid, syn: psyn}
	key := ""
	switch string(ev.name) {
	case "process_name":
		m.kind, key = procName, "name"
	case "process_labels":
		m.kind, key = procLabels, "labels"
	default:
		return
	}
	if ev.args != nil {
		m.hasArgs = true
		m.val = string(ev.args.GetStringBytes(key))
	}
	d.procOp(m)
}

// procOp applies a change to a process record, or logs it in a split read's second half.
func (d *decoder) procOp(m procEv) {
	if d.half {
		if m.kind == procTouch {
			if d.procSeen[m.pid] {
				return
			}
			d.procSeen[m.pid] = true
		}
		d.procLog = append(d.procLog, m)
		return
	}
	p := d.proc(m.pid, m.syn)
	if !m.hasArgs {
		return
	}
	switch m.kind {
	case procName:
		p.Name = m.val
	case procLabels:
		if lab := m.val; p.Label != "" && lab != "" && p.Label != lab {
			p.Label = p.Label + " " + lab
		} else if lab != "" {
			p.Label = lab
		}
	}
}

// waitCalls counts the ids of dangling (sorted flow ids) that belong to runtime calls that
// wait rather than enqueue work (cudaStreamWaitEvent, cudaDeviceSynchronize,
// cudaStreamSynchronize, event records and queries). PyTorch 2.11's profiler draws a flow from
// such a call, but its GPU side is a CUDA-sync record that Kineto writes only when sync events
// are asked for, so a flow start without a finish there is not a lost GPU record (a real H100
// trace of a two-stream loop had 21 of them and nothing lost).
func waitCalls(t *trace.Trace, dangling []int64) int {
	if len(dangling) == 0 {
		return 0
	}
	wait := map[trace.NameID]bool{}
	counted := make([]bool, len(dangling)) // an id several calls share (several processes) counts once
	n := 0
	for i := range t.Launches {
		l := &t.Launches[i]
		k, found := slices.BinarySearch(dangling, l.Correlation)
		if !found || counted[k] {
			continue
		}
		w, seen := wait[l.Name]
		if !seen {
			w = isWaitCall(t.Name(l.Name))
			wait[l.Name] = w
		}
		if w {
			counted[k] = true
			n++
		}
	}
	return n
}

// isWaitCall says a CUDA or HIP runtime or driver call named name waits on the device or
// marks a point in a stream rather than enqueueing a kernel, copy or memset.
func isWaitCall(name string) bool {
	for _, s := range []string{"Synchronize", "WaitEvent", "EventRecord", "EventQuery", "StreamQuery"} {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}
