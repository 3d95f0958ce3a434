package main

import (
	"context"
	"github.com/urfave/cli/v3"

	"github.com/sglprof/runner/runner"
)

// loadClientCommand is one client process of an LLM cell with [load] clients > 1: the runner
// starts its own binary as `runner load-client SPEC` (hidden; SPEC is the client's share, which
// the runner wrote under the cell's clients/ directory).
func loadClientCommand() *cli.Command {
	return &cli.Command{
		Name:      runner.LoadClientCommand,
		Hidden:    true,
		Usage:     "send one client's share of an LLM cell's load (started by runner run)",
		ArgsUsage: "SPEC",
		Action: func(ctx context.Context, c *cli.Command) error {
			if c.NArg() != 1 {
				return usageErr("usage: runner %s SPEC", runner.LoadClientCommand)
			}
			return runner.RunLoadClient(ctx, c.Args().First())
		},
	}
}
