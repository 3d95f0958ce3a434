// Package runner orchestrates a plan: it creates the run directory, starts one process per
// cell through runner/proc (optionally wrapped in `nsys profile`), judges each cell with its
// backend, exports and triages what the profilers wrote, and writes result.json per cell and
// the run summary. It never touches the terminal or the process environment itself: cmd/runner
// hands it writers, a logger, the environment to pass to children and a context that is
// cancelled on Ctrl-C.
package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/backends/sglang"
	"github.com/sglprof/runner/backends/vllm"
	"github.com/sglprof/runner/backends/vllmomni"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/exitcode"
	"github.com/sglprof/runner/runner/proc"
	"github.com/sglprof/runner/runner/secrets"
)

// Stopped is the cause (context.Cause) of a run's context cancelled because the runner was
// asked to stop: cmd/runner, the one place that sees signals, cancels the context with it, so
// that what was stopped records the exit status the signal calls for (summary.json's
// exit_code) without this package knowing about signals. The context's Err is
// context.Canceled as for any cancellation.
type Stopped struct {
	// Signal names what stopped the runner ("SIGINT", "SIGTERM").
	Signal string
	// ExitCode is the exit status it calls for (exitcode.Interrupted, exitcode.Terminated).
	ExitCode int
}

// Error says what stopped the runner: "stopped by SIGTERM".
func (s *Stopped) Error() string { return "stopped by " + s.Signal }

// InterruptedExit is the exit status of a run that ctx's cancellation stopped: the code of
// its Stopped cause, else exitcode.Interrupted (a context cancelled for any other reason, as in
// tests, counts as Ctrl-C).
func InterruptedExit(ctx context.Context) int {
	var s *Stopped
	if errors.As(context.Cause(ctx), &s) && s.ExitCode != 0 {
		return s.ExitCode
	}
	return exitcode.Interrupted
}

// Options configure a run. cmd/runner fills them from flags, the environment and the terminal.
type Options struct {
	// OutputDir overrides the plan's output_dir when not empty.
	OutputDir string
	// Simulate replaces sglang and nsys with the built-in simulators, reached by re-executing
	// Exe as `Exe sim sglang ...` and `Exe sim nsys ...`.
	Simulate bool
	// Exe is the path of the runner binary (needed with Simulate).
	Exe string
	// Env is the environment the cells inherit (KEY=VALUE), normally the runner's own.
	Env []string
	// Out receives the final summary table.
	Out io.Writer
	// Progress reports cell starts and ends; nil means none.
	Progress Progress
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// ProbeTimeout bounds each environment probe (nvidia-smi, nvcc, ...); 0 means 10s.
	ProbeTimeout time.Duration
	// NoTriage skips the per-cell triage of traces.
	NoTriage bool
	// Args is the command line that started the run, recorded in the manifest.
	Args []string
	// Nightly appends the run to the history and compares it with a baseline (runner/nightly.go).
	Nightly NightlyOptions
	// Executor overrides the plan's [executor] kind when not empty (runner run --executor).
	Executor string
	// Detach returns once a Slurm job array is submitted; runner run --resume waits for it.
	Detach bool
	// SlurmPoll is how often a Slurm job array is polled; 0 means 2 s.
	SlurmPoll time.Duration

	// gpus are the GPU slots of the local executor (resolveExecutor); nil runs one cell at a time.
	gpus []int
	// onSlurm is set when the cells run as a Slurm job array (resolveExecutor).
	onSlurm bool
	// nsysProbe is what preflight's `nsys --version` printed, so the manifest records it
	// without starting nsys a second time.
	nsysProbe *rundir.Probe
	// lost keeps the results execute could not write (a full disk) for its summary.
	lost *lostResults
	// unwritten are the records startRun could not write; with any, execute runs no cell.
	unwritten []earlyWrite
	// CheckEnvTimeout bounds `python -m sglang.check_env` and the library-version probe
	// (runner/gpuenv.go); 0 means 60s.
	CheckEnvTimeout time.Duration

	gpu *gpuGuard // the GPU noise guard of the run (runner/gpucheck.go)
	// freeSpace is the free bytes of the file system holding a directory (statfs); tests
	// replace it.
	freeSpace func(dir string) (uint64, error)
	// Probed, when set, is the environment ProbeEnvironment captured for this plan moments
	// before (runner replay shows it, then runs): the run's manifest takes its probes and GPU
	// environment instead of running check_env and the other probes a second time.
	Probed *rundir.Manifest

	// NoPlanProbes keeps the environment probes from running anything the plan names (the
	// Python beside backend.command for check_env and library versions): set by a simulated
	// replay, whose bundle's commands nobody confirmed.
	NoPlanProbes bool

	// red is the run's redactor (prepareRedactor), cloned for each run-directory file.
	red *secrets.Redactor
}

func (o *Options) defaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Progress == nil {
		o.Progress = nopProgress{}
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = 10 * time.Second
	}
}

// sglangCommand and nsysCommand are the argv prefixes of the external programs, replaced by
// the simulators under --simulate.
func (o *Options) sglangCommand(c plans.Cell) []string {
	if o.Simulate {
		return []string{o.Exe, "sim", "sglang"}
	}
	return c.Backend.Command
}

func (o *Options) nsysCommand() []string {
	if o.Simulate {
		return []string{o.Exe, "sim", "nsys"}
	}
	return []string{"nsys"}
}

// backendFor picks the backend of a cell by backend.kind and mode (the registry lives here
// because package backends cannot import its sub-packages) and has it refuse what its program
// cannot run as planned (Backend.ValidateCell), so a cell is refused before anything runs
// instead of being run half-right.
func backendFor(c plans.Cell) (backends.Backend, error) {
	be, err := pickBackend(c)
	if err != nil {
		return nil, err
	}
	if err := be.ValidateCell(c); err != nil {
		return nil, &exitcode.UsageError{Err: err}
	}
	return be, nil
}

// pickBackend is the registry of backends: one per supported backend.kind and mode.
func pickBackend(c plans.Cell) (backends.Backend, error) {
	switch {
	case c.Backend.Kind == sglang.Kind && c.Backend.Mode == sglang.Mode:
		return sglang.New(), nil
	case c.Backend.Kind == sglang.Kind && c.Backend.Mode == backends.ModeServe:
		// Serve mode: the runner drives the server itself (runner/serve.go).
		return sglang.NewServe(), nil
	case c.Backend.Kind == vllmomni.Kind && c.Backend.Mode == backends.ModeServe:
		return vllmomni.New(), nil
	case c.Backend.Kind == vllm.Kind && c.Backend.Mode == backends.ModeServe:
		return vllm.New(), nil
	case c.Backend.Mode == backends.ModeServe:
		return nil, &exitcode.UsageError{Err: fmt.Errorf("backend.kind = %q with mode \"serve\" is not supported by this runner version yet; use kind = \"sglang\", \"vllm\" or \"vllm-omni\"", c.Backend.Kind)}
	default:
		return nil, &exitcode.UsageError{Err: fmt.Errorf("backend.kind = %q with mode %q is not supported by this runner version yet; use kind = \"sglang\"", c.Backend.Kind, c.Backend.Mode)}
	}
}

// Run executes every cell of plan p in a new run directory and returns the summary. A plan or
// environment problem found before the first cell starts is returned as an error (a
// *exitcode.UsageError for problems the user must fix in the plan); cell failures are not errors, they
// are in the summary and its ExitCode.
func Run(ctx context.Context, p *plans.Plan, opts Options) (*rundir.Summary, error) {
	return RunCells(ctx, p, nil, opts)
}

// Resume finishes the cells of an existing run directory that have no result.json, and re-runs
// cells recorded as interrupted; each reruns in an empty cell directory (setAside keeps the old
// attempt's directory under interrupted/ or unreadable/). The plan is
// re-read from the run directory's plan.toml, so the cells are the ones of the original run.
func Resume(ctx context.Context, dir string, opts Options) (*rundir.Summary, error) {
	opts.defaults()
	p, _, err := rundir.ReadPlan(dir)
	if err != nil {
		return nil, &exitcode.UsageError{Err: fmt.Errorf("resume %s: %w", dir, err)}
	}
	if err := opts.prepareRedactor(p); err != nil {
		return nil, fmt.Errorf("resume %s: %w", dir, err)
	}
	saved, err := rundir.ReadCells(dir)
	if err != nil {
		return nil, &exitcode.UsageError{Err: fmt.Errorf("resume %s: %w; is this a run directory?", dir, err)}
	}
	warnDatasetChanged(ctx, saved.Dataset, &opts)
	// The run may hold a subset of the plan's cells (runner replay --cells): resume exactly the
	// cells cells.json lists, each of which the plan must still expand to.
	byID := map[string]plans.Cell{}
	for _, c := range p.Expand() {
		byID[c.ID] = c
	}
	cells := make([]plans.Cell, 0, len(saved.Cells))
	for _, sc := range saved.Cells {
		c, ok := byID[sc.Cell.ID]
		if !ok {
			return nil, fmt.Errorf("resume %s: cells.json lists cell %q but plan.toml does not expand to it; the run directory was edited", dir, sc.Cell.ID)
		}
		cells = append(cells, c)
	}
	if len(cells) == 0 {
		return nil, fmt.Errorf("resume %s: cells.json lists no cells; the run directory was edited", dir)
	}
	if err := preflight(ctx, cells, &opts); err != nil {
		return nil, err
	}
	man, manErr := rundir.ReadManifest(dir)
	if opts.Executor == "" && manErr == nil {
		opts.Executor = man.Executor // a run resumes where it ran, unless --executor says otherwise
	}
	if err = resolveExecutor(ctx, p, cells, &opts); err != nil {
		return nil, err
	}
	if opts.onSlurm {
		if err := checkSlurmRunDir(dir); err != nil {
			return nil, err
		}
	}
	// The processes a run's cells recorded are leftovers only once nothing runs them: a Slurm
	// array that may still be active runs its cells right now (on the test cluster, on this very
	// machine), so they are reaped only after Slurm says the array is over. The arrays are the
	// manifest's and, should the manifest have lost them, the batch scripts in slurm/.
	var recorded []rundir.SlurmJob
	if manErr == nil {
		recorded = man.Slurm
	}
	arrays := len(recorded) > 0 || lastScript(dir) > 0
	switch {
	case !arrays:
		reapLeftovers(dir, &opts)
	case opts.onSlurm:
		// runOnSlurm finds, waits for or collects the last array first, then reaps and sets aside.
	default:
		if err := leaveSlurm(ctx, dir, recorded, &opts); err != nil {
			return nil, err
		}
	}
	if !arrays || !opts.onSlurm {
		for _, c := range cells {
			if err := setAside(dir, c, &opts); err != nil {
				return nil, err
			}
		}
	}
	recs, err := prepareCells(dir, cells, &opts)
	if err != nil {
		return nil, err
	}
	if manErr != nil {
		man = captureManifest(ctx, p, dir, cells, &opts, opts.Now())
	}
	man.Executor = opts.executorKind()
	man.Resumed = append(man.Resumed, opts.Now().UTC())
	return execute(ctx, p, dir, recs, man, &opts)
}

// reapLeftovers kills what a killed run left running (the processes its cells' and servers'
// supervisors recorded, when the supervisors died too), so that a resumed cell does not meet a
// stale server on its port or its GPU. It reads the records only where the runner writes them
// (recordPaths), and Record.Reap signals only processes that carry the record's token: every
// other process a record names is left alone, and said so, with its pid and why. A record is
// removed once it names nothing alive, and kept otherwise (with the cell, under interrupted/).
func reapLeftovers(dir string, opts *Options) {
	for _, path := range recordPaths(dir) {
		rel, _ := filepath.Rel(dir, path)
		rec, err := readRecord(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			opts.Logger.Warn("resume: process record not used; nothing it names was signalled", "record", rel, "err", err)
			continue
		}
		n, spared := rec.Reap()
		for _, s := range spared {
			opts.Logger.Warn("resume: left alone a process that a process record names: "+s.Why, "pid", s.PID, "name", s.Name, "record", rel)
		}
		if n > 0 {
			opts.Logger.Warn("resume: killed processes that the interrupted run left running", "count", n, "record", rel)
		}
		if len(spared) == 0 {
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				opts.Logger.Warn("resume: process record", "record", rel, "err", err)
			}
		}
	}
}

// recordPaths lists the process records a run may have left, at exactly the paths the runner
// writes them (never a search of the run directory, which may hold anything): one per cell of
// cells.json (cells/<id>/processes.json) and one per numbered server directory of serve mode
// (servers/<n>/processes.json).
func recordPaths(dir string) []string {
	var out []string
	if saved, err := rundir.ReadCells(dir); err == nil {
		for _, c := range saved.Cells {
			if c.Cell.ID != "" && filepath.Base(c.Cell.ID) == c.Cell.ID {
				out = append(out, filepath.Join(rundir.CellDir(dir, c.Cell.ID), proc.RecordFile))
			}
		}
	}
	ents, _ := os.ReadDir(filepath.Join(dir, rundir.ServersDir))
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > 0 && e.Name() == strconv.Itoa(n) {
			out = append(out, filepath.Join(dir, rundir.ServersDir, e.Name(), proc.RecordFile))
		}
	}
	return out
}

// maxRecord bounds the size of a process record: a record lists a cell's processes, a few
// dozen bytes each.
const maxRecord = 4 << 20

// readRecord reads a process record through the run directory's reader, refusing a link (a
// record is a file the supervisor wrote in place) and one too large to be a record.
func readRecord(path string) (proc.Record, error) {
	var rec proc.Record
	st, err := os.Lstat(path)
	switch {
	case err != nil:
		return rec, err
	case !st.Mode().IsRegular():
		return rec, fmt.Errorf("%s is not a regular file (%s); the runner writes records as files", path, st.Mode().Type())
	case st.Size() > maxRecord:
		return rec, fmt.Errorf("%s is %d bytes, more than a process record ever holds (%d); remove it after checking that none of the run's processes still runs", path, st.Size(), maxRecord)
	}
	if err := rundir.ReadJSON(path, &rec); err != nil {
		return rec, fmt.Errorf("%w; remove it after checking that none of the run's processes still runs", err)
	}
	return rec, nil
}

// leaveSlurm is the start of resuming a Slurm run with another executor (--executor local): it
// refuses while the run's last array (found by its job name, findOwnArray) is still active (its
// tasks would run the same cells in the same directories), and also when Slurm cannot say (a
// cell Slurm still runs has no result yet, so it would run twice at once); it reaps the cells'
// processes only when Slurm says the array is over.
func leaveSlurm(ctx context.Context, dir string, arrays []rundir.SlurmJob, opts *Options) error {
	if err := checkUnrecordedArray(ctx, dir, arrays, opts); err != nil {
		return fmt.Errorf("resume %s: %w", dir, err)
	}
	if len(arrays) > 0 {
		last := arrays[len(arrays)-1]
		found, err := findOwnArray(ctx, dir, &last, opts)
		active := false
		if err == nil && found {
			active, err = arrayActive(ctx, last, opts)
		}
		switch {
		case err != nil:
			array := last.Name
			if last.JobID != "" {
				array += " (job " + last.JobID + ")"
			}
			return fmt.Errorf("resume %s: Slurm cannot say whether this run's array %s still runs its cells (%w); resuming here could run a cell twice at once. Check with squeue -n %s, scancel it if it still runs, and resume again where Slurm answers",
				dir, array, err, last.Name)
		case active:
			return fmt.Errorf("resume %s: Slurm job %s of this run is still active and runs its cells; wait for it with runner run --resume %s (without --executor local), or scancel %s first", dir, last.JobID, dir, last.JobID)
		}
	}
	reapLeftovers(dir, opts)
	return nil
}

// setAside moves the directory of a cell that must run again out of the way, so that the rerun
// starts from an empty cell directory and nothing is overwritten or deleted: one whose result
// says "interrupted" (it measured nothing) to interrupted/<id>-<n>/; one without a result that
// still holds files (an attempt killed together with the runner, by SIGKILL, a crash or a lost
// node: an empty trace, a log cut short) also to interrupted/<id>-<n>/, with a note, since a
// partial file left beside the rerun's would be judged as the rerun's (an empty trace failed a
// good rerun as trace-truncated); one whose result.json cannot be read (empty, not JSON, an
// unknown verdict: a crash or a full disk while it was written) to unreadable/<id>-<n>/, with a
// warning. The old directories sit beside cells/, so no report, triage or bundle, which read
// cells/<id>/, takes their files for the cell's.
func setAside(dir string, c plans.Cell, opts *Options) error {
	cellDir := filepath.Join(dir, rundir.CellsDir, c.ID)
	r, err := readResult(cellDir)
	into, partial := "interrupted", false
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if !holdsFiles(cellDir) {
			return nil // never started: only the empty directories prepareCells made
		}
		partial = true
	case err != nil:
		into = "unreadable"
	case r.Verdict != plans.VerdictInterrupted:
		return nil
	}
	if err := os.MkdirAll(filepath.Join(dir, into), 0o755); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	for n := 1; ; n++ {
		dst := filepath.Join(dir, into, fmt.Sprintf("%s-%d", c.ID, n))
		if _, err := os.Lstat(dst); err == nil {
			continue
		}
		if err := os.Rename(cellDir, dst); err != nil {
			return fmt.Errorf("resume: set aside %s cell %s: %w", into, c.ID, err)
		}
		switch {
		case into == "unreadable":
			opts.Logger.Warn("resume: the cell's result cannot be read; it runs again (its old directory is kept)",
				"cell", c.ID, "err", err, "moved_to", dst)
		case partial:
			opts.Logger.Warn("resume: the cell's earlier attempt ended without a result (the runner was killed while it ran); it runs again in an empty directory (the attempt's files are kept)",
				"cell", c.ID, "moved_to", dst)
		}
		return nil
	}
}

// holdsFiles reports whether the directory tree at dir holds anything but directories (a file,
// a link, a FIFO: nothing is opened). It stops at the first one.
func holdsFiles(dir string) bool {
	found := errors.New("found")
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // an unreadable part: judge by what can be seen
		}
		if !d.IsDir() {
			return found
		}
		return nil
	})
	return errors.Is(err, found)
}

// preflight checks, before the first cell starts, what would otherwise fail in the middle of
// a sweep: an unsupported backend, a missing program, a missing nsys.
func preflight(ctx context.Context, cells []plans.Cell, opts *Options) error {
	if opts.Simulate && opts.Exe == "" {
		return errors.New("--simulate needs the runner's own path to re-execute as the simulator")
	}
	seen := map[string]bool{}
	needNsys := false
	for _, c := range cells {
		be, err := backendFor(c)
		if err != nil {
			return err
		}
		if c.Profiler == plans.ProfilerNsys {
			needNsys = true
		}
		if c.Backend.URL != "" {
			continue // an attached server (backend.url): no program to run here
		}
		cmd := opts.sglangCommand(c)
		if s, ok := be.(backends.Server); ok {
			cmd = opts.serverCommand(s, c)
		}
		if len(cmd) == 0 || seen[cmd[0]] {
			continue
		}
		seen[cmd[0]] = true
		if _, err := proc.LookPath(cmd[0], opts.Env); err != nil {
			return fmt.Errorf("%s not found: %w; install it, activate its environment, or set backend.command in the plan (or use --simulate)", cmd[0], err)
		}
	}
	if needNsys {
		pr, err := checkNsys(ctx, opts.nsysCommand(), opts.Env)
		if err != nil {
			return err
		}
		opts.nsysProbe = &pr
	}
	return nil
}

// envValue returns the value of key in a KEY=VALUE list (the last one wins, as in exec).
func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// simJitterSeed is the RUNNER_SIM_JITTER_SEED a simulated cell gets: its repeat number, mixed
// with the user's own seed when one is set, so a set seed reproduces a run while its repeats
// still differ as real ones do (one seed for every repeat made compare show ±0%).
func simJitterSeed(env []string, repeat int) string {
	base := strings.TrimSpace(envValue(env, "RUNNER_SIM_JITTER_SEED"))
	if base == "" {
		return strconv.Itoa(repeat)
	}
	n, err := strconv.ParseInt(base, 10, 64)
	if err != nil {
		return base // the simulator refuses it with a message that names the variable
	}
	return strconv.FormatInt(n*1_000_003+int64(repeat), 10)
}

// mergeEnv returns base with extra added; an extra key replaces the inherited value.
func mergeEnv(base []string, extra map[string]string) []string {
	out := make([]string, 0, len(base)+len(extra))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := extra[k]; ok {
			continue
		}
		out = append(out, kv)
	}
	for _, k := range sortedKeys(extra) {
		out = append(out, k+"="+extra[k])
	}
	return out
}
