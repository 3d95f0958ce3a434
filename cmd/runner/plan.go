package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/history"
	"github.com/sglprof/runner/reports/render"
	"github.com/sglprof/runner/runner"
	"github.com/sglprof/runner/runner/exitcode"
)

// planPower states what comparisons of the plan's runs can detect: the unprofiled cells'
// configurations (what runner compare compares by default) with the plan's repeats, and the
// noise of the history database when one exists (read only: a plan creates nothing). It returns
// the database path it read, "" when there was none.
func planPower(ctx context.Context, c *cli.Command, p *plans.Plan, cells []runner.CellLaunch) (*history.Power, string, error) {
	var keys []string
	seen := map[string]bool{}
	for _, cl := range cells {
		if cl.Cell.Profiler == "none" && !seen[cl.Cell.Key] {
			seen[cl.Cell.Key] = true
			keys = append(keys, cl.Cell.Key)
		}
	}
	hpath := c.String("history")
	if hpath == "" {
		hpath = os.Getenv("RUNNER_HISTORY")
	}
	if hpath == "" {
		hpath = filepath.Join(p.OutputDir, history.FileName)
	}
	var db *history.DB
	if _, err := os.Stat(hpath); err == nil {
		if db, err = history.OpenReadOnly(ctx, hpath); err != nil {
			return nil, "", &exitError{code: exitcode.Usage, err: err}
		}
		defer db.Close()
	} else {
		hpath = ""
	}
	n := runner.NightlyOptions{}
	_, bo := n.CompareOptions(p)
	serve := p.Backend.Mode == "serve"
	llm := serve && p.Backend.ModelType == "llm"
	pw, err := history.PlanPower(ctx, db, p.Name, keys, history.HeadlineMetrics(serve, llm), max(p.Matrix.Repeats, 1), bo)
	return pw, hpath, err
}

func planCommand(std stdio) *cli.Command {
	return &cli.Command{
		Name:      "plan",
		Usage:     "validate a plan and print its cells with the exact argv, environment and requests each would run",
		ArgsUsage: "PLAN.toml",
		Description: `Validates PLAN.toml and prints each cell's argv and environment (a serve cell also its
POST /start_profile body and its requests, with one body; a Slurm plan the batch script its
run would submit), then what comparisons of
the plan's runs can detect: per configuration and headline metric, the minimum detectable
change (MDC) of runner compare between two runs (from the plan's repeats and the run-to-run
noise: measured by the history database when it has runs of the plan, else an assumed 2%),
and of --baseline history once the history calibrated it. A metric that cannot see a 10%
change gets a warning that names the repeats that would. Nothing is created or written.`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print JSON for machines"},
			&cli.BoolFlag{Name: "simulate", Usage: "show the argv that run --simulate would use"},
			&cli.StringFlag{Name: "history", Usage: "history database `PATH` whose runs of the plan measure its noise (default: $RUNNER_HISTORY, else history.db in the plan's output_dir; read only)"},
		},
		Action: interruptible(func(ctx context.Context, c *cli.Command) error {
			args, err := positional(c, 1, 1, "PLAN.toml")
			if err != nil {
				return err
			}
			p, err := loadPlan(args[0])
			if err != nil {
				return err
			}
			exe, _ := os.Executable()
			cells, err := runner.Describe(p, runner.Options{Simulate: c.Bool("simulate"), Exe: exe})
			if err != nil {
				return err
			}
			sbatch, err := runner.DescribeSlurm(p, runner.Options{Simulate: c.Bool("simulate"), Exe: exe})
			if err != nil {
				return err
			}
			pw, hpath, err := planPower(ctx, c, p, cells)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				enc := json.NewEncoder(std.out)
				enc.SetIndent("", "  ")
				out := map[string]any{"plan": p.Name, "cells": cells, "detection": pw}
				if parity := runner.CheckParity(p.Expand()); parity != nil {
					out["parity"] = parity
				}
				if sbatch != "" {
					out["sbatch"] = sbatch
				}
				return enc.Encode(out)
			}
			fmt.Fprintf(std.out, "plan %s: %d cells (valid)\n", p.Name, len(cells))
			for _, cl := range cells {
				fmt.Fprintf(std.out, "\n%s  [%s]\n  argv: %s\n", cl.Cell.ID, cl.Cell.Key, shellQuote(cl.Argv))
				for _, k := range sortedEnvKeys(cl.Env) {
					fmt.Fprintf(std.out, "  env:  %s=%s\n", k, shellQuote([]string{cl.Env[k]}))
				}
				if cl.StartProfile != nil {
					b, _ := json.Marshal(cl.StartProfile)
					fmt.Fprintf(std.out, "  POST /start_profile %s (then the measured requests, then POST /stop_profile)\n", b)
				}
				if r := cl.Request; r != nil {
					fmt.Fprintf(std.out, "  requests: %s %s, %s\n    body: %s\n", r.Method, r.Path, requestCounts(r), r.Body)
				}
			}
			if parity := runner.CheckParity(p.Expand()); parity != nil {
				// The same table `runner run` prints before its first cell.
				fmt.Fprintln(std.out)
				if err := render.WriteParity(std.out, parity); err != nil {
					return err
				}
			}
			if sbatch != "" {
				fmt.Fprintf(std.out, "\nsbatch script of the run's job array (slurm/job-1.sbatch):\n")
				for _, line := range strings.Split(strings.TrimRight(sbatch, "\n"), "\n") {
					fmt.Fprintf(std.out, "  %s\n", line)
				}
			}
			return history.WritePowerText(std.out, pw, hpath)
		}),
	}
}

// requestCounts says how many requests a serve cell sends and how fast.
func requestCounts(r *runner.RequestPlan) string {
	parts := []string{fmt.Sprintf("%d warmup", r.Warmup)}
	if r.Duration != "" {
		parts = append(parts, "measured for "+r.Duration)
	} else {
		parts = append(parts, fmt.Sprintf("%d measured", r.Requests))
	}
	if r.Concurrency > 0 {
		parts = append(parts, fmt.Sprintf("concurrency %d", r.Concurrency))
	}
	if r.RequestRate != "" {
		parts = append(parts, "rate "+r.RequestRate+"/s")
	}
	if r.Dataset != "" {
		parts = append(parts, r.Dataset+" dataset")
	}
	return strings.Join(parts, ", ")
}

// shellQuote renders argv for a human to read or paste; the runner itself never uses a shell.
func shellQuote(argv []string) string {
	parts := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r == '-' || r == '_' || r == '.' || r == '/' || r == '=' || r == ',' || r == ':' || r == '+' ||
				(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'))
		}) < 0 {
			parts[i] = a
			continue
		}
		parts[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(parts, " ")
}

func sortedEnvKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
