package triage

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/kineto"
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

// longName is a unique 1 KB kernel name of identifiers and template arguments (the
// classifier ran at 1.5 MB/s on such names).
func longName(i int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "void ns%d::kernel_%d<", i, i)
	for b.Len() < 1000 {
		fmt.Fprintf(&b, "cute::tuple<cute::C<%d>, float_%d>, ", b.Len(), i)
	}
	b.WriteString("int>")
	return b.String()
}

// BenchmarkClassifyLongNames classifies unique 1 KB names; MB/s is of name bytes.
func BenchmarkClassifyLongNames(b *testing.B) {
	names := make([]string, 2000)
	for i := range names {
		names[i] = longName(i)
	}
	c := DefaultClassifier()
	b.SetBytes(int64(len(names[0])) * int64(len(names)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, n := range names {
			c.Classify(n)
		}
	}
}

// longNameTrace is a Kineto trace of n kernels, each with a unique 1 KB name (unique=true) or
// one of a handful of ordinary names, for comparing triage speed on hostile names.
func longNameTrace(n int, unique bool) []byte {
	var b bytes.Buffer
	b.WriteString(`{"schemaVersion":1,"traceEvents":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		name := longName(i % 7)
		if unique {
			name = longName(i)
		}
		fmt.Fprintf(&b, `{"ph":"X","cat":"kernel","name":%q,"pid":0,"tid":7,"ts":%d.000,"dur":1.500,"args":{"device":0,"stream":7,"correlation":%d}}`, name, 1000+i*2, i+1)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// BenchmarkTriageLongNames reads and triages a trace of unique 1 KB kernel names against one of
// the same size whose names repeat; MB/s is of trace JSON. Issue 14's goal: the two run at the
// same speed.
func BenchmarkTriageLongNames(b *testing.B) {
	for _, unique := range []bool{false, true} {
		b.Run(fmt.Sprintf("unique=%v", unique), func(b *testing.B) {
			js := longNameTrace(20_000, unique)
			b.SetBytes(int64(len(js)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				tr, err := kineto.Read(context.Background(), bytes.NewReader(js), "long.json", kineto.Options{})
				if err != nil {
					b.Fatal(err)
				}
				trace.Link(tr)
				open := func(context.Context, string) (*trace.Trace, error) { return tr, nil }
				r, err := Analyze(context.Background(), Inputs{Files: []Input{{Path: "long.json", Rank: NoRank}}}, Options{Open: open})
				if err != nil || len(r.Stages) == 0 {
					b.Fatalf("err=%v", err)
				}
			}
		})
	}
}
