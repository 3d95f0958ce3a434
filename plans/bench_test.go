package plans

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user+system CPU time. The benchmarks report it per operation as
// well as wall time, because on a shared machine wall time mostly measures the neighbours.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// parseBench runs Parse on src b.N times, wantErr saying whether it must fail.
func parseBench(b *testing.B, src []byte, wantErr bool) {
	b.SetBytes(int64(len(src)))
	start := cpuTime()
	for b.Loop() {
		if _, err := Parse("plan.toml", src); (err != nil) != wantErr {
			b.Fatalf("Parse error = %v, want error: %v", err, wantErr)
		}
	}
	b.ReportMetric(float64((cpuTime()-start).Milliseconds())/float64(b.N), "cpu-ms/op")
}

// planWithUnknownKeys is a valid plan followed by unknown keys until it is about size bytes.
func planWithUnknownKeys(size int) []byte {
	var b strings.Builder
	b.WriteString("name = \"x\"\n[backend]\nkind = \"sglang\"\n[matrix]\nmodel = [\"m\"]\nprompt = [\"p\"]\n")
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, "junk_%d = 1\n", i)
	}
	return []byte(b.String())
}

// BenchmarkParseUnknownKeys judges a 1 MB plan made of unknown keys (8k keys took
// 31 s when each problem's position was looked up from scratch). Figures: docs/performance.md.
func BenchmarkParseUnknownKeys(b *testing.B) {
	parseBench(b, planWithUnknownKeys(1<<20), true)
}

// BenchmarkParseLargeEnv judges a valid 1 MB plan: a [backend.env] table of about 40k variables.
func BenchmarkParseLargeEnv(b *testing.B) {
	var s strings.Builder
	s.WriteString("name = \"x\"\n[matrix]\nmodel = [\"m\"]\nprompt = [\"p\"]\n[backend.env]\n")
	for i := 0; s.Len() < 1<<20; i++ {
		fmt.Fprintf(&s, "VAR_%d = \"value\"\n", i)
	}
	parseBench(b, []byte(s.String()), false)
}
