package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/nsys"
	"github.com/sglprof/runner/nsys/nsysdb"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/plans/infile"
	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/analysis"
	"github.com/sglprof/runner/runner/proc"
)

// cellRecord is one entry of cells.json (rundir.CellRecord) with what the runner keeps of it
// in memory.
type cellRecord struct {
	rundir.CellRecord
	abs string           // absolute cell directory
	be  backends.Backend // the cell's backend
}

// prepareCells creates every cell directory and computes each cell's launch, wrapping it in
// `nsys profile` for nsys cells. Directories that already exist (resume) are reused.
func prepareCells(runDir string, cells []plans.Cell, opts *Options) ([]cellRecord, error) {
	recs := make([]cellRecord, 0, len(cells))
	for _, c := range cells {
		be, err := backendFor(c)
		if err != nil {
			return nil, err
		}
		rel := filepath.Join(rundir.CellsDir, c.ID)
		abs, err := filepath.Abs(filepath.Join(runDir, rel))
		if err != nil {
			return nil, err
		}
		if err := makeCellDir(abs, c); err != nil {
			return nil, err
		}
		lc := c
		lc.Backend.Command = opts.sglangCommand(c)
		launch, err := be.Launch(lc, abs)
		if err != nil {
			return nil, fmt.Errorf("cell %s: %w", c.ID, err)
		}
		if opts.Simulate {
			// Real repeats differ a little; so do simulated ones.
			if launch.Env == nil {
				launch.Env = map[string]string{}
			}
			launch.Env["RUNNER_SIM_JITTER_SEED"] = simJitterSeed(opts.Env, c.Repeat)
		}
		rec := cellRecord{CellRecord: rundir.CellRecord{Cell: c, Dir: rel, Launch: launch}, abs: abs, be: be}
		if c.Profiler == plans.ProfilerNsys {
			report := filepath.Join(abs, "nsys", "report")
			rec.Launch.Argv = nsys.Wrap(opts.nsysCommand(), c.NSys, report, launch.Argv)
			rec.NSys = &rundir.NSysFiles{Report: filepath.Join("nsys", "report")}
		}
		recs = append(recs, rec)
	}
	return recs, nil
}

// makeCellDir creates a cell's directory and the subdirectories its process writes into.
func makeCellDir(abs string, c plans.Cell) error {
	subs := []string{"", "traces", "outputs"}
	if c.Profiler == plans.ProfilerNsys {
		subs = append(subs, "nsys")
	}
	for _, sub := range subs {
		if err := os.MkdirAll(filepath.Join(abs, sub), 0o755); err != nil {
			return fmt.Errorf("create cell directory: %w", err)
		}
	}
	return nil
}

// cellResult is a cell's result.json (rundir.CellResult) with the artifacts its backend found,
// which the runner's later steps (triage, timings) use and the file does not record.
type cellResult struct {
	rundir.CellResult
	Found backends.Artifacts
}

// runCell runs one cell to its verdict. It never returns early without a result: whatever
// happens, the caller writes result.json.
func runCell(ctx context.Context, rec cellRecord, opts *Options) *cellResult {
	c := rec.Cell
	res := &cellResult{CellResult: rundir.CellResult{ID: c.ID, Index: c.Index, Key: c.Key, Profiler: c.Profiler, Start: opts.Now().UTC()}}
	if !gpuBefore(ctx, rec, opts, res) {
		res.End = opts.Now().UTC()
		res.Artifacts = collectArtifacts(rec.abs)
		return res
	}
	logPath := filepath.Join(rec.abs, rundir.LogFile)
	logf, err := os.Create(logPath)
	if err != nil {
		res.End = opts.Now().UTC()
		res.Verdict = plans.VerdictFailed
		res.Reasons = append(res.Reasons, rundir.Reason{Code: "log-create", Message: fmt.Sprintf("cannot create %s: %v; check free space and permissions of the output directory", logPath, err)})
		return res
	}
	if err := opts.writeRedactedJSON(filepath.Join(rec.abs, rundir.CommandFile), redactLaunch(rec.Launch)); err != nil {
		opts.Logger.Warn("command.json", "cell", c.ID, "err", err)
	}
	w := rec.be.NewWatcher(c)
	grace := c.Backend.Grace.Duration
	if grace <= 0 {
		grace = 10 * time.Second
	}
	intGrace := grace
	if c.Profiler == plans.ProfilerNsys && intGrace < time.Minute {
		// nsys writes its report after SIGINT; a big capture takes a while to finalise.
		intGrace = time.Minute
	}
	spec := proc.Spec{
		Argv:           rec.Launch.Argv,
		Env:            mergeEnv(opts.Env, rec.Launch.Env),
		Dir:            rec.Launch.Dir,
		Log:            logf,
		OnLine:         func(l proc.Line) { w.Line(l.No, l.Stream, l.Text) },
		Timeout:        c.Backend.Timeout.Duration,
		InterruptGrace: intGrace,
		TerminateGrace: grace,
		Record:         filepath.Join(rec.abs, proc.RecordFile),
	}
	selectLines(&spec, w)
	pres := proc.Run(ctx, spec, opts.Logger.With("cell", c.ID))
	cerr := logf.Close()
	res.End = opts.Now().UTC()
	res.Timings.WallNS = pres.End.Sub(pres.Start).Nanoseconds()
	res.StoppedBy = pres.StoppedWith
	exit := rundir.Exit{Code: pres.ExitCode, Signal: pres.Signal}
	if pres.StartErr != nil {
		exit.StartErr = pres.StartErr.Error()
	}
	res.Exit = exit
	gpuAfter(ctx, opts, res, false)

	a := rec.be.Assess(c, rec.abs, w, exit)
	res.Verdict, res.Reasons, res.Found = a.Verdict, a.Reasons, a.Artifacts
	res.Warnings = append(res.Warnings, a.Warnings...)
	if pres.StartErr != nil {
		res.Verdict = plans.VerdictFailed
		res.Reasons = append([]rundir.Reason{{Code: "start", Message: pres.StartErr.Error()}}, res.Reasons...)
	}
	if logErr := errors.Join(pres.LogErr, cerr); logErr != nil {
		res.Verdict = plans.VerdictFailed
		res.Reasons = append(res.Reasons, rundir.Reason{Code: "log-write", Message: fmt.Sprintf("writing %s failed: %v; the log is incomplete, so the cell cannot be trusted; free disk space and resume the run", logPath, logErr)})
	}
	switch {
	case pres.Interrupted:
		res.Verdict = plans.VerdictInterrupted
		res.Reasons = append([]rundir.Reason{{Code: "interrupted", Message: "stopped by the user: " + stoppedHow(pres.StoppedWith) + "; `runner run --resume` runs this cell again"}}, res.Reasons...)
	case pres.TimedOut:
		res.Verdict = plans.VerdictTimeout
		res.Reasons = append([]rundir.Reason{{Code: "timeout", Message: fmt.Sprintf("still running after backend.timeout = %s; %s; raise backend.timeout in the plan if the model is just slow", c.Backend.Timeout.Duration, stoppedHow(pres.StoppedWith))}}, res.Reasons...)
	}
	if rec.NSys != nil && !pres.Interrupted {
		nsysStep(ctx, rec, res, opts)
	}
	if a.Artifacts.PerfDump != "" {
		if d, err := perf.ReadDumpFile(a.Artifacts.PerfDump); err == nil {
			fillTimings(&res.Timings, d)
		} else {
			res.Warnings = append(res.Warnings, rundir.Reason{Code: "perf-dump-unreadable", Message: err.Error()})
		}
	}
	if !opts.NoTriage && res.Verdict == plans.VerdictOK {
		triageCell(ctx, rec, res, opts)
	}
	res.Artifacts = collectArtifacts(rec.abs)
	return res
}

// selectLines lets a selective watcher see only the lines it needs (backends.Selective). Offline
// cells read the tail only after the process exited, which is when a selective watcher has it.
func selectLines(spec *proc.Spec, w backends.Watcher) {
	if sw, ok := w.(backends.Selective); ok {
		spec.Select = sw.Needles()
		spec.Tail = sw.TailLines()
	}
}

// stoppedHow says in words how the stop ladder (SIGINT, then SIGTERM, then SIGKILL, each after
// the grace period) ended the cell's processes; s is the last signal it needed, "" when they
// exited before the runner signalled them.
func stoppedHow(s string) string {
	switch s {
	case "":
		return "its processes exited on their own before the runner signalled them"
	case "SIGINT":
		return "the runner stopped its processes with SIGINT"
	case "SIGTERM":
		return "its processes ignored SIGINT for the grace period, and SIGTERM stopped them"
	case "SIGKILL":
		return "its processes ignored SIGINT and SIGTERM for the grace periods, and SIGKILL ended them"
	}
	return "the runner stopped its processes with " + s
}

// nsysStep checks that nsys wrote its report and exports it to SQLite.
func nsysStep(ctx context.Context, rec cellRecord, res *cellResult, opts *Options) {
	base := filepath.Join(rec.abs, rec.NSys.Report)
	rep := base + ".nsys-rep"
	if _, err := os.Stat(rep); err != nil {
		if res.Verdict == plans.VerdictOK {
			res.Verdict = plans.VerdictFailed
		}
		res.Reasons = append(res.Reasons, rundir.Reason{Code: "nsys-report-missing", Message: fmt.Sprintf("nsys wrote no report at %s; see log.txt for nsys's own messages", rep)})
		return
	}
	if _, err := nsys.Export(ctx, proc.Command, opts.nsysCommand(), base); err != nil {
		if res.Verdict == plans.VerdictOK {
			res.Verdict = plans.VerdictFailed
		}
		res.Reasons = append(res.Reasons, rundir.Reason{Code: "nsys-export", Message: err.Error()})
		return
	}
	c, err := analysis.Census(ctx, base+".sqlite")
	if err != nil {
		res.Warnings = append(res.Warnings, rundir.Reason{Code: "nsys-export", Message: err.Error()})
		return
	}
	if c.Kernels == 0 && res.Verdict == plans.VerdictOK {
		// A profile of none of the measured work: the cell's claim (a profile of this
		// configuration) is false, whatever its timings say.
		res.Verdict = plans.VerdictInvalid
		res.Reasons = append(res.Reasons, rundir.Reason{Code: "nsys-no-kernels", Message: noKernelsMessage(rec.Cell, c, res.Timings.WallNS)})
	}
}

// noKernelsMessage says why an nsys cell's capture holds no kernel, with the window and the
// run's length side by side, and what to change in the plan.
func noKernelsMessage(c plans.Cell, census nsysdb.Census, wallNS int64) string {
	delay, dur := c.NSys.Delay.Duration, c.NSys.Duration.Duration
	ran := time.Duration(wallNS).Round(100 * time.Millisecond)
	window := fmt.Sprintf("window: delay %s, duration %s", delay, orAll(dur))
	if wallNS > 0 {
		window += fmt.Sprintf("; the cell ran %s", ran)
	} else if c.Backend.Mode == backends.ModeServe {
		window += " from the server's start" // nsys wraps the server, not the cell
	}
	switch {
	case census.Empty() && delay > 0 && wallNS > 0 && delay >= time.Duration(wallNS):
		return fmt.Sprintf("the nsys capture holds nothing: [nsys] delay = %s, but the cell ran %s, so collection would have begun after the run ended; set delay below %s (or drop it, or use capture_range)", delay, ran, ran)
	case census.Empty():
		return fmt.Sprintf("the nsys capture holds nothing (%s): collection began after the application finished or ended before the measured work; shorten [nsys] delay or lengthen duration", window)
	case !slices.Contains(c.NSys.Trace, "cuda"):
		return fmt.Sprintf("the nsys capture holds no CUDA kernel: [nsys] trace = %q has no \"cuda\"; add it", c.NSys.Trace)
	}
	return fmt.Sprintf("the nsys capture holds no CUDA kernel (%s): %s", window, census.NoKernelsAdvice())
}

// orAll names an unset nsys duration.
func orAll(d time.Duration) string {
	if d <= 0 {
		return "to the end"
	}
	return d.String()
}

func fillTimings(t *rundir.Timings, d *perf.Dump) {
	t.E2ENS = d.Total.Nanoseconds()
	t.MeanDenoiseStepNS = d.MeanDenoiseStep().Nanoseconds()
	t.DenoiseStepsNS = t.DenoiseStepsNS[:0]
	for _, s := range d.DenoiseSteps {
		t.DenoiseStepsNS = append(t.DenoiseStepsNS, s.Nanoseconds())
	}
	for _, s := range d.Stages {
		t.Stages = append(t.Stages, rundir.StageTime{Name: s.Name, NS: s.Dur.Nanoseconds()})
	}
	t.PeakMemoryMB = d.PeakMemoryMB()
	t.PerfDumpSchema = d.Schema
}

// collectArtifacts lists every file of the cell directory except result.json, with size and
// sha256, sorted by path.
func collectArtifacts(cellDir string) []rundir.Artifact {
	var out []rundir.Artifact
	_ = filepath.WalkDir(cellDir, func(p string, d fs.DirEntry, err error) error {
		// Only regular files: a link or device could point anywhere (reading /dev/full or a
		// FIFO would never end).
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(cellDir, p)
		if rel == rundir.ResultFile || strings.HasPrefix(filepath.Base(rel), ".") {
			return nil
		}
		a := rundir.Artifact{Path: filepath.ToSlash(rel), Kind: artifactKind(rel)}
		if f, err := infile.Open(p); err == nil {
			h := sha256.New()
			n, _ := io.Copy(h, f)
			f.Close()
			a.Bytes = n
			a.SHA256 = hex.EncodeToString(h.Sum(nil))
		}
		out = append(out, a)
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func artifactKind(rel string) string {
	rel = filepath.ToSlash(rel)
	switch {
	case strings.HasPrefix(rel, "traces/"):
		return "trace"
	case strings.HasPrefix(rel, "outputs/"):
		return "output"
	case strings.HasSuffix(rel, ".nsys-rep"):
		return "nsys-report"
	case strings.HasSuffix(rel, ".sqlite"):
		return "nsys-export"
	case rel == rundir.PerfFile:
		return "perf-dump"
	case rel == rundir.LogFile:
		return "log"
	case rel == rundir.CommandFile:
		return "command"
	case strings.HasPrefix(filepath.Base(rel), "triage"):
		return "triage"
	default:
		return "other"
	}
}

// recordTraceSize records how much a torch cell's traces took (result.json "trace"), per
// profiled step, beside [profile] max_trace_mb and the cap it set; a cell over its budget gets
// a warning with the measured figure, so the next plan can set the budget from it.
func recordTraceSize(rec cellRecord, res *cellResult) {
	c := rec.Cell
	steps, _ := plans.TraceSteps(&c)
	if steps <= 0 {
		return
	}
	var bytes int64
	_ = filepath.WalkDir(filepath.Join(rec.abs, "traces"), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				bytes += fi.Size()
			}
		}
		return nil
	})
	if bytes == 0 {
		return
	}
	mb := float64(bytes) / (1 << 20)
	ts := &rundir.TraceSize{MB: round2(mb), Steps: steps, MBPerStep: round2(mb / float64(steps)),
		BudgetMB: c.Profile.MaxTraceMB, CappedFrom: c.Profile.StepsCappedFrom}
	res.Trace = ts
	if ts.BudgetMB > 0 && mb > float64(ts.BudgetMB) {
		fit := max(int(float64(ts.BudgetMB)/ts.MBPerStep), 1) // steps the budget holds at the measured size
		res.Warnings = append(res.Warnings, rundir.Reason{Code: "trace-budget", Message: fmt.Sprintf(
			"the traces took %.0f MB, over [profile] max_trace_mb = %d: %.1f MB per profiled step, more than the %d MB the cap assumes; max_trace_mb = %d would cap these cells at %d steps, within %d MB",
			mb, ts.BudgetMB, ts.MBPerStep, plans.TraceMBPerStep, fit*plans.TraceMBPerStep, fit, ts.BudgetMB)})
	}
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }
