package runner

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/runner/rundir"
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
	start := opts.Now()
	dir, err := rundir.Create(output, p.Name, start)
	if err != nil {
		return nil, err
	}
	if err := rundir.WriteFileAtomic(filepath.Join(dir, rundir.PlanFile), p.Source); err != nil {
		return nil, err
	}
	recs, err := prepareCells(dir, cells, &opts)
	if err != nil {
		return nil, err
	}
	if err := writeRedactedJSON(filepath.Join(dir, rundir.CellsFile), rundir.Cells{Cells: redactRecords(recs)}); err != nil {
		return nil, err
	}
	man := captureManifest(ctx, p, dir, cells, &opts, start)
	if err := writeRedactedJSON(filepath.Join(dir, rundir.ManifestFile), man); err != nil {
		return nil, err
	}
	opts.Logger.Info("run directory", "dir", dir, "cells", len(cells))
	return execute(ctx, p, dir, recs, man, &opts)
}

// selectCells keeps the cells named in only, in plan order.
func selectCells(all []plans.Cell, only []string) ([]plans.Cell, error) {
	if len(all) == 0 {
		return nil, &UsageError{errors.New("the plan expands to no cells")}
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
		return nil, &UsageError{fmt.Errorf("the plan has no cell %s; its cells are: %s", strings.Join(missing, ", "), strings.Join(ids, ", "))}
	}
	slices.SortFunc(out, func(a, b plans.Cell) int { return a.Index - b.Index })
	return out, nil
}

// ProbeEnvironment captures this machine's environment the way a run's manifest.json does
// (GPUs, driver, nvcc, sglang and nsys versions, the variables that matter), without creating
// anything, so `runner replay` can show how this machine differs from a bundle's before it runs.
func ProbeEnvironment(ctx context.Context, p *plans.Plan, opts Options) *rundir.Manifest {
	opts.defaults()
	cells := p.Expand()
	return captureManifest(ctx, p, "", cells, &opts, opts.Now())
}
