package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/sglprof/runner/reports/kineto"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/reports/triage"
)

func traceCommand(std stdio) *cli.Command {
	return &cli.Command{
		Name:  "trace",
		Usage: "rewrite torch-profiler traces for viewing in Perfetto",
		Commands: []*cli.Command{
			{
				Name:      "fix",
				Usage:     "move GPU ops that overlap on one stream onto their own lanes so Perfetto shows them",
				ArgsUsage: "IN OUT",
				Flags:     []cli.Flag{forceFlag()},
				Action: func(ctx context.Context, c *cli.Command) error {
					args, err := positional(c, 2, 2, "IN OUT")
					if err != nil {
						return err
					}
					in, err := singleTrace(args[0])
					if err != nil {
						return err
					}
					st, err := kineto.FixFile(ctx, in, args[1], c.Bool("force"))
					if err != nil {
						return rewriteErr(err)
					}
					fmt.Fprintf(std.out, "%s: %d GPU ops on %d tracks, %d moved to %d overlap lanes\n", args[1], st.GPUOps, st.Tracks, st.Moved, st.Lanes)
					for _, w := range st.Warnings {
						fmt.Fprintf(std.err, "warning: %s\n", w)
					}
					return nil
				},
			},
			{
				Name:      "slim",
				Usage:     "keep a time window of a trace (the first N steps or START:END) so a huge trace opens in Perfetto",
				ArgsUsage: "IN OUT",
				Flags: []cli.Flag{
					&cli.IntFlag{Name: "steps", Usage: "keep the first `N` steps (ProfilerStep#, denoising_step_*, step[...])"},
					&cli.StringFlag{Name: "window", Usage: "keep `START:END`, durations from the first event (e.g. 1.5s:2s)"},
					forceFlag(),
				},
				Action: func(ctx context.Context, c *cli.Command) error {
					args, err := positional(c, 2, 2, "IN OUT")
					if err != nil {
						return err
					}
					var opts kineto.SlimOptions
					switch {
					case c.Int("steps") > 0 && c.String("window") != "":
						return usageErr("--steps and --window exclude each other")
					case c.Int("steps") > 0:
						opts.Steps = c.Int("steps")
					case c.String("window") != "":
						a, b, ok := strings.Cut(c.String("window"), ":")
						start, err1 := time.ParseDuration(a)
						end, err2 := time.ParseDuration(b)
						if !ok || err1 != nil || err2 != nil || end <= start || start < 0 {
							return usageErr("--window wants START:END durations with END > START, e.g. 1.5s:2s")
						}
						opts.Window = [2]int64{start.Nanoseconds(), end.Nanoseconds()}
					default:
						return usageErr("give --steps N or --window START:END")
					}
					in, err := singleTrace(args[0])
					if err != nil {
						return err
					}
					st, err := kineto.SlimFile(ctx, in, args[1], opts, c.Bool("force"))
					if err != nil {
						return rewriteErr(err)
					}
					fmt.Fprintf(std.out, "%s: kept %d of %d events (%.3f ms window", args[1], st.Kept, st.Events, float64(st.WindowEnd-st.WindowStart)/1e6)
					if st.Steps > 0 {
						fmt.Fprintf(std.out, ", %d %s steps", st.Steps, st.StepFamily)
					}
					fmt.Fprintln(std.out, ")")
					for _, w := range st.Warnings {
						fmt.Fprintf(std.err, "warning: %s\n", w)
					}
					return nil
				},
			},
		},
	}
}

// forceFlag is trace fix and slim's --force: OUT is written beside and renamed over, so an
// existing file is replaced only when asked (as bundle -o).
func forceFlag() cli.Flag {
	return &cli.BoolFlag{Name: "force", Usage: "replace an existing regular file at OUT"}
}

// rewriteErr makes an output that is the input, or an OUT refused before anything was written
// (not a regular file, existing without --force, no such directory), a usage error (exit 2).
func rewriteErr(err error) error {
	var oe *rundir.OutputError
	if errors.Is(err, kineto.ErrSameFile) || errors.As(err, &oe) {
		return usageErr("%v", err)
	}
	return err
}

// singleTrace accepts a trace file, or a directory (a run cell's traces/) that holds exactly
// one torch-profiler trace.
func singleTrace(path string) (string, error) {
	if err := regularInput(path, "pass a trace file or a directory holding one"); err != nil {
		return "", err
	}
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if !st.IsDir() {
		return path, nil
	}
	in, err := triage.Discover(path, triage.DiscoverOptions{AllRanks: true})
	if err != nil {
		return "", err
	}
	var files []string
	for _, f := range in.Files {
		if f.Format == triage.FormatKineto {
			files = append(files, f.Path)
		}
	}
	if len(files) != 1 {
		return "", usageErr("%s holds %d torch-profiler traces; name the one to rewrite: %s", path, len(files), strings.Join(files, ", "))
	}
	return files[0], nil
}
