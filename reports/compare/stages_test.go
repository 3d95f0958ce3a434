package compare

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sglprof/runner/reports/perf"
)

// writeManyStagesDump writes a perf dump with n distinct stages, the last ones first so that
// pipeline order and name order differ.
func writeManyStagesDump(tb testing.TB, path string, n int, scale float64) {
	tb.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, `{"total_duration_ms": %g, "steps": [`, 1000*scale)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name": "Stage%07d", "duration_ms": %g}`, n-i, float64(i%7+1)*scale)
	}
	b.WriteString("]}\n")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// compareManyStages loads two perf dumps of n stages, compares them and renders the text
// report, as `runner compare A B` does.
func compareManyStages(tb testing.TB, dir string) *bytes.Buffer {
	tb.Helper()
	a, err := perf.Load(filepath.Join(dir, "a.json"), perf.LoadOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	c, err := perf.Load(filepath.Join(dir, "b.json"), perf.LoadOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	res, err := Compare(a, c, Options{})
	if err != nil {
		tb.Fatal(err)
	}
	var out bytes.Buffer
	if err := Write(&out, "text", res, a, c); err != nil {
		tb.Fatal(err)
	}
	return &out
}

// Stages keep their pipeline order (the dump's), however many there are.
func TestManyStagesPipelineOrder(t *testing.T) {
	dir := t.TempDir()
	writeManyStagesDump(t, filepath.Join(dir, "a.json"), 50, 1)
	writeManyStagesDump(t, filepath.Join(dir, "b.json"), 50, 1.1)
	out := compareManyStages(t, dir).String()
	first, last := strings.Index(out, "Stage0000050"), strings.Index(out, "Stage0000001")
	if first < 0 || last < 0 || first > last {
		t.Fatalf("stages not in pipeline order:\n%s", out)
	}
}

// BenchmarkCompareManyStages: `runner compare` on two perf dumps of 10k and 100k stages each
// (100k took over 60 s while every sort comparison searched the stage list). It
// reports CPU time per operation too: on a shared machine wall time measures the neighbours.
// Figures: docs/performance.md.
func BenchmarkCompareManyStages(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			dir := b.TempDir()
			writeManyStagesDump(b, filepath.Join(dir, "a.json"), n, 1)
			writeManyStagesDump(b, filepath.Join(dir, "b.json"), n, 1.1)
			start := cpuTime()
			for b.Loop() {
				compareManyStages(b, dir)
			}
			b.ReportMetric(float64((cpuTime()-start).Milliseconds())/float64(b.N), "cpu-ms/op")
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
