package triage

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/sglprof/runner/reports/trace"
)

// tb builds trace.Trace values directly, with links already filled as the linker would, so
// the triage tests do not depend on the Kineto reader.
type tb struct{ t *trace.Trace }

func newTB(path string) *tb { return &tb{t: trace.New(path, "kineto")} }

func (b *tb) id(s string) trace.NameID { return b.t.Names.InternString(s) }

func (b *tb) frame(name string, start, end int64, parent int32) int32 {
	b.t.Frames = append(b.t.Frames, trace.Frame{Start: start, End: end, ID: int64(len(b.t.Frames)), ParentID: trace.NoID,
		Name: b.id(name), PID: 1, TID: 1, Parent: parent})
	return int32(len(b.t.Frames) - 1)
}

func (b *tb) cpuop(name string, start, end int64, frame int32) int32 {
	b.t.CPUOps = append(b.t.CPUOps, trace.CPUOp{Start: start, End: end, ExternalID: int64(len(b.t.CPUOps)), Name: b.id(name), PID: 1, TID: 1, Frame: frame})
	return int32(len(b.t.CPUOps) - 1)
}

func (b *tb) launch(name string, start, end int64, graph bool) int32 {
	b.t.Launches = append(b.t.Launches, trace.Launch{Start: start, End: end, Correlation: int64(len(b.t.Launches)), ExternalID: trace.NoID,
		Name: b.id(name), PID: 1, TID: 1, Graph: graph, Frame: trace.NoID})
	return int32(len(b.t.Launches) - 1)
}

func (b *tb) kernel(name string, dev, stream int32, start, end int64, launch, cpuop int32) {
	kind := trace.OpKernel
	if len(name) > 6 && name[:6] == "Memcpy" {
		kind = trace.OpMemcpy
	}
	b.t.GPUOps = append(b.t.GPUOps, trace.GPUOp{Start: start, End: end, Correlation: trace.NoID, ExternalID: trace.NoID,
		Name: b.id(name), Device: dev, Stream: stream, Kind: kind, Launch: launch, CPUOp: cpuop})
}

func (b *tb) annot(name string, start, end int64, gpu bool) {
	dev := int32(trace.NoID)
	if gpu {
		dev = 0
	}
	b.t.Annotations = append(b.t.Annotations, trace.Annotation{Start: start, End: end, Name: b.id(name), PID: 1, TID: 1, Device: dev, GPU: gpu})
}

// opener serves prepared traces by path.
func opener(m map[string]*trace.Trace) func(context.Context, string) (*trace.Trace, error) {
	return func(_ context.Context, p string) (*trace.Trace, error) {
		t, ok := m[p]
		if !ok {
			return nil, fmt.Errorf("no such test trace %q", p)
		}
		return t, nil
	}
}

// Kernel names used by the synthetic traces (real names from SGLang/H100 traces).
const (
	kGEMM    = "nvjet_tst_64x8_64x16_4x1_v_bz_TNT"
	kAttn    = "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<128l>, cute::C<128l>, cute::C<128l> >, 128, cutlass::bfloat16_t, float, cutlass::arch::Sm90, true, false, false, true, false, false, false, true, true, false, false, false>, flash::CollectiveEpilogueFwd<cute::tuple<cute::C<128l>, cute::C<128l>, cute::C<128l> >, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cutlass::bfloat16_t, cutlass::arch::Sm90, 256, true, false, false, false>, flash::VarlenDynamicPersistentTileScheduler<128, 256, 128, false, true, true, true, false> > > >(flash::FlashAttnFwdSm90<...>::Params)"
	kNorm    = "void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, unsigned int, unsigned int, unsigned int, float, float)"
	kSilu    = "void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, at::native::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>)"
	kMul     = "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul>)"
	kNCCL    = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
	kMemcpy  = "Memcpy DtoD (Device -> Device)"
	pyRunner = "sglang/srt/model_executor/model_runner.py(2010): forward_decode"
	pyGraph  = "sglang/srt/model_executor/cuda_graph_runner.py(1193): replay"
	pyModule = "torch/nn/modules/module.py(1773): _call_impl"
	pyMM     = "sglang/srt/layers/quantization/unquant.py(134): apply"
	pyAttn   = "sglang/srt/layers/attention/flashattention_backend.py(700): forward_extend"
	pyNorm   = "sglang/srt/layers/layernorm.py(133): forward_cuda"
	pyAct    = "sglang/srt/layers/activation.py(60): forward_native"
	pyAR     = "sglang/srt/distributed/parallel_state.py(520): all_reduce"
)

// goldenTrace is the deterministic synthetic trace of the golden files: an extend step (eager,
// two streams: compute on 7, NCCL on 24 partly overlapping) and a decode step replayed by one
// CUDA graph, split by step[...] annotations; a fused add-RMSNorm (fusion present) and split
// SiLU + mul (fusion available).
func goldenTrace() *trace.Trace { return goldenTraceWith(goldenVariant{}) }

// goldenVariant changes the golden trace for the kernel diff tests: attention kernels scaled
// by attnScale (0 keeps them), the extend step's multiply dropped, and one more extend kernel
// named extra after each layer's first GEMM ("" for none), extraNS long.
type goldenVariant struct {
	attnScale float64
	dropMul   bool
	extra     string
	extraNS   int64 // the extra kernel's duration; 0 means 4 µs
}

func goldenTraceWith(v goldenVariant) *trace.Trace {
	attn := func(d int64) int64 {
		if v.attnScale == 0 {
			return d
		}
		return int64(float64(d) * v.attnScale)
	}
	b := newTB("synthetic/golden.trace.json")
	var tc int64 = 1_000_000 // CPU clock (ns)
	var g7 int64 = 1_050_000 // GPU stream 7 clock
	root := b.frame(pyRunner, 0, 100_000_000, trace.NoID)
	wrap := b.frame(pyModule, 0, 100_000_000, root)
	op := func(kname, py, cpu string, dur int64, stream int32) {
		f := b.frame(py, tc, tc+5_000, wrap)
		// a torch wrapper below the SGLang frame must not win (W11)
		inner := b.frame(pyModule, tc+100, tc+4_900, f)
		c := b.cpuop(cpu, tc+200, tc+4_800, inner)
		l := b.launch("cudaLaunchKernel", tc+300, tc+1_300, false)
		start := g7
		if stream == 24 {
			// NCCL on the side stream starts 4 us before the compute stream is free (3 us of
			// real overlap with the GEMM before it); the next compute kernel waits for it.
			start = g7 - 4_000
			b.kernel(kname, 0, stream, start, start+dur, l, c)
			g7 = start + dur + 1_000
		} else {
			b.kernel(kname, 0, stream, start, start+dur, l, c)
			g7 += dur + 1_000
		}
		tc += 6_000
	}
	b.annot("step[EXTEND bs=1 toks=128]", tc-500, tc+100_000, false)
	for layer := 0; layer < 2; layer++ {
		op(kNorm, pyNorm, "sgl_kernel::fused_add_rmsnorm", 9_000, 7)
		op(kGEMM, pyMM, "aten::mm", 40_000, 7)
		if v.extra != "" {
			op(v.extra, pyMM, "aten::add", cmp.Or(v.extraNS, 4_000), 7)
		}
		op(kAttn, pyAttn, "sgl_kernel::fwd", attn(30_000), 7)
		op(kGEMM, pyMM, "aten::mm", 20_000, 7)
		op(kNCCL, pyAR, "c10d::allreduce_", 16_000, 24)
		op(kSilu, pyAct, "aten::silu", 6_000, 7)
		if !v.dropMul {
			op(kMul, pyAct, "aten::mul", 5_000, 7)
		}
	}
	op(kMemcpy, pyRunner, "aten::copy_", 2_000, 7)
	// decode: one graph launch replays the whole step
	tc = 200_000
	g7 = 300_000
	b.annot("step[DECODE bs=1]", tc, tc+10_000, false)
	gf := b.frame(pyGraph, tc+100, tc+9_000, root)
	gl := b.launch("cudaGraphLaunch", tc+1_000, tc+2_000, true)
	b.t.Launches[gl].Frame = gf
	for _, k := range []struct {
		n string
		d int64
	}{{kNorm, 3_000}, {kGEMM, 12_000}, {kAttn, attn(8_000)}, {kGEMM, 6_000}, {kSilu, 2_000}, {kMul, 2_000}} {
		b.kernel(k.n, 0, 7, g7, g7+k.d, gl, trace.NoID)
		g7 += k.d + 500
	}
	// A second device with little work: must not be analysed.
	b.kernel(kGEMM, 1, 7, 0, 1_000, trace.NoID, trace.NoID)
	return b.t
}

// bigTrace generates n GPU ops over two streams with Python stacks, for benchmarks.
func bigTrace(n int, seed uint64) *trace.Trace {
	r := rand.New(rand.NewPCG(seed, 1))
	b := newTB("synthetic/big.trace.json")
	names := []string{kGEMM, kAttn, kNorm, kSilu, kMul, kNCCL, kMemcpy}
	pys := []string{pyMM, pyAttn, pyNorm, pyAct, pyAct, pyAR, pyRunner}
	root := b.frame(pyRunner, 0, 1<<62, trace.NoID)
	var tc, g7, g24 int64
	for i := 0; i < n; i++ {
		k := r.IntN(len(names))
		f := b.frame(pys[k], tc, tc+3_000, root)
		inner := b.frame(pyModule, tc+10, tc+2_900, f)
		c := b.cpuop("aten::op", tc+20, tc+2_800, inner)
		l := b.launch("cudaLaunchKernel", tc+30, tc+1_000, false)
		d := int64(1_000 + r.IntN(50_000))
		if names[k] == kNCCL {
			if g24 < g7-d {
				g24 = g7 - d
			}
			b.kernel(names[k], 0, 24, g24, g24+d, l, c)
			g24 += d
		} else {
			b.kernel(names[k], 0, 7, g7, g7+d, l, c)
			g7 += d + int64(r.IntN(2_000))
		}
		tc += 3_000
	}
	return b.t
}
