package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner"
)

// runCommand is runner run: every cell of a plan, or the rest of an earlier run.
// simulationBanner is what every command that runs simulated cells prints first, so that no
// simulated timing is ever read as a measurement.
const simulationBanner = "SIMULATION: sglang, vLLM and nsys are replaced by the runner's built-in simulators; no GPU is used and the timings are not measurements."

func runCommand(std stdio) *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run every cell of a plan and write a run directory",
		ArgsUsage: "PLAN.toml",
		Description: `Runs each cell of the plan as one process (sglang generate, optionally under nsys
profile), judges it (ok, invalid, failed, timeout, interrupted), exports and triages its
traces, and prints a summary.
With [backend] mode = "serve" it starts a server instead (sglang serve, or vLLM-Omni with
kind = "vllm-omni"; one per model and server arguments, or per cell with restart =
"per-cell"; [backend] url attaches to a running one), waits until it is ready, and per cell
sends the [load] requests (diffusion images or videos; LLM requests measured as
bench_serving measures them: TTFT, TPOT, ITL, throughput), profiling them with a
/start_profile window (torch) or nsys around the server. runner plan shows every request. Exit status: 0 all cells ok, 1 runner error, 2 plan or usage
error, 3 a cell was invalid or failed, 4 a regression against --baseline, 130 interrupted
(Ctrl-C), 143 stopped by SIGTERM.
Every run is appended to the history database (--history, $RUNNER_HISTORY, or history.db
in the output directory) unless --no-history.

--simulate replaces sglang and nsys with the runner's built-in simulators: nothing runs on a
GPU and the timings are made up. Use it to try a plan or the tool on a machine without a GPU.`,
		Flags: append([]cli.Flag{
			&cli.BoolFlag{Name: "simulate", Usage: "use the built-in simulators of sglang and nsys instead of the real programs (no GPU needed; timings are not measurements)"},
			&cli.StringFlag{Name: "resume", Usage: "finish the cells of an earlier run directory `DIR` that have no result (and re-run interrupted ones)"},
			&cli.StringFlag{Name: "output", Usage: "put the run under `DIR` instead of the plan's output_dir"},
			&cli.BoolFlag{Name: "no-triage", Usage: "do not triage the traces of each cell"},
			&cli.BoolFlag{Name: "no-progress", Usage: "no progress bar or progress lines"},
			// History and baseline comparison at the end of the run.
			&cli.StringFlag{Name: "baseline", Usage: "end with a comparison against `history` (rolling median of the history database) or a run directory; a regression exits 4"},
			&cli.BoolFlag{Name: "no-history", Usage: "do not append this run to the history database"},
			&cli.StringFlag{Name: "executor", Usage: "where cells run, overriding the plan's [executor] kind: `KIND` is local or slurm"},
			&cli.BoolFlag{Name: "detach", Usage: "with the Slurm executor: return once the job array is submitted; runner run --resume DIR waits for it and writes the summary"},
		}, comparisonFlags()...),
		Action: func(ctx context.Context, c *cli.Command) error { return runAction(ctx, c, std) },
	}
}

// runAction runs the plan named on the command line (or resumes --resume DIR) and turns the
// summary into the exit status.
func runAction(ctx context.Context, c *cli.Command, std stdio) error {
	log, err := logger(c, std.err)
	if err != nil {
		return err
	}
	opts, err := runOptions(ctx, c, std, log)
	if err != nil {
		return err
	}
	if opts.Simulate {
		fmt.Fprintln(std.err, simulationBanner)
	}
	var sum *rundir.Summary
	if dir := c.String("resume"); dir != "" {
		if _, err := positional(c, 0, 0, ""); err != nil {
			return usageErr("--resume DIR takes no plan: the plan is read from DIR/plan.toml")
		}
		sum, err = runner.Resume(ctx, dir, opts)
	} else {
		args, perr := positional(c, 1, 1, "PLAN.toml")
		if perr != nil {
			return perr
		}
		p, lerr := loadPlan(args[0])
		if lerr != nil {
			return lerr
		}
		sum, err = runner.Run(ctx, p, opts)
	}
	if err != nil {
		return err
	}
	if sum.Detached {
		return nil
	}
	if sum.ExitCode != 0 {
		return &exitError{code: sum.ExitCode}
	}
	return nil
}

// runOptions turns the flags and environment of runner run into runner.Options; a simulated
// run given to --resume resumes simulated (its manifest says so, the user need not).
func runOptions(ctx context.Context, c *cli.Command, std stdio, log *slog.Logger) (runner.Options, error) {
	exe, err := os.Executable()
	if err != nil && c.Bool("simulate") {
		return runner.Options{}, fmt.Errorf("--simulate: cannot find the runner's own binary: %w", err)
	}
	opts := runner.Options{
		OutputDir: c.String("output"),
		Simulate:  c.Bool("simulate"),
		Exe:       exe,
		Env:       os.Environ(),
		Out:       std.out,
		Logger:    log,
		NoTriage:  c.Bool("no-triage"),
		Args:      os.Args,
		Detach:    c.Bool("detach"),
	}
	if v := os.Getenv("RUNNER_SLURM_POLL"); v != "" {
		// Tests poll their one-node cluster faster than the default.
		if opts.SlurmPoll, err = time.ParseDuration(v); err != nil {
			return opts, usageErr("RUNNER_SLURM_POLL=%q: want a duration such as 2s", v)
		}
	}
	switch k := c.String("executor"); k {
	case "", "local", "slurm":
		opts.Executor = k
	default:
		return opts, usageErr("--executor %q: want local or slurm", k)
	}
	if opts.Nightly, err = nightlyOptions(ctx, c); err != nil {
		return opts, err
	}
	if c.Bool("no-history") {
		opts.Nightly.History = "off"
	}
	switch {
	case c.Bool("no-progress"):
	case isTerminal(std.err) && os.Getenv("CI") == "":
		opts.Progress = newBarProgress(std.err)
	default:
		opts.Progress = newLineProgress(std.err)
	}
	if dir := c.String("resume"); dir != "" && !opts.Simulate && simulatedRun(dir) {
		if exe == "" {
			return opts, fmt.Errorf("%s is a simulated run: cannot find the runner's own binary to simulate with", dir)
		}
		opts.Simulate = true
		fmt.Fprintf(std.err, "runner: %s was a simulated run (its manifest.json says so); resuming it simulated\n", dir)
	}
	return opts, nil
}

// simulatedRun reports whether the run directory's manifest.json records a simulated run.
func simulatedRun(dir string) bool {
	m, err := rundir.ReadManifest(dir)
	return err == nil && m.Simulated
}
