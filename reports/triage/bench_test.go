package triage

import (
	"context"
	"fmt"
	"testing"

	"github.com/sglprof/runner/reports/trace"
)

// BenchmarkAnalyze measures Analyze alone (the trace is already in memory) on synthetic traces
// with Python stacks, two streams and overlapping NCCL. The ns/gpu-op metric should stay flat as
// the op count grows: every step is O(n log n) or better.
func BenchmarkAnalyze(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("ops=%d", n), func(b *testing.B) {
			tr := bigTrace(n, 42)
			open := func(context.Context, string) (*trace.Trace, error) { return tr, nil }
			in := Inputs{Files: []Input{{Path: tr.Path, Stage: StageDecode, Rank: NoRank}}}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r, err := Analyze(context.Background(), in, Options{Open: open})
				if err != nil || r.Stages[0].KernelCount != n {
					b.Fatalf("err=%v", err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/gpu-op")
		})
	}
}

// BenchmarkSweep isolates the overlap sweep.
func BenchmarkSweep(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("ops=%d", n), func(b *testing.B) {
			tr := bigTrace(n, 42)
			iv := make([]Interval, len(tr.GPUOps))
			for i, o := range tr.GPUOps {
				iv[i] = Interval{o.Start, o.End, o.Stream}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				SweepOverlap(iv)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/gpu-op")
		})
	}
}

// BenchmarkAnalyzeMappingFormal: two-trace mode on two traces of n ops each; compare with
// BenchmarkAnalyze (the target is at most twice the single-trace time).
func BenchmarkAnalyzeMappingFormal(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("ops=%d", n), func(b *testing.B) {
			m, f := bigTrace(n, 1), bigTrace(n, 2)
			open := opener(map[string]*trace.Trace{"m": m, "f": f})
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := Analyze(context.Background(), Inputs{Files: []Input{{Path: "f", Stage: StageDecode, Rank: NoRank}}},
					Options{Open: open, Mapping: &Inputs{Files: []Input{{Path: "m", Stage: StageDecode, Rank: NoRank}}}}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/formal-op")
		})
	}
}
