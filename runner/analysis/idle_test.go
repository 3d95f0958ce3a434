package analysis

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/sglprof/runner/reports/triage"
)

// TestIdleNsysFixture: the idle breakdown of the real nsys export (an MPI+CUDA saxpy run on an
// A100, Nsight Systems 2022.2) equals an independent computation straight from its SQLite
// tables — Python's sqlite3 over CUPTI_ACTIVITY_KIND_KERNEL/MEMCPY (start, end,
// correlationId) and CUPTI_ACTIVITY_KIND_RUNTIME (start, correlationId): the ops sorted by
// start and merged, each gap host wait when the earliest launch of the ops starting at its
// end came after the gap began, else kernel wait under 30 µs, else other. It gave (ns):
// window 1,097,327,843, busy 373,273,080, host wait 723,650,062, kernel wait 88,128, other
// 316,573.
func TestIdleNsysFixture(t *testing.T) {
	p := filepath.Join("..", "..", "..", "shared", "fixtures", "pipit-a100-saxpy-mpi-nsys2022.2.sqlite")
	if _, err := os.Stat(p); err != nil {
		t.Skipf("fixture not found (%v); it lives in ../shared/fixtures beside the checkout", err)
	}
	rep, err := TriagePath(context.Background(), p, triage.DiscoverOptions{}, triage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Stages) != 1 || rep.Stages[0].Idle == nil {
		t.Fatalf("stages %+v, want one with an idle breakdown", rep.Stages)
	}
	id := rep.Stages[0].Idle
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"window", id.WindowUS, 1_097_327.843},
		{"busy", id.BusyUS, 373_273.080},
		{"host wait", id.HostWaitUS, 723_650.062},
		{"kernel wait", id.KernelWaitUS, 88.128},
		{"other", id.OtherUS, 316.573},
		{"parts", id.HostWaitUS + id.KernelWaitUS + id.OtherUS, id.WindowUS - id.BusyUS},
	} {
		if math.Abs(c.got-c.want) > 1e-3 {
			t.Errorf("%s = %.3f µs, want %.3f µs", c.what, c.got, c.want)
		}
	}
	if hb := rep.Stages[0].HostBound; hb == nil || !hb.HostBound || len(hb.Longest) == 0 {
		t.Errorf("host-bound verdict %+v, want host-bound with its longest waits named", hb)
	} else {
		t.Logf("longest host wait: %+v", hb.Longest[0])
	}
}
