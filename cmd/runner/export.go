package main

import (
	"context"
	"slices"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/sglprof/runner/runner"
)

func exportCommand(std stdio) *cli.Command {
	return &cli.Command{
		Name:      "export",
		Usage:     "write a cell's or a run's LLM results in another tool's format",
		ArgsUsage: "CELL_DIR | RUN_DIR",
		Description: `Writes the result of one LLM serve cell (or of every LLM serve cell of a run directory, one
line each, in the run's order) to stdout in another tool's format.
--format bench_serving writes one line of SGLang bench_serving's --output-file JSONL
(mean_ttft_ms, p99_itl_ms, output_throughput, ...), so dashboards that read
bench_serving's results read the runner's. --format pytorch writes one JSON array of the
PyTorch OSS benchmark database records vLLM's serve benchmark writes (one per metric and
cell: benchmark.name, benchmark.extra_info.args, model.name, metric.name,
metric.benchmark_values, metric.extra_info). --format gab-smaller and gab-bigger write
github-action-benchmark's customSmallerIsBetter (latencies, ms) and customBiggerIsBetter
(throughputs) entries ({name, unit, value, range, extra}) for the whole run.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "format", Value: "bench_serving", Usage: "output format: " + strings.Join(runner.ExportFormats, ", ")},
		},
		// It writes only stdout: interruptible ends it at Ctrl-C even inside a read.
		Action: interruptible(func(ctx context.Context, c *cli.Command) error {
			args, err := positional(c, 1, 1, "CELL_DIR | RUN_DIR")
			if err != nil {
				return err
			}
			if f := c.String("format"); !slices.Contains(runner.ExportFormats, f) {
				return usageErr("--format %q: use one of %s", f, strings.Join(runner.ExportFormats, ", "))
			}
			return runner.Export(std.out, c.String("format"), args[0])
		}),
	}
}
