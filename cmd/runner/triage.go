package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"

	"github.com/urfave/cli/v3"

	"github.com/sglprof/runner/nsys/nsysdb"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/render/table"
	"github.com/sglprof/runner/reports/triage"
	"github.com/sglprof/runner/runner/analysis"
	"github.com/sglprof/runner/runner/exitcode"
)

func triageCommand(std stdio) *cli.Command {
	return &cli.Command{
		Name:      "triage",
		Usage:     "kernel, overlap and fusion tables of a torch-profiler trace or nsys export",
		ArgsUsage: "FILE|DIR | --diff BASE NEW",
		Description: `FILE is a Kineto trace (.json or .json.gz, detected by content), an nsys SQLite
export, or an nsys report (.nsys-rep, exported to SQLite beside it with the nsys on PATH);
DIR is a trace directory (SGLang, SGLang diffusion or vLLM-Omni naming) or a run cell of
runner run. Two-trace mode: --mapping DIR (graph-off trace, Python attribution) --formal DIR
(graph-on trace, times) and no FILE|DIR.

--diff BASE NEW triages two inputs of the same kind (torch against torch, nsys against nsys;
each anything FILE|DIR accepts) and shows per stage the kernels ranked by how much their total
time changed, with both totals, launch counts and mean durations, the kernels of one side only
(added, removed), the fusion rows whose status changed and how much of the stage's change the
rows shown explain. Kernels are matched by name, then by a normalised name (template
arguments, hashes and numeric suffixes dropped), shown as "≈ base: NAME". --cutoff hides
kernels whose change is under that share of the stage's kernel time; JSON ("diff" beside
NEW's own triage) and CSV list every kernel.

For nsys inputs the three tables are followed by the NVTX range, memory operation and CUDA
API tables (JSON keys "nvtx", "memory_ops", "api"), and a kernel without a Python site shows
its NVTX scope (the innermost NVTX range around its launch, numbers folded to N) as location.
--stats prints nsys stats' cuda_gpu_kern_sum, cuda_api_sum and nvtx_sum instead.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "format", Value: "text", Usage: "text, md, json or csv"},
			&cli.FloatFlag{Name: "cutoff", Value: triage.DefaultCutoff, Usage: "hide rows below this share in `PERCENT` (0 shows all)"},
			&cli.IntFlag{Name: "rank", Value: -1, Usage: "analyse rank `N`", DefaultText: "the lowest rank present"},
			&cli.BoolFlag{Name: "all-ranks", Usage: "analyse every rank"},
			&cli.IntFlag{Name: "device", Value: -1, Usage: "analyse GPU `N`", DefaultText: "the one with the most kernel time"},
			&cli.StringFlag{Name: "mapping", Usage: "graph-off trace `DIR` for Python attribution (two-trace mode)"},
			&cli.StringFlag{Name: "formal", Usage: "graph-on trace `DIR` for times (two-trace mode)"},
			&cli.BoolFlag{Name: "force", Usage: "triage a run cell even when it is marked invalid"},
			&cli.StringFlag{Name: "nvtx-stage", Usage: "nsys inputs: the NVTX ranges whose name matches `REGEX` are the stages (each kernel goes to the innermost match around its launch). Default: the stage rules of torch traces (SGLang diffusion stage ranges such as DenoisingStage, denoising_step_N ranges as DenoisingStage, LLM step[EXTEND|DECODE] ranges), else one stage 'all'"},
			&cli.BoolFlag{Name: "kernels-only", Usage: "nsys exports: only the kernel and fusion tables, from SQL per-name sums (memory flat in the number of kernels; for exports too large for the full triage)"},
			&cli.BoolFlag{Name: "diff", Usage: "kernel diff of two inputs: runner triage --diff BASE NEW"},
			&cli.BoolFlag{Name: "stats", Usage: "nsys inputs: print the nsys stats summaries cuda_gpu_kern_sum, cuda_api_sum and nvtx_sum with nsys's headers (CSV with --format csv, as JSON rows with --format json, text otherwise) instead of the triage"},
		},
		Action: interruptible(func(ctx context.Context, c *cli.Command) error { return triageAction(ctx, c, std) }),
	}
}

// triageAction checks the flags, resolves the input (one FILE|DIR or the two-trace pair) and
// prints the nsys stats, the kernels-only tables or the full triage.
func triageAction(ctx context.Context, c *cli.Command, std stdio) error {
	limitMemory()
	log, err := logger(c, std.err)
	if err != nil {
		return err
	}
	format := c.String("format")
	dopts, topts, nopts, err := triageOptions(ctx, c, format, log)
	if err != nil {
		return err
	}
	if c.Bool("diff") {
		return triageDiff(ctx, c, std, format, dopts, topts, nopts, log)
	}
	root, err := triageRoot(ctx, c, std, dopts, &topts, log)
	if err != nil {
		return err
	}
	if c.Bool("stats") {
		return printStats(ctx, c, std, root, dopts, format, log)
	}
	if c.Bool("kernels-only") {
		if c.Bool("stats") || topts.Mapping != nil {
			return usageErr("--kernels-only takes one nsys export, without --stats or two-trace mode")
		}
		rep, err := analysis.TriageKernelsOnly(ctx, root, topts)
		if err != nil {
			return err
		}
		return triage.Render(std.out, rep, format, c.Float("cutoff"))
	}
	rep, err := analysis.TriageNsys(ctx, root, dopts, topts, nopts)
	if err != nil {
		return err
	}
	return triage.Render(std.out, rep, format, c.Float("cutoff"))
}

// triageOptions validates the triage flags that need no input and turns them into the
// discovery, triage and nsys options.
func triageOptions(ctx context.Context, c *cli.Command, format string, log *slog.Logger) (triage.DiscoverOptions, triage.Options, analysis.NsysOptions, error) {
	var (
		dopts triage.DiscoverOptions
		topts triage.Options
		nopts analysis.NsysOptions
		err   error
	)
	switch format {
	case "text", "md", "json", "csv":
	default:
		return dopts, topts, nopts, usageErr("--format must be text, md, json or csv, not %q", format)
	}
	if co := c.Float("cutoff"); !(co >= 0 && co <= 100) { // NaN fails both
		return dopts, topts, nopts, usageErr("--cutoff is a percentage from 0 to 100")
	}
	dopts = triage.DiscoverOptions{AllRanks: c.Bool("all-ranks"), Header: analysis.HeaderReader(ctx)}
	if r := c.Int("rank"); r >= 0 {
		if dopts.AllRanks {
			return dopts, topts, nopts, usageErr("--rank and --all-ranks exclude each other")
		}
		dopts.Rank = &r
	}
	topts = triage.Options{Logger: log}
	nopts = analysis.NsysOptions{Env: os.Environ()}
	if re := c.String("nvtx-stage"); re != "" {
		if nopts.StageRE, err = regexp.Compile(re); err != nil {
			return dopts, topts, nopts, usageErr("--nvtx-stage: %v", err)
		}
	}
	if c.Bool("stats") && (c.String("mapping") != "" || c.String("formal") != "") {
		return dopts, topts, nopts, usageErr("--stats reads one nsys export; it does not take --mapping/--formal")
	}
	if d := c.Int("device"); d >= 0 {
		topts.Device = &d
	}
	return dopts, topts, nopts, nil
}

// triageRoot returns the trace file or directory to triage: the --formal directory in
// two-trace mode (the --mapping input is discovered into topts), else the FILE|DIR argument
// resolved through run directories and cells, with an nsys report exported to SQLite.
func triageRoot(ctx context.Context, c *cli.Command, std stdio, dopts triage.DiscoverOptions, topts *triage.Options, log *slog.Logger) (string, error) {
	mapping, formal := c.String("mapping"), c.String("formal")
	if mapping != "" || formal != "" {
		if mapping == "" || formal == "" {
			return "", usageErr("two-trace mode needs both --mapping DIR and --formal DIR")
		}
		if _, err := positional(c, 0, 0, ""); err != nil {
			return "", usageErr("two-trace mode takes no FILE|DIR: give --mapping DIR --formal DIR")
		}
		min, err := triage.Discover(mapping, dopts)
		if err != nil {
			return "", fmt.Errorf("--mapping: %w", err)
		}
		topts.Mapping = &min
		topts.OpenMapping = analysis.OpenMappingTrace
		return formal, nil
	}
	args, err := positional(c, 1, 1, "FILE|DIR")
	if err != nil {
		return "", err
	}
	return triageInput(ctx, c, std, args[0], log)
}

// triageInput resolves one FILE|DIR argument: a run directory to its one traced cell, a cell
// to its traces (refusing an invalid cell without --force), an nsys report to its SQLite
// export.
func triageInput(ctx context.Context, c *cli.Command, std stdio, arg string, log *slog.Logger) (string, error) {
	// A FIFO or device would block the read: refused up front, before anything opens it.
	if err := regularInput(arg, "pass a trace file or the directory the profiler wrote"); err != nil {
		return "", err
	}
	in, note, err := analysis.ResolveRunDir(arg)
	if err != nil {
		return "", err
	}
	if note != "" {
		fmt.Fprintf(std.err, "runner: %s\n", note)
	}
	cell, res, root, err := analysis.ResolveCell(in)
	if err != nil {
		return "", err
	}
	if res != nil && res.Verdict == plans.VerdictInvalid && !c.Bool("force") {
		return "", &exitError{code: exitcode.CellsFailed, err: &analysis.GateError{Cell: cell, Result: res}}
	}
	if analysis.IsNsysReport(root) {
		if root, err = analysis.ExportReport(ctx, root, os.Environ(), log); err != nil {
			return "", err
		}
	}
	return root, nil
}

// triageDiff is `runner triage --diff BASE NEW`: both inputs resolved as FILE|DIR is, checked
// to be of one kind, triaged with the same options, and NEW's report rendered with the diff.
func triageDiff(ctx context.Context, c *cli.Command, std stdio, format string, dopts triage.DiscoverOptions, topts triage.Options, nopts analysis.NsysOptions, log *slog.Logger) error {
	if c.Bool("stats") || c.String("mapping") != "" || c.String("formal") != "" {
		return usageErr("--diff compares the triages of two inputs; it takes neither --stats nor --mapping/--formal")
	}
	args, err := positional(c, 2, 2, "--diff BASE NEW")
	if err != nil {
		return err
	}
	var roots, kinds [2]string
	for i, a := range args {
		if roots[i], err = triageInput(ctx, c, std, a, log); err != nil {
			return diffSide(i, err)
		}
		if kinds[i], err = analysis.InputKind(roots[i], dopts); err != nil {
			return diffSide(i, err)
		}
	}
	if kinds[0] != kinds[1] {
		name := map[string]string{triage.FormatNsys: "an nsys export", triage.FormatKineto: "a torch-profiler trace"}
		return usageErr("--diff compares like with like: BASE %s is %s and NEW %s is %s; their kernel names and the time they cover differ, so diff two torch-profiler traces or two nsys exports",
			args[0], name[kinds[0]], args[1], name[kinds[1]])
	}
	var reps [2]*triage.Report
	for i, root := range roots {
		if c.Bool("kernels-only") {
			reps[i], err = analysis.TriageKernelsOnly(ctx, root, topts)
		} else {
			reps[i], err = analysis.TriageNsys(ctx, root, dopts, topts, nopts)
		}
		if err != nil {
			return diffSide(i, err)
		}
	}
	reps[1].Diff = triage.Diff(reps[0], reps[1])
	return triage.Render(std.out, reps[1], format, c.Float("cutoff"))
}

// diffSide names the side of --diff an error is about, keeping its exit code.
func diffSide(i int, err error) error {
	side := [2]string{"BASE", "NEW"}[i]
	var ee *exitError
	if errors.As(err, &ee) && ee.err != nil {
		return &exitError{code: ee.code, err: fmt.Errorf("%s: %w", side, ee.err)}
	}
	return fmt.Errorf("%s: %w", side, err)
}

// printStats writes the nsys stats summaries of every nsys export under root (text, md, csv
// with nsys's headers, or the rows as JSON); a torch trace is a usage error.
func printStats(ctx context.Context, c *cli.Command, std stdio, root string, dopts triage.DiscoverOptions, format string, log *slog.Logger) error {
	in, err := triage.Discover(root, dopts)
	if err != nil {
		var me *triage.MixedInputsError
		if errors.As(err, &me) {
			return &exitcode.UsageError{Err: err}
		}
		return err
	}
	for _, f := range in.Files {
		if f.Format != triage.FormatNsys {
			return usageErr("--stats needs an nsys export (.sqlite or .nsys-rep); %s is a torch-profiler trace: drop --stats to triage it", f.Path)
		}
	}
	tf := table.Format(format)
	for i, f := range in.Files {
		capt, err := nsysdb.ReadCapture(ctx, f.Path, nsysdb.ReadOptions{Logger: log})
		if err != nil {
			return err
		}
		if len(in.Files) > 1 && format != "json" {
			if i > 0 {
				fmt.Fprintln(std.out)
			}
			fmt.Fprintf(std.out, "# %s\n", f.Path)
		}
		if format == "json" {
			enc := json.NewEncoder(std.out)
			enc.SetIndent("", "  ")
			enc.SetEscapeHTML(false)
			if err := enc.Encode(nsysdb.Stats(capt)); err != nil {
				return err
			}
			continue
		}
		for j, r := range nsysdb.Stats(capt) {
			if j > 0 {
				fmt.Fprintln(std.out)
			}
			if err := table.Write(std.out, tf, r.Table()); err != nil {
				return err
			}
		}
	}
	return nil
}

// limitMemory caps the heap so the garbage collector works harder instead of letting a
// multi-GB trace's garbage double the resident size; the reader's live data stays far below
// it. It also lets the heap grow to 1.35 times the live data between collections instead of
// twice: a trace's records are pointer-free slices, so a collection costs little, and the
// smaller heap keeps a 500 MB trace's peak RSS under 200 MB (and faults in fewer fresh pages;
// docs/performance.md). A GOMEMLIMIT or GOGC set by the user wins.
func limitMemory() {
	gcPolicy(os.Getenv("GOMEMLIMIT") != "", os.Getenv("GOGC") != "", nil)
}

// gcPolicy is limitMemory's settings, given whether the user set GOMEMLIMIT and GOGC; restored
// (tests) is called once the collector runs at triage's GOGC.
//
// Without either, no collection runs before the heap first reaches triageQuietHeap: GOGC 35
// alone collects from a 1.4 MB heap on, and the first 80 ms of an nsys export's triage (the
// open: schema, memory ops, the NVTX index, the pass's arrays) went through six to eight
// collections, each taking one of the two cores for its marking while the NVTX read wanted
// both: with no collection there, the pass started about 20 ms sooner (docs/performance.md).
// The collector is off with a memory limit of triageQuietHeap; the first collection (at that
// limit) finds a sentinel object unreachable, and its finalizer sets GOGC 35 and the real limit.
// A run that never gets there (an nsys export of a few million kernels is streamed in less)
// never collects.
func gcPolicy(userLimit, userGC bool, restored func()) {
	if !userLimit {
		debug.SetMemoryLimit(triageMemoryLimit)
	}
	if userGC {
		return
	}
	if userLimit {
		debug.SetGCPercent(triageGCPercent)
		return
	}
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(triageQuietHeap)
	runtime.SetFinalizer(&gcSentinel{}, func(*gcSentinel) {
		debug.SetGCPercent(triageGCPercent)
		debug.SetMemoryLimit(triageMemoryLimit)
		if restored != nil {
			restored()
		}
	})
}

// gcSentinel is gcPolicy's object whose finalizer ends the quiet start. It holds a pointer so
// that it is not put in a tiny-allocation block (whose objects' finalizers wait for the block).
type gcSentinel struct {
	_ *byte
	_ [16]byte
}

// triageQuietHeap is the Go memory (heap, stacks, runtime) up to which triage does not collect.
const triageQuietHeap = 32 << 20

// triageGCPercent is triage's GOGC (see limitMemory).
const triageGCPercent = 35

// triageMemoryLimit keeps triage's peak RSS under the 300 MB target for large traces (the sizes
// it holds for are in docs/performance.md, measured with scripts/bench_kineto.sh).
const triageMemoryLimit = 256 << 20
