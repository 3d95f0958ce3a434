package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/dustin/go-humanize"
	"github.com/urfave/cli/v3"

	"github.com/sglprof/runner/runner"
	"github.com/sglprof/runner/runner/bundle"
)

func bundleCommand(std stdio) *cli.Command {
	return &cli.Command{
		Name:      "bundle",
		Usage:     "pack a run (or one cell) into one redacted .tar.gz for a bug report, or print an issue body",
		ArgsUsage: "RUN_DIR|CELL_DIR",
		Description: `Writes one .tar.gz with the plan, cells.json, manifest.json and, for each selected cell,
command.json, log.txt, result.json, the perf dump, the triage outputs, the nsys export's
summaries (CSV) and a slimmed trace (the first steps; --with-traces for the whole traces and
nsys reports), plus a README.md: the symptom, the environment, the exact commands and how to
reproduce with ` + "`runner replay FILE`" + `.

Secrets are redacted before anything is written: values of secret-looking variables, Hugging
Face tokens, bearer tokens, credentials in URLs, AWS keys and the plan's [bundle] redact
patterns, in every text file. The README lists what was redacted (names and kinds, never values).

The run's dataset file (a sharegpt plan's dataset_path) goes in as dataset/<name>, redacted,
and replay reads it; a file over --max-dataset-size is left out.

--max-size is enforced by dropping traces first, then cutting logs to their head and tail, then
dropping the dataset; the README and the message say what was left out.

--issue prints a Markdown issue body (symptom, plan excerpt, commands, environment, top kernels,
comparison) to stdout instead, ready to paste into a GitHub issue.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write the bundle to `FILE` (default <plan>-<run>.bundle.tar.gz here)"},
			&cli.BoolFlag{Name: "force", Usage: "replace an existing bundle file at -o"},
			&cli.BoolFlag{Name: "with-traces", Usage: "include the full traces and nsys reports instead of slimmed traces"},
			&cli.StringFlag{Name: "max-size", Value: "50MB", Usage: "largest bundle to write, e.g. 50MB or 1GiB"},
			&cli.StringFlag{Name: "max-dataset-size", Value: "16MiB", Usage: "largest dataset file (load.dataset_path) to include, e.g. 16MiB; a bigger one is left out"},
			&cli.StringFlag{Name: "cells", Usage: "only these cells: comma-separated `IDs`"},
			&cli.IntFlag{Name: "trace-steps", Value: bundle.DefaultTraceSteps, Usage: "steps a slimmed trace keeps"},
			&cli.BoolFlag{Name: "issue", Usage: "print a Markdown issue body to stdout instead of writing a bundle"},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			args, err := positional(c, 1, 1, "RUN_DIR|CELL_DIR")
			if err != nil {
				return err
			}
			log, err := logger(c, std.err)
			if err != nil {
				return err
			}
			cells := splitList(c.String("cells"))
			if c.Bool("issue") {
				// The issue body is only read and printed: Ctrl-C ends it even inside a read.
				body, err := interruptibly(ctx, func() (string, error) {
					return bundle.Issue(args[0], bundle.IssueOptions{Cells: cells, Env: os.Environ()})
				})
				if err != nil {
					return usageOr(err)
				}
				_, err = fmt.Fprint(std.out, body)
				return err
			}
			size, err := humanize.ParseBytes(c.String("max-size"))
			if err != nil || size == 0 {
				return usageErr("--max-size %q: want a size such as 50MB or 1GiB", c.String("max-size"))
			}
			dsSize, err := humanize.ParseBytes(c.String("max-dataset-size"))
			if err != nil || dsSize == 0 {
				return usageErr("--max-dataset-size %q: want a size such as 16MiB or 100MB", c.String("max-dataset-size"))
			}
			if c.Int("trace-steps") < 1 {
				return usageErr("--trace-steps must be at least 1")
			}
			res, err := bundle.Create(ctx, args[0], bundle.Options{
				Output:     c.String("output"),
				Force:      c.Bool("force"),
				Cells:      cells,
				WithTraces: c.Bool("with-traces"),
				TraceSteps: c.Int("trace-steps"),
				MaxSize:    int64(size),
				MaxDataset: int64(dsSize),
				Env:        os.Environ(),
				Logger:     log,
				// bundle.json records the version of the runner that made the bundle.
				RunnerVersion: runner.RunnerVersion(),
			})
			if err != nil {
				return usageOr(err)
			}
			m := res.Metadata
			fmt.Fprintf(std.out, "bundle: %s (%s, %d cell(s), traces: %s)\n", res.Path, humanize.IBytes(uint64(res.Bytes)), len(m.Cells), m.Traces)
			for _, w := range m.Warnings {
				fmt.Fprintf(std.err, "runner: warning: %s\n", w)
			}
			for _, line := range omissionLines(m.Omitted) {
				fmt.Fprintln(std.out, line)
			}
			if len(m.Redactions) > 0 {
				var parts []string
				for _, r := range m.Redactions {
					parts = append(parts, fmt.Sprintf("%s (%s) ×%d", r.Name, r.Kind, r.Count))
				}
				fmt.Fprintf(std.out, "redacted: %s\n", strings.Join(parts, ", "))
			} else {
				fmt.Fprintln(std.out, "redacted: nothing secret-looking was found")
			}
			fmt.Fprintf(std.out, "reproduce with: runner replay %s\n", res.Path)
			return nil
		},
	}
}

// usageOr maps a bundle error about the input (missing directory, unknown cell, bad
// pattern) to exit 2; I/O failures stay exit 1.
func usageOr(err error) error {
	msg := err.Error()
	if strings.Contains(msg, "give a run directory") || strings.Contains(msg, "has no cell") || strings.Contains(msg, "redact pattern") || strings.Contains(msg, "--max-size") {
		return &exitError{code: 2, err: err}
	}
	return err
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// omissionLines is one line per kind of left-out file (the same reason), in the order each
// kind first appears: a run of twelve nsys cells says once that its reports were left out,
// naming the first and counting the rest. The bundle's bundle.json lists every file.
func omissionLines(omitted []bundle.Omission) []string {
	var order []string
	byReason := map[string][]string{}
	for _, o := range omitted {
		if _, ok := byReason[o.Reason]; !ok {
			order = append(order, o.Reason)
		}
		byReason[o.Reason] = append(byReason[o.Reason], o.Path)
	}
	lines := make([]string, 0, len(order))
	for _, r := range order {
		paths := byReason[r]
		if len(paths) == 1 {
			lines = append(lines, fmt.Sprintf("left out: %s: %s", paths[0], r))
			continue
		}
		lines = append(lines, fmt.Sprintf("left out: %d files (%s and %d more, listed in %s): %s", len(paths), paths[0], len(paths)-1, bundle.MetadataFile, r))
	}
	return lines
}
