// Command tracegen writes synthetic SGLang-like PyTorch-profiler (Kineto) traces of any size,
// for tests, benchmarks and trying out `runner triage` without a GPU. The output is gzipped when
// the file name ends in .gz.
//
//	tracegen -flavor llm -size 500MB -comm -graph -stack -o /tmp/trace.json
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

	"github.com/sglprof/runner/reports/kineto/kinetogen"
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
	seed := fs.Int64("seed", 1, "jitter seed; the same flags give the same bytes")
	level := fs.Int("gzip-level", gzip.DefaultCompression, "gzip level for .gz output (Python's gzip.open uses 9)")
	out := fs.String("o", "", "output file (.json or .json.gz); - for stdout")
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
	if *out == "" {
		fmt.Fprintln(stderr, "tracegen: -o FILE is required (use -o - for stdout)")
		return 2
	}
	cfg := kinetogen.Config{Flavor: *flavor, Steps: *steps, Layers: *layers, CommStream: *comm, CUDAGraph: *graph,
		WithStack: *stack, Rank: *rank, Seed: *seed}
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
