package analysis

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sglprof/runner/nsys/nsysgen"
	"github.com/sglprof/runner/reports/triage"
)

// streamExport writes a random export that a stream can serve: one process, kernels in start
// order on several streams (overlapping, touching, equal starts, zero length), graph and
// driver launches, synchronisations that launch nothing, copies and memsets, one or two GPUs.
// twoPIDs gives a second process's kernels, whose correlation ids repeat the first's; nvtx
// NVTX ranges (nvtxRanges).
func streamExport(t *testing.T, seed uint64, version string, twoPIDs bool, nvtx nvtxMode) string {
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
	calls := map[int64]bool{}  // every call's start
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
		calls[call.Start] = true
		if r.IntN(8) == 0 {
			corrs[pid]++
			e.Runtime = append(e.Runtime, nsysgen.Runtime{Start: at - 400, End: at + 9_000, PID: pid, TID: pid, Correlation: corrs[pid], Name: "cudaStreamSynchronize_v3020"})
		}
	}
	if nvtx != nvtxNone {
		pids := []int32{4242}
		if twoPIDs {
			pids = append(pids, 4343)
		}
		for _, pid := range pids {
			e.NVTX = append(e.NVTX, nvtxRanges(r, pid, at, calls, nvtx == nvtxCrossing)...)
		}
	}
	path := filepath.Join(t.TempDir(), fmt.Sprintf("report-%d.sqlite", seed))
	if err := nsysgen.Write(path, e); err != nil {
		t.Fatal(err)
	}
	return path
}

// nvtxMode is what NVTX ranges streamExport gives its export.
type nvtxMode int

const (
	nvtxNone     nvtxMode = iota
	nvtxNested            // stages, steps and layers, nested per thread (streamed)
	nvtxCrossing          // the same with two ranges that overlap without nesting (read held)
)

// nvtxRanges gives thread pid ranges as a diffusion pipeline marks them over [0, end]: a
// stage range, touching denoising_step_N ranges inside it (their shared bounds never at a
// call's start: a call there would be inside two ranges that do not nest), layer ranges
// (some in a named domain, some with a bound exactly at a call's start, some touching) inside
// each step, a range on a thread that makes no call, and, with crossing, a range that
// overlaps the first step without nesting.
func nvtxRanges(r *rand.Rand, pid int32, end int64, calls map[int64]bool, crossing bool) []nsysgen.NVTX {
	var starts []int64
	for s := range calls {
		if s > 0 && s < end {
			starts = append(starts, s)
		}
	}
	slices.Sort(starts)
	out := []nsysgen.NVTX{{Start: 0, End: end, PID: pid, TID: pid, Text: "DenoisingStage"},
		{Start: 10, End: end / 2, PID: pid, TID: pid + 1, Text: "loader"}}
	steps := 2 + r.IntN(4)
	at := int64(1_000)
	for k := range steps {
		next := at + (end-2_000)/int64(steps)
		for calls[next] {
			next++
		}
		if k == steps-1 {
			next = end - 1_000
		}
		out = append(out, nsysgen.NVTX{Start: at, End: next, PID: pid, TID: pid, Text: fmt.Sprintf("denoising_step_%d", k)})
		// Layers: ordered sub-intervals of the step, bounds picked from the calls inside it.
		var in []int64
		for _, s := range starts {
			if s > at && s < next {
				in = append(in, s)
			}
		}
		for i := 0; i+1 < len(in); {
			j := i + 1 + r.IntN(6)
			if j >= len(in) {
				break
			}
			lo, hi := in[i], in[j]
			if r.IntN(2) == 0 {
				lo++ // not at a call
			}
			l := nsysgen.NVTX{Start: lo, End: hi, PID: pid, TID: pid, Text: fmt.Sprintf("layers.%d", r.IntN(4))}
			if r.IntN(4) == 0 {
				l.Domain = "sgl"
			}
			out = append(out, l)
			if r.IntN(3) == 0 && hi < in[len(in)-1] && !calls[hi] {
				i = j // the next layer touches this one (never at a call: see above)
			} else {
				i = j + 1
			}
		}
		at = next
	}
	if crossing {
		out = append(out, nsysgen.NVTX{Start: 500, End: 1_000 + (end-2_000)/int64(steps)/2, PID: pid, TID: pid, Text: "crossing"})
	}
	return out
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
		version      string
		twoPIDs      bool
		nvtx         nvtxMode
		wantStreamed bool
	}{
		{"3.28.1", false, nvtxNone, true},
		{"3.13.2", false, nvtxNone, true},
		{"2.9.1", false, nvtxNone, true},
		{"3.28.1", true, nvtxNone, true},
		{"3.28.1", false, nvtxNested, true},
		{"3.28.1", true, nvtxNested, true},
		{"3.28.1", false, nvtxCrossing, false},
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
				// NVTX: scopes in and out of a domain, the steps' stage and the NVTX table.
				if tc.nvtx == nvtxNested {
					for _, want := range []string{"nvtx: layers.N", "nvtx: sgl:layers.N", `"stage": "DenoisingStage`, `"range": "denoising_step_0"`} {
						if !strings.Contains(streamed, want) {
							t.Fatalf("seed %d: the report lacks %q, so the export does not exercise it:\n%s", seed, want, streamed)
						}
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
