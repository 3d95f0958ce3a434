package main

import (
	"context"
	"fmt"
	"runtime"

	"github.com/urfave/cli/v3"

	"github.com/sglprof/runner/runner"
)

func versionCommand(std stdio) *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the runner's version",
		Action: func(ctx context.Context, c *cli.Command) error {
			if _, err := positional(c, 0, 0, ""); err != nil {
				return err
			}
			fmt.Fprintln(std.out, versionLine())
			return nil
		},
	}
}

// versionLine is what `runner version` and `runner --version` both print.
func versionLine() string {
	return fmt.Sprintf("runner %s (%s, %s/%s)", runner.RunnerVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func init() {
	// --version prints the same line as the version command.
	cli.VersionPrinter = func(c *cli.Command) { fmt.Fprintln(c.Root().Writer, versionLine()) }
}
