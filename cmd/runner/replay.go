package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v3"
	"golang.org/x/term"

	"github.com/sglprof/runner/runner"
)

func replayCommand(std stdio) *cli.Command {
	return &cli.Command{
		Name:      "replay",
		Usage:     "run the cells of a bundle again and say whether the result reproduced",
		ArgsUsage: "BUNDLE.tar.gz",
		Description: `Extracts the bundle safely into a new directory (refusing absolute paths, "..", links,
devices and archives that expand too far), prints how this machine's environment differs from
the bundle's, runs the bundled cells again with the same argv and environment, and prints per
cell whether the verdict and the timings reproduced, e.g.

  000-unknown-model-default-s0-none-r1: reproduced: invalid (diffusers-fallback)

The outcome is also written to DIR/replay.json.

Everything in a bundle is untrusted, its claim to be simulated included. Before anything
runs, replay prints what the bundle's plan would run, set and contact on this machine: the
environment probes and every command, the variables of [backend.env] (loader and interpreter
variables such as LD_PRELOAD and PYTHONPATH marked DANGEROUS) and those of its manifest, the
Slurm options and setup lines, every network target (backend.url, a fixed host or port), and
every file of the bundle that is a program or library or that the plan names. Then it asks;
--yes runs it all without asking, and without a terminal and --yes it runs nothing (exit 2).
A bundle of a simulated run replays with the simulators, and asks only when its plan sets,
runs or contacts any of the above. --simulate runs the built-in simulators only: it drops
[backend.env], backend.url, a fixed host or port, the Slurm executor (options and setup
lines) and the manifest's variables, says what it dropped, and asks nothing. When plan.toml's
commands differ from the argv the bundle recorded in command.json (an edited bundle), replay
refuses unless --trust-plan. A failed replay removes the directory it created.

Redacted secrets are not in the bundle: export them before replaying (replay names the missing
ones). Exit status: 0 everything reproduced, 3 a verdict did not, 4 the verdicts did but a
timing moved beyond its tolerance, 1 or 2 the replay itself failed.`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "simulate", Usage: "run the built-in simulators of sglang and nsys only, dropping everything of the bundle's plan that sets, runs or contacts anything (nothing is asked)"},
			&cli.StringFlag{Name: "cells", Usage: "only these bundled cells: comma-separated `IDs`"},
			&cli.StringFlag{Name: "output", Usage: "extract and run in the new directory `DIR` (default replay-<bundle name>, then -2, -3, ... when taken)"},
			&cli.BoolFlag{Name: "no-bundle-env", Usage: "keep this machine's CUDA_/SGLANG_/NCCL_/... variables instead of the bundle's"},
			&cli.BoolFlag{Name: "no-progress", Usage: "no progress lines"},
			&cli.BoolFlag{Name: "yes", Usage: "run what the replay lists (commands, variables, setup lines, network targets) without asking; read the list first"},
			&cli.BoolFlag{Name: "trust-plan", Usage: "run plan.toml's commands even where they differ from the argv the bundle recorded"},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			args, err := positional(c, 1, 1, "BUNDLE.tar.gz")
			if err != nil {
				return err
			}
			if err := regularInput(args[0], "pass the .tar.gz file runner bundle wrote"); err != nil {
				return err
			}
			log, err := logger(c, std.err)
			if err != nil {
				return err
			}
			exe, err := os.Executable()
			if err != nil && c.Bool("simulate") {
				return fmt.Errorf("--simulate: cannot find the runner's own binary: %w", err)
			}
			opts := runner.ReplayOptions{
				Output:      c.String("output"),
				Cells:       splitList(c.String("cells")),
				Simulate:    c.Bool("simulate"),
				Exe:         exe,
				Env:         os.Environ(),
				Logger:      log,
				Args:        os.Args,
				Out:         std.out,
				NoBundleEnv: c.Bool("no-bundle-env"),
				Yes:         c.Bool("yes"),
				TrustPlan:   c.Bool("trust-plan"),
			}
			// Asking needs a person at a terminal; otherwise a real replay needs --yes.
			if f, ok := std.in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
				in := bufio.NewReader(std.in)
				opts.Confirm = func(prompt string) (bool, error) {
					fmt.Fprint(std.err, prompt)
					line, err := in.ReadString('\n')
					if err != nil && line == "" {
						return false, err
					}
					a := strings.ToLower(strings.TrimSpace(line))
					return a == "y" || a == "yes", nil
				}
			}
			if !c.Bool("no-progress") {
				opts.Progress = newLineProgress(std.err)
			}
			if opts.Simulate {
				fmt.Fprintln(std.err, simulationBanner)
			}
			res, err := runner.Replay(ctx, args[0], opts)
			if err != nil {
				return err
			}
			if res.ExitCode != 0 {
				return &exitError{code: res.ExitCode}
			}
			return nil
		},
	}
}
