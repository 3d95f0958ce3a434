package runner

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/compare"
	"github.com/sglprof/runner/reports/history"
	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/reports/triage"
	"github.com/sglprof/runner/runner/analysis"
)

// kernelDiffProfilers are the profilers whose cells a kernel diff reads, in order of
// preference: a torch trace covers the same profiled steps in every run, while an nsys capture
// covers whatever its --delay/--duration window caught. The two sides are always of one
// profiler (kernel names and coverage differ between them).
var kernelDiffProfilers = []string{plans.ProfilerTorch, plans.ProfilerNsys}

// historyKernelDiffRuns bounds how many earlier runs of the history are searched for a profiled
// cell to diff against.
const historyKernelDiffRuns = 5

// attachKernelDiffs explains every regressed configuration of res at the kernel level: it
// finds a profiled cell of the configuration in the base (the base run or cell; with a history
// baseline, the newest earlier run of the history that still has one) and in the new run,
// reads their triages and attaches the kernel diff with its verdict lines. A configuration
// without such a pair gets a note saying what is missing; nothing here fails the comparison.
func attachKernelDiffs(ctx context.Context, res *compare.Result, base, cur *perf.Set, db *history.DB) {
	for _, key := range res.RegressedConfigs() {
		if ctx.Err() != nil {
			return
		}
		kd := compare.KernelDiff{Config: key}
		newCells := profiledCells(cur, key)
		var baseCells []cellRef
		var baseFrom string
		switch {
		case base != nil:
			baseCells, baseFrom = profiledCells(base, key), base.Source
		case db != nil:
			dirs, err := db.RunDirs(ctx, key, cur.GPU, cur.RunID, historyKernelDiffRuns)
			if err != nil {
				kd.Note = fmt.Sprintf("no kernel diff: %v", err)
			}
			baseFrom = fmt.Sprintf("none of the last %d runs of this configuration in the history (GPU %q) still has", historyKernelDiffRuns, cur.GPU)
			for _, d := range dirs {
				if baseCells = profiledCells(&perf.Set{Source: d, Kind: "run"}, key); len(baseCells) > 0 {
					break
				}
			}
		}
		if kd.Note == "" {
			b, n, ok := pickCells(baseCells, newCells)
			if !ok {
				kd.Note = noCellsNote(baseCells, newCells, baseFrom, cur.Source)
			} else {
				kd.Profiler, kd.BaseCell, kd.NewCell = b.profiler, b.dir, n.dir
				diffCells(ctx, &kd, b, n)
			}
		}
		compare.Explain(res, &kd)
		res.KernelDiffs = append(res.KernelDiffs, kd)
	}
}

// cellRef is one ok profiled cell of a configuration.
type cellRef struct {
	dir, profiler string
	repeat        int
}

// profiledCells lists the ok cells of configuration key profiled with torch or nsys in one side
// of a comparison: the cells of a run directory, or a cell directory itself (whatever its key:
// a cell compared with a cell is one configuration). A perf dump has none.
func profiledCells(s *perf.Set, key string) []cellRef {
	var dirs []string
	switch s.Kind {
	case "cell":
		dirs = []string{s.Source}
	case "run":
		cf, err := rundir.ReadCells(s.Source)
		if err != nil {
			return nil
		}
		for _, c := range cf.Cells {
			if c.Cell.Key == key && slices.Contains(kernelDiffProfilers, c.Cell.Profiler) {
				dirs = append(dirs, filepath.Join(s.Source, c.Dir))
			}
		}
	}
	var out []cellRef
	for _, d := range dirs {
		r, err := rundir.ReadResult(d)
		if err != nil || r.Verdict != plans.VerdictOK || !slices.Contains(kernelDiffProfilers, r.Profiler) {
			continue
		}
		c := cellRef{dir: d, profiler: r.Profiler}
		if cf, err := rundir.ReadCells(filepath.Dir(filepath.Dir(d))); err == nil {
			for _, rec := range cf.Cells {
				if rec.Cell.ID == r.ID {
					c.repeat = rec.Cell.Repeat
				}
			}
		}
		out = append(out, c)
	}
	slices.SortStableFunc(out, func(a, b cellRef) int { return a.repeat - b.repeat })
	return out
}

// pickCells chooses the two cells to diff: the first profiler of kernelDiffProfilers that both
// sides have, and on each side its first repeat.
func pickCells(base, cur []cellRef) (b, n cellRef, ok bool) {
	for _, p := range kernelDiffProfilers {
		bi := slices.IndexFunc(base, func(c cellRef) bool { return c.profiler == p })
		ni := slices.IndexFunc(cur, func(c cellRef) bool { return c.profiler == p })
		if bi >= 0 && ni >= 0 {
			return base[bi], cur[ni], true
		}
	}
	return b, n, false
}

// noCellsNote says why a regressed configuration has no kernel diff.
func noCellsNote(base, cur []cellRef, baseFrom, newFrom string) string {
	switch {
	case len(base) == 0 && len(cur) == 0:
		return "no kernel diff: neither run has an ok torch or nsys cell of this configuration; add torch to [profile] profilers to have regressions explained by kernel"
	case len(cur) == 0:
		return fmt.Sprintf("no kernel diff: the new run (%s) has no ok torch or nsys cell of this configuration", newFrom)
	case len(base) == 0 && strings.HasPrefix(baseFrom, "none of"):
		return fmt.Sprintf("no kernel diff: %s an ok torch or nsys cell (or a run directory)", baseFrom)
	case len(base) == 0:
		if baseFrom == "" {
			baseFrom = "the baseline"
		}
		return fmt.Sprintf("no kernel diff: %s has no ok torch or nsys cell of this configuration", baseFrom)
	}
	return fmt.Sprintf("no kernel diff: the base has only %s cells and the new run only %s cells of this configuration; a kernel diff compares one profiler with itself",
		base[0].profiler, cur[0].profiler)
}

// diffCells reads the triages of the two cells and attaches their diff to kd (or a note).
func diffCells(ctx context.Context, kd *compare.KernelDiff, b, n cellRef) {
	br, err := cellTriage(ctx, b.dir)
	if err != nil {
		kd.Note = fmt.Sprintf("no kernel diff: base cell %s: %v", b.dir, err)
		return
	}
	nr, err := cellTriage(ctx, n.dir)
	if err != nil {
		kd.Note = fmt.Sprintf("no kernel diff: new cell %s: %v", n.dir, err)
		return
	}
	kd.Diff = triage.Diff(br, nr)
}

// cellTriage is the triage of a cell: its triage.json when that lists every kernel (runner run
// writes it without a cutoff), else a triage of the cell's traces. A triage.json written with
// a cutoff (an older runner) is used only when the traces are gone; the diff then warns what
// it lacks.
func cellTriage(ctx context.Context, dir string) (*triage.Report, error) {
	saved, serr := triage.ReadReportFile(filepath.Join(dir, rundir.TriageJSON))
	if serr == nil && saved.Complete() && len(saved.Stages) > 0 {
		return saved, nil
	}
	_, _, root, err := analysis.ResolveCell(dir)
	if err == nil {
		if _, err = os.Stat(root); err == nil {
			var rep *triage.Report
			if rep, err = analysis.TriageNsys(ctx, root, triage.DiscoverOptions{}, triage.Options{}, analysis.NsysOptions{AllowNoKernels: true}); err == nil {
				return rep, nil
			}
		}
	}
	if serr == nil {
		return saved, nil
	}
	if errors.Is(serr, fs.ErrNotExist) {
		return nil, fmt.Errorf("no triage.json and no readable traces (%v)", err)
	}
	return nil, fmt.Errorf("%v; and its traces: %v", serr, err)
}
