package triage

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/kineto/kinetogen"
	"github.com/sglprof/runner/reports/trace"
)

// checkFusionInvariants asserts issue 17's rule on every stage of a report: a kernel is
// evidence for at most one fusion row, each row's share is the share of the kernels it cites,
// and the rows' shares add up to at most the share of those kernels.
func checkFusionInvariants(t *testing.T, r *Report) {
	t.Helper()
	for _, s := range r.Stages {
		share := map[string]float64{}
		for _, k := range s.Kernels {
			share[k.Name] = k.SharePct
		}
		owner := map[string]string{}
		var rowsSum, citedSum float64
		for _, f := range s.Fusions {
			var mine float64
			for ci, k := range f.cited {
				if o, ok := owner[k]; ok {
					t.Errorf("stage %s: kernel %q is evidence for both %q and %q", s.Stage, k, o, f.Pattern)
					continue
				}
				owner[k] = f.Pattern
				if c := f.citedPct[ci]; c > share[k]+1e-9 {
					t.Errorf("stage %s: %q counts %.2f%% of %q, which takes %.2f%%", s.Stage, f.Pattern, c, k, share[k])
				}
				mine += f.citedPct[ci]
			}
			if math.Abs(mine-f.SharePct) > 0.01 {
				t.Errorf("stage %s: %q claims %.2f%% but its kernels take %.2f%%", s.Stage, f.Pattern, f.SharePct, mine)
			}
			rowsSum += f.SharePct
			citedSum += mine
		}
		if rowsSum > citedSum+0.01 {
			t.Errorf("stage %s: fusion rows add to %.2f%%, the kernels they cite to %.2f%%", s.Stage, rowsSum, citedSum)
		}
	}
}

func fusionByPattern(s *Stage, pattern string) *FusionRow {
	for i := range s.Fusions {
		if s.Fusions[i].Pattern == pattern {
			return &s.Fusions[i]
		}
	}
	return nil
}

// The simulated Qwen-Image DiT block (kinetogen, as backends/sim writes it): before issue 17 the
// norm + scale + shift and modulation rows cited the same kernels (5.8% each), SwiGLU was
// suggested for the plain GELU MLP, and "fusion available" was claimed for norm + scale + shift
// while fused_scale_shift_gate_kernel ran.
func TestFusionQwenImageNoDoubleCounting(t *testing.T) {
	tr, _, _ := genTrace(t, kinetogen.Config{Flavor: kinetogen.FlavorDiffusion, Steps: 2, Layers: 4, WithStack: true, Seed: 1})
	r := analyzeOne(t, tr, "Qwen/Qwen-Image")
	checkFusionInvariants(t, r)
	den := findStage(t, r, kinetogen.StageDenoising)
	if f := fusionByPattern(den, "Fused activation-and-mul (SwiGLU/GeGLU)"); f != nil {
		t.Errorf("SwiGLU/GeGLU suggested for a GELU MLP with no gate multiply: %+v", *f)
	}
	nss := fusionByPattern(den, "Diffusion fused norm + scale + shift")
	if nss == nil || nss.Status != StatusPresent {
		t.Fatalf("norm + scale + shift = %+v, want present (fused_scale_shift_gate_kernel runs); rows %+v", nss, den.Fusions)
	}
	if len(nss.SplitRemaining) == 0 || !strings.Contains(nss.Rationale, "still run") ||
		!strings.Contains(strings.Join(nss.SplitRemaining, " "), "denoising.py") {
		t.Errorf("present row does not say which split launches remain and where: %+v", *nss)
	}
	// The residual add runs once per block but sits beside a norm only where the last block
	// meets the final norm: those launches are cited, not every add of the model.
	for _, r := range nss.SplitRemaining {
		if strings.Contains(r, "CUDAFunctor_add") && !strings.Contains(r, " of ") {
			t.Errorf("present row cites every residual add as a remaining split launch: %q", r)
		}
	}
	for _, f := range den.Fusions {
		if f.Status == StatusAvailable && strings.Contains(f.Pattern, "scale + shift") {
			t.Errorf("%q reported available while its family's fused kernel runs", f.Pattern)
		}
	}
}

func TestFusionInvariantsGeneratedAndGolden(t *testing.T) {
	checkFusionInvariants(t, analyzeGolden(t))
	tr, _, _ := genTrace(t, kinetogen.Config{Flavor: kinetogen.FlavorLLM, Steps: 3, Layers: 3, CommStream: true, WithStack: true, Seed: 2})
	checkFusionInvariants(t, analyzeOne(t, tr, "Qwen/Qwen3-8B"))
	tr, _, _ = genTrace(t, kinetogen.Config{Flavor: kinetogen.FlavorDiffusion, Steps: 2, Layers: 3, AllStages: true, WithStack: true, Seed: 3})
	checkFusionInvariants(t, analyzeOne(t, tr, "black-forest-labs/FLUX.1-dev"))
}

func TestFusionInvariantsFixtures(t *testing.T) {
	for _, name := range []string{
		"tracelens-mi300x-sglang-qwen3-8b-decode-hipgraph.json.gz",
		"hta-a100-ddp-nccl-rank0.json.gz",
		"hta-a100-cudagraph-multistream-rank0.json.gz",
	} {
		t.Run(name, func(t *testing.T) { checkFusionInvariants(t, analyzeFixture(t, name)) })
	}
}

// A plain GELU MLP (GEMM, GELU, GEMM, residual add) has no gate multiply: no SwiGLU/GeGLU row,
// even though a Python location under multimodal_gen contains the letters "mul".
func TestFusionNeedsAllParts(t *testing.T) {
	const loc = "python/sglang/multimodal_gen/runtime/models/dits/qwen_image.py:400 forward"
	rows := []KernelRow{
		row("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT", 50, loc),
		row("triton_poi_fused_gelu_2", 5, loc),
		row("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul> >(int)", 3, loc),
		row("triton_poi_fused_add_mul_0", 3, loc),
	}
	got := DefaultCatalog().Match(rows, 100_000, "Qwen/Qwen-Image", 0)
	if s, f := statusOf(got, "Fused activation-and-mul (SwiGLU/GeGLU)"); s != "absent" {
		t.Errorf("GELU MLP: SwiGLU/GeGLU %q %+v, want absent", s, f)
	}
}

// Issue 17 item 6: two kernels that differ only inside a template argument must not print the
// same in one table.
func TestDistinctShortNames(t *testing.T) {
	names := []string{
		"void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul> >",
		"void at::native::vectorized_elementwise_kernel<4, at::native::threshold_backward_kernel<c10::BFloat16>, std::array<char*, 3ul> >",
		"nvjet_tst_64x8_64x16_4x1_v_bz_TNT",
	}
	for _, w := range []int{40, 60, 100} {
		got := distinctShort(len(names), func(i int) string { return names[i] }, w)
		if got[0] == got[1] {
			t.Errorf("width %d: add and threshold_backward both print %q", w, got[0])
		}
		if got[2] != names[2] {
			t.Errorf("width %d: a short name changed: %q", w, got[2])
		}
	}
}

// Issue 17 item 7: stages in pipeline order, one unit per table in its header, and a legend that
// explains each verdict word once.
func TestRenderOrderUnitsLegend(t *testing.T) {
	tr, _, _ := genTrace(t, kinetogen.Config{Flavor: kinetogen.FlavorDiffusion, Steps: 2, Layers: 2, AllStages: true, WithStack: true, Seed: 4})
	r := analyzeOne(t, tr, "Qwen/Qwen-Image")
	var order []string
	for _, s := range r.Stages {
		order = append(order, s.Stage)
	}
	want := []string{kinetogen.StageTextEncoding, kinetogen.StageDenoising, kinetogen.StageDecoding}
	if strings.Join(order, ",") != strings.Join(want, ",") {
		t.Errorf("stage order %v, want pipeline order %v", order, want)
	}
	var b strings.Builder
	if err := Render(&b, r, FormatText, DefaultCutoff); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, h := range []string{"GPU time (ms)", "Legend", "- headroom: ", "- check deps: "} {
		if !strings.Contains(out, h) {
			t.Errorf("output lacks %q", h)
		}
	}
	if strings.Count(out, "- headroom: ") != 1 {
		t.Errorf("headroom explained %d times, want once", strings.Count(out, "- headroom: "))
	}
	// No table cell carries its own unit: the header does.
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "P1 ") || strings.HasPrefix(line, "P2 ") {
			if strings.Contains(line, " us,") || strings.Contains(line, " ms ") {
				t.Errorf("overlap row carries a unit: %q", line)
			}
		}
	}
}

// FuzzFusionRowsDisjoint: whatever mix of real kernel families a stage runs, no kernel is cited
// by two fusion rows and each row's share is that of its own kernels.
func FuzzFusionRowsDisjoint(f *testing.F) {
	f.Add([]byte{0, 5, 1, 5, 2, 9, 3, 4, 4, 4})
	f.Add([]byte{5, 1, 6, 2, 7, 3, 8, 4, 9, 5, 10, 6, 11, 7, 12, 8})
	names := []string{kSilu, kMul, kNorm, kNCCL, kGEMM, "triton_poi_fused_add_mul_0", "triton_poi_fused_gelu_2",
		"fused_scale_shift_gate_kernel", "void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>",
		"void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, true>",
		"fused_qknorm_rope_kernel", "void rotary_embedding_kernel<c10::BFloat16, true>", "fused_qknorm_warp",
		"void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul> >"}
	locs := []string{"python/sglang/srt/layers/activation.py:60 forward_native", "python/sglang/multimodal_gen/runtime/layers/layernorm.py:10 forward"}
	f.Fuzz(func(t *testing.T, data []byte) {
		seen := map[string]bool{}
		var rows []KernelRow
		var total int64
		for i := 0; i+1 < len(data); i += 2 {
			n := names[int(data[i])%len(names)]
			if seen[n] {
				continue
			}
			seen[n] = true
			r := row(n, float64(data[i+1])+1, locs[int(data[i])%len(locs)])
			rows = append(rows, r)
			total += r.totalNS
		}
		for i := range rows {
			rows[i].SharePct = pct(rows[i].totalNS, total)
		}
		for _, model := range []string{"", "Qwen/Qwen-Image"} {
			owner := map[string]string{}
			for _, fr := range DefaultCatalog().Match(rows, total, model, 2) {
				var ns int64
				for _, k := range fr.cited {
					if o, ok := owner[k]; ok {
						t.Fatalf("%q cited by %q and %q", k, o, fr.Pattern)
					}
					owner[k] = fr.Pattern
					for _, r := range rows {
						if r.Name == k {
							ns += r.totalNS
						}
					}
				}
				if math.Abs(pct(ns, total)-fr.SharePct) > 1e-9 {
					t.Fatalf("%q share %v, its kernels %v", fr.Pattern, fr.SharePct, pct(ns, total))
				}
			}
		}
	})
}

// mlpTrace is a stage of two transformer blocks on one stream: attention, then an MLP whose
// GELU is followed by gated (a multiply as the very next launch, a gated MLP) or not (a plain
// GELU MLP, and a multiply of the attention code two launches later: the old 3-op window took
// it for the gate and suggested SwiGLU/GeGLU at high confidence).
func mlpTrace(gated bool) *trace.Trace {
	const (
		kGelu   = "triton_poi_fused_gelu_2"
		pyAttnM = "python/sglang/multimodal_gen/runtime/layers/attention/attention.py(210): forward"
		pyMLP   = "python/sglang/multimodal_gen/runtime/layers/mlp.py(80): forward"
	)
	b := newTB("mlp.json")
	var tc, g int64
	op := func(k, py, cpu string, dur int64) {
		f := b.frame(py, tc, tc+5_000, trace.NoID)
		c := b.cpuop(cpu, tc+100, tc+4_900, f)
		l := b.launch("cudaLaunchKernel", tc+200, tc+1_200, false)
		b.kernel(k, 0, 7, g, g+dur, l, c)
		tc += 6_000
		g += dur + 1_000
	}
	for range 2 {
		op(kGEMM, pyAttnM, "aten::linear", 40_000)
		op(kAttn, pyAttnM, "sgl_kernel::fwd", 30_000)
		op(kGEMM, pyAttnM, "aten::linear", 20_000)
		op(kGEMM, pyMLP, "aten::linear", 40_000)
		op(kGelu, pyMLP, "aten::gelu", 6_000)
		if gated {
			op(kMul, pyMLP, "aten::mul", 5_000)
		}
		op(kGEMM, pyMLP, "aten::linear", 40_000)
		if !gated {
			op(kMul, pyAttnM, "aten::mul", 5_000)
		}
	}
	return b.t
}

// Issue 17: a pattern's parts must be related, not only present in the stage.
func TestFusionPartsMustRunTogether(t *testing.T) {
	const act = "Fused activation-and-mul (SwiGLU/GeGLU)"
	for _, gated := range []bool{false, true} {
		tr := mlpTrace(gated)
		r, err := Analyze(context.Background(), Inputs{Files: []Input{{Path: "mlp.json", Stage: StageAll, Rank: NoRank}}},
			Options{Open: opener(map[string]*trace.Trace{"mlp.json": tr})})
		if err != nil {
			t.Fatal(err)
		}
		checkFusionInvariants(t, r)
		s, fr := statusOf(r.Stages[0].Fusions, act)
		switch {
		case !gated && s != "absent":
			t.Errorf("GELU MLP with an unrelated multiply: SwiGLU/GeGLU %q %+v, want absent", s, fr)
		case gated && s != StatusAvailable:
			t.Errorf("gated MLP (GELU then mul back to back): SwiGLU/GeGLU %q %+v, want available", s, fr)
		}
	}
}

// Issue 17: the modulation pattern (residual + norm + scale + shift) had the plain norm + scale
// + shift pattern's parts and nothing more, so a norm with a fused add+mul was a residual
// modulation candidate. It needs its residual add now.
func TestFusionResidualModulationNeedsResidualAdd(t *testing.T) {
	const (
		loc   = "python/sglang/multimodal_gen/runtime/models/dits/qwen_image.py:400 forward"
		resid = "Diffusion fused residual + norm + scale + shift (modulation)"
		plain = "Diffusion fused norm + scale + shift"
	)
	norm := row("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, true>", 5, loc)
	addMul := row("triton_poi_fused_add_mul_0", 5, loc)
	add := row("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul> >(int)", 5, loc)
	got := DefaultCatalog().Match([]KernelRow{norm, addMul}, 100_000, "Qwen/Qwen-Image", 0)
	if s, f := statusOf(got, resid); s != "absent" {
		t.Errorf("norm + fused add*mul, no residual add: %s %q %+v, want absent", resid, s, f)
	}
	if s, _ := statusOf(got, plain); s != StatusAvailable {
		t.Errorf("norm + fused add*mul: %s %q, want available", plain, s)
	}
	got = DefaultCatalog().Match([]KernelRow{norm, addMul, add}, 100_000, "Qwen/Qwen-Image", 0)
	if s, _ := statusOf(got, resid); s != StatusAvailable {
		t.Errorf("residual add + norm + fused add*mul: %s %q, want available (rows %+v)", resid, s, got)
	}
}

// Issue 17: JSON evidence stopped at "+3 more kernels"; the report keeps every cited kernel and
// only the text and Markdown tables abbreviate.
func TestFusionEvidenceComplete(t *testing.T) {
	const loc = "python/sglang/multimodal_gen/runtime/models/dits/qwen_image.py:400 forward"
	rows := []KernelRow{row("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, true>", 5, loc)}
	for i := range MaxEvidence + 2 {
		rows = append(rows, row(fmt.Sprintf("triton_poi_fused_add_mul_%d", i), 5, loc))
	}
	got := DefaultCatalog().Match(rows, 100_000, "Qwen/Qwen-Image", 0)
	_, f := statusOf(got, "Diffusion fused norm + scale + shift")
	if f == nil {
		t.Fatalf("no norm + scale + shift row: %+v", got)
	}
	if len(f.Evidence) != len(rows) || strings.Contains(strings.Join(f.Evidence, " "), "more kernels") {
		t.Errorf("evidence %q, want all %d kernels", f.Evidence, len(rows))
	}
	if a := abbrev(f.Evidence); len(a) != MaxEvidence+1 || !strings.Contains(a[MaxEvidence], "+3 more kernels") {
		t.Errorf("table evidence %q, want %d kernels and a count", a, MaxEvidence)
	}
}

// One unit per stage: a kernel at 346.8 µs read 0.35 ms in the kernel table
// and 346.8 µs in the overlap table of the same stage (TraceLens decode), and an empty fusion
// table's header named µs beside ms tables.
func TestRenderOneUnitPerStage(t *testing.T) {
	r := &Report{Mode: ModeSingle, Stages: []Stage{{
		Stage: "decode", KernelCount: 3, KernelTimeUS: 9690, BusyUS: 9690, WindowUS: 10370,
		Kernels: []KernelRow{{Name: "gemm", Category: "gemm", TotalUS: 2420, Count: 1, SharePct: 25},
			{Name: "add_rmsnorm_quant_kernel", Category: "norm", TotalUS: 346.8, Count: 1, SharePct: 3.6}},
		Overlap: []OverlapRow{{Priority: "P2", Verdict: VerdictHeadroom, Kernel: "add_rmsnorm_quant_kernel", TotalUS: 346.8,
			SharePct: 3.6, ExclusivePct: 100, DepRisk: DepHigh, Recommendation: RecCheckDeps}},
		Summary: OverlapTotals{MultiStreamNS: 0, PeakStreams: 1, Streams: 1},
	}}}
	for _, f := range []string{FormatText, FormatMarkdown} {
		var b strings.Builder
		if err := Render(&b, r, f, 0); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		if strings.Contains(out, "µs") {
			t.Errorf("%s: a stage whose largest row is 2.42 ms writes µs somewhere:\n%s", f, out)
		}
		for _, h := range []string{"GPU time (ms)", "Related GPU time (ms)", "0.35", "Busy 9.69 ms, 2+-stream overlap 0.00 ms"} {
			if !strings.Contains(out, h) {
				t.Errorf("%s: output lacks %q:\n%s", f, h, out)
			}
		}
	}
}

// Review of issue 17: on the simulated Qwen-Image nsys cell, a Triton scale/shift kernel
// (triton_poi_fused_add_mul_1) was the "add" of the residual add + RMSNorm pattern. A fused
// add+mul is not a residual add.
func TestFusionResidualAddExcludesAddMul(t *testing.T) {
	const (
		loc   = "python/sglang/srt/layers/layernorm.py:120 forward"
		resid = "Fused residual add + RMSNorm"
	)
	norm := row("void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>(...)", 5, loc)
	addMul := row("triton_poi_fused_add_mul_1", 5, loc)
	add := row("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul> >(int)", 5, loc)
	got := DefaultCatalog().Match([]KernelRow{norm, addMul}, 100_000, "", 0)
	if s, f := statusOf(got, resid); s != "absent" {
		t.Errorf("RMSNorm + fused add*mul: %s %q %+v, want absent", resid, s, f)
	}
	got = DefaultCatalog().Match([]KernelRow{norm, addMul, add}, 100_000, "", 0)
	if s, _ := statusOf(got, resid); s != StatusAvailable {
		t.Errorf("RMSNorm + plain add: %s %q, want available (rows %+v)", resid, s, got)
	}
}

// Review of issue 17: an nsys export has no Python frames, so the diffusion patterns never
// applied to it; its NVTX ranges (DenoisingStage, denoising_step_N) say it is a diffusion
// pipeline.
func TestFusionDiffusionFromNVTX(t *testing.T) {
	const plain = "Diffusion fused norm + scale + shift"
	for _, tc := range []struct {
		loc  string
		want string
	}{
		{"nvtx: denoising_step_N", StatusPresent},
		{"nvtx: DenoisingStage", StatusPresent},
		{"nvtx: layers.N.attn", "absent"},
		{"nvtx: step[DECODE bs=N]", "absent"},
	} {
		rows := []KernelRow{
			row("fused_scale_shift_gate_kernel", 5, tc.loc),
			row("void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>(...)", 5, tc.loc),
		}
		if s, f := statusOf(DefaultCatalog().Match(rows, 100_000, "", 0), plain); s != tc.want {
			t.Errorf("kernels under %q: %s %q %+v, want %q", tc.loc, plain, s, f, tc.want)
		}
	}
}
