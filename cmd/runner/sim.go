package main

import (
	"context"
	"os"
	"runtime/debug"

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
			simGCPolicy()
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

// simGCPolicy lets a simulator's heap grow to five times what it holds before collecting (a
// simulated nsys holds a whole capture: the default spent about a quarter of a simulated run's
// CPU collecting), within a soft limit of 1 GiB (a simulator whose live heap nears that collects
// more often than the default would; the README's example peaks under 100 MB). A simulator
// stands in for sglang or nsys and measures nothing, so its collections only cost time.
func simGCPolicy() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(1 << 30)
	}
}
