package gpu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sglprof/runner/reports/rundir"
)

// heapPeak runs f and returns the most heap memory held by objects at any moment while it
// ran, above what was held before: what f made the process retain, sampled every
// millisecond.
func heapPeak(f func()) uint64 {
	const name = "/memory/classes/heap/objects:bytes"
	read := func(s []metrics.Sample) uint64 { metrics.Read(s); return s[0].Value.Uint64() }
	runtime.GC()
	base := read([]metrics.Sample{{Name: name}})
	stop, done := make(chan struct{}), make(chan uint64)
	go func() {
		s := []metrics.Sample{{Name: name}}
		var peak uint64
		for {
			peak = max(peak, read(s))
			select {
			case <-stop:
				done <- max(peak, read(s))
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	f()
	close(stop)
	peak := <-done
	if peak < base {
		return 0
	}
	return peak - base
}

// An nvidia-smi that prints 100 MB (to each of the snapshot's two queries) is stopped once it
// passed proc.ProbeLimit: the snapshot says why it has no reading, and the runner's heap never
// holds as much as one query printed (about 40 MiB here: the two answers' 4 MiB each, the
// output pipelines' chunks and their garbage; reading all of it grew the heap by 900 MiB).
func TestSnapshotBoundsOutput(t *testing.T) {
	line := "0, GPU-aaaa, 0 %, 1 MiB, 1980 MHz, 1980 MHz, 0x0000000000000001, Enabled, 70.12 W, 33"
	env := fakeSMI(t, idleGPUs, "", "", "yes '"+line+"' | head -c 100000000; exit 0\n")
	var s rundir.GPUSnapshot
	grew := heapPeak(func() { s = Prober{Env: env, Timeout: time.Minute}.Snapshot(context.Background(), nil) })
	if s.Available() || !strings.Contains(s.Error, "printed more than 4 MiB") {
		t.Errorf("Error = %q, want the probe stopped for printing more than 4 MiB", s.Error)
	}
	const bound = 80 << 20 // below the 95 MiB of one query's output
	if grew > bound {
		t.Errorf("the heap grew by %d MiB during the snapshot, want at most %d MiB", grew>>20, bound>>20)
	}
	t.Logf("heap grew by %.1f MiB", float64(grew)/(1<<20))
}

// An nvidia-smi that leaves a process behind (`sleep 300 &`) has it swept by the probe's
// supervisor: once the snapshot returned, no process of the stand-in is left, and the
// snapshot still reads what it printed.
func TestSnapshotLeavesNoProcess(t *testing.T) {
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	env := fakeSMI(t, idleGPUs, "", "", "sleep 300 & echo $! >> '"+pids+"'\n")
	t.Cleanup(func() {
		for _, pid := range readPIDs(t, pids) {
			syscall.Kill(pid, syscall.SIGKILL) // only when the test failed
		}
	})
	p := Prober{Env: env}
	for range 3 {
		if s := p.Snapshot(context.Background(), nil); !s.Available() {
			t.Errorf("snapshot unavailable: %s", s.Error)
		}
	}
	got := readPIDs(t, pids)
	if len(got) != 6 { // two queries a snapshot
		t.Fatalf("the stand-in recorded %d background processes, want 6", len(got))
	}
	for _, pid := range got {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
			t.Errorf("pid %d (%q), started by the stand-in nvidia-smi, outlived the probe", pid, strings.ReplaceAll(string(cmd), "\x00", " "))
		}
	}
}

func readPIDs(t *testing.T, path string) []int {
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	return out
}
