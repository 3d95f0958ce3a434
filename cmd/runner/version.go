package main

import (
	"fmt"
	"runtime"

	"github.com/urfave/cli/v2"

	"github.com/sglprof/runner/runner"
)

func versionCommand(io stdio) *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the runner's version",
		Action: func(c *cli.Context) error {
			if _, err := positional(c, 0, 0, ""); err != nil {
				return err
			}
			fmt.Fprintf(io.out, "runner %s (%s, %s/%s)\n", runner.RunnerVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}
