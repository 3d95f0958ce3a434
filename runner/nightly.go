package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/compare"
	"github.com/sglprof/runner/reports/history"
	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/exitcode"
)

// NightlyOptions make a run end like a nightly job: its results are appended to the history
// database and, with a baseline, compared, so that `runner run --baseline history plan.toml`
// is the whole job and its exit code (4 on regression) the verdict.
type NightlyOptions struct {
	// History is the database path; "" means <output_dir>/history.db and "off" disables the
	// history.
	History string
	// Baseline is "" (no comparison), "history" (rolling median of the history) or a run
	// directory.
	Baseline string
	// Compare overrides the plan's [compare] table where set (flags).
	Compare compare.Options
	// BaselineRuns and Consecutive override the plan's history rule where > 0.
	BaselineRuns, Consecutive int
	// Profilers whose cells are compared; nil means perf.DefaultProfilers ("none").
	Profilers []string
	// IgnoreEnv calls regressions even between runs whose GPU clock states differ
	// (runner/envdiff.go).
	IgnoreEnv bool
}

// HistoryPath is the database a run directory's run appends to when no path is given:
// history.db in the output directory, two levels above the run directory
// (<output>/<plan>/<run>).
func HistoryPath(runDir string) string {
	return filepath.Join(filepath.Dir(filepath.Dir(filepath.Clean(runDir))), history.FileName)
}

// CompareOptions merges the plan's [compare] table with the overrides of n.
func (n NightlyOptions) CompareOptions(p *plans.Plan) (compare.Options, history.BaselineOptions) {
	co := compare.FromPlan(p.Compare)
	if n.Compare.Alpha > 0 {
		co.Alpha = n.Compare.Alpha
	}
	for k, t := range n.Compare.Tolerances {
		if co.Tolerances == nil {
			co.Tolerances = map[string]compare.Tolerance{}
		}
		co.Tolerances[k] = t
	}
	bo := history.BaselineOptions{Runs: p.Compare.BaselineRuns, Consecutive: p.Compare.Consecutive, Compare: co}
	if n.BaselineRuns > 0 {
		bo.Runs = n.BaselineRuns
	}
	if n.Consecutive > 0 {
		bo.Consecutive = n.Consecutive
	}
	return co, bo
}

// nightly is the hook at the end of execute: append to the history, compare with the
// baseline, print the comparison, and turn a regression into exit code 4 (a run whose cells
// failed keeps exit code 3: its comparison is still printed, but the failure comes first).
func nightly(ctx context.Context, p *plans.Plan, dir string, sum *rundir.Summary, opts *Options) error {
	n := opts.Nightly
	if sum.Interrupted || (n.History == "off" && n.Baseline == "") {
		return nil
	}
	set, err := perf.Load(dir, perf.LoadOptions{Profilers: n.Profilers})
	if err != nil {
		return fmt.Errorf("read the results of %s: %w", dir, err)
	}
	var db *history.DB
	if n.History != "off" {
		path := n.History
		if path == "" {
			path = HistoryPath(dir)
		}
		h, err := history.Open(ctx, path)
		if err != nil {
			if n.Baseline == BaselineHistory {
				return err
			}
			fmt.Fprintf(opts.Out, "history: not recorded: %v\n", err)
		} else {
			db = h
			defer db.Close()
		}
	}
	// Compare before appending, so that the history baseline never holds this run.
	res, _, err := n.CompareBaseline(ctx, set, p, db)
	switch {
	case errors.Is(err, ErrNoHistory):
		// --no-history with --baseline history: nothing to compare with.
	case NoBaselineYet(err):
		fmt.Fprintf(opts.Out, "baseline: %v\n", err)
	case err != nil:
		return err
	}
	if db != nil {
		if _, err := db.Append(ctx, history.FromSet(set, RunnerVersion())); err != nil {
			fmt.Fprintf(opts.Out, "history: not recorded: %v\n", err)
		}
	}
	if res == nil {
		return nil
	}
	fmt.Fprintln(opts.Out)
	if err := compare.WriteText(opts.Out, res); err != nil {
		return err
	}
	if err := rundir.WriteJSON(filepath.Join(dir, rundir.CompareFile), res, nil); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, rundir.CompareMD))
	if err == nil {
		err = errors.Join(compare.WriteMarkdown(f, res), f.Close())
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", rundir.CompareMD, err)
	}
	if res.Regressed() && sum.ExitCode == exitcode.OK {
		sum.ExitCode = exitcode.Regression
		return writeSummaryFiles(dir, sum)
	}
	return nil
}
