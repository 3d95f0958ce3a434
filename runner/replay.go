package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sglprof/runner/backends/sglang"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/compare"
	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/bundle"
	"github.com/sglprof/runner/runner/exitcode"
	"github.com/sglprof/runner/runner/exposure"
	"github.com/sglprof/runner/runner/gpu"
)

// ReplayOptions configure Replay.
type ReplayOptions struct {
	// Output is the new directory the bundle is extracted to (Output/bundle) and run in
	// (Output/runs); it must not exist or be empty. "" means replay-<bundle name>.
	Output string
	// Cells restricts the replay to these bundled cells.
	Cells []string
	// Simulate (--simulate) runs the built-in simulators only: everything of the bundle's plan
	// that sets, runs or contacts anything is dropped (exposure.SimulatorOnly), and so are the
	// manifest's variables; nothing is asked. Without it, a bundle whose manifest says
	// simulated replays with the simulators too, but keeps (and asks about) all of that.
	Simulate bool
	// Exe, Env, Progress, Logger and Args are passed to the run (Options).
	Exe      string
	Env      []string
	Progress Progress
	Logger   *slog.Logger
	Args     []string
	// Out receives the environment diff, the run's summary table and the per-cell outcome.
	Out io.Writer
	// NoBundleEnv runs with this machine's variables instead of setting the ones the bundle's
	// manifest recorded (CUDA_*, SGLANG_*, NCCL_*, ...).
	NoBundleEnv bool
	// Extract bounds the extraction.
	Extract bundle.ExtractOptions
	// Yes runs what the replay lists (commands, variables, setup lines, network targets)
	// without asking.
	Yes bool
	// Confirm asks whether to run what was just listed; nil (no terminal) refuses unless Yes.
	Confirm func(prompt string) (bool, error)
	// TrustPlan runs plan.toml's commands even when they differ from the argv the bundle
	// recorded in command.json.
	TrustPlan bool
}

// Replay extracts a bundle into a new directory, shows how this machine differs from the
// bundle's environment, runs the bundled cells again with the same argv and environment
// (secrets must be set again: it says which are missing), and compares each cell's verdict
// and timings with the bundled result. Everything in the bundle is untrusted, its claim to be
// simulated included: before anything runs, replay lists every command, variable, Slurm
// option and setup line, network target and bundle file that can be run or loaded, and needs
// a confirmation (opts.Yes or opts.Confirm); it refuses commands that differ from the ones the
// bundle recorded unless opts.TrustPlan. A bundle of a simulated run replays simulated, asking
// only when its plan sets, runs or contacts anything; opts.Simulate drops all of that and asks
// nothing. A failed replay removes what it created.
//
// The bundle's format (extraction, its plan, manifest, secrets and results, the confirmation
// list and the comparison) is runner/bundle's; what runs on this machine (probes, commands,
// the run) is decided here.
func Replay(ctx context.Context, bundlePath string, opts ReplayOptions) (res *bundle.ReplayResult, err error) {
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	out := opts.Out
	st, err := bundle.OpenReplay(ctx, bundlePath, bundle.OpenOptions{Output: opts.Output, Cells: opts.Cells, Extract: opts.Extract, Out: out})
	if err != nil {
		return nil, err
	}
	// A failed replay leaves nothing that would block the next attempt.
	defer func() {
		if err != nil {
			st.Discard()
		}
	}()
	p, bman := st.Plan(), st.Manifest()
	// The bundle's claim to be simulated picks the simulators, nothing more: what its plan
	// sets, runs or contacts is asked about like a real replay's commands, unless --simulate
	// drops all of it first.
	simulate := opts.Simulate || bman.Simulated
	if simulate && opts.Exe == "" {
		return nil, fmt.Errorf("replay: the simulators are the runner's own binary, which was not found")
	}
	env := slices.Clone(opts.Env)
	ropts := Options{
		OutputDir: p.OutputDir,
		Simulate:  simulate,
		Exe:       opts.Exe,
		Env:       env,
		Out:       out,
		Progress:  opts.Progress,
		Logger:    opts.Logger,
		Args:      opts.Args,
		// The simulators replace backend.command, so the Python beside it is not probed
		// either: under them, nothing the plan names runs as a probe.
		NoPlanProbes: simulate,
	}
	// The bundle manifest's variables, KEY=VALUE, that the replay sets.
	setEnv := st.SetUp(env, opts.Simulate, opts.NoBundleEnv)
	if !opts.Simulate {
		exp := exposure.Of(p, ropts.Executor, ropts.Simulate)
		if bman.Simulated && exp.Empty() && len(setEnv) == 0 {
			// Nothing to drop: this is the replay --simulate would run.
			fmt.Fprintln(out, "the bundled run was simulated (its manifest says so) and its plan sets, runs and contacts nothing beyond the simulators: replaying it with the simulators")
		} else if err := confirmReplay(st, ropts, opts, exp, setEnv); err != nil {
			return nil, err // before anything ran, the environment probe included
		}
	}
	here := ProbeEnvironment(ctx, p, ropts)
	ropts.Probed = here // each probe runs once: the run's manifest takes what was just probed
	if err := bundle.WriteDiff(out, bundle.DiffManifests(bman, here)); err != nil {
		return nil, err
	}
	if len(setEnv) > 0 {
		names := make([]string, len(setEnv))
		for i, kv := range setEnv {
			names[i], _, _ = strings.Cut(kv, "=")
		}
		ropts.Env = append(ropts.Env, setEnv...)
		fmt.Fprintf(out, "replay sets %d variable(s) to the bundle's values (--no-bundle-env keeps this machine's): %s\n", len(names), strings.Join(names, ", "))
	}
	sum, err := RunCells(ctx, p, st.Cells(), ropts)
	if err != nil {
		return nil, err
	}
	return st.Outcome(sum, simulate, func(baseDir, newDir string) (*compare.Result, error) {
		cur, err := perf.Load(newDir, perf.LoadOptions{})
		if err != nil {
			return nil, err
		}
		res, _, err := (NightlyOptions{Baseline: baseDir}).CompareBaseline(ctx, cur, p, nil)
		return res, err
	})
}

// confirmReplay has the bundle list what a replay of its plan runs on this machine with ropts
// (the probes, the cells' commands, what the plan sets and contacts) and ask.
func confirmReplay(st *bundle.Replay, ropts Options, opts ReplayOptions, exp exposure.Exposure, setEnv []string) error {
	launches, err := Describe(st.Plan(), ropts)
	if err != nil {
		return &exitcode.UsageError{Err: fmt.Errorf("replay: %w", err)}
	}
	cmds := make([]bundle.CellCommand, len(launches))
	for i, l := range launches {
		cmds[i] = bundle.CellCommand{Cell: l.Cell.ID, Argv: l.Argv, Dir: l.Dir, Attached: l.Cell.Backend.URL != ""}
	}
	return st.Confirm(bundle.Confirmation{
		Probes:    ProbeCommands(st.Plan(), ropts),
		Commands:  cmds,
		Exposure:  exp,
		SetEnv:    setEnv,
		Yes:       opts.Yes,
		Ask:       opts.Confirm,
		TrustPlan: opts.TrustPlan,
	})
}

// RunCells is Run restricted to the cells whose IDs are in only (all cells when only is
// empty). `runner replay` uses it to run again exactly the cells a bundle holds: the cells keep
// the IDs, argv and environment the plan gives them, so the new run directory lines up cell by
// cell with the bundled one. An ID that the plan does not expand to is a usage error, listing
// the IDs it does have.
func RunCells(ctx context.Context, p *plans.Plan, only []string, opts Options) (*rundir.Summary, error) {
	opts.defaults()
	cells, err := selectCells(p.Expand(), only)
	if err != nil {
		return nil, err
	}
	if err := opts.prepareRedactor(p); err != nil {
		return nil, err
	}
	if err := preflight(ctx, cells, &opts); err != nil {
		return nil, err
	}
	if err := resolveExecutor(ctx, p, cells, &opts); err != nil {
		return nil, err
	}
	output := p.OutputDir
	if opts.OutputDir != "" {
		output = opts.OutputDir
	}
	if err := checkTraceSpace(cells, output, &opts); err != nil {
		return nil, err
	}
	if opts.onSlurm {
		if err := checkSlurmRunDir(filepath.Join(output, p.Name)); err != nil {
			return nil, err
		}
	}
	start := opts.Now()
	dir, err := rundir.Create(output, p.Name, start)
	if err != nil {
		return nil, err
	}
	return startRun(ctx, p, dir, cells, start, &opts)
}

// startRun writes a new run directory's records (plan.toml, the cell directories, cells.json,
// manifest.json) and executes its cells. A record that cannot be written (a full disk) does not
// end the run with only that error: plan.toml and cells.json are what --resume reads, so
// without them no cell runs, each is failed (run-write) in the summary, the writes are tried
// again at the end and the error lists what is still missing; a manifest.json that cannot be
// written is written again at the end of the run anyway.
func startRun(ctx context.Context, p *plans.Plan, dir string, cells []plans.Cell, start time.Time, opts *Options) (*rundir.Summary, error) {
	recs, err := prepareCells(dir, cells, opts)
	if err != nil {
		return nil, err
	}
	dataset := datasetRecord(ctx, p, opts)
	records := []earlyWrite{
		{rundir.PlanFile, func() error { return rundir.WriteFileAtomic(filepath.Join(dir, rundir.PlanFile), p.Source) }},
		{rundir.CellsFile, func() error {
			return opts.writeRedactedJSON(filepath.Join(dir, rundir.CellsFile), rundir.Cells{Dataset: dataset, Cells: redactRecords(recs)})
		}},
	}
	for _, w := range records {
		if err := w.write(); err != nil {
			opts.unwritten = append(opts.unwritten, w)
		}
	}
	man := captureManifest(ctx, p, dir, cells, opts, start)
	if err := opts.writeRedactedJSON(filepath.Join(dir, rundir.ManifestFile), man); err != nil {
		opts.Logger.Warn("manifest.json not written; it is written again at the end of the run", "err", err)
	}
	opts.Logger.Info("run directory", "dir", dir, "cells", len(cells))
	return execute(ctx, p, dir, recs, man, opts)
}

// earlyWrite is a record of the run directory written before the first cell (plan.toml,
// cells.json) that could not be: execute runs no cell and writes it again at the end.
type earlyWrite struct {
	name  string
	write func() error
}

// selectCells keeps the cells named in only, in plan order.
func selectCells(all []plans.Cell, only []string) ([]plans.Cell, error) {
	if len(all) == 0 {
		return nil, &exitcode.UsageError{Err: errors.New("the plan expands to no cells")}
	}
	if len(only) == 0 {
		return all, nil
	}
	var out []plans.Cell
	var missing []string
	for _, id := range only {
		i := slices.IndexFunc(all, func(c plans.Cell) bool { return c.ID == id })
		if i < 0 {
			missing = append(missing, id)
			continue
		}
		if !slices.ContainsFunc(out, func(c plans.Cell) bool { return c.ID == id }) {
			out = append(out, all[i])
		}
	}
	if len(missing) > 0 {
		ids := make([]string, len(all))
		for i, c := range all {
			ids[i] = c.ID
		}
		return nil, &exitcode.UsageError{Err: fmt.Errorf("the plan has no cell %s; its cells are: %s", strings.Join(missing, ", "), strings.Join(ids, ", "))}
	}
	slices.SortFunc(out, func(a, b plans.Cell) int { return a.Index - b.Index })
	return out, nil
}

// ProbeCommands lists, exactly, the commands ProbeEnvironment runs on this machine beyond the
// GPU guard's nvidia-smi queries: the backend's version, the Python beside the backend's
// program (the library versions, and check_env where the backend's EnvProbes say it applies,
// as captureGPUEnv decides) and the tools the cells use. `runner replay` shows them
// before it asks.
func ProbeCommands(p *plans.Plan, opts Options) [][]string {
	opts.defaults()
	cells := p.Expand()
	out := [][]string{{"nvidia-smi", "--query-gpu=" + gpuQuery, "--format=csv"}, {"nvcc", "--version"}}
	if len(cells) == 0 {
		return out
	}
	c := cells[0]
	name, version := versionProbe(c, &opts)
	out = append(out, version)
	if !opts.Simulate && name == sglang.Kind {
		out = append(out, sglangPythonProbe)
	}
	probes := envProbes(c)
	if py := gpu.Interpreter(probes.Command, opts.Env); py != "" && !opts.NoPlanProbes {
		if probes.CheckEnv {
			out = append(out, gpu.CheckEnvArgv(py))
		}
		out = append(out, gpu.VersionsArgv(py))
	}
	for _, c := range cells {
		if c.Profiler == plans.ProfilerNsys {
			out = append(out, append(opts.nsysCommand(), "--version"))
			break
		}
	}
	return out
}

// ProbeEnvironment captures this machine's environment the way a run's manifest.json does
// (GPUs, driver, nvcc, sglang and nsys versions, the variables that matter), without creating
// anything, so `runner replay` can show how this machine differs from a bundle's before it runs.
func ProbeEnvironment(ctx context.Context, p *plans.Plan, opts Options) *rundir.Manifest {
	opts.defaults()
	cells := p.Expand()
	return captureManifest(ctx, p, "", cells, &opts, opts.Now())
}
