package triage

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/kineto"
	"github.com/sglprof/runner/reports/trace"
)

// kinetoJSON is a minimal Kineto trace: one aten::mm CPU op with recorded shapes whose one
// kernel (launched through cudaLaunchKernel) runs durUS microseconds on device 0, named dev.
func kinetoJSON(dev, dims, types string, durUS string) string {
	return `{"schemaVersion":1,"deviceProperties":[{"id":0,"name":"` + dev + `","totalGlobalMem":85018279936}],
"traceEvents":[
{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":100,"dur":50,"args":{"External id":7,"Input Dims": ` + dims + `, "Input type": ` + types + `}},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":110,"dur":5,"args":{"External id":7,"correlation":70}},
{"ph":"X","cat":"kernel","name":"nvjet_tst_256x128_64x4_1x2_h_bz_coopA_TNN","pid":0,"tid":7,"ts":200,"dur":` + durUS + `,"args":{"External id":7,"correlation":70,"device":0,"stream":7}}
]}`
}

func analyzeJSON(t *testing.T, js string) *Report {
	t.Helper()
	open := func(ctx context.Context, p string) (*trace.Trace, error) {
		tr, err := kineto.Read(ctx, strings.NewReader(js), p, kineto.Options{})
		if err != nil {
			return nil, err
		}
		trace.Link(tr)
		return tr, nil
	}
	r, err := Analyze(context.Background(), Inputs{Files: []Input{{Path: "mm.json", Rank: NoRank}}}, Options{Open: open})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A 4096×4096×4096 BF16 GEMM is 2·4096³ = 137.4 GFLOP: in 1.000 ms that is 137.4 TFLOP/s, and
// on an H100 SXM (989.5 dense BF16 TFLOP/s) 13.9 % of the peak, compute-bound (1365 FLOP per
// byte, far over the ridge of 295).
func TestRooflineGEMM4096OnH100(t *testing.T) {
	r := analyzeJSON(t, kinetoJSON("NVIDIA H100 80GB HBM3", `[[4096, 4096], [4096, 4096]]`, `["c10::BFloat16", "c10::BFloat16"]`, "1000.000"))
	if in := r.Inputs[0]; in.GPU != "NVIDIA H100 80GB HBM3" || in.Peak == nil || in.Peak.GPU != "H100 SXM" {
		t.Fatalf("device %q matched %+v, want the H100 SXM entry", in.GPU, in.Peak)
	}
	k := r.Stages[0].Kernels[0]
	if math.Abs(k.TFLOPS-137.4) > 0.1 {
		t.Errorf("TFLOP/s = %v, want 137.4 ± 0.1", k.TFLOPS)
	}
	wantPct := 2 * math.Pow(4096, 3) / 1e-3 / 1e12 / 989.5 * 100
	if math.Abs(k.PctOfPeak-wantPct) > 1e-9 || math.Abs(k.PctOfPeak-13.89) > 0.01 {
		t.Errorf("pct_of_peak = %v, want %v (13.89)", k.PctOfPeak, wantPct)
	}
	if k.Bound != BoundCompute || k.Dtype != "bf16" {
		t.Errorf("bound %q dtype %q, want compute bf16", k.Bound, k.Dtype)
	}
	if want := 3 * 4096.0 * 4096 * 2; k.Bytes != want {
		t.Errorf("bytes = %v, want %v (A, B read and C written once)", k.Bytes, want)
	}
	if k.RooflineUS != 1000 || k.TotalUS != 1000 {
		t.Errorf("roofline time %v of %v µs, want 1000 of 1000", k.RooflineUS, k.TotalUS)
	}
	var b bytes.Buffer
	if err := Render(&b, r, FormatText, 0); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"TFLOP/s", "137.4", "13.9%", "compute", "H100 SXM"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, b.String())
		}
	}
}

// A GPU the table does not know gets the achieved figures and no percentage or verdict; the
// FP8 peak is the one an FP8 GEMM is measured against.
func TestRooflinePeakSelection(t *testing.T) {
	r := analyzeJSON(t, kinetoJSON("NVIDIA GeForce RTX 3090", `[[4096, 4096], [4096, 4096]]`, `["c10::BFloat16", "c10::BFloat16"]`, "1000"))
	k := r.Stages[0].Kernels[0]
	if r.Inputs[0].Peak != nil || k.PctOfPeak != 0 || k.Bound != "" || math.Abs(k.TFLOPS-137.4) > 0.1 {
		t.Errorf("unknown GPU: peak %+v pct %v bound %q tflops %v; want achieved figures only", r.Inputs[0].Peak, k.PctOfPeak, k.Bound, k.TFLOPS)
	}
	r = analyzeJSON(t, kinetoJSON("NVIDIA H100 80GB HBM3", `[[4096, 4096], [4096, 4096]]`, `["c10::Float8_e4m3fn", "c10::Float8_e4m3fn"]`, "1000"))
	k = r.Stages[0].Kernels[0]
	if want := k.TFLOPS / 1979 * 100; k.Dtype != "fp8" || math.Abs(k.PctOfPeak-want) > 1e-9 {
		t.Errorf("FP8 GEMM: dtype %q pct %v, want fp8 and %v (of 1979 TFLOP/s)", k.Dtype, k.PctOfPeak, want)
	}
	for name, want := range map[string]string{
		"NVIDIA H100 80GB HBM3": "H100 SXM", "NVIDIA H100 PCIe": "H100 PCIe", "NVIDIA H200": "H200 SXM",
		"NVIDIA B200": "B200", "NVIDIA GB200": "GB200", "NVIDIA A100-SXM4-80GB": "A100 SXM 80GB",
		"NVIDIA A100-SXM4-40GB": "A100 SXM 40GB", "NVIDIA A100 80GB PCIe": "A100 PCIe 80GB", "NVIDIA L40S": "L40S",
		"AMD Instinct MI300X": "MI300X", "AMD Instinct MI325X": "MI325X", "AMD Instinct MI355X": "MI355X",
		"NVIDIA H100 NVL": "", "NVIDIA H200 NVL": "", "NVIDIA H100": "",
	} {
		p, ok := PeakFor(name)
		if ok != (want != "") || p.GPU != want {
			t.Errorf("PeakFor(%q) = %q, %v; want %q", name, p.GPU, ok, want)
		}
	}
	for _, p := range Peaks() {
		if p.BF16 <= 0 || p.FP16 <= 0 || p.HBMGBps <= 0 || p.Source == "" {
			t.Errorf("peak entry %+v lacks a figure or its source", p)
		}
	}
}

// The cost formulas on hand-computed cases: attention (causal and not, both layouts),
// convolution, a batched matmul, a transposed weight and an in-place elementwise op.
func TestRooflineCostFormulas(t *testing.T) {
	sep := string(trace.ShapeSep)
	for _, c := range []struct {
		name, dims, types, concrete string
		flops, bytes                float64
	}{
		{"aten::linear", `[[2,3,8],[16,8],[16]]`, `["float","float","float"]`, ``,
			2 * 6 * 16 * 8, 4 * (6*8 + 16*8 + 6*16 + 16)},
		{"aten::bmm", `[[4,5,6],[4,6,7]]`, `["c10::Half","c10::Half"]`, ``,
			2 * 4 * 5 * 6 * 7, 2 * 4 * (5*6 + 6*7 + 5*7)},
		{"aten::_scaled_dot_product_flash_attention", `[[1,2,4,8],[1,2,4,8],[1,2,4,8]]`, `["c10::BFloat16","c10::BFloat16","c10::BFloat16"]`, `["","","","0.","True"]`,
			2 * 2 * (4 + 3 + 2 + 1) * 16, 2 * 4 * 64},
		{"aten::_flash_attention_forward", `[[1,4,2,8],[1,4,2,8],[1,4,2,8],[],[]]`, `["c10::BFloat16","c10::BFloat16","c10::BFloat16","",""]`, `["","","","","","4","4","0.","False"]`,
			2 * 2 * 16 * 16, 2 * 4 * 64},
		{"aten::_flash_attention_forward", `[[5,2,8],[5,2,8],[5,2,8],[2],[2]]`, `["c10::BFloat16","c10::BFloat16","c10::BFloat16","int","int"]`, ``,
			0, 0}, // ragged: per-sequence lengths are not in the shapes
		// SDPA's cuDNN backend as PyTorch 2.11 records it: 13 inputs, is_causal at 10.
		{"aten::_cudnn_attention_forward", `[[1,2,4,8],[1,2,4,8],[1,2,4,8],[],[],[],[],[],[],[],[],[],[]]`, `["c10::BFloat16","c10::BFloat16","c10::BFloat16","","","","Scalar","Scalar","Scalar","Scalar","Scalar","Scalar",""]`, `["","","","","","","4","4","False","0.","True","False",""]`,
			2 * 2 * (4 + 3 + 2 + 1) * 16, 2 * 4 * 64},
		{"aten::_cudnn_attention_forward", `[[5,2,8],[5,2,8],[5,2,8],[],[2],[2]]`, `["c10::BFloat16","c10::BFloat16","c10::BFloat16","","int","int"]`, ``,
			0, 0}, // packed (varlen): per-sequence lengths are not in the shapes
		{"aten::cudnn_convolution", `[[1,3,8,8],[4,3,3,3]]`, `["float","float"]`, `["","","[1, 1]","[1, 1]","[1, 1]","1"]`,
			2 * 4 * 64 * 3 * 9, 4 * (192 + 108 + 256)},
		{"aten::mul_", `[[4,8],[8]]`, `["c10::BFloat16","c10::BFloat16"]`, ``,
			32, 2 * (32 + 8 + 32)},
		{"aten::mm", `[[3,4],[5,6]]`, `["float","float"]`, ``, 0, 0}, // K does not match: no guess
	} {
		got := costOf(c.name, c.dims+sep+c.types+sep+c.concrete)
		if got.flops != c.flops || got.bytes != c.bytes || got.ok != (c.flops+c.bytes > 0) {
			t.Errorf("%s %s: flops %v bytes %v ok %v; want %v %v", c.name, c.dims, got.flops, got.bytes, got.ok, c.flops, c.bytes)
		}
	}
}

const realShapesTrace = "testdata/real/tracelens-mi300x-sglang-qwen3-8b-prefilldecode.json.gz"

// FLOPs on a public real trace with recorded shapes: every GEMM row's FLOPs equal an
// independent count — the file walked as generic JSON, each kernel joined to the aten::mm CPU
// op of its External id, 2·M·N·K per op from its Input Dims (each op counted once).
func TestRooflineRealTraceGEMMFlops(t *testing.T) {
	// Only the fields the count needs, decoded by encoding/json (no code of the reader).
	var doc struct {
		TraceEvents []struct {
			Cat, Name string
			Args      struct {
				ExternalID *float64          `json:"External id"`
				Dims       []json.RawMessage `json:"Input Dims"`
			}
		} `json:"traceEvents"`
	}
	decodeGzipJSON(t, realShapesTrace, &doc)
	mmFlops := map[float64]float64{} // External id -> 2·M·N·K
	for _, e := range doc.TraceEvents {
		if e.Cat != "cpu_op" || e.Name != "aten::mm" {
			continue
		}
		var a, b []float64
		if err := json.Unmarshal(e.Args.Dims[0], &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(e.Args.Dims[1], &b); err != nil {
			t.Fatal(err)
		}
		if len(a) != 2 || len(b) != 2 || a[1] != b[0] {
			t.Fatalf("aten::mm with A %v and B %v", a, b)
		}
		mmFlops[*e.Args.ExternalID] = 2 * a[0] * b[1] * a[1]
	}
	want := map[string]float64{} // kernel name -> FLOPs
	done := map[float64]bool{}
	for _, e := range doc.TraceEvents {
		if e.Cat != "kernel" || e.Args.ExternalID == nil {
			continue
		}
		id := *e.Args.ExternalID
		if fl, ok := mmFlops[id]; ok && !done[id] {
			done[id] = true
			want[Canonical(e.Name)] += fl
		}
	}
	if len(done) < 100 {
		t.Fatalf("independent count found %d aten::mm ops with kernels; the fixture has 145", len(done))
	}
	in, err := Discover(realShapesTrace, DiscoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Analyze(context.Background(), in, Options{Open: openKineto})
	if err != nil {
		t.Fatal(err)
	}
	if p := r.Inputs[0].Peak; p == nil || p.GPU != "MI300X" {
		t.Fatalf("device %q matched %+v, want MI300X", r.Inputs[0].GPU, p)
	}
	got := map[string]float64{}
	gemmRows := 0
	for _, s := range r.Stages {
		for _, k := range s.Kernels {
			if k.Category != "gemm" {
				continue
			}
			gemmRows++
			got[k.Name] += k.FLOPs
			if k.FLOPs > 0 && (k.Bound == "" || k.PctOfPeak <= 0 || k.Dtype != "bf16") {
				t.Errorf("%s %s: bound %q pct %v dtype %q; want a verdict against the MI300X BF16 peak", s.Stage, k.Name, k.Bound, k.PctOfPeak, k.Dtype)
			}
		}
	}
	if gemmRows == 0 || len(got) != len(want) {
		t.Fatalf("GEMM rows %d with kernels %v; independent count has %v", gemmRows, keys(got), keys(want))
	}
	for name, w := range want {
		if g := got[name]; math.Abs(g-w) > 1e-9*w {
			t.Errorf("%s: FLOPs %v, independent count %v", name, g, w)
		}
	}
	t.Logf("%d GEMM rows, %d aten::mm ops, %.4g FLOPs", gemmRows, len(done), sum(want))
}

func keys(m map[string]float64) []string {
	var out []string
	for k := range m {
		out = append(out, fmt.Sprintf("%.40s", k))
	}
	return out
}

func sum(m map[string]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}

// roofJSON is a small H100 trace with a costed GEMM, an elementwise add, a layer norm, a
// memcpy with its byte count and a kernel whose CPU op recorded no shapes.
const roofJSON = `{"schemaVersion":1,"deviceProperties":[{"id":0,"name":"NVIDIA H100 80GB HBM3"}],
"traceEvents":[
{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":100,"dur":50,"args":{"External id":1,"Input Dims":[[4096,4096],[4096,4096]],"Input type":["c10::BFloat16","c10::BFloat16"],"Concrete Inputs":["",""]}},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":110,"dur":5,"args":{"External id":1,"correlation":10}},
{"ph":"X","cat":"kernel","name":"nvjet_tst_256x128_64x4_1x2_h_bz_coopA_TNN","pid":0,"tid":7,"ts":200,"dur":1000,"args":{"External id":1,"correlation":10,"device":0,"stream":7}},
{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":160,"dur":20,"args":{"External id":2,"Input Dims":[[4096,4096],[4096,4096],[]],"Input type":["c10::BFloat16","c10::BFloat16","Scalar"],"Concrete Inputs":["","","1"]}},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":165,"dur":5,"args":{"External id":2,"correlation":20}},
{"ph":"X","cat":"kernel","name":"void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<c10::BFloat16> >(int)","pid":0,"tid":7,"ts":1300,"dur":40,"args":{"External id":2,"correlation":20,"device":0,"stream":7}},
{"ph":"X","cat":"cpu_op","name":"aten::native_layer_norm","pid":1,"tid":1,"ts":190,"dur":20,"args":{"External id":3,"Input Dims":[[4096,4096],[],[4096],[4096],[]],"Input type":["c10::BFloat16","ScalarList","c10::BFloat16","c10::BFloat16","Scalar"],"Concrete Inputs":["","[4096]","","","1e-05"]}},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":195,"dur":5,"args":{"External id":3,"correlation":30}},
{"ph":"X","cat":"kernel","name":"void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int)","pid":0,"tid":7,"ts":1400,"dur":30,"args":{"External id":3,"correlation":30,"device":0,"stream":7}},
{"ph":"X","cat":"cpu_op","name":"sgl_kernel::apply_rope_with_cos_sin_cache_inplace","pid":1,"tid":1,"ts":220,"dur":20,"args":{"External id":4}},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":225,"dur":5,"args":{"External id":4,"correlation":40}},
{"ph":"X","cat":"kernel","name":"void flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheKernel<true, 128u, 8u, 16u, __nv_bfloat16, long>(int)","pid":0,"tid":7,"ts":1500,"dur":20,"args":{"External id":4,"correlation":40,"device":0,"stream":7}},
{"ph":"X","cat":"cuda_runtime","name":"cudaMemcpyAsync","pid":1,"tid":1,"ts":250,"dur":5,"args":{"External id":5,"correlation":50}},
{"ph":"X","cat":"gpu_memcpy","name":"Memcpy DtoD (Device -> Device)","pid":0,"tid":7,"ts":1600,"dur":50,"args":{"External id":5,"correlation":50,"device":0,"stream":7,"bytes":67108864}}
]}`

func TestRooflineGolden(t *testing.T) {
	r := analyzeJSON(t, roofJSON)
	for _, f := range []string{FormatText, FormatMarkdown, FormatJSON, FormatCSV} {
		t.Run(f, func(t *testing.T) {
			var buf bytes.Buffer
			if err := Render(&buf, r, f, 0); err != nil {
				t.Fatal(err)
			}
			p := "testdata/roofline." + f + ".golden"
			if *update {
				if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(p)
			if err != nil {
				t.Fatalf("%v (run go test ./reports/triage -run TestRooflineGolden -update to create it)", err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("%s output differs from %s (rerun with -update after checking the diff):\n%s", f, p, buf.String())
			}
		})
	}
}

// FuzzCostOf: recorded shapes of any text cost without panicking, and a cost is finite and
// non-negative.
func FuzzCostOf(f *testing.F) {
	sep := string(trace.ShapeSep)
	for _, c := range [][2]string{
		{"aten::mm", `[[4096,4096],[4096,4096]]` + sep + `["c10::BFloat16","c10::BFloat16"]` + sep},
		{"aten::cudnn_convolution", `[[1,3,8,8],[4,3,3,3]]` + sep + `["float","float"]` + sep + `["","","[1, 1]","[0, 0]","[1, 1]","1"]`},
		{"aten::convolution", `[[1,3,8],[4,3,3],[4]]` + sep + `["float","float","float"]` + sep + `["","","","[2]","[1]","[1]","True","[0]","1"]`},
		{"aten::_efficient_attention_forward", `[[1,4,2,8],[1,4,2,8],[1,4,2,8],[],[],[]]` + sep + `["c10::Half","c10::Half","c10::Half"]` + sep + `["","","","","","","4","4","0.","2"]`},
		{"aten::add_", `[[2,3],[3],[]]` + sep + `["float","float","Scalar"]` + sep},
		{"aten::linear", `[[[1]],[2]]` + sep + `[1]` + sep + `{}`},
	} {
		f.Add(c[0], c[1])
	}
	f.Fuzz(func(t *testing.T, name, shape string) {
		c := costOf(name, shape)
		for _, v := range []float64{c.flops, c.bytes} {
			if v < 0 || math.IsNaN(v) {
				t.Fatalf("%s %q: cost %+v", name, shape, c)
			}
		}
	})
}

// A copy's roofline traffic by its name, in Kineto's and nsys's spellings.
func TestCopyTraffic(t *testing.T) {
	for _, c := range []struct {
		name   string
		factor float64
		link   bool
	}{
		{"Memcpy DtoD (Device -> Device)", 2, false},
		{"[CUDA memcpy Device-to-Device]", 2, false},
		{"Memcpy HtoD (Pinned -> Device)", 1, true},
		{"Memcpy DtoH (Device -> Pageable)", 1, true},
		{"Memcpy PtoP (Device -> Device)", 1, true},
		{"[CUDA memcpy Host-to-Device]", 1, true},
		{"[CUDA memcpy Peer-to-Peer]", 1, true},
		{"[CUDA memcpy Unified Device-to-Device]", 1, true},
		{"Memcpy", 1, false}, // no direction: as before, once against HBM
	} {
		f, l := copyTraffic(c.name)
		if f != c.factor || l != c.link {
			t.Errorf("%s: factor %v link %v, want %v %v", c.name, f, l, c.factor, c.link)
		}
	}
	// A link-bound copy keeps its GB/s but gets no share of the HBM roof.
	pk, _ := PeakFor("NVIDIA H100 80GB HBM3")
	var row KernelRow
	agg := roofAgg{}
	agg.add(opCost{bytes: 1 << 30, link: true, ok: true}, 50_000_000)
	setRoofline(&row, &agg, &pk)
	if row.GBps <= 0 || row.Bound != "" || row.PctOfPeak != 0 {
		t.Errorf("host copy row: %.1f GB/s, %q %.1f%%; want GB/s and no roof", row.GBps, row.Bound, row.PctOfPeak)
	}
}
