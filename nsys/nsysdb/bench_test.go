package nsysdb

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"testing"
	"time"

	"github.com/sglprof/runner/nsys/nsysgen"
	"github.com/sglprof/runner/reports/trace"
)

// The README figure uses -nsys.kernels=1000000 (scripts/bench_nsys.sh); the default keeps a
// plain `go test -bench .` quick on a small machine.
var (
	benchKernels = flag.Int("nsys.kernels", 20_000, "kernels in the generated benchmark export (runtime calls are 3x)")
	benchNVTX    = flag.Bool("nsys.nvtx", false, "give the benchmark export NVTX ranges: a denoising_step_N range per 1000 kernels and a layers.N range per 20 inside it")
	benchMemops  = flag.Bool("nsys.memops", false, "give the benchmark export memory copies: every 50th kernel's cudaMemcpyAsync call copies 1 MiB host to device on the kernel stream")
	benchProcs   = flag.Int("nsys.procs", 1, "processes in the benchmark export (as a server's TP ranks): kernel i runs in process i%procs on GPU i%procs, each process numbering its own correlation ids from 1")
)

// BenchExportPath is where the benchmark export for n kernels is cached between runs.
func benchExportPath(n int) string {
	suffix := ""
	if *benchNVTX {
		suffix = "-nvtx"
	}
	if *benchMemops {
		suffix += "-memops"
	}
	if *benchProcs > 1 {
		suffix += "-procs" + strconv.Itoa(*benchProcs)
	}
	return filepath.Join(os.TempDir(), "runner-nsys-bench-"+strconv.Itoa(n)+suffix+".sqlite")
}

// benchExport generates (once, then reuses) an export with n kernels over 500 distinct names
// and 3n runtime calls: one cudaLaunchKernel per kernel plus an event record and, every 16th
// kernel, a stream synchronisation, the rest cudaMemcpyAsync calls. With -nsys.procs P the
// kernels go round-robin to P processes (one GPU each), each with its own correlation ids, its
// own NVTX ranges and copies, their calls interleaved in time as the ranks of one server.
func benchExport(b *testing.B, n int) string {
	b.Helper()
	path := benchExportPath(n)
	if _, err := os.Stat(path); err == nil {
		return path
	}
	tmp := path + ".partial"
	w, err := nsysgen.Create(tmp, "")
	if err != nil {
		b.Fatal(err)
	}
	procs := max(*benchProcs, 1)
	for p := range procs {
		w.AddGPU(nsysgen.GPU{ID: int32(p), Name: "NVIDIA H100 80GB HBM3"})
		w.AddProcess(nsysgen.Process{PID: int32(777 + p), Name: "python3"})
	}
	names := make([]string, 500)
	for i := range names {
		names[i] = fmt.Sprintf("void kernels::op_%03d<float, %d>(float const*, float*, int)", i, i%7)
	}
	per := (n + procs - 1) / procs // kernels of process 0, the most of any
	for i := 0; i < n; i++ {
		p, k := i%procs, i/procs // process, and the kernel's number in it
		pid, t := int32(777+p), int64(k)*8_000+int64(p)*100
		corr := int64(k + 1)
		w.AddRuntime(nsysgen.Runtime{Start: t, End: t + 3_000, PID: pid, TID: pid, Correlation: corr, Name: "cudaLaunchKernel_v7000"})
		w.AddRuntime(nsysgen.Runtime{Start: t + 3_500, End: t + 4_000, PID: pid, TID: pid, Name: "cudaEventRecord_v3020"})
		other := "cudaMemcpyAsync_v3020"
		if k%16 == 0 {
			other = "cudaStreamSynchronize_v3020"
		}
		copyCorr := int64(0)
		if *benchMemops && k%50 == 0 && other != "cudaStreamSynchronize_v3020" {
			copyCorr = int64(per + 1 + k/50) // after every kernel's id of the process
			w.AddMemop(nsysgen.Memop{Start: t + 6_000, End: t + 7_000, Device: int32(p), Stream: 7, Correlation: copyCorr, Bytes: 1 << 20,
				CopyKind: nsysgen.CopyHtoD, PID: pid})
		}
		w.AddRuntime(nsysgen.Runtime{Start: t + 4_500, End: t + 6_000, PID: pid, TID: pid, Correlation: copyCorr, Name: other})
		if *benchNVTX && k%1000 == 0 {
			w.AddNVTX(nsysgen.NVTX{Start: t, End: t + 1000*8_000 - 100, PID: pid, TID: pid, Text: fmt.Sprintf("denoising_step_%d", k/1000)})
		}
		if *benchNVTX && k%20 == 0 {
			w.AddNVTX(nsysgen.NVTX{Start: t + 10, End: t + 20*8_000 - 200, PID: pid, TID: pid, Text: fmt.Sprintf("layers.%d", k/20%50)})
		}
		dur := int64(2_000 + (i*7919)%50_000)
		w.AddKernel(nsysgen.Kernel{Start: t + 5_000, End: t + 5_000 + dur, Device: int32(p), Stream: 7, Correlation: corr,
			Name: names[(i*31)%len(names)], GridX: 128, BlockX: 256, PID: pid, TID: pid})
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		b.Fatal(err)
	}
	return path
}

// BenchmarkKernelSummary is the streaming path: SQLite groups by name id, Go gets ~500 rows.
func BenchmarkKernelSummary(b *testing.B) {
	path := benchExport(b, *benchKernels)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		stats, err := KernelSummary(context.Background(), path, Short)
		if err != nil {
			b.Fatal(err)
		}
		if len(stats) != 500 {
			b.Fatalf("%d names", len(stats))
		}
	}
	b.ReportMetric(float64(*benchKernels), "kernels")
}

// BenchmarkReadAggregate is the full path: every kernel, copy and runtime call into the trace
// model, linked, then the cuda_gpu_kern_sum aggregate.
func BenchmarkReadAggregate(b *testing.B) {
	path := benchExport(b, *benchKernels)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		c, err := ReadCapture(context.Background(), path, ReadOptions{KernelNames: Short})
		if err != nil {
			b.Fatal(err)
		}
		if rows := KernSum(c.Trace).Rows; len(rows) != 500 {
			b.Fatalf("%d names", len(rows))
		}
	}
	b.ReportMetric(float64(*benchKernels), "kernels")
}

// BenchmarkReadLean is the read of the default `runner triage`: kernels and memory operations
// into the trace model from the direct file reader, the runtime table summed per call name with
// only the calls that launched a GPU op kept, then the three nsys-only tables. The triage's own
// analysis comes on top (scripts/bench_nsys.sh times the whole program).
func BenchmarkReadLean(b *testing.B) {
	path := benchExport(b, *benchKernels)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		c, err := ReadCapture(context.Background(), path, ReadOptions{SummariseAPI: true, SkipKernelInfo: true})
		if err != nil {
			b.Fatal(err)
		}
		if tb := Summaries(c, 20); len(tb.API) != 4 || len(c.Trace.Launches) != *benchKernels {
			b.Fatalf("%d API rows, %d launches kept", len(tb.API), len(c.Trace.Launches))
		}
	}
	b.ReportMetric(float64(*benchKernels), "kernels")
}

// BenchmarkSQLiteCLI times the reference: the sqlite3 shell's GROUP BY over the same file. It
// skips when sqlite3 is not installed (`apt-get install -y sqlite3`).
func BenchmarkSQLiteCLI(b *testing.B) {
	bin, err := exec.LookPath("sqlite3")
	if err != nil {
		b.Skip("sqlite3 not on PATH; install it with `apt-get install -y sqlite3` to get the reference figure")
	}
	path := benchExport(b, *benchKernels)
	b.ResetTimer()
	for b.Loop() {
		out, err := exec.Command(bin, "-readonly", path,
			`SELECT shortName, COUNT(*), SUM(end-start) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY shortName`).Output()
		if err != nil || len(out) == 0 {
			b.Fatalf("sqlite3: %v", err)
		}
	}
	b.ReportMetric(float64(*benchKernels), "kernels")
}

// BenchmarkStream is the producer side of the streamed triage: OpenStream (open-ms) and one
// Each over the benchmark export, with a no-op fn ("noop") and with a fn of about 100 ns a call
// ("work"), about what the triage's per-op analysis costs. It reports the peak live heap
// during the pass (sampled every 16384 ops after a GC at the start, so it includes the
// names, the windows and the memory ops) and that peak per kernel: run it at
// -nsys.kernels=100000 and 1000000 to see it flat.
func BenchmarkStream(b *testing.B) {
	path := benchExport(b, *benchKernels)
	for _, fn := range []struct {
		name string
		work bool
	}{{"noop", false}, {"work", true}} {
		b.Run(fn.name, func(b *testing.B) {
			b.ReportAllocs()
			var peak uint64
			sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
			heap := func() uint64 {
				metrics.Read(sample)
				return sample[0].Value.Uint64()
			}
			var sink uint64
			var open time.Duration
			for b.Loop() {
				b.StopTimer()
				runtime.GC()
				base := heap()
				b.StartTimer()
				t0 := time.Now()
				s, err := OpenStream(context.Background(), path, ReadOptions{})
				if err != nil {
					b.Fatal(err)
				}
				open += time.Since(t0)
				n := 0
				err = s.Each(context.Background(), func(op *trace.GPUOp, seq, _ int64) {
					if fn.work {
						sink += streamWork(op)
					}
					if n++; n&16383 == 0 {
						peak = max(peak, heap()-min(base, heap()))
					}
				})
				if err != nil {
					b.Fatal(err)
				}
				if n != *benchKernels+len(s.Capture.Memops) || len(s.Capture.APIStats) != 4 {
					b.Fatalf("%d ops, %d API names", n, len(s.Capture.APIStats))
				}
				s.Close()
			}
			b.ReportMetric(open.Seconds()*1000/float64(b.N), "open-ms")
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
			b.ReportMetric(float64(peak)/float64(*benchKernels), "peak-heap-B/kernel")
			b.ReportMetric(float64(*benchKernels), "kernels")
			streamSink = sink
		})
	}
}

var streamSink uint64

// streamWork stands in for the triage's per-op analysis: about 100 ns of dependent integer
// work on the op's fields (BenchmarkStreamWork measures it alone).
func streamWork(op *trace.GPUOp) uint64 {
	x := uint64(op.Start) ^ uint64(op.End)<<7 ^ uint64(op.Name)
	for range 60 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

// BenchmarkStreamWork is the cost of streamWork alone, to subtract from BenchmarkStream/work.
func BenchmarkStreamWork(b *testing.B) {
	op := trace.GPUOp{Start: 1, End: 2}
	var sink uint64
	for b.Loop() {
		op.Start++
		sink += streamWork(&op)
	}
	streamSink = sink
}

// BenchmarkScanTables is the direct reader alone: the kernel and runtime tables of the
// benchmark export scanned with the streamed pass's columns into a callback that does
// nothing (pages read, cells and records decoded), one table after the other on one
// goroutine. It reports rows per second and nanoseconds a row.
func BenchmarkScanTables(b *testing.B) {
	path := benchExport(b, *benchKernels)
	s, err := OpenStream(context.Background(), path, ReadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	rows := 0
	for b.Loop() {
		rows = 0
		for _, p := range []*directPlan{s.kernels, s.runtime} {
			err := s.r.file.scanInts(context.Background(), p.root, p.cols, func([]sql.NullInt64) error {
				rows++
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	if rows != 4**benchKernels {
		b.Fatalf("%d rows, want %d", rows, 4**benchKernels)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(rows), "ns/row")
}
