package triage

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
)

// A real H100 trace with known work: scripts/gpu/record_model_loop.py ran a DiT-like loop
// (RMSNorm, GEMMs of known shapes, cuDNN attention, a GELU MLP, an FP8 GEMM, a 64 MiB copy on
// a second stream, a 4 ms host sleep between steps, a CUDA graph replayed three times) under
// the torch profiler with record_shapes, and timed each GEMM, the attention and the copy
// outside the profiler with CUDA events (the .truth.json beside it). The triage's figures are
// held to the shapes (exact FLOP and byte counts) and to those independent timings.
const (
	h100Trace = "testdata/real/h100-torch-model-loop.json.gz"
	h100Truth = "testdata/real/h100-torch-model-loop.truth.json"
)

// triageReal triages the trace at path (with mapping traces in two-trace mode, when given).
func triageReal(t *testing.T, path string, mapping *Inputs) *Report {
	t.Helper()
	in, err := Discover(path, DiscoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Analyze(context.Background(), in, Options{Open: openKineto, Mapping: mapping})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// readTruth decodes a recording's truth file into v.
func readTruth(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatal(err)
	}
}

type h100TruthDoc struct {
	Device                       string
	Steps, Tokens, Hidden, Heads int64
	HeadDim                      int64   `json:"head_dim"`
	HostSleepMS                  float64 `json:"host_sleep_ms"`
	CopyBytes                    int64   `json:"copy_bytes"`
	GraphReplays                 int     `json:"graph_replays"`
	GEMM                         map[string]struct {
		M, K, N int64
		MS      float64
	}
	SDPA struct{ MS float64 }
}

func TestH100ModelLoop(t *testing.T) {
	var truth h100TruthDoc
	readTruth(t, h100Truth, &truth)
	r := triageReal(t, h100Trace, nil)
	for _, w := range r.Warnings {
		// The trace lost nothing: flows from cudaStreamWaitEvent and cudaDeviceSynchronize
		// have no GPU side in PyTorch 2.11's traces and are no sign of lost records.
		if strings.Contains(w, "dangling") {
			t.Errorf("false alarm on a complete trace: %s", w)
		}
	}
	if r.Inputs[0].Peak == nil || r.Inputs[0].Peak.GPU != "H100 SXM" {
		t.Fatalf("peak for %q: %+v, want the H100 SXM row", r.Inputs[0].GPU, r.Inputs[0].Peak)
	}
	stage := func(name string) *Stage {
		for i := range r.Stages {
			if r.Stages[i].Stage == name {
				return &r.Stages[i]
			}
		}
		t.Fatalf("no stage %s in %d stages", name, len(r.Stages))
		return nil
	}
	den := stage("DenoisingStage")
	steps := float64(truth.Steps)

	// GEMMs: FLOPs exactly 2·M·N·K per launch, TFLOP/s near the CUDA-event figure.
	var bf16Flops, bf16US, fp8Flops, fp8US float64
	for _, k := range den.Kernels {
		if k.Category != "gemm" {
			continue
		}
		switch k.Dtype {
		case "bf16":
			bf16Flops += k.FLOPs
			bf16US += k.RooflineUS
		case "fp8":
			fp8Flops += k.FLOPs
			fp8US += k.RooflineUS
		default:
			t.Errorf("GEMM row %s has dtype %q", k.Name, k.Dtype)
		}
	}
	var wantBF16, truthBF16MS float64
	for name, g := range truth.GEMM {
		if name == "fp8" {
			continue
		}
		wantBF16 += steps * 2 * float64(g.M*g.K*g.N)
		truthBF16MS += steps * g.MS
	}
	if bf16Flops != wantBF16 {
		t.Errorf("BF16 GEMM FLOPs %.6g, want %.6g (2·M·N·K of the four shapes, %v steps)", bf16Flops, wantBF16, steps)
	}
	// The trace's kernel times leave out the gaps between back-to-back launches that the
	// CUDA-event timing includes, and the profiled GEMMs shared the GPU with the side stream's
	// copy: the triage's figure may be somewhat above the event figure, never far below it.
	checkRatio(t, "BF16 GEMM TFLOP/s", tflops(bf16Flops, bf16US), tflops(wantBF16, truthBF16MS*1e3), 0.95, 1.15)
	if f8 := truth.GEMM["fp8"]; f8.MS > 0 {
		want := steps * 2 * float64(f8.M*f8.K*f8.N)
		if fp8Flops != want {
			t.Errorf("FP8 GEMM FLOPs %.6g, want %.6g", fp8Flops, want)
		}
		checkRatio(t, "FP8 GEMM TFLOP/s", tflops(fp8Flops, fp8US), tflops(want, steps*f8.MS*1e3), 0.95, 1.2)
	}

	// Attention (cuDNN, launched under aten::_cudnn_attention_forward): 4·H·S²·D FLOPs, not
	// causal.
	var attn *KernelRow
	for i := range den.Kernels {
		if den.Kernels[i].Category == "attention" {
			attn = &den.Kernels[i]
		}
	}
	if attn == nil {
		t.Fatal("no attention row")
	}
	wantAttn := steps * 4 * float64(truth.Heads*truth.Tokens*truth.Tokens*truth.HeadDim)
	if attn.FLOPs != wantAttn || attn.Bound != BoundCompute {
		t.Errorf("attention row %s: %.6g FLOPs, bound %q; want %.6g, compute", attn.Name, attn.FLOPs, attn.Bound, wantAttn)
	}
	checkRatio(t, "attention TFLOP/s", attn.TFLOPS, tflops(wantAttn, steps*truth.SDPA.MS*1e3), 0.9, 1.15)

	// The side stream's device-to-device copy: every byte read and written in HBM, so its
	// share of the HBM roof is at most 100 %; and it ran beside the GEMMs.
	var cp *KernelRow
	for i := range den.Kernels {
		if strings.HasPrefix(den.Kernels[i].Name, "Memcpy DtoD") {
			cp = &den.Kernels[i]
		}
	}
	if cp == nil {
		t.Fatal("no device-to-device copy row")
	}
	if want := steps * 2 * float64(truth.CopyBytes); cp.Bytes != want || cp.Bound != BoundMemory || cp.PctOfPeak <= 0 || cp.PctOfPeak > 100 {
		t.Errorf("copy row: %.6g bytes, %.1f%% %s; want %.6g bytes (read and written), memory-bound within the roof", cp.Bytes, cp.PctOfPeak, cp.Bound, want)
	}
	if den.Summary.Streams != 2 || den.Summary.MultiStreamNS <= 0 {
		t.Errorf("streams %d, overlap %d ns; want 2 streams overlapping", den.Summary.Streams, den.Summary.MultiStreamNS)
	}

	// Idle: the host slept between steps, so at least (steps-1) sleeps of the window are
	// host wait, and the stage reads as host-bound.
	if den.Idle == nil || den.HostBound == nil {
		t.Fatal("no idle breakdown")
	}
	if min := (steps - 1) * truth.HostSleepMS * 1e3; den.Idle.HostWaitUS < min || den.Idle.HostWaitUS > den.Idle.WindowUS {
		t.Errorf("host wait %.0f µs; want at least %.0f µs (the sleeps) and within the %.0f µs window", den.Idle.HostWaitUS, min, den.Idle.WindowUS)
	}
	if sum := den.Idle.BusyUS + den.Idle.HostWaitUS + den.Idle.KernelWaitUS + den.Idle.OtherUS; sum < den.Idle.WindowUS*0.999 || sum > den.Idle.WindowUS*1.001 {
		t.Errorf("busy and idle parts sum to %.1f µs, window %.1f µs", sum, den.Idle.WindowUS)
	}
	if !den.HostBound.HostBound {
		t.Errorf("stage not host-bound: %+v", den.HostBound)
	}

	// The decoding stage is three replays of a five-kernel CUDA graph: no CPU op of its own.
	dec := stage("DecodingStage")
	if dec.KernelCount != 3*5 {
		t.Errorf("decoding stage has %d GPU ops, want 15 (3 graph replays of 5 kernels)", dec.KernelCount)
	}
	for _, k := range dec.Kernels {
		if len(k.Locations) == 0 || !strings.Contains(k.Locations[0].Location, "graph replay") {
			t.Errorf("decoding kernel %s located at %+v, want a graph replay", k.Name, k.Locations)
		}
	}
}

// checkRatio fails when got/want is outside [lo, hi].
func checkRatio(t *testing.T, what string, got, want, lo, hi float64) {
	t.Helper()
	if want <= 0 || got/want < lo || got/want > hi {
		t.Errorf("%s: triage %.1f, independent %.1f (ratio %.3f, want %.2f–%.2f)", what, got, want, got/want, lo, hi)
	} else {
		t.Logf("%s: triage %.1f, independent %.1f (ratio %.3f)", what, got, want, got/want)
	}
}

// tflops is TFLOP/s from FLOPs and microseconds.
func tflops(flops, us float64) float64 { return flops / us / 1e6 }

// Two-trace mode on the real H100 recordings: the same loop with Python stacks (mapping) and
// with each step's block replayed as a CUDA graph (formal). Every kernel of the block runs in
// the formal trace with no CPU op or Python frame of its own; the mapping trace must give each
// the site it has there (block's frame, the FP8 GEMM's own function), while the times stay the
// formal trace's.
func TestH100MappingFormal(t *testing.T) {
	mapping, err := Discover("testdata/real/h100-torch-model-loop-stack.json.gz", DiscoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const formal = "testdata/real/h100-torch-model-loop-graph.json.gz"
	alone := triageReal(t, formal, nil)
	r := triageReal(t, formal, &mapping)
	if r.Mode != ModeMappingFormal {
		t.Fatalf("mode %s", r.Mode)
	}
	var den, den0 *Stage
	for i := range r.Stages {
		if r.Stages[i].Stage == "DenoisingStage" {
			den, den0 = &r.Stages[i], &alone.Stages[i]
		}
	}
	if den == nil || den0.Stage != "DenoisingStage" {
		t.Fatal("no denoising stage")
	}
	if den.KernelTimeUS != den0.KernelTimeUS || len(den.Kernels) != len(den0.Kernels) {
		t.Errorf("the mapping changed the formal trace's times: %.1f µs over %d rows, alone %.1f µs over %d", den.KernelTimeUS, len(den.Kernels), den0.KernelTimeUS, len(den0.Kernels))
	}
	graphKernels, mapped := 0, 0
	for i, k := range den.Kernels {
		if len(den0.Kernels[i].Locations) == 0 || !strings.Contains(den0.Kernels[i].Locations[0].Location, "graph replay") {
			continue // not a graph kernel on its own (the copy between replays)
		}
		graphKernels++
		loc := k.Locations[0]
		want := "block"
		if strings.HasPrefix(loc.CPUOp, "aten::_scaled_mm") {
			want = "fp8_gemm"
		}
		if !strings.HasSuffix(loc.CPUOp, "(mapping)") || !strings.Contains(loc.Location, "record_model_loop.py") || !strings.HasSuffix(loc.Location, " "+want) {
			t.Errorf("%s: site %q, CPU op %q; want the mapping trace's record_model_loop.py %s", k.Name, loc.Location, loc.CPUOp, want)
		} else {
			mapped++
		}
	}
	if graphKernels < 8 || mapped != graphKernels {
		t.Errorf("%d of %d graph-replayed kernel rows took their site from the mapping trace, want all (at least 8)", mapped, graphKernels)
	}

	// The graph replays' roofline comes from the mapping trace's shapes: both recordings ran
	// the same steps, so the FLOPs are the shapes' counts exactly, over the formal trace's time.
	var truth h100TruthDoc
	readTruth(t, h100Truth, &truth)
	var bf16, attn float64
	for _, k := range den.Kernels {
		if k.Category == "memory" {
			if k.RooflineFrom != "" {
				t.Errorf("%s: a copy has bytes of its own, yet its figures came from %q", k.Name, k.RooflineFrom)
			}
			continue
		}
		if k.RooflineFrom != RooflineFromMapping || k.RooflineUS != k.TotalUS {
			t.Errorf("%s: roofline from %q over %.1f of %.1f µs; want the mapping trace's, over the row's time", k.Name, k.RooflineFrom, k.RooflineUS, k.TotalUS)
		}
		switch {
		case k.Category == "gemm" && k.Dtype == "bf16":
			bf16 += k.FLOPs
		case k.Category == "attention":
			attn += k.FLOPs
		}
	}
	var want float64
	for name, g := range truth.GEMM {
		if name != "fp8" {
			want += float64(truth.Steps) * 2 * float64(g.M*g.K*g.N)
		}
	}
	if math.Abs(bf16-want) > want*1e-9 {
		t.Errorf("graph-replayed BF16 GEMM FLOPs %.6g, want %.6g", bf16, want)
	}
	if wantAttn := float64(truth.Steps) * 4 * float64(truth.Heads*truth.Tokens*truth.Tokens*truth.HeadDim); math.Abs(attn-wantAttn) > wantAttn*1e-9 {
		t.Errorf("graph-replayed attention FLOPs %.6g, want %.6g", attn, wantAttn)
	}
}

// A kernel name only some of whose mapping-trace launches had a cost gives its graph replays
// no figures: any per-launch average would be a guess.
func TestMappingRoofOnlyWhenEveryLaunchCosted(t *testing.T) {
	full := &kagg{count: 4, roof: roofAgg{flops: 400, bytes: 40, ns: 10, n: 4, class: "bf16"}}
	part := &kagg{count: 4, roof: roofAgg{flops: 100, bytes: 10, ns: 3, n: 1, class: "bf16"}}
	var r mapRoof
	r.add(full)
	if !r.usable() {
		t.Fatal("every launch costed: not usable")
	}
	if got := r.scaled(2, 5); got.flops != 200 || got.bytes != 20 || got.ns != 5 || got.class != "bf16" {
		t.Errorf("two launches of a 100-FLOP kernel: %+v", got)
	}
	r.add(part)
	if r.usable() {
		t.Errorf("5 of 8 launches costed, yet usable: %+v", r)
	}
}

// LLM-decode-like GEMMs on the real H100 (8 tokens through a Llama-8B-sized MLP): memory-bound,
// with the bytes of both operands and the output exactly, and GB/s near the CUDA-event figure.
// cuBLAS splits the down projection's K (a split-K kernel and its reduction): the GEMM's cost
// goes to the first kernel, the reduction shows time without figures.
func TestH100Decode(t *testing.T) {
	var truth struct {
		Steps, Tokens, Hidden, Inter int64
		Up, Down                     struct{ MS, Bytes, GBps float64 }
	}
	readTruth(t, "testdata/real/h100-torch-decode.truth.json", &truth)
	r := triageReal(t, "testdata/real/h100-torch-decode.json.gz", nil)
	if len(r.Stages) != 1 || r.Stages[0].Stage != StageDecode {
		t.Fatalf("stages %d (%v), want decode alone", len(r.Stages), r.Stages)
	}
	var gemms, reduce int
	var bytes, ns float64
	for _, k := range r.Stages[0].Kernels {
		switch {
		case k.Category == "gemm" && k.FLOPs > 0:
			gemms++
			if k.Bound != BoundMemory || k.PctOfPeak <= 0 || k.PctOfPeak > 100 {
				t.Errorf("%s: %.1f%% %s, want memory-bound within the roof", k.Name, k.PctOfPeak, k.Bound)
			}
			bytes += k.Bytes
			ns += k.RooflineUS * 1e3
		case strings.Contains(k.Name, "splitKreduce"):
			reduce++
			if k.RooflineUS != 0 {
				t.Errorf("split-K reduction %s has figures (%.1f µs costed): the GEMM's cost was counted twice", k.Name, k.RooflineUS)
			}
		}
	}
	if gemms != 2 {
		t.Fatalf("%d costed GEMM rows, want 2 (up and down projections)", gemms)
	}
	if want := float64(truth.Steps) * (truth.Up.Bytes + truth.Down.Bytes); bytes != want {
		t.Errorf("GEMM bytes %.6g, want %.6g", bytes, want)
	}
	// Event timings include the launch gaps and the split-K reduction; the rows' do not.
	checkRatio(t, "decode GEMM GB/s", bytes/ns, (truth.Up.Bytes+truth.Down.Bytes)/((truth.Up.MS+truth.Down.MS)*1e6), 0.95, 1.2)
	if reduce == 0 {
		t.Log("no split-K reduction in this recording")
	}
}
