package main

import (
	"context"
	"fmt"
	"os"

	"github.com/urfave/cli/v3"

	"github.com/sglprof/runner/runner"
)

// execCellCommand is what a Slurm array task runs on its node: one cell of an existing run
// directory, its result.json written into the shared directory. It is documented (docs/
// executors.md) but hidden from the command list, since people run it only through Slurm.
func execCellCommand(std stdio) *cli.Command {
	return &cli.Command{
		Name:      "exec-cell",
		Hidden:    true,
		Usage:     "run one cell of a run directory (what a Slurm array task runs)",
		ArgsUsage: "RUN_DIR CELL_ID",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "simulate", Usage: "use the built-in simulators of sglang and nsys"},
			&cli.BoolFlag{Name: "no-triage", Usage: "do not triage the cell's traces"},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			args, err := positional(c, 2, 2, "RUN_DIR CELL_ID")
			if err != nil {
				return err
			}
			log, err := logger(c, std.err)
			if err != nil {
				return err
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("exec-cell: cannot find the runner's own binary: %w", err)
			}
			res, err := runner.ExecCell(ctx, args[0], args[1], runner.Options{
				Simulate: c.Bool("simulate"), Exe: exe, Env: os.Environ(), Out: std.out, Logger: log,
				NoTriage: c.Bool("no-triage"), Args: os.Args,
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(std.out, "%s %s\n", res.Verdict, res.ID)
			return nil
		},
	}
}
