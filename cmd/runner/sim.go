package main

import (
	"context"
	"os"

	"github.com/urfave/cli/v3"

	"github.com/sglprof/runner/backends/sim"
)

// simCommand is the hidden entry of the simulators: `runner run --simulate` re-executes the
// runner binary as `runner sim sglang ...` and `runner sim nsys ...`.
func simCommand(std stdio) *cli.Command {
	return &cli.Command{
		Name:            "sim",
		Hidden:          true,
		SkipFlagParsing: true,
		Usage:           "run a simulator: sim sglang ARGS... | sim nsys ARGS...",
		Action: func(ctx context.Context, c *cli.Command) error {
			args := c.Args().Slice()
			if len(args) == 0 {
				return usageErr("usage: runner sim sglang|nsys ARGS...")
			}
			code, ok := sim.Main(ctx, args, sim.EnvMap(os.Environ()), std.out, std.err)
			if !ok {
				return usageErr("unknown simulator %q: want sglang or nsys", args[0])
			}
			if code != 0 {
				return &exitError{code: code}
			}
			return nil
		},
	}
}
