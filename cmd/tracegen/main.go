// Command tracegen writes synthetic SGLang-like PyTorch-profiler (Kineto) traces of any size,
// for tests, benchmarks and trying out `runner triage` without a GPU. The output is gzipped when
// the file name ends in .gz.
//
//	tracegen -flavor llm -size 500MB -comm -graph -stack -o /tmp/trace.json
//
// With -read FILE it instead reads a trace with the streaming reader (reports/kineto) and prints
// one line of figures; scripts/bench_kineto.sh times it with /usr/bin/time for the end-to-end
// throughput and peak RSS. -read-mode lean drops Python frames, CPU ops and flows; gunzip only
// decompresses (the floor for .json.gz input).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/klauspost/compress/gzip"

	"github.com/sglprof/runner/reports/kineto"
	"github.com/sglprof/runner/reports/kineto/kinetogen"
	"github.com/sglprof/runner/reports/trace"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole command, with its arguments and output streams passed in so tests can call
// it. It returns the exit status: 0 ok, 1 failure, 2 usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tracegen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	flavor := fs.String("flavor", kinetogen.FlavorLLM, "trace flavor: llm or diffusion")
	size := fs.String("size", "", "keep adding steps until the uncompressed JSON reaches this size (e.g. 100MB, 1GiB)")
	steps := fs.Int("steps", 0, "denoising or decode steps (at least this many when -size is given)")
	layers := fs.Int("layers", 0, "transformer blocks per step (0: flavor default)")
	comm := fs.Bool("comm", false, "add a communication stream whose all-reduce kernels overlap compute")
	graph := fs.Bool("graph", false, "llm: replay decode steps through one cudaGraphLaunch each")
	stack := fs.Bool("stack", false, "record Python frames (with_stack=True)")
	rank := fs.Int("rank", 0, "distributed rank (also the GPU index)")
	world := fs.Int("world", 0, "distributedInfo.world_size (0: 2 with -comm, else 1; at least rank+1); give every rank of a directory the same, as triage requires")
	seed := fs.Int64("seed", 1, "jitter seed; the same flags give the same bytes")
	level := fs.Int("gzip-level", gzip.DefaultCompression, "gzip level for .gz output (Python's gzip.open uses 9)")
	out := fs.String("o", "", "output file (.json or .json.gz); - for stdout")
	read := fs.String("read", "", "instead of generating, read this trace and print figures")
	readMode := fs.String("read-mode", "full", "with -read: full (keep everything and link), lean (no frames, CPU ops, flows), full-seq / lean-seq (gzip on one goroutine too), full-pipe / lean-pipe (two-goroutine pipeline for plain JSON too), gunzip (decompress only)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tracegen: unexpected argument %q (flags go before nothing else)\n", fs.Arg(0))
		return 2
	}
	if *read != "" {
		return readTrace(ctx, *read, *readMode, stdout, stderr)
	}
	if *out == "" {
		fmt.Fprintln(stderr, "tracegen: -o FILE is required (use -o - for stdout)")
		return 2
	}
	cfg := kinetogen.Config{Flavor: *flavor, Steps: *steps, Layers: *layers, CommStream: *comm, CUDAGraph: *graph,
		WithStack: *stack, Rank: *rank, WorldSize: *world, Seed: *seed}
	if *size != "" {
		n, err := humanize.ParseBytes(*size)
		if err != nil {
			fmt.Fprintf(stderr, "tracegen: -size %q: %v (write e.g. 500MB or 1GiB)\n", *size, err)
			return 2
		}
		cfg.TargetBytes = int64(n)
	}
	if err := ctx.Err(); err != nil {
		return 1
	}
	start := time.Now()
	st, err := write(*out, *level, stdout, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "tracegen: %v\n", err)
		return 1
	}
	if *out != "-" {
		fmt.Fprintf(stderr, "tracegen: wrote %s: %s of JSON, %d events, %d kernels (%.3f ms kernel time), %d steps in %s\n",
			*out, humanize.IBytes(uint64(st.Bytes)), st.Events, st.Kernels, float64(st.KernelNS)/1e6, st.Steps, time.Since(start).Round(time.Millisecond))
	}
	return 0
}

// write generates into path, gzipping for a .gz name.
func write(path string, level int, stdout io.Writer, cfg kinetogen.Config) (kinetogen.Stats, error) {
	var w io.Writer = stdout
	var f *os.File
	if path != "-" {
		var err error
		f, err = os.Create(path)
		if err != nil {
			return kinetogen.Stats{}, err
		}
		defer f.Close()
		w = f
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	var zw *gzip.Writer
	var dst io.Writer = bw
	if strings.HasSuffix(path, ".gz") {
		var err error
		zw, err = gzip.NewWriterLevel(bw, level)
		if err != nil {
			return kinetogen.Stats{}, fmt.Errorf("-gzip-level %d: %w", level, err)
		}
		dst = zw
	}
	st, err := kinetogen.Write(dst, cfg)
	if err != nil {
		return st, fmt.Errorf("generate: %w", err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return st, err
		}
	}
	if err := bw.Flush(); err != nil {
		return st, err
	}
	if f != nil {
		return st, f.Close()
	}
	return st, nil
}

// readTrace reads path in the given mode and prints "bytes events kernels kernel_ns seconds MB/s".
func readTrace(ctx context.Context, path, mode string, stdout, stderr io.Writer) int {
	start := time.Now()
	var jsonBytes, events, kernels, kernelNS int64
	switch mode {
	case "gunzip":
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintf(stderr, "tracegen: %v\n", err)
			return 1
		}
		defer f.Close()
		zr, err := gzip.NewReader(bufio.NewReaderSize(f, 256<<10))
		if err != nil {
			fmt.Fprintf(stderr, "tracegen: %s: %v\n", path, err)
			return 1
		}
		jsonBytes, err = io.Copy(io.Discard, zr)
		if err != nil {
			fmt.Fprintf(stderr, "tracegen: %s: %v\n", path, err)
			return 1
		}
	case "full", "lean", "full-seq", "lean-seq", "full-pipe", "lean-pipe":
		opts := kineto.Options{}
		if strings.HasPrefix(mode, "lean") {
			opts = kineto.Options{SkipFrames: true, SkipCPUOps: true, SkipFlows: true}
		}
		opts.Sequential = strings.HasSuffix(mode, "-seq")
		opts.Pipeline = strings.HasSuffix(mode, "-pipe")
		cr := &countingReader{}
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintf(stderr, "tracegen: %v\n", err)
			return 1
		}
		defer f.Close()
		cr.r = f
		tr, err := kineto.Read(ctx, cr, path, opts)
		if err != nil {
			fmt.Fprintf(stderr, "tracegen: %v\n", err)
			return 1
		}
		if strings.HasPrefix(mode, "full") {
			trace.Link(tr)
		}
		n, ns := tr.KernelTime(trace.NoID)
		events, kernels, kernelNS = tr.Events, int64(n), ns
		jsonBytes = cr.n
		if len(tr.Warnings) > 0 {
			fmt.Fprintf(stderr, "tracegen: %d warnings, first: %s\n", len(tr.Warnings), tr.Warnings[0])
		}
		if strings.HasSuffix(path, ".gz") || isGzip(path) {
			jsonBytes = -1 // the caller knows the uncompressed size
		}
	default:
		fmt.Fprintf(stderr, "tracegen: -read-mode %q: want full, lean, full-seq, lean-seq, full-pipe, lean-pipe or gunzip\n", mode)
		return 2
	}
	secs := time.Since(start).Seconds()
	mbps := 0.0
	if jsonBytes > 0 {
		mbps = float64(jsonBytes) / 1e6 / secs
	}
	fmt.Fprintf(stdout, "bytes=%d events=%d kernels=%d kernel_ns=%d seconds=%.3f MB/s=%.1f\n", jsonBytes, events, kernels, kernelNS, secs, mbps)
	return 0
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func isGzip(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var b [2]byte
	n, _ := io.ReadFull(f, b[:])
	return n == 2 && b[0] == 0x1f && b[1] == 0x8b
}
