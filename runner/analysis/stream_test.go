package analysis

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprof/runner/nsys/nsysgen"
	"github.com/sglprof/runner/reports/triage"
)

// streamExport writes a random export that a stream can serve: one process, kernels in start
// order on several streams (overlapping, touching, equal starts, zero length), graph and
// driver launches, synchronisations that launch nothing, copies and memsets, one or two GPUs.
// twoPIDs gives a second process's kernels, whose correlation ids repeat the first's; nvtx a
// range, which must be read held.
func streamExport(t *testing.T, seed uint64, version string, twoPIDs, nvtx bool) string {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 77))
	e := nsysgen.Export{Version: version, GPUs: []nsysgen.GPU{{ID: 0, Name: "H100"}, {ID: 1, Name: "H100"}},
		Processes: []nsysgen.Process{{PID: 4242, Name: "python3"}}}
	names := []string{"void flash::FlashAttnFwdSm90<int>(int)", "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT",
		"void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, at::native::FillFunctor<float>)",
		"ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
		"void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*)"}
	devs := 1 + r.IntN(2)
	var at int64
	corrs := map[int32]int64{} // per process: CUPTI numbers each process's calls from 1
	for i := range 600 {
		at += int64(r.IntN(4_000))
		pid := int32(4242)
		if twoPIDs && i%2 == 1 {
			pid = 4343
		}
		corrs[pid]++
		corr := corrs[pid]
		call := nsysgen.Runtime{Start: at - 2_500, End: at - 500, PID: pid, TID: pid, Correlation: corr, Name: "cudaLaunchKernel_v7000"}
		switch r.IntN(10) {
		case 0:
			call.Name = "cudaGraphLaunch_v10000"
		case 1:
			call.Name, call.Driver = "cuLaunchKernel", true
		}
		d := int64(r.IntN(30_000))
		if r.IntN(25) == 0 {
			d = 0
		}
		dev := int32(r.IntN(devs))
		if r.IntN(12) == 0 {
			call.Name = "cudaMemcpyAsync_v3020"
			e.Memops = append(e.Memops, nsysgen.Memop{Start: at, End: at + d, Device: dev, Stream: 7, Correlation: corr,
				Bytes: 1 << 20, CopyKind: nsysgen.CopyHtoD, Memset: r.IntN(3) == 0, PID: pid})
		} else {
			e.Kernels = append(e.Kernels, nsysgen.Kernel{Start: at, End: at + d, Device: dev, Stream: int32(7 + r.IntN(3)),
				Correlation: corr, Name: names[r.IntN(len(names))], PID: pid, TID: pid})
		}
		e.Runtime = append(e.Runtime, call)
		if r.IntN(8) == 0 {
			corrs[pid]++
			e.Runtime = append(e.Runtime, nsysgen.Runtime{Start: at - 400, End: at + 9_000, PID: pid, TID: pid, Correlation: corrs[pid], Name: "cudaStreamSynchronize_v3020"})
		}
	}
	if nvtx {
		e.NVTX = append(e.NVTX, nsysgen.NVTX{Start: 0, End: at, PID: 4242, TID: 4242, Text: "denoising_step_0"})
	}
	path := filepath.Join(t.TempDir(), fmt.Sprintf("report-%d.sqlite", seed))
	if err := nsysgen.Write(path, e); err != nil {
		t.Fatal(err)
	}
	return path
}

// triageJSON triages path (streamed or held) and returns the JSON report and the debug log.
func triageJSON(t *testing.T, path string, stream bool) (string, string) {
	t.Helper()
	var log bytes.Buffer
	rep, err := TriageNsys(context.Background(), path, triage.DiscoverOptions{},
		triage.Options{Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))}, NsysOptions{held: !stream})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := triage.Render(&b, rep, triage.FormatJSON, 0); err != nil {
		t.Fatal(err)
	}
	return b.String(), log.String()
}

// TestStreamedTriageMatchesHeld: `runner triage report.sqlite` gives the same report, nsys
// tables included, whether the export is streamed or held; exports a stream cannot serve are
// read held (and say so at debug level).
func TestStreamedTriageMatchesHeld(t *testing.T) {
	const fellBack = "reading the whole trace"
	for i, tc := range []struct {
		version       string
		twoPIDs, nvtx bool
		wantStreamed  bool
	}{
		{"3.28.1", false, false, true},
		{"3.13.2", false, false, true},
		{"2.9.1", false, false, true},
		{"3.28.1", true, false, true},
		{"3.28.1", false, true, false},
	} {
		t.Run(fmt.Sprintf("%s-pids%v-nvtx%v", tc.version, tc.twoPIDs, tc.nvtx), func(t *testing.T) {
			for seed := range uint64(4) {
				path := streamExport(t, seed+uint64(i)*10, tc.version, tc.twoPIDs, tc.nvtx)
				streamed, log := triageJSON(t, path, true)
				held, _ := triageJSON(t, path, false)
				if streamed != held {
					t.Fatalf("seed %d: the streamed report differs from the held one:\n%s\n----\n%s", seed, streamed, held)
				}
				if got := !strings.Contains(log, fellBack); got != tc.wantStreamed {
					t.Fatalf("seed %d: streamed = %v, want %v; log:\n%s", seed, got, tc.wantStreamed, log)
				}
				// host_wait_us: the launch starts reach the idle breakdown on both paths.
				for _, want := range []string{`"memory_ops": [`, "cudaGraphLaunch", "cudaStreamSynchronize", `"host_wait_us": `, `"launch_delay`} {
					if !strings.Contains(streamed, want) {
						t.Fatalf("seed %d: the report lacks %q, so the export does not exercise it:\n%s", seed, want, streamed)
					}
				}
			}
		})
	}
}

// TestStreamedMatchesHeldExport is scripts/bench_nsys.sh's check on its large generated
// exports: RUNNER_NSYS_DIFF_EXPORT names an export (a 1M-kernel one of four processes, the first
// million kernels of the script's 10M-kernel export), whose streamed and held reports must be
// the same, and the streamed one must have been streamed. It skips without the variable (the
// held read of a 1M-kernel export takes about 250 MB and a second or more).
func TestStreamedMatchesHeldExport(t *testing.T) {
	path := os.Getenv("RUNNER_NSYS_DIFF_EXPORT")
	if path == "" {
		t.Skip("RUNNER_NSYS_DIFF_EXPORT not set (scripts/bench_nsys.sh sets it)")
	}
	streamed, log := triageJSON(t, path, true)
	if strings.Contains(log, "reading the whole trace") {
		t.Fatalf("%s was not streamed:\n%s", path, log)
	}
	held, _ := triageJSON(t, path, false)
	if streamed != held {
		t.Fatalf("the streamed report of %s differs from the held one:\n%s\n----\n%s", path, streamed, held)
	}
	t.Logf("%s: the streamed and held reports are the same (%d bytes of JSON)", path, len(streamed))
}

// BenchmarkTriageNsysExport is the whole `runner triage report.sqlite` minus the process start
// and the rendering, on the export RUNNER_NSYS_DIFF_EXPORT names, streamed, for a CPU profile
// (go test -run '^$' -bench TriageNsysExport -cpuprofile cpu.out ./runner/analysis).
func BenchmarkTriageNsysExport(b *testing.B) {
	path := os.Getenv("RUNNER_NSYS_DIFF_EXPORT")
	if path == "" {
		b.Skip("RUNNER_NSYS_DIFF_EXPORT not set")
	}
	for b.Loop() {
		if _, err := TriageNsys(context.Background(), path, triage.DiscoverOptions{}, triage.Options{}, NsysOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
