package runner

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sglprof/runner/backends/sglang"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/exitcode"
	"github.com/sglprof/runner/runner/gpu"
)

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
