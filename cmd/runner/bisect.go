package main

import (
	"context"
	"fmt"

	"time"

	"github.com/urfave/cli/v3"

	"github.com/sglprof/runner/runner"
)

func bisectCommand(std stdio) *cli.Command {
	return &cli.Command{
		Name:      "bisect",
		Usage:     "find the backend commit that changed a plan's measurement",
		ArgsUsage: "PLAN.toml",
		Description: `Walks the first-parent chain of --repo from --good to --bad (default HEAD). For each
commit it visits it checks the commit out, detached, in a worktree of its own (the checkout in
--repo, its HEAD, index and uncommitted files are never touched; hooks do not run), runs
--install there (sh -c, log kept, --install-timeout), and runs the plan's cells of one
configuration (--config KEY, the configuration of --cell ID, the plan's only one, or the one the
history's latest regression names) through the configured executor. In [backend] env values
and backend.command, {worktree} is replaced by the step's worktree path.

Each commit is judged with the comparison of runner compare (Welch's t-test on per-run values,
the plan's tolerances, --tolerance): bad when it regressed against the good endpoint and the bad
endpoint is no regression against it, good the other way round. A commit that is neither gets
another --repeats, up to --max-repeats, and is then set aside; a commit whose install or cells
fail is skipped, as git bisect skip does. When the endpoints themselves do not differ, no
commit is named.

Every step is kept (a run directory under <output>/<plan>/bisect/, a row in the history
database): a second bisection of the same plan, configuration and install command measures
nothing it already measured, and an interrupted one resumes.

--from-history takes the endpoints from the history: the backend commits of the run where the
latest regression's step change began and of the run before it.

Exit status: 0 a verdict (a first bad commit, candidates, or endpoints that do not differ),
1 runner error, 2 usage error (a revision that is not a commit, a bad range, a plan error),
130 interrupted (Ctrl-C), 143 stopped by SIGTERM; the worktree is removed on every path.`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "repo", Value: ".", Usage: "the backend's git repository `DIR`"},
			&cli.StringFlag{Name: "good", Usage: "a commit, branch or tag `REV` known to be good"},
			&cli.StringFlag{Name: "bad", Usage: "a `REV` known to be bad (default HEAD)"},
			&cli.BoolFlag{Name: "from-history", Usage: "take the good and bad commits (and the configuration) from the history's latest regression"},
			&cli.StringFlag{Name: "install", Usage: "shell `COMMAND` run in each step's worktree before its cells, such as 'pip install -e \"python\"'"},
			&cli.DurationFlag{Name: "install-timeout", Value: runner.DefaultInstallTimeout, Usage: "stop an install command after this long and skip its commit"},
			&cli.StringFlag{Name: "cell", Usage: "bisect the configuration of cell `ID`"},
			&cli.StringFlag{Name: "config", Usage: "bisect configuration `KEY`"},
			&cli.IntFlag{Name: "repeats", Usage: "repeats of each commit's first batch (at least 2)", DefaultText: "the plan's repeats, at least 2"},
			&cli.IntFlag{Name: "max-repeats", Usage: "repeats an undecided commit may reach before it is set aside", DefaultText: "3 × --repeats"},
			&cli.BoolFlag{Name: "simulate", Usage: "use the built-in simulators of sglang and nsys instead of the real programs"},
			&cli.StringFlag{Name: "output", Usage: "keep the steps under `DIR` instead of the plan's output_dir"},
			&cli.BoolFlag{Name: "no-triage", Usage: "do not triage the traces of each cell"},
			&cli.BoolFlag{Name: "no-progress", Usage: "no progress lines"},
			&cli.BoolFlag{Name: "no-history", Usage: "keep no cache of the steps in the history database"},
			&cli.BoolFlag{Name: "retry-skipped", Usage: "try again the commits the cache holds as skipped (their install or cells failed)"},
			&cli.StringFlag{Name: "executor", Usage: "where cells run, overriding the plan's [executor] kind: `KIND` is local or slurm"},
			&cli.StringFlag{Name: "format", Value: "text", Usage: "output format: text or json"},
		}, bisectComparisonFlags()...),
		Action: func(ctx context.Context, c *cli.Command) error { return bisectAction(ctx, c, std) },
	}
}

func bisectAction(ctx context.Context, c *cli.Command, std stdio) error {
	log, err := logger(c, std.err)
	if err != nil {
		return err
	}
	format := c.String("format")
	if format != "text" && format != "json" {
		return usageErr("--format %q: use text or json", format)
	}
	args, err := positional(c, 1, 1, "PLAN.toml")
	if err != nil {
		return err
	}
	if c.Bool("from-history") && (c.IsSet("good") || c.IsSet("bad")) {
		return usageErr("--from-history takes --good and --bad from the history; pass either it or them")
	}
	if c.Int("repeats") < 0 || c.Int("max-repeats") < 0 || c.Duration("install-timeout") < 0 {
		return usageErr("--repeats, --max-repeats and --install-timeout must not be negative")
	}
	if c.IsSet("cell") && c.IsSet("config") {
		return usageErr("pass --cell or --config, not both")
	}
	p, err := loadPlan(args[0])
	if err != nil {
		return err
	}
	opts, err := runOptions(ctx, c, std, log)
	if err != nil {
		return err
	}
	opts.Out = std.err
	if opts.Simulate {
		fmt.Fprintln(std.err, simulationBanner)
	}
	bo := runner.BisectOptions{
		Repo: c.String("repo"), Good: c.String("good"), Bad: c.String("bad"), FromHistory: c.Bool("from-history"),
		Install: c.String("install"), InstallTimeout: c.Duration("install-timeout"),
		Cell: c.String("cell"), Config: c.String("config"),
		Repeats: c.Int("repeats"), MaxRepeats: c.Int("max-repeats"),
		RetrySkipped: c.Bool("retry-skipped"),
		Run:          opts, Nightly: opts.Nightly,
	}
	if bo.InstallTimeout == 0 {
		bo.InstallTimeout = runner.DefaultInstallTimeout
	}
	if !c.Bool("no-progress") {
		start := time.Now()
		bo.Note = func(line string) {
			fmt.Fprintf(std.err, "%s [%s]\n", line, time.Since(start).Round(time.Second))
		}
	}
	rep, err := runner.Bisect(ctx, p, bo)
	if err != nil {
		return err
	}
	if format == "json" {
		return rep.WriteJSON(std.out)
	}
	return rep.WriteText(std.out)
}

// bisectComparisonFlags are the comparison flags that apply to a bisection: its comparisons are
// of runs (the history baseline's --baseline-runs and --consecutive do not apply) between
// builds on one machine (--ignore-env has nothing to ignore).
func bisectComparisonFlags() []cli.Flag {
	var out []cli.Flag
	for _, f := range comparisonFlags() {
		switch f.Names()[0] {
		case "baseline-runs", "consecutive", "ignore-env":
			continue
		}
		out = append(out, f)
	}
	return out
}
