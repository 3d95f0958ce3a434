package main

import (
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sglprof/runner/backends/sim"
)

// simCommand is the hidden entry of the simulators: `runner run --simulate` re-executes the
// runner binary as `runner sim sglang ...` and `runner sim nsys ...`.
func simCommand(io stdio) *cli.Command {
	return &cli.Command{
		Name:            "sim",
		Hidden:          true,
		SkipFlagParsing: true,
		Usage:           "run a simulator: sim sglang ARGS... | sim nsys ARGS...",
		Action: func(c *cli.Context) error {
			args := c.Args().Slice()
			if len(args) == 0 {
				return usageErr("usage: runner sim sglang|nsys ARGS...")
			}
			env := environMap(os.Environ())
			var code int
			switch args[0] {
			case "sglang":
				code = sim.SGLang(c.Context, args[1:], env, io.out, io.err)
			case "nsys":
				code = sim.NSys(c.Context, args[1:], env, io.out, io.err)
			default:
				return usageErr("unknown simulator %q: want sglang or nsys", args[0])
			}
			if code != 0 {
				return &exitError{code: code}
			}
			return nil
		},
	}
}

func environMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}
