// Package analysis is the triage front end: it takes whatever a user points `runner triage`
// at (a trace file, a directory of traces, a cell or run directory, an nsys export or
// report), finds and opens the inputs with the right reader (reports/kineto for torch-profiler
// traces, nsys/nsysdb for nsys exports, exporting an .nsys-rep with nsys when asked), and runs
// reports/triage over them with the nsys-only tables and scopes filled in. The runner calls it
// after each profiled cell and cmd/runner for `runner triage`; it runs no cell and writes no
// file but the SQLite export nsys produces beside a report.
package analysis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sglprof/runner/nsys"
	"github.com/sglprof/runner/nsys/nsysdb"
	"github.com/sglprof/runner/plans/infile"
	"github.com/sglprof/runner/reports/kineto"
	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/reports/render/table"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/reports/trace"
	"github.com/sglprof/runner/reports/triage"
	"github.com/sglprof/runner/runner/exitcode"
	"github.com/sglprof/runner/runner/proc"
)

// OpenTrace reads one trace file into the linked trace model: an nsys SQLite export through
// the nsys reader, anything else through the Kineto reader (which detects gzip by its magic
// bytes). A file named .sqlite or .nsys-rep that is no SQLite database goes to the nsys
// reader too, whose error says what the file is not and how to export a report. It is the
// Open function every triage in the runner uses.
func OpenTrace(ctx context.Context, path string) (*trace.Trace, error) {
	if nsysInput(path) {
		return nsysdb.Read(ctx, path, nsysdb.ReadOptions{})
	}
	t, err := kineto.ReadFile(ctx, path, kineto.Options{})
	if err != nil {
		return nil, err
	}
	trace.Link(t)
	return t, nil
}

// OpenMappingTrace reads a two-trace mode mapping trace: like OpenTrace, but a Kineto trace is
// read without its flow events, which only cross-check the kernel-to-launch links that the
// mapping trace is not asked for (its times are not used).
func OpenMappingTrace(ctx context.Context, path string) (*trace.Trace, error) {
	if nsysInput(path) {
		return OpenTrace(ctx, path)
	}
	t, err := kineto.ReadFile(ctx, path, kineto.Options{SkipFlows: true})
	if err != nil {
		return nil, err
	}
	trace.Link(t)
	return t, nil
}

// nsysInput says whether the nsys reader should read path: an SQLite file, or a file that
// claims to be an export or report by its name.
func nsysInput(path string) bool {
	return isSQLite(path) || strings.HasSuffix(path, nsys.SQLiteExt) || strings.HasSuffix(path, nsys.ReportExt)
}

// isSQLite sniffs the SQLite file header rather than trusting the suffix.
func isSQLite(path string) bool {
	f, err := infile.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var hdr [16]byte
	n, _ := f.Read(hdr[:])
	return n == 16 && string(hdr[:]) == "SQLite format 3\x00"
}

// Census counts what the nsys export at path captured (nsysdb.CensusOf): the runner judges an
// nsys cell by it before any triage, so a capture that missed the run is caught with
// --no-triage too.
func Census(ctx context.Context, path string) (nsysdb.Census, error) {
	return nsysdb.CensusOf(ctx, path)
}

// StepTimings places a perf dump's denoise steps on the Unix clock: the dump's timestamp is
// taken as the end of the request (sglang writes the dump when the request finishes), the
// stages before DenoisingStage are laid end to end from the request's start, and the steps end
// to end from the denoising stage's start. It is an estimate (host gaps between stages are
// not in the dump) used only when the export has no NVTX step ranges; nil when the dump has no
// steps or no readable timestamp.
func StepTimings(d *perf.Dump) []nsysdb.Step {
	if d == nil || len(d.DenoiseSteps) == 0 {
		return nil
	}
	var end time.Time
	var err error
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999"} {
		if end, err = time.Parse(layout, d.Timestamp); err == nil {
			break
		}
	}
	if err != nil {
		return nil
	}
	at := end.UnixNano() - d.Total.Nanoseconds()
	for _, st := range d.Stages {
		if st.Name == "DenoisingStage" {
			break
		}
		at += st.Dur.Nanoseconds()
	}
	steps := make([]nsysdb.Step, len(d.DenoiseSteps))
	for i, dur := range d.DenoiseSteps {
		steps[i] = nsysdb.Step{Index: i, Start: at, End: at + dur.Nanoseconds()}
		at += dur.Nanoseconds()
	}
	return steps
}

// TriagePath discovers the traces under root (a file or directory) and triages them with the
// runner's readers.
func TriagePath(ctx context.Context, root string, dopts triage.DiscoverOptions, topts triage.Options) (*triage.Report, error) {
	return TriageNsys(ctx, root, dopts, topts, NsysOptions{})
}

// TriageNsys is TriagePath with the nsys options of `runner triage` (--nvtx-stage, the window
// mapping). For an nsys export the report also carries the nsys-only tables (Report.NVTX,
// MemoryOps, API) and kernels without a Python site show their NVTX scope as location.
func TriageNsys(ctx context.Context, root string, dopts triage.DiscoverOptions, topts triage.Options, nopts NsysOptions) (*triage.Report, error) {
	rep, _, err := Triage(ctx, root, dopts, topts, nopts)
	return rep, err
}

// Triage is TriageNsys that also returns the nsys session, whose Coverage says which denoise
// steps an nsys capture window covered (nil for torch traces and when no window was asked).
func Triage(ctx context.Context, root string, dopts triage.DiscoverOptions, topts triage.Options, nopts NsysOptions) (*triage.Report, *Session, error) {
	if dopts.Header == nil {
		dopts.Header = HeaderReader(ctx)
	}
	in, err := triage.Discover(root, dopts)
	if err != nil {
		var me *triage.MixedInputsError
		if errors.As(err, &me) {
			return nil, nil, &exitcode.UsageError{Err: err}
		}
		return nil, nil, err
	}
	if err := checkFileRank(ctx, root, &in, dopts); err != nil {
		return nil, nil, err
	}
	s := newSession(nopts, topts.Logger)
	if topts.Open == nil {
		topts.Open = s.open
		if topts.OpenStream == nil {
			topts.OpenStream = s.openStream
		}
	}
	topts.Scopes = s.scopes
	topts.Stages = s.stages
	topts.LaunchStarts = s.launchStarts
	rep, err := triage.Analyze(ctx, in, topts)
	if err != nil {
		return nil, nil, err
	}
	s.fill(rep)
	return rep, s, nil
}

// InputKind says what a triage of root would read: triage.FormatNsys when every input is an
// nsys export, triage.FormatKineto when every input is a torch-profiler trace (Discover refuses
// a directory that mixes them, as a *exitcode.UsageError). `runner triage --diff` diffs only
// like with like.
func InputKind(root string, dopts triage.DiscoverOptions) (string, error) {
	if dopts.Header == nil {
		dopts.Header = HeaderReader(context.Background())
	}
	in, err := triage.Discover(root, dopts)
	if err != nil {
		var me *triage.MixedInputsError
		if errors.As(err, &me) {
			return "", &exitcode.UsageError{Err: err}
		}
		return "", err
	}
	if len(in.Files) == 0 {
		return "", fmt.Errorf("%s holds no trace to triage", root)
	}
	// The reader decides by content, as OpenTrace does: a SQLite file is an nsys export
	// whatever its name.
	kind := func(f triage.Input) string {
		if nsysInput(f.Path) {
			return triage.FormatNsys
		}
		return triage.FormatKineto
	}
	k := kind(in.Files[0])
	for _, f := range in.Files[1:] {
		if kind(f) != k {
			return "", &exitcode.UsageError{Err: fmt.Errorf("%s holds both nsys exports and torch-profiler traces (%s, %s); pass one of them", root, in.Files[0].Path, f.Path)}
		}
	}
	return k, nil
}

// HeaderReader is the DiscoverOptions.Header of the runner: the Kineto reader's header read
// (distributedInfo before traceEvents, a few KiB of each file).
func HeaderReader(ctx context.Context) func(path string) (int, int, error) {
	return func(path string) (int, int, error) {
		h, err := kineto.ReadHeaderFile(ctx, path)
		return h.Rank, h.WorldSize, err
	}
}

// checkFileRank refuses --rank N on one named trace file that is not rank N: Discover uses a
// named file whatever it is called, so without this the request would be silently ignored. A
// Kineto file whose name carries no rank takes the rank its header records
// (distributedInfo.rank), so the report says which rank it analysed instead of -1.
func checkFileRank(ctx context.Context, root string, in *triage.Inputs, dopts triage.DiscoverOptions) error {
	if len(in.Files) != 1 || in.Files[0].Path != root {
		return nil
	}
	f := &in.Files[0]
	from := "its name"
	if f.Rank.Primary() < 0 && f.Format == triage.FormatKineto {
		r, ok, err := kineto.ReadRankFile(ctx, f.Path)
		if err != nil {
			return err
		}
		if ok {
			f.Rank.Global = r
			from = "its distributedInfo.rank"
		}
	}
	if dopts.Rank == nil {
		return nil
	}
	got := f.Rank.Primary()
	if got == *dopts.Rank {
		return nil
	}
	if got < 0 {
		return &exitcode.UsageError{Err: fmt.Errorf("--rank %d: %s is one trace whose name and header (distributedInfo) carry no rank; drop --rank, or pass the directory that holds every rank's trace", *dopts.Rank, root)}
	}
	return &exitcode.UsageError{Err: fmt.Errorf("--rank %d: %s is the trace of rank %d (%s); pass rank %d's file, or the directory that holds every rank's trace", *dopts.Rank, root, got, from, *dopts.Rank)}
}

// ResolveCell handles `runner triage CELL_DIR`: when path is a run cell (or a file or folder
// inside one), it returns the cell's result and the trace to triage in it. It returns a nil
// result for a path that is not part of a cell.
func ResolveCell(path string) (cellDir string, res *rundir.CellResult, root string, err error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", nil, "", err
	}
	for d, i := abs, 0; i < 3; d, i = filepath.Dir(d), i+1 {
		if r, rerr := rundir.ReadResult(d); rerr == nil {
			cellDir, res = d, r
			break
		}
	}
	if res == nil {
		return "", nil, path, nil
	}
	root = path
	if abs == cellDir {
		root = filepath.Join(cellDir, "traces")
		if m, _ := filepath.Glob(filepath.Join(root, "*")); len(m) == 0 {
			root = filepath.Join(cellDir, "nsys", "report.sqlite")
		}
	}
	return cellDir, res, root, nil
}

// ResolveRunDir handles `runner triage RUN_DIR` (or RUN_DIR/cells): a run holds one trace set
// per profiled cell, so triaging "the run" is ambiguous. When exactly one cell has traces it
// returns that cell's directory and a note saying so; when several have, a *exitcode.UsageError that
// names them and the per-cell triage.md already written; a path that is not a run directory
// comes back unchanged with no note.
func ResolveRunDir(path string) (resolved, note string, err error) {
	run := filepath.Clean(path)
	if filepath.Base(run) == rundir.CellsDir && fileExists(filepath.Join(filepath.Dir(run), rundir.CellsFile)) {
		run = filepath.Dir(run)
	}
	if !fileExists(filepath.Join(run, rundir.CellsFile)) {
		return path, "", nil
	}
	entries, err := os.ReadDir(filepath.Join(run, rundir.CellsDir))
	if err != nil {
		return "", "", &exitcode.UsageError{Err: fmt.Errorf("%s is a run directory without readable cells: %w", run, err)}
	}
	var traced []string
	for _, e := range entries {
		if e.IsDir() && cellHasTraces(filepath.Join(run, rundir.CellsDir, e.Name())) {
			traced = append(traced, e.Name())
		}
	}
	switch len(traced) {
	case 0:
		return "", "", &exitcode.UsageError{Err: fmt.Errorf("%s is a run directory and none of its cells has traces (only profilers torch and nsys write them)", run)}
	case 1:
		cell := filepath.Join(run, rundir.CellsDir, traced[0])
		return cell, fmt.Sprintf("triaging cell %s, the only cell of the run with traces", traced[0]), nil
	}
	list := traced
	if len(list) > 4 {
		list = append(append([]string(nil), list[:4]...), fmt.Sprintf("and %d more", len(traced)-4))
	}
	return "", "", &exitcode.UsageError{Err: fmt.Errorf("%s is a run directory with %d cells that have traces (%s); triage reads one: pass a cell, such as %s (each cell's triage is already in its triage.md)",
		run, len(traced), strings.Join(list, ", "), filepath.Join(run, rundir.CellsDir, traced[0]))}
}

// fileExists reports whether path names something that can be stat'ed.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// cellHasTraces reports whether a cell directory holds torch traces or an nsys report.
func cellHasTraces(cell string) bool {
	if m, _ := filepath.Glob(filepath.Join(cell, "traces", "*")); len(m) > 0 {
		return true
	}
	m, _ := filepath.Glob(filepath.Join(cell, "nsys", "*"))
	return len(m) > 0
}

// GateError is returned when a triage is asked of a cell whose verdict says its traces do not
// show what they claim (a diffusers fallback); --force overrides it.
type GateError struct {
	Cell   string
	Result *rundir.CellResult
}

func (e *GateError) Error() string {
	var why []string
	for _, r := range e.Result.Reasons {
		why = append(why, r.Line())
	}
	return fmt.Sprintf("cell %s is marked %s: %s; its traces do not measure what the cell claims (pass --force to triage them anyway)", e.Cell, e.Result.Verdict, strings.Join(why, "; "))
}

// DefaultAPITop is how many CUDA API calls the nsys API table keeps (by total time).
const DefaultAPITop = 20

// WindowPrefix starts the report line that says which denoise steps an nsys capture covered.
const WindowPrefix = "nsys capture window: "

// NsysOptions tune what a triage does with nsys exports; the zero value is `runner triage`
// without nsys flags.
type NsysOptions struct {
	// StageRE, when set, makes the NVTX ranges whose name matches it the stages (--nvtx-stage):
	// each kernel belongs to the innermost matching range open on its launching thread when it
	// was launched, kernels outside every match to "unannotated". Nil keeps the rules of torch
	// traces: SGLang diffusion stage ranges (DenoisingStage, ...) and denoising_step_N ranges
	// (DenoisingStage), LLM step ranges, else a single stage "all".
	StageRE *regexp.Regexp
	// APITop bounds the CUDA API table (DefaultAPITop when 0, all calls when negative).
	APITop int
	// AllowNoKernels triages an export without kernels as an empty report whose warnings say
	// why, instead of failing (runner run wants the window mapping of such a cell).
	AllowNoKernels bool
	// Window asks for the capture-window mapping of a diffusion run: which denoise steps the
	// --delay/--duration window covered, from the export's NVTX step ranges, else from
	// StepTimings.
	Window bool
	// NVTXTraced says the capture traced NVTX, so no step range in it means no step captured.
	NVTXTraced bool
	// TotalSteps is the run's number of denoise steps when known (0 if not).
	TotalSteps int
	// StepTimings are the run's steps on the Unix clock (see StepTimings), for exports without
	// NVTX step ranges.
	StepTimings []nsysdb.Step
	// Env, when not nil, is the environment whose PATH finds nsys to export the .nsys-rep
	// reports a directory holds without their SQLite export (ExportReport); nil leaves such a
	// report to the reader, whose error says how to export it.
	Env []string
	// held reads every export whole, never as a stream; noCompact keeps every launching call
	// (no compactLaunches, no ReadOptions.OneLaunchPerName). Tests compare those paths with
	// the default ones.
	held, noCompact bool
}

// Session is the nsys side of one triage: its Open reads exports with the nsys reader and
// computes, while the capture is in hand, what the triage hooks and the report need, so that
// no capture outlives its turn in Analyze (inputs are read one at a time).
type Session struct {
	opts     NsysOptions
	log      *slog.Logger
	pending  map[*trace.Trace]*nsysTrace
	tables   *nsysdb.Tables // of the first nsys input
	inputs   int            // nsys inputs read
	streamed string         // the export whose stream was read last (openStream), until open runs
	coverage *nsysdb.Coverage
	starts   map[*trace.Trace][]int64 // launch call starts per GPU op, of compacted traces
}

// nsysTrace is what the hooks need of one read export.
type nsysTrace struct {
	scopes []trace.NameID
	stages []string
}

func newSession(o NsysOptions, log *slog.Logger) *Session {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Session{opts: o, log: log, pending: map[*trace.Trace]*nsysTrace{}}
}

// open is OpenTrace that keeps the nsys facts of an export.
func (s *Session) open(ctx context.Context, path string) (*trace.Trace, error) {
	if !nsysInput(path) {
		return OpenTrace(ctx, path)
	}
	if s.opts.Env != nil && IsNsysReport(path) {
		var err error
		if path, err = ExportReport(ctx, path, s.opts.Env, s.log); err != nil {
			return nil, err
		}
	}
	if s.streamed == path {
		// Analyze dropped the pass over this export (its order broke): it is read again, and
		// counted once.
		s.inputs--
		if s.inputs == 0 {
			s.tables = nil
		}
	}
	s.streamed = ""
	c, err := nsysdb.ReadCapture(ctx, path, nsysdb.ReadOptions{Logger: s.log, AllowNoKernels: s.opts.AllowNoKernels,
		SummariseAPI: true, SkipKernelInfo: true, OneLaunchPerName: !s.opts.noCompact})
	if err != nil {
		return nil, err
	}
	s.inputs++
	t := c.Trace
	nt := &nsysTrace{}
	compact := !s.opts.noCompact && !c.OneLaunchPerName // the reader did it already when it could
	if compact && len(t.Annotations) > 0 && s.opts.StageRE == nil && slices.ContainsFunc(t.Annotations, func(a trace.Annotation) bool { return a.GPU }) {
		compact = false // GPU-side stage windows: Analyze finds those stages itself
	}
	// The NVTX work only reads the capture, so its parts run side by side; the scope labels
	// are interned afterwards, as nothing may intern while the others read names.
	var (
		wg       sync.WaitGroup
		scopeIdx []int32
	)
	run := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}
	if s.inputs == 1 {
		run(func() {
			top := s.opts.APITop
			if top == 0 {
				top = DefaultAPITop
			}
			tb := nsysdb.Summaries(c, max(top, 0))
			s.tables = &tb
		})
	}
	if len(t.Annotations) > 0 {
		run(func() { scopeIdx = nsysdb.Scopes(t, nil) })
	}
	switch {
	case s.opts.StageRE != nil:
		run(func() { nt.stages = stageLabels(t, s.opts.StageRE) })
	case compact && len(t.Annotations) > 0:
		// The stages Analyze would find from the NVTX ranges, found now while the launch
		// times are there (nil when no range names a stage: then none are looked up).
		run(func() { nt.stages = triage.AnnotationStages(t, trace.NoID) })
	}
	wg.Wait()
	if s.inputs == 1 && s.opts.Window {
		s.coverage = windowCoverage(c, s.opts)
	}
	nt.scopes = scopeLabels(c, scopeIdx)
	s.pending[t] = nt
	if c.OneLaunchPerName && c.LaunchStarts != nil {
		// The reader merged the launches and kept each op's launch start itself.
		s.setLaunchStarts(t, c.LaunchStarts)
	}
	if compact {
		s.keepLaunchStarts(t)
		compactLaunches(t)
	} else {
		// The read's garbage (the correlation index, 4 bytes per id; the scan's buffers) is
		// collected before the triage allocates its per-op arrays, which then reuse it: the
		// one collection so far ran when the ops were allocated, and the next would not come
		// before the triage is done (less peak RSS for a few ms; docs/performance.md).
		runtime.GC()
	}
	return t, nil
}

// compactLaunches replaces t.Launches by one call per (name, graph flag, frame) and points every
// GPU op at its representative, then hands the freed memory (about 56 bytes a kernel, more
// with the parallel scan's buffers) back to the OS before the triage allocates its own arrays:
// with only a collection the peak resident size stayed higher (docs/performance.md). It is for
// a trace whose NVTX scopes and tables are computed already (open does that first) and whose op stages need no launch time any more:
// they are precomputed labels (--nvtx-stage, or the stages of the NVTX ranges from
// triage.AnnotationStages), or there is no annotation at all. Analyze then reads only a
// launch's name, graph flag and frame, which the representative has.
func compactLaunches(t *trace.Trace) {
	type key struct {
		name  trace.NameID
		graph bool
		frame int32
	}
	idx := map[key]int32{}
	var reps []trace.Launch
	last, lastRep := int32(trace.NoID), int32(0) // consecutive ops mostly share a launch name
	for i := range t.GPUOps {
		op := &t.GPUOps[i]
		if op.Launch < 0 || int(op.Launch) >= len(t.Launches) {
			continue
		}
		l := &t.Launches[op.Launch]
		if last != trace.NoID {
			if r := &reps[lastRep]; r.Name == l.Name && r.Graph == l.Graph && r.Frame == l.Frame {
				op.Launch = lastRep
				continue
			}
		}
		k := key{l.Name, l.Graph, l.Frame}
		j, ok := idx[k]
		if !ok {
			j = int32(len(reps))
			idx[k] = j
			reps = append(reps, *l)
		}
		op.Launch, last, lastRep = j, j, j
	}
	t.Launches = reps
	t.LaunchTimesDropped = true
	debug.FreeOSMemory()
}

// stages is the triage.Options.Stages hook (--nvtx-stage). Analyze calls it before scopes.
func (s *Session) stages(t *trace.Trace) []string {
	if nt := s.pending[t]; nt != nil {
		return nt.stages
	}
	return nil
}

// scopes is the triage.Options.Scopes hook: the NVTX scope of every op of an nsys trace. It is
// the last hook Analyze calls for a trace, so the trace's entry goes here.
// keepLaunchStarts records, before compactLaunches merges the calls, each GPU op's launch
// call start (8 bytes an op, where the merge frees about 56), for the idle breakdown and the
// launch delays (triage.Options.LaunchStarts).
func (s *Session) keepLaunchStarts(t *trace.Trace) {
	starts := make([]int64, len(t.GPUOps))
	for i := range t.GPUOps {
		starts[i] = trace.NoID
		if l := t.GPUOps[i].Launch; l >= 0 && int(l) < len(t.Launches) {
			starts[i] = t.Launches[l].Start
		}
	}
	s.setLaunchStarts(t, starts)
}

// setLaunchStarts keeps starts (per GPU op of t, its launch call's start) for launchStarts.
func (s *Session) setLaunchStarts(t *trace.Trace, starts []int64) {
	if s.starts == nil {
		s.starts = map[*trace.Trace][]int64{}
	}
	s.starts[t] = starts
}

// launchStarts is triage.Options.LaunchStarts: what keepLaunchStarts kept of t, handed over once.
func (s *Session) launchStarts(t *trace.Trace) []int64 {
	st := s.starts[t]
	delete(s.starts, t)
	return st
}

func (s *Session) scopes(t *trace.Trace) []trace.NameID {
	nt := s.pending[t]
	if nt == nil {
		return nil
	}
	delete(s.pending, t)
	return nt.scopes
}

// fill adds the nsys-only tables and the window mapping to the report.
func (s *Session) fill(rep *triage.Report) {
	clear(s.pending)
	clear(s.starts)
	if s.tables != nil {
		rep.NVTX = nvtxSection(nonNilSlice(s.tables.NVTX))
		rep.MemoryOps = memorySection(nonNilSlice(s.tables.MemoryOps))
		rep.API = apiSection(nonNilSlice(s.tables.API))
		if s.inputs > 1 {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("%d nsys exports triaged; the NVTX, memory and API tables are of the first one (%s)", s.inputs, firstPath(rep)))
		}
	}
	if s.coverage != nil {
		lines := []string{WindowPrefix + s.coverage.Summary}
		rep.Warnings = append(lines, append(s.coverage.Warnings, rep.Warnings...)...)
	}
}

func firstPath(rep *triage.Report) string {
	if len(rep.Inputs) == 0 {
		return "?"
	}
	return rep.Inputs[0].Path
}

// nonNilSlice keeps an nsys table an array in JSON ("nvtx": []), never null, so a consumer
// can tell "an nsys export with no NVTX ranges" from "a torch trace" (key absent).
func nonNilSlice[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// windowCoverage maps the capture window onto the denoise steps. NVTX step ranges are
// authoritative when NVTX was traced (they come from the same capture, so none means no step
// was captured); the perf dump's step timings, an estimate on another clock, are used only when
// NVTX was not traced. nil when neither can say.
func windowCoverage(c *nsysdb.Capture, o NsysOptions) *nsysdb.Coverage {
	if o.NVTXTraced || len(nsysdb.StepsFromNVTX(c.Trace, nil)) > 0 {
		cov := nsysdb.CoverFromNVTX(c, nil, o.TotalSteps)
		return &cov
	}
	if len(o.StepTimings) > 0 && c.WindowEnd > c.WindowStart {
		if cov, ok := nsysdb.CoverFromTimings(c, o.StepTimings); ok {
			if o.TotalSteps > 0 {
				cov.TotalSteps = o.TotalSteps
			}
			return &cov
		}
	}
	return nil
}

// scopeLabels names every GPU op's NVTX scope, the innermost NVTX range on its launching thread
// when it was launched, as "nvtx: <range>" (domain-qualified outside the default domain).
// Decimal numbers in the range name are folded to N (denoising_step_12 → denoising_step_N,
// layers.3.attn → layers.N.attn), as a Python location is one code line for every loop
// iteration: otherwise a kernel's time would be split over 50 step or 60 layer sites.
//
// idx is nsysdb.Scopes(c.Trace, nil), computed by the caller (nil when there is no range).
func scopeLabels(c *nsysdb.Capture, idx []int32) []trace.NameID {
	t := c.Trace
	if len(t.Annotations) == 0 || idx == nil {
		return nil // no NVTX range, so no op has a scope (nil reads as "none" for every op)
	}
	label := rangeLabeler(t)
	labels := map[int32]trace.NameID{}
	out := make([]trace.NameID, len(idx))
	for i, a := range idx {
		if a < 0 || int(a) >= len(t.Annotations) {
			continue
		}
		id, ok := labels[a]
		if !ok {
			domain := ""
			if int(a) < len(c.Ranges) {
				domain = c.Ranges[a].Domain
			}
			id = label(t.Annotations[a].Name, domain)
			labels[a] = id
		}
		out[i] = id
	}
	return out
}

// rangeLabeler returns the scope label of an NVTX range of t with that name and domain (see
// scopeLabels), interning it on first use. The label depends on the range's name and domain
// only: one per distinct pair, not per range instance (a layerwise-marked run has tens of
// thousands of those).
func rangeLabeler(t *trace.Trace) func(name trace.NameID, domain string) trace.NameID {
	type key struct {
		name   trace.NameID
		domain string
	}
	byName := map[key]trace.NameID{}
	return func(name trace.NameID, domain string) trace.NameID {
		k := key{name, domain}
		id, ok := byName[k]
		if !ok {
			name := foldNumbers(t.Name(k.name))
			if k.domain != "" {
				name = k.domain + ":" + name
			}
			id = t.Names.InternString("nvtx: " + name)
			byName[k] = id
		}
		return id
	}
}

var decimalRun = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[0-9]+`) })

func foldNumbers(s string) string { return decimalRun().ReplaceAllString(s, "N") }

// stageLabels gives every GPU op the name of the innermost range matching re around its launch
// ("" outside every match).
func stageLabels(t *trace.Trace, re *regexp.Regexp) []string {
	idx := nsysdb.StageScopes(t, re)
	out := make([]string, len(idx))
	for i, a := range idx {
		if a >= 0 && int(a) < len(t.Annotations) {
			out[i] = t.Name(t.Annotations[a].Name)
		}
	}
	return out
}

// nvtxSection, memorySection and apiSection are the nsys-only tables of a triage as typed
// triage sections: nsys renders their tables, and here their rows join the triage's long-form
// CSV (times in microseconds as in the rest of the CSV). Their JSON is the nsys rows under
// "nvtx", "memory_ops" and "api".
type (
	nvtxSection   []nsysdb.NVTXRange
	memorySection []nsysdb.MemoryOp
	apiSection    []nsysdb.APICall
)

func usOf(ns int64) float64 { return float64(ns) / 1e3 }

// usv renders microseconds for an evidence pair, unrounded like the CSV's numeric columns.
func usv(ns int64) string { return strconv.FormatFloat(usOf(ns), 'g', -1, 64) }

// Table is the NVTX range summary.
func (s nvtxSection) Table() *table.Table { return nsysdb.NVTXTable(s) }

// CSVRows: "name" is the range and "category" its NVTX domain.
func (s nvtxSection) CSVRows() []triage.CSVRow {
	out := make([]triage.CSVRow, 0, len(s))
	for _, r := range s {
		out = append(out, triage.CSVRow{Table: "nvtx", Name: r.Range, Category: r.Domain, TotalUS: usOf(r.TotalNS), Count: r.Count,
			Evidence: fmt.Sprintf("mean_us=%s; min_us=%s; max_us=%s; gpu_time_inside_us=%s", usv(r.MeanNS), usv(r.MinNS), usv(r.MaxNS), usv(r.GPUTimeNS))})
	}
	return out
}

// Table is the memory-operation summary.
func (s memorySection) Table() *table.Table { return nsysdb.MemoryTable(s) }

// CSVRows: "name" is the operation.
func (s memorySection) CSVRows() []triage.CSVRow {
	out := make([]triage.CSVRow, 0, len(s))
	for _, r := range s {
		out = append(out, triage.CSVRow{Table: "memory_op", Name: r.Operation, TotalUS: usOf(r.TotalNS), Count: r.Count,
			Evidence: fmt.Sprintf("bytes=%d; mean_us=%s; gb_per_s=%s", r.Bytes, usv(r.MeanNS), strconv.FormatFloat(r.GBps, 'g', -1, 64))})
	}
	return out
}

// Table is the CUDA API summary.
func (s apiSection) Table() *table.Table { return nsysdb.APITable(s) }

// CSVRows: "name" is the call, "category" "sync" for a synchronising call and "share_pct" its
// share of all API time.
func (s apiSection) CSVRows() []triage.CSVRow {
	out := make([]triage.CSVRow, 0, len(s))
	for _, r := range s {
		cat := ""
		if r.Sync {
			cat = "sync"
		}
		share := r.Percent
		out = append(out, triage.CSVRow{Table: "api", Name: r.Name, Category: cat, TotalUS: usOf(r.TotalNS), Count: r.Calls, SharePct: &share,
			Evidence: fmt.Sprintf("mean_us=%s; min_us=%s; max_us=%s", usv(r.MeanNS), usv(r.MinNS), usv(r.MaxNS))})
	}
	return out
}

// IsNsysReport says whether path names an Nsight Systems report (.nsys-rep) rather than its
// SQLite export.
func IsNsysReport(path string) bool {
	return strings.HasSuffix(path, nsys.ReportExt) && !isSQLite(path)
}

// ExportReport turns an Nsight Systems report into the SQLite export that triage reads, with
// `nsys export --type sqlite` (nsys looked up on env's PATH), written beside the report as
// `nsys stats` does; an export already there and not older than the report is reused. The
// report itself is only read.
func ExportReport(ctx context.Context, report string, env []string, log *slog.Logger) (string, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rs, err := os.Stat(report)
	if err != nil {
		return "", fmt.Errorf("nsys report: %w", err)
	}
	out := nsys.SQLitePath(report)
	if st, err := os.Stat(out); err == nil && !st.ModTime().Before(rs.ModTime()) && isSQLite(out) {
		log.Info("using the existing SQLite export of the report", "export", out)
		return out, nil
	}
	exe, err := proc.LookPath("nsys", env)
	if err != nil {
		return "", fmt.Errorf("%s is an Nsight Systems report and nsys is not on PATH to export it (%v): install Nsight Systems, or export it on a machine that has it with `nsys export --type sqlite -o %s %s` and triage the .sqlite file", report, err, filepath.Base(out), filepath.Base(report))
	}
	log.Info("exporting the report to SQLite", "nsys", exe, "report", report)
	return nsys.Export(ctx, proc.Command, []string{exe}, report)
}

// TriageKernelsOnly triages one nsys export from SQL per-name sums (nsysdb.KernelSummary): the
// kernel and fusion tables without loading a single kernel, so memory grows with the number of
// kernel names only. A torch trace is refused: its kernels must be read anyway.
func TriageKernelsOnly(ctx context.Context, path string, topts triage.Options) (*triage.Report, error) {
	if !isSQLite(path) {
		return nil, &exitcode.UsageError{Err: fmt.Errorf("--kernels-only needs an nsys SQLite export; %s is not one", path)}
	}
	stats, err := nsysdb.KernelSummary(ctx, path, nsysdb.Demangled)
	if err != nil {
		return nil, err
	}
	totals := make([]triage.NameTotal, len(stats))
	for i, s := range stats {
		totals[i] = triage.NameTotal{Name: s.Name, Count: s.Count, TotalNS: s.TotalNS}
	}
	return triage.KernelsOnly(path, totals, topts), nil
}

// Coverage is the capture-window mapping of the triage's nsys export (which denoise steps its
// --delay/--duration window covered); nil when none was asked or the input was no export.
func (s *Session) Coverage() *nsysdb.Coverage {
	if s == nil {
		return nil
	}
	return s.coverage
}
