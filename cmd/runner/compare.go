package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/compare"
	"github.com/sglprof/runner/reports/history"
	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/reports/render/table"
	"github.com/sglprof/runner/runner/exitcode"

	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner"
)

// comparisonFlags are shared by compare, report and run.
func comparisonFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "history", Usage: "history database `PATH` (default: $RUNNER_HISTORY, else history.db in the run's output directory)"},
		&cli.FloatFlag{Name: "alpha", Usage: "significance level of the t-test (and of the history's change-point search)", DefaultText: "the plan's [compare] alpha, else 0.05"},
		&cli.StringSliceFlag{Name: "tolerance", Usage: "override a tolerance, `METRIC=SPEC` such as denoise_stage=10% or 120ms, stage/DecodingStage=30%, peak_memory=2% or 256MB; METRIC is a class of the plan's [compare.tolerances] (" + strings.Join(plans.CompareMetrics, ", ") + ") or a metric name such as stage/DecodingStage (repeatable)"},
		&cli.StringFlag{Name: "profilers", Value: "none", Usage: "comma list of the profilers whose cells are compared; profiled cells distort latency, so only none by default (all admits every cell)"},
		&cli.IntFlag{Name: "baseline-runs", Usage: "history baseline: rolling median of the last `N` valid runs", DefaultText: "the plan's, else 5"},
		&cli.IntFlag{Name: "consecutive", Usage: "history baseline: `N` violations in a row before a regression", DefaultText: "the plan's, else 2"},
		&cli.BoolFlag{Name: "ignore-env", Usage: "call regressions even when the two runs' GPU clock states differ (locked vs floating); the env diff is shown either way"},
	}
}

// nightlyOptions reads the shared flags.
func nightlyOptions(ctx context.Context, c *cli.Command) (runner.NightlyOptions, error) {
	n := runner.NightlyOptions{
		History:      c.String("history"),
		Baseline:     c.String("baseline"),
		BaselineRuns: c.Int("baseline-runs"),
		Consecutive:  c.Int("consecutive"),
		IgnoreEnv:    c.Bool("ignore-env"),
	}
	if n.History == "" {
		n.History = os.Getenv("RUNNER_HISTORY")
	}
	if c.IsSet("alpha") {
		a := c.Float("alpha")
		if !(a > 0 && a < 1) { // NaN fails both comparisons
			return n, usageErr("--alpha %v: want a level between 0 and 1, such as 0.05", a)
		}
		n.Compare.Alpha = a
	}
	for _, spec := range c.StringSlice("tolerance") {
		k, v, ok := strings.Cut(spec, "=")
		if !ok || k == "" {
			return n, usageErr("--tolerance %q: want METRIC=SPEC such as denoise_stage=10%%", spec)
		}
		t, err := compare.ParseTolerance(v)
		if err != nil {
			return n, usageErr("--tolerance: %v", err)
		}
		if n.Compare.Tolerances == nil {
			n.Compare.Tolerances = map[string]compare.Tolerance{}
		}
		n.Compare.Tolerances[k] = t
	}
	if n.BaselineRuns < 0 {
		return n, usageErr("--baseline-runs %d: want a number of runs >= 1 (0 or no flag: the plan's, else 5)", n.BaselineRuns)
	}
	if n.Consecutive < 0 {
		return n, usageErr("--consecutive %d: want a count >= 1 (0 or no flag: the plan's, else 2)", n.Consecutive)
	}
	if p := c.String("profilers"); p != "" {
		n.Profilers = strings.Split(p, ",")
		for _, pr := range n.Profilers {
			if pr != "all" && !slices.Contains(plans.Profilers, pr) {
				return n, usageErr("--profilers: unknown profiler %q; use a comma list of %s, or all", pr, strings.Join(plans.Profilers, ", "))
			}
		}
	}
	return n, nil
}

// planOf reads the plan.toml of a run directory for its [compare] table; a side that is not
// a run directory, or a plan this runner cannot read, gives the defaults.
func planOf(path string) *plans.Plan {
	if p, _, err := rundir.ReadPlan(path); err == nil {
		return p
	}
	return &plans.Plan{}
}

func compareCommand(std stdio) *cli.Command {
	return &cli.Command{
		Name:      "compare",
		Usage:     "compare two runs (or cells, or perf dumps) metric by metric; exit 4 on a regression",
		ArgsUsage: "BASE NEW | --baseline history RUN_DIR | --engines RUN_DIR",
		Description: `Each side is a run directory, a cell directory or a perf-dump JSON file. Only ok cells of
the profilers in --profilers (default none: profiled runs distort latency) enter. The samples
are runs: one value per cell (repeat), the median of its steps or requests where it has many.
One row per (configuration, metric): base and new median, delta (only when Welch's t-test on
the logs of the per-run values gives p < alpha, otherwise ~), the p-value and n (runs), and
the MDC: the smallest change the test finds with 80% probability at this n and noise. With one
run a side a metric with many samples per run is tested on those ("in 1 run": these two runs
differ, not necessarily a rerun); others get no test. A regression is a significant change
beyond the tolerance max(rel, abs).

With --baseline history the base is the rolling median of the last N runs of the same
configuration on the same GPU model in the history database; the tolerance follows that
configuration's measured run-to-run noise unless the plan or --tolerance fixes it; a
violation must repeat --consecutive times before it is a regression (the first is a warning),
and the row names the run where the step change began.

Every regressed configuration is explained by kernel: the kernel diff of a profiled cell of
it on each side (torch, else nsys; with a history baseline, the newest earlier run that has
one) follows the table, with a verdict line per stage naming the kernels that grew; JSON has
the whole diff under kernel_diff.

With --engines the two sides are the engines of one run whose plan has [matrix] engine =
["sglang", "vllm"]: each configuration's cells meet under their key without the engine part,
so the engines' TTFT, TPOT, ITL, E2E and throughput stand side by side (base: the plan's first
engine). A difference between engines is not a regression: the exit status is 0.

Exit status: 0 no regression, 4 regression, 2 nothing to compare (no configuration in
common, a run still in progress, unreadable input), 1 other errors.`,
		Flags: append(comparisonFlags(),
			&cli.StringFlag{Name: "baseline", Usage: "history: compare RUN_DIR against the history database instead of a BASE"},
			&cli.BoolFlag{Name: "engines", Usage: "compare the engines of one RUN_DIR whose plan has an engine axis: the first engine is the base, the second the new side (exit 0 whatever they differ by)"},
			&cli.StringFlag{Name: "format", Value: "text", Usage: "output format: text, md, json, csv or benchstat (Go benchmark lines for benchstat -col side FILE)"},
		),
		// compare writes only its standard output: Ctrl-C ends it even inside a read that does
		// not watch the context (a FIFO inside a run directory, a huge perf dump).
		Action: interruptible(func(ctx context.Context, c *cli.Command) error {
			n, err := nightlyOptions(ctx, c)
			if err != nil {
				return err
			}
			format := c.String("format")
			if !contains(compare.Formats, format) {
				return usageErr("--format %q: use one of %s", format, strings.Join(compare.Formats, ", "))
			}
			if c.Bool("engines") {
				return compareEngines(ctx, c, std, n, format)
			}
			// The new side is the last argument; the base is the history or the first.
			var newPath string
			switch n.Baseline {
			case runner.BaselineHistory:
				args, err := positional(c, 1, 1, "RUN_DIR")
				if err != nil {
					return err
				}
				if format == "benchstat" {
					return usageErr("--format benchstat needs two sample sets; a history baseline has only medians")
				}
				newPath = args[0]
			case "":
				args, err := positional(c, 2, 2, "BASE NEW")
				if err != nil {
					return err
				}
				n.Baseline, newPath = args[0], args[1]
				if n.Baseline == runner.BaselineHistory {
					n.Baseline = "./" + n.Baseline // a directory named history, not the database
				}
			default:
				return usageErr("--baseline %q: runner compare takes --baseline history; to compare with a run directory, name it as BASE", n.Baseline)
			}
			for _, side := range []string{n.Baseline, newPath} {
				if side != runner.BaselineHistory {
					if err := regularInput(side, "pass a run directory, a cell directory or a perf-dump JSON file"); err != nil {
						return err
					}
				}
			}
			cur, err := perf.Load(newPath, perf.LoadOptions{Profilers: n.Profilers})
			if err != nil {
				if n.Baseline != runner.BaselineHistory {
					err = fmt.Errorf("new: %w", err)
				}
				return &exitError{code: exitcode.Usage, err: err}
			}
			var db *history.DB
			if n.Baseline == runner.BaselineHistory {
				path := n.History
				if path == "" {
					path = runner.HistoryPath(newPath)
				}
				if _, err := os.Stat(path); err != nil {
					return usageErr("history database %s: %v; runs append to it as they finish, or pass --history PATH", path, err)
				}
				if db, err = history.Open(ctx, path); err != nil {
					return &exitError{code: exitcode.Usage, err: err}
				}
				defer db.Close()
			}
			res, base, err := n.CompareBaseline(ctx, cur, planOf(newPath), db)
			if err != nil {
				return &exitError{code: exitcode.Usage, err: err}
			}
			if err := compare.Write(std.out, format, res, base, cur); err != nil {
				return err
			}
			if res.Regressed() {
				return &exitError{code: exitcode.Regression}
			}
			return nil
		}),
	}
}

func historyCommand(std stdio) *cli.Command {
	return &cli.Command{
		Name:      "history",
		Usage:     "list the runs recorded in the history database",
		ArgsUsage: "[PLAN.toml | RUN_DIR | HISTORY.db]",
		Description: `Lists one line per (run, configuration, metric) median, oldest first. The database is
--history PATH, else the one the argument names: a plan's (history.db in its output_dir,
listing that plan's runs), a run directory's (history.db in the output directory it sits in,
listing its plan's runs) or a database file; else $RUNNER_HISTORY, else runs/history.db.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "history", Usage: "history database `PATH`"},
			&cli.StringFlag{Name: "plan", Usage: "only runs of the plan `NAME`"},
			&cli.StringFlag{Name: "cell", Usage: "only the configuration `KEY` (a trailing * matches a prefix)"},
			&cli.StringFlag{Name: "metric", Usage: "only the metric `NAME` (e2e, stage/DenoisingStage, denoise_step, ...)"},
			&cli.StringFlag{Name: "gpu", Usage: "only runs on the GPU `MODEL`"},
			&cli.StringFlag{Name: "since", Usage: "only runs newer than `AGE`: 30d, 12h, 90m"},
			&cli.StringFlag{Name: "format", Value: "text", Usage: "text, md, csv, json or html"},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			args, err := positional(c, 0, 1, "[PLAN.toml | RUN_DIR | HISTORY.db]")
			if err != nil {
				return err
			}
			path := c.String("history")
			planName := c.String("plan")
			if len(args) == 1 {
				p, name, err := historyOf(args[0])
				if err != nil {
					return err
				}
				if path == "" {
					path = p
				}
				if planName == "" {
					planName = name
				}
			}
			if path == "" {
				path = os.Getenv("RUNNER_HISTORY")
			}
			if path == "" {
				path = filepath.Join(plans.DefaultOutputDir, history.FileName)
			}
			if _, err := os.Stat(path); err != nil {
				return usageErr("history database %s: %v; `runner run` creates it, or pass --history PATH", path, err)
			}
			f := history.Filter{Plan: planName, Cell: c.String("cell"), GPU: c.String("gpu")}
			if s := c.String("since"); s != "" {
				d, err := parseAge(s)
				if err != nil {
					return usageErr("--since %q: %v", s, err)
				}
				f.Since = time.Now().Add(-d)
			}
			db, err := history.Open(ctx, path)
			if err != nil {
				return &exitError{code: exitcode.Usage, err: err}
			}
			defer db.Close()
			entries, err := db.List(ctx, f)
			if err != nil {
				return err
			}
			if m := c.String("metric"); m != "" {
				kept := entries[:0]
				for _, e := range entries {
					if e.Metric == m {
						kept = append(kept, e)
					}
				}
				entries = kept
			}
			switch f := table.Format(c.String("format")); f {
			case table.JSON:
				return writeJSON(std.out, entries) // the entries' own fields, not strings
			case table.Text:
				return history.WriteText(std.out, entries)
			case table.Markdown, table.CSV, table.HTML:
				return table.Write(std.out, f, history.Table(entries))
			}
			return usageErr("--format must be text, md, csv, json or html")
		},
	}
}

// historyOf is the history database an argument of runner history names, and the plan whose
// runs to list ("" for all): a plan file's (its output_dir), a run directory's (the output
// directory it sits in, as runner run appends to), or the database file itself.
func historyOf(arg string) (path, plan string, err error) {
	fi, err := os.Stat(arg)
	if err != nil {
		return "", "", usageErr("%s: %v; pass a plan, a run directory or a history database", arg, err)
	}
	if fi.IsDir() {
		p, _, err := rundir.ReadPlan(arg)
		if err != nil {
			return "", "", usageErr("%s is a directory but not a run directory (%v); pass a plan, a run directory or a history database", arg, err)
		}
		return runner.HistoryPath(arg), p.Name, nil
	}
	if strings.HasSuffix(arg, ".toml") {
		p, err := loadPlan(arg)
		if err != nil {
			return "", "", err
		}
		return filepath.Join(p.OutputDir, history.FileName), p.Name, nil
	}
	return arg, "", nil
}

// parseAge reads "30d" (days, which time.ParseDuration lacks) or any Go duration.
func parseAge(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 {
			return 0, errors.New("want a number of days such as 30d, or a duration such as 12h")
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, errors.New("want a number of days such as 30d, or a duration such as 12h")
	}
	return d, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// compareEngines is `runner compare --engines RUN_DIR`: the engines of one run side by side.
func compareEngines(ctx context.Context, c *cli.Command, std stdio, n runner.NightlyOptions, format string) error {
	if n.Baseline != "" {
		return usageErr("--engines compares the engines of one run; it takes no --baseline")
	}
	args, err := positional(c, 1, 1, "RUN_DIR")
	if err != nil {
		return err
	}
	if err := regularInput(args[0], "pass a run directory of a plan with an engine axis"); err != nil {
		return err
	}
	cur, err := perf.Load(args[0], perf.LoadOptions{Profilers: n.Profilers})
	if err != nil {
		return &exitError{code: exitcode.Usage, err: err}
	}
	res, base, next, err := n.CompareEngines(cur, planOf(args[0]))
	if err != nil {
		return &exitError{code: exitcode.Usage, err: err}
	}
	return compare.Write(std.out, format, res, base, next)
}
