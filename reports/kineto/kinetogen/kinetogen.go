// Package kinetogen writes synthetic but realistic PyTorch-profiler (Kineto) Chrome-trace JSON.
//
// It exists so that the sglang simulator can leave the traces a real `sglang generate --profile`
// would leave, and so that the Kineto reader can be tested and benchmarked on traces of any size
// (hundreds of MB) without a GPU. The output follows what current Kineto writes: the top-level
// key order, µs timestamps with exactly three decimals relative to baseTimeNanoseconds, the
// event categories and args of an H100 run, ac2g flows, CUDA-graph replays that share one
// correlation id, and kernel names taken from real SGLang diffusion and LLM runs.
//
// Stats are counted by the generator itself, never by parsing its output, so reader tests can
// compare what they read against them. Output is deterministic for a given Config.
package kinetogen

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
)

// Flavors of trace the generator knows.
const (
	// FlavorDiffusion is a DiT denoising loop (optionally with text encoding and VAE decode),
	// the shape of an `sglang generate --profile` trace.
	FlavorDiffusion = "diffusion"
	// FlavorLLM is an SGLang scheduler running prefill (EXTEND) and decode batches.
	FlavorLLM = "llm"
)

// Stage names used for diffusion annotations; they are also keys of Config.StepScale and
// Config.StageNS.
const (
	StageTextEncoding = "TextEncodingStage"
	StageDenoising    = "DenoisingStage"
	StageDecoding     = "DecodingStage"
)

// Kernel groups; keys of Config.StepScale besides the stage names.
const (
	GroupAttention   = "attention"
	GroupGEMM        = "gemm"
	GroupNorm        = "norm"
	GroupModulation  = "modulation"
	GroupActivation  = "activation"
	GroupElementwise = "elementwise"
	GroupConv        = "conv"
	GroupMemcpy      = "memcpy"
	GroupComm        = "comm"
)

// Config describes the trace to generate. Zero values get sensible defaults (see Write).
type Config struct {
	Flavor      string // FlavorDiffusion (default) or FlavorLLM
	Steps       int    // denoising steps or LLM decode steps (default 5)
	Layers      int    // transformer blocks per step (default 60 diffusion, 32 llm)
	CommStream  bool   // a second stream with all-reduce kernels that overlap compute (TP > 1)
	CUDAGraph   bool   // llm: decode steps replayed by one cudaGraphLaunch
	WithStack   bool   // python_function events with "Python id"/"Python parent id"
	TargetBytes int64  // when > 0, keep adding steps until at least this many bytes are written
	Rank        int    // distributed rank; also the GPU index (pid of GPU events)
	Seed        int64  // jitter seed; same Config, same bytes
	BaseTimeNS  int64  // baseTimeNanoseconds (Unix ns); default 2025-12-20T16:45:15Z
	DeviceName  string // default "NVIDIA H100 80GB HBM3"
	Model       string // recorded in the trace metadata and the traceName
	// StepScale slows kernels down: keys are kernel groups (GroupAttention ...) or stage
	// names (StageDenoising ...); factors multiply the durations of matching kernels. It is
	// the simulator's slowdown knob.
	StepScale map[string]float64

	WorldSize int              // distributedInfo.world_size; default 2 with CommStream, else 1
	AllStages bool             // diffusion: also TextEncodingStage and DecodingStage (VAE)
	StepNS    int64            // GPU time of one step before StepScale (default by flavor)
	StepDurNS []int64          // per-step GPU time overriding StepNS for step i < len
	StageNS   map[string]int64 // GPU time of TextEncodingStage / DecodingStage
	TraceName string           // traceName value (default derived from Model)
	HostPID   int              // pid of the CPU process (default 4321 + Rank)
	// FirstStep numbers the first generated step (denoising_step_<FirstStep>): a denoise-only
	// profile starts after the profiler's warmup step, so its first step is 1, not 0.
	FirstStep int
	// StageOnly, when StageTextEncoding or StageDecoding, generates only that diffusion stage
	// (no steps); the simulator uses it to emit activity stage by stage.
	StageOnly string
	// CommLateNS starts every collective kernel of this rank that many ns after it would have
	// started (the rank arrives late); CommWaitNS lengthens every collective kernel of this
	// rank by that many ns (it waits inside NCCL for a late rank). Give the late rank
	// CommLateNS and every other rank of the job CommWaitNS of the same value, with the same
	// Seed: their collectives then end together, as in a real run, and each instance's start
	// skew across the ranks is exactly the value. The simulator's RUNNER_SIM_LATE_RANK.
	CommLateNS, CommWaitNS int64
}

// Stats are counted while generating; they are the ground truth for reader tests.
type Stats struct {
	Events         int64            // entries of traceEvents (metadata, flows and all others)
	Kernels        int64            // "kernel" events
	Memcpys        int64            // "gpu_memcpy" events
	KernelNS       int64            // sum of kernel durations (exact: durations are whole ns)
	Bytes          int64            // bytes written (0 for Walk)
	Steps          int              // steps generated (≥ Config.Steps when TargetBytes is set)
	KernelNSByName map[string]int64 // kernel time per kernel name
}

// OpKind is the category of one generated activity.
type OpKind uint8

// Activity kinds, one per Kineto category the generator emits.
const (
	OpCPU           OpKind = iota // cpu_op
	OpAnnotation                  // user_annotation
	OpPython                      // python_function
	OpRuntime                     // cuda_runtime
	OpKernel                      // kernel
	OpMemcpy                      // gpu_memcpy
	OpGPUAnnotation               // gpu_user_annotation
)

var opCat = [...]string{"cpu_op", "user_annotation", "python_function", "cuda_runtime", "kernel", "gpu_memcpy", "gpu_user_annotation"}

// String returns the Kineto category name.
func (k OpKind) String() string {
	if int(k) < len(opCat) {
		return opCat[k]
	}
	return "unknown"
}

// Op is one generated activity as Walk reports it. Times are absolute Unix ns.
type Op struct {
	Kind        OpKind
	Name        string
	Group       string // kernel group (GroupGEMM ...) for kernels and memcpys
	StartNS     int64
	DurNS       int64
	PID, TID    int // host pid/tid for CPU-side ops; device/stream for GPU ops
	Device      int
	Stream      int
	Correlation int64 // runtime ↔ GPU link
	ExternalID  int64 // CPU op ↔ runtime/GPU link
	Bytes       int64 // memcpy size
	CopyKind    string
	Grid, Block [3]int32
	Registers   int32
	SharedMem   int32
	GraphID     int32 // > 0 for kernels replayed from a CUDA graph
	GraphNode   int64
	PyID        int64
	PyParent    int64
	Flow        bool   // runtime call that starts an ac2g flow
	Collective  string // collective name for comm kernels
}

// Write generates the trace described by cfg into w.
func Write(w io.Writer, cfg Config) (Stats, error) {
	if w == nil {
		return Stats{}, errors.New("kinetogen: nil writer")
	}
	g, err := newGen(cfg)
	if err != nil {
		return Stats{}, err
	}
	j := &jsonSink{w: w, buf: make([]byte, 0, 1<<17), g: g}
	g.sink = j
	g.stats.KernelNSByName = map[string]int64{}
	j.header()
	g.run()
	j.footer()
	if j.err == nil {
		j.flush()
	}
	g.stats.Bytes = j.n
	return g.stats, j.err
}

// Walk generates the same activities Write would (without metadata and flow events) and
// hands each to fn, in generation order; the *Op is reused between calls. The simulators use
// it to feed an Nsight Systems report that matches the torch trace of the same run.
func Walk(cfg Config, fn func(*Op)) (Stats, error) {
	if fn == nil {
		return Stats{}, errors.New("kinetogen: nil callback")
	}
	g, err := newGen(cfg)
	if err != nil {
		return Stats{}, err
	}
	g.stats.KernelNSByName = map[string]int64{}
	g.sink = funcSink{fn: fn, base: g.base}
	g.run()
	return g.stats, nil
}

// StageFactor is the factor by which StepScale lengthens the GPU time of stage (a stage name)
// of flavor: stage factor times the time-weighted mean of the group factors. The simulator
// uses it so that its perf dump and logs agree with the trace it writes.
func StageFactor(flavor, stage string, scale map[string]float64) float64 {
	f := 1.0
	if v, ok := scale[stage]; ok && v > 0 {
		f = v
	}
	var specs []kspec
	switch {
	case flavor == FlavorLLM:
		specs = llmLayerDecode
	case stage == StageTextEncoding:
		specs = textEncLayer
	case stage == StageDecoding:
		specs = vaeOps
	default:
		specs = ditLayer
	}
	var tot, scaled float64
	for _, k := range specs {
		if k.group == GroupComm {
			continue
		}
		gf := 1.0
		if v, ok := scale[k.group]; ok && v > 0 {
			gf = v
		}
		tot += k.weight
		scaled += k.weight * gf
	}
	if tot == 0 {
		return f
	}
	return f * scaled / tot
}

// kspec is one kernel of a template: what it is called, how long it takes relative to the
// others, how it is launched.
type kspec struct {
	name    string
	group   string
	weight  float64 // share of the step time (relative)
	cpuOp   string  // the aten/sgl op that launches it
	grid    [3]int32
	block   [3]int32
	regs    int32
	smem    int32
	memcpy  string // non-empty: a memcpy of this kind instead of a kernel
	bytes   int64
	onComm  bool // launched on the communication stream (CommStream only)
	collect string
}

const (
	nameFA3       = "void flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<128>, cute::C<128>, cute::C<128> >, 128, cutlass::bfloat16_t, float, cutlass::arch::Sm90, false, false, false, false, false, false, false, true, false, false, false, false>, flash::CollectiveEpilogueFwd<cute::tuple<cute::C<128>, cute::C<128>, cute::C<128> >, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cutlass::bfloat16_t, cutlass::arch::Sm90, 256, false, false, false, false>, flash::VarlenDynamicPersistentTileScheduler<128, 256, 128, false, true, true>, false> >(flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<128>, cute::C<128>, cute::C<128> >, 128, cutlass::bfloat16_t, float, cutlass::arch::Sm90, false, false, false, false, false, false, false, true, false, false, false, false>, flash::CollectiveEpilogueFwd<cute::tuple<cute::C<128>, cute::C<128>, cute::C<128> >, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cutlass::bfloat16_t, cutlass::arch::Sm90, 256, false, false, false, false>, flash::VarlenDynamicPersistentTileScheduler<128, 256, 128, false, true, true>, false>::Params)"
	nameLayerNorm = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, true>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)"
	nameRMSNorm   = "void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, unsigned int, unsigned int, unsigned int, float, float)"
	nameAdd       = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)"
	nameMul       = "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul>)"
	nameCopy      = "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1})"
	nameConv      = "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cudnn"
	nameNCHW      = "void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float, false, true, (cudnnKernelDataType_t)0>(cudnn::engines_precompiled::nchw2nhwc_params_t<float>, __nv_bfloat16 const*, __nv_bfloat16*)"
	nameNHWC      = "void cudnn::engines_precompiled::nhwcToNchwKernel<__nv_bfloat16, __nv_bfloat16, float, true, false, (cudnnKernelDataType_t)0>(cudnn::engines_precompiled::nhwc2nchw_params_t<float>, __nv_bfloat16 const*, __nv_bfloat16*)"
	nameGroupNorm = "void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<c10::BFloat16>(long, c10::BFloat16, c10::BFloat16 const*, c10::BFloat16*, c10::BFloat16*)"
	nameSiLU      = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#5}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, at::native::(anonymous namespace)::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#5}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>)"
	nameFA2       = "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(flash::Flash_fwd_params)"
	nameNCCL      = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
	nameCAR       = "void sglang::cross_device_reduce_1stage<__nv_bfloat16, 2>(sglang::RankData*, sglang::RankSignals, sglang::Signal*, __nv_bfloat16*, int, int)"
)

func k(name, group, cpuOp string, weight float64, grid, block [3]int32, regs, smem int32) kspec {
	return kspec{name: name, group: group, cpuOp: cpuOp, weight: weight, grid: grid, block: block, regs: regs, smem: smem}
}

// ditLayer is one MMDiT block of a Qwen-Image/FLUX-like transformer at 1024x1024 on H100.
var ditLayer = []kspec{
	k("triton_poi_fused_add_mul_0", GroupModulation, "aten::mul", 1.2, [3]int32{4096, 1, 1}, [3]int32{128, 1, 1}, 24, 0),
	k(nameLayerNorm, GroupNorm, "aten::layer_norm", 1.4, [3]int32{4096, 1, 1}, [3]int32{128, 1, 1}, 32, 0),
	k("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT", GroupGEMM, "aten::linear", 14.5, [3]int32{132, 1, 1}, [3]int32{384, 1, 1}, 168, 213248),
	k("fused_qknorm_rope_kernel", GroupNorm, "sgl_kernel::fused_qknorm_rope", 1.1, [3]int32{8192, 1, 1}, [3]int32{256, 1, 1}, 40, 0),
	k(nameFA3, GroupAttention, "sgl_kernel::fwd", 34.0, [3]int32{132, 1, 1}, [3]int32{384, 1, 1}, 128, 197632),
	k("nvjet_tst_128x192_64x5_1x2_h_bz_coopB_NNT", GroupGEMM, "aten::linear", 5.2, [3]int32{132, 1, 1}, [3]int32{384, 1, 1}, 168, 200704),
	// Tensor parallelism (CommStream only): the attention output projection's all-reduce.
	{name: nameNCCL, group: GroupComm, cpuOp: "c10d::allreduce_", weight: 2.5, grid: [3]int32{2, 1, 1}, block: [3]int32{640, 1, 1}, regs: 96, onComm: true, collect: "allreduce"},
	k("fused_scale_shift_gate_kernel", GroupModulation, "sgl_kernel::fused_scale_shift_gate", 1.3, [3]int32{4096, 1, 1}, [3]int32{256, 1, 1}, 30, 0),
	k(nameRMSNorm, GroupNorm, "sgl_kernel::rmsnorm", 1.0, [3]int32{4096, 1, 1}, [3]int32{128, 1, 1}, 34, 0),
	k("triton_poi_fused_add_mul_1", GroupModulation, "aten::mul", 1.1, [3]int32{4096, 1, 1}, [3]int32{128, 1, 1}, 24, 0),
	k("nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT", GroupGEMM, "aten::linear", 17.0, [3]int32{132, 1, 1}, [3]int32{384, 1, 1}, 168, 213248),
	k("triton_poi_fused_gelu_2", GroupActivation, "aten::gelu", 2.4, [3]int32{16384, 1, 1}, [3]int32{128, 1, 1}, 20, 0),
	k("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT", GroupGEMM, "aten::linear", 16.8, [3]int32{132, 1, 1}, [3]int32{384, 1, 1}, 168, 213248),
	// The MLP down projection's all-reduce (CommStream only).
	{name: nameNCCL, group: GroupComm, cpuOp: "c10d::allreduce_", weight: 2.5, grid: [3]int32{2, 1, 1}, block: [3]int32{640, 1, 1}, regs: 96, onComm: true, collect: "allreduce"},
	k(nameAdd, GroupElementwise, "aten::add", 1.0, [3]int32{4096, 1, 1}, [3]int32{128, 1, 1}, 16, 0),
}

// ditPrologue and ditEpilogue surround the blocks of one denoising step: timestep upload and
// embedding before, final projection and scheduler update after.
var ditPrologue = []kspec{
	{name: "Memcpy HtoD (Pageable -> Device)", group: GroupMemcpy, cpuOp: "aten::copy_", weight: 0.02, memcpy: "HtoD", bytes: 8},
	k(nameMul, GroupElementwise, "aten::mul", 0.15, [3]int32{1, 1, 1}, [3]int32{128, 1, 1}, 16, 0),
	k("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", GroupGEMM, "aten::linear", 0.3, [3]int32{48, 1, 1}, [3]int32{128, 1, 1}, 168, 99328),
	k("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT", GroupGEMM, "aten::linear", 1.2, [3]int32{132, 1, 1}, [3]int32{384, 1, 1}, 168, 213248),
}

var ditEpilogue = []kspec{
	k(nameLayerNorm, GroupNorm, "aten::layer_norm", 1.0, [3]int32{4096, 1, 1}, [3]int32{128, 1, 1}, 32, 0),
	k("nvjet_tst_128x64_64x8_2x1_v_bz_NNT", GroupGEMM, "aten::linear", 0.8, [3]int32{132, 1, 1}, [3]int32{256, 1, 1}, 168, 164864),
	k(nameMul, GroupElementwise, "aten::mul", 0.3, [3]int32{2048, 1, 1}, [3]int32{128, 1, 1}, 16, 0),
	k(nameAdd, GroupElementwise, "aten::add", 0.3, [3]int32{2048, 1, 1}, [3]int32{128, 1, 1}, 16, 0),
	{name: "Memcpy DtoH (Device -> Pageable)", group: GroupMemcpy, cpuOp: "aten::item", weight: 0.02, memcpy: "DtoH", bytes: 4},
}

// textEncLayer is one decoder layer of a Qwen2.5-VL-like text encoder.
var textEncLayer = []kspec{
	k(nameRMSNorm, GroupNorm, "sgl_kernel::rmsnorm", 1, [3]int32{512, 1, 1}, [3]int32{128, 1, 1}, 34, 0),
	k("nvjet_tst_64x64_64x8_2x1_v_bz_NNT", GroupGEMM, "aten::linear", 6, [3]int32{96, 1, 1}, [3]int32{256, 1, 1}, 168, 131072),
	k(nameFA2, GroupAttention, "flash_attn::_flash_attn_forward", 5, [3]int32{4, 28, 1}, [3]int32{128, 1, 1}, 255, 49152),
	k("nvjet_tst_64x64_64x8_2x1_v_bz_NNT", GroupGEMM, "aten::linear", 4, [3]int32{96, 1, 1}, [3]int32{256, 1, 1}, 168, 131072),
	k(nameRMSNorm, GroupNorm, "sgl_kernel::rmsnorm", 1, [3]int32{512, 1, 1}, [3]int32{128, 1, 1}, 34, 0),
	k("nvjet_tst_128x128_64x6_2x1_v_bz_NNT", GroupGEMM, "aten::linear", 9, [3]int32{132, 1, 1}, [3]int32{256, 1, 1}, 168, 196608),
	k(nameSiLU, GroupActivation, "aten::silu", 1.5, [3]int32{2048, 1, 1}, [3]int32{128, 1, 1}, 20, 0),
	k("nvjet_tst_128x128_64x6_2x1_v_bz_NNT", GroupGEMM, "aten::linear", 7, [3]int32{132, 1, 1}, [3]int32{256, 1, 1}, 168, 196608),
}

// vaeOps is the VAE decoder: cuDNN implicit-GEMM convolutions with layout transposes, group
// norms and SiLU, then the image copied to the host.
var vaeOps = []kspec{
	k(nameNCHW, GroupConv, "aten::cudnn_convolution", 1, [3]int32{1024, 1, 1}, [3]int32{256, 1, 1}, 32, 0),
	k(nameConv, GroupConv, "aten::cudnn_convolution", 10, [3]int32{512, 1, 1}, [3]int32{256, 1, 1}, 168, 213248),
	k(nameNHWC, GroupConv, "aten::cudnn_convolution", 1, [3]int32{1024, 1, 1}, [3]int32{256, 1, 1}, 32, 0),
	k(nameGroupNorm, GroupNorm, "aten::group_norm", 2, [3]int32{1024, 1, 1}, [3]int32{512, 1, 1}, 28, 0),
	k(nameSiLU, GroupActivation, "aten::silu", 1.5, [3]int32{8192, 1, 1}, [3]int32{128, 1, 1}, 20, 0),
	k(nameConv, GroupConv, "aten::cudnn_convolution", 10, [3]int32{512, 1, 1}, [3]int32{256, 1, 1}, 168, 213248),
	k(nameAdd, GroupElementwise, "aten::add", 1, [3]int32{8192, 1, 1}, [3]int32{128, 1, 1}, 16, 0),
}

var vaeEpilogue = []kspec{
	k(nameCopy, GroupElementwise, "aten::copy_", 1, [3]int32{6144, 1, 1}, [3]int32{128, 1, 1}, 18, 0),
	{name: "Memcpy DtoH (Device -> Pageable)", group: GroupMemcpy, cpuOp: "aten::copy_", weight: 0.5, memcpy: "DtoH", bytes: 3 * 1024 * 1024 * 4},
}

// llmLayerPrefill / llmLayerDecode are one Llama/Qwen-style decoder layer in SGLang.
var llmLayerPrefill = []kspec{
	k("sgl_kernel::fused_add_rmsnorm", GroupNorm, "sgl_kernel::fused_add_rmsnorm", 1, [3]int32{8192, 1, 1}, [3]int32{512, 1, 1}, 40, 0),
	k("nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT", GroupGEMM, "aten::mm", 12, [3]int32{132, 1, 1}, [3]int32{384, 1, 1}, 168, 213248),
	k("void sgl_kernel::apply_rotary_pos_emb_kernel<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, float const*, long const*, int, int, int)", GroupElementwise, "sgl_kernel::apply_rope_pos_ids_cos_sin_cache", 1, [3]int32{8192, 1, 1}, [3]int32{128, 1, 1}, 32, 0),
	k("void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)1, 128u, 1u, 8u, 8u, 8u, 1u, 4u, (flashinfer::PosEncodingMode)0, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, int, flashinfer::DefaultAttention<false, false, false, false> >, flashinfer::BatchPrefillPagedParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int> >(flashinfer::BatchPrefillPagedParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int>)", GroupAttention, "flashinfer::batch_prefill_with_paged_kv_cache_run", 14, [3]int32{264, 8, 1}, [3]int32{32, 1, 4}, 128, 98304),
	k("nvjet_tst_128x192_64x5_1x2_h_bz_coopB_NNT", GroupGEMM, "aten::mm", 8, [3]int32{132, 1, 1}, [3]int32{384, 1, 1}, 168, 200704),
	{name: nameNCCL, group: GroupComm, cpuOp: "sglang::inplace_all_reduce", weight: 4, grid: [3]int32{2, 1, 1}, block: [3]int32{640, 1, 1}, regs: 96, onComm: true, collect: "allreduce"},
	k("sgl_kernel::fused_add_rmsnorm", GroupNorm, "sgl_kernel::fused_add_rmsnorm", 1, [3]int32{8192, 1, 1}, [3]int32{512, 1, 1}, 40, 0),
	k("nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT", GroupGEMM, "aten::mm", 22, [3]int32{132, 1, 1}, [3]int32{384, 1, 1}, 168, 213248),
	k("silu_and_mul_kernel", GroupActivation, "sgl_kernel::silu_and_mul", 2, [3]int32{8192, 1, 1}, [3]int32{128, 1, 1}, 24, 0),
	k("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT", GroupGEMM, "aten::mm", 12, [3]int32{132, 1, 1}, [3]int32{384, 1, 1}, 168, 213248),
	{name: nameCAR, group: GroupComm, cpuOp: "sglang::inplace_all_reduce", weight: 3, grid: [3]int32{36, 1, 1}, block: [3]int32{512, 1, 1}, regs: 64, onComm: true, collect: "allreduce"},
}

var llmLayerDecode = []kspec{
	k("sgl_kernel::fused_add_rmsnorm", GroupNorm, "sgl_kernel::fused_add_rmsnorm", 1, [3]int32{32, 1, 1}, [3]int32{512, 1, 1}, 40, 0),
	k("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", GroupGEMM, "aten::mm", 6, [3]int32{66, 1, 1}, [3]int32{128, 1, 1}, 168, 99328),
	k("void sgl_kernel::apply_rotary_pos_emb_kernel<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, float const*, long const*, int, int, int)", GroupElementwise, "sgl_kernel::apply_rope_pos_ids_cos_sin_cache", 0.6, [3]int32{32, 1, 1}, [3]int32{128, 1, 1}, 32, 0),
	k("void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, 2u, 4u, 8u, 16u, 1u, 8u, flashinfer::DefaultAttention<false, false, false, false>, flashinfer::BatchDecodeParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int> >(flashinfer::BatchDecodeParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int>)", GroupAttention, "flashinfer::batch_decode_with_paged_kv_cache_run", 5, [3]int32{32, 8, 1}, [3]int32{16, 8, 1}, 72, 33280),
	k("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", GroupGEMM, "aten::mm", 3, [3]int32{66, 1, 1}, [3]int32{128, 1, 1}, 168, 99328),
	{name: nameCAR, group: GroupComm, cpuOp: "sglang::inplace_all_reduce", weight: 2, grid: [3]int32{36, 1, 1}, block: [3]int32{512, 1, 1}, regs: 64, onComm: true, collect: "allreduce"},
	k("sgl_kernel::fused_add_rmsnorm", GroupNorm, "sgl_kernel::fused_add_rmsnorm", 1, [3]int32{32, 1, 1}, [3]int32{512, 1, 1}, 40, 0),
	k("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", GroupGEMM, "aten::mm", 9, [3]int32{66, 1, 1}, [3]int32{128, 1, 1}, 168, 99328),
	k("silu_and_mul_kernel", GroupActivation, "sgl_kernel::silu_and_mul", 0.8, [3]int32{32, 1, 1}, [3]int32{128, 1, 1}, 24, 0),
	k("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", GroupGEMM, "aten::mm", 5, [3]int32{66, 1, 1}, [3]int32{128, 1, 1}, 168, 99328),
	{name: nameNCCL, group: GroupComm, cpuOp: "sglang::inplace_all_reduce", weight: 2, grid: [3]int32{2, 1, 1}, block: [3]int32{640, 1, 1}, regs: 96, onComm: true, collect: "allreduce"},
}

var llmPrologue = []kspec{
	{name: "Memcpy HtoD (Pinned -> Device)", group: GroupMemcpy, cpuOp: "aten::copy_", weight: 0.05, memcpy: "HtoD", bytes: 4096},
	k("void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<c10::BFloat16 const, unsigned int>, at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, unsigned int, unsigned int, long)", GroupElementwise, "aten::embedding", 0.3, [3]int32{1024, 1, 1}, [3]int32{128, 1, 1}, 30, 0),
}

var llmEpilogue = []kspec{
	k("sgl_kernel::fused_add_rmsnorm", GroupNorm, "sgl_kernel::fused_add_rmsnorm", 0.3, [3]int32{32, 1, 1}, [3]int32{512, 1, 1}, 40, 0),
	k("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNN", GroupGEMM, "aten::mm", 3, [3]int32{132, 1, 1}, [3]int32{384, 1, 1}, 168, 213248),
	k("void flashinfer::sampling::TopKTopPSamplingFromProbKernel<1024u, (cub::BlockScanAlgorithm)2, (cub::BlockReduceAlgorithm)2, 4u, false, float, int>(float*, int*, int*, float*, int*, float*, unsigned int, unsigned long, unsigned long)", GroupElementwise, "sgl_kernel::top_k_top_p_sampling_from_probs", 0.4, [3]int32{32, 1, 1}, [3]int32{1024, 1, 1}, 64, 8192),
	{name: "Memcpy DtoH (Device -> Pinned)", group: GroupMemcpy, cpuOp: "aten::copy_", weight: 0.03, memcpy: "DtoH", bytes: 256},
}

const (
	computeStream = 7
	commStream    = 24
	defaultBaseNS = 1766249115000000000 // 2025-12-20T16:45:15Z
)

// gen is the timeline model: one host thread launching onto one compute stream (plus an
// optional comm stream); the GPU runs behind the CPU as in a GPU-bound inference step.
type gen struct {
	cfg  Config
	sink sink
	rng  *rand.Rand
	base int64
	pid  int
	tid  int
	dev  int
	cpuT int64 // host clock, ns relative to base
	gpuT map[int]int64
	// reduced is set after an all-reduce: the next compute kernel consumes its output and
	// waits for it, as a TP block's next layer does.
	reduced bool
	corr    int64
	extID   int64
	pyID    int64
	graph   int32
	stats   Stats
	op      Op
	scale   map[string]float64
	stage   string
	curPy   int64
	frames  []string
}

type sink interface {
	emit(op *Op)
	full() bool // TargetBytes reached
}

type funcSink struct {
	fn   func(*Op)
	base int64
}

func (f funcSink) emit(op *Op) {
	op.StartNS += f.base
	f.fn(op)
	op.StartNS -= f.base
}
func (funcSink) full() bool { return false }

func newGen(cfg Config) (*gen, error) {
	if cfg.Flavor == "" {
		cfg.Flavor = FlavorDiffusion
	}
	if cfg.Flavor != FlavorDiffusion && cfg.Flavor != FlavorLLM {
		return nil, fmt.Errorf("kinetogen: unknown flavor %q (want %q or %q)", cfg.Flavor, FlavorDiffusion, FlavorLLM)
	}
	if cfg.Steps < 0 || cfg.Layers < 0 || cfg.TargetBytes < 0 || cfg.Rank < 0 {
		return nil, errors.New("kinetogen: Steps, Layers, TargetBytes and Rank must not be negative")
	}
	if cfg.StageOnly != "" && cfg.StageOnly != StageTextEncoding && cfg.StageOnly != StageDecoding {
		return nil, fmt.Errorf("kinetogen: StageOnly %q is not %q or %q", cfg.StageOnly, StageTextEncoding, StageDecoding)
	}
	if cfg.Steps == 0 {
		cfg.Steps = 5
	}
	if cfg.Layers == 0 {
		if cfg.Flavor == FlavorLLM {
			cfg.Layers = 32
		} else {
			cfg.Layers = 60
		}
	}
	if cfg.WorldSize <= 0 {
		cfg.WorldSize = 1
		if cfg.CommStream {
			cfg.WorldSize = 2
		}
	}
	if cfg.Rank >= cfg.WorldSize {
		cfg.WorldSize = cfg.Rank + 1
	}
	if cfg.BaseTimeNS == 0 {
		cfg.BaseTimeNS = defaultBaseNS
	}
	if cfg.DeviceName == "" {
		cfg.DeviceName = "NVIDIA H100 80GB HBM3"
	}
	if cfg.StepNS <= 0 {
		if cfg.Flavor == FlavorLLM {
			cfg.StepNS = 12_000_000
		} else {
			cfg.StepNS = 400_000_000
		}
	}
	if cfg.HostPID <= 0 {
		cfg.HostPID = 4321 + cfg.Rank
	}
	for k, v := range cfg.StepScale {
		if !(v > 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("kinetogen: StepScale[%q] = %v; factors must be positive and finite", k, v)
		}
	}
	g := &gen{
		cfg:   cfg,
		rng:   rand.New(rand.NewPCG(uint64(cfg.Seed), 0x9e3779b97f4a7c15)),
		base:  cfg.BaseTimeNS,
		pid:   cfg.HostPID,
		tid:   cfg.HostPID,
		dev:   cfg.Rank,
		gpuT:  map[int]int64{},
		scale: cfg.StepScale,
		corr:  int64(1000 + cfg.Rank*7),
		extID: 1,
		pyID:  1,
	}
	return g, nil
}

// CommStretch is the factor by which the collectives of a rank must run longer for it to wait
// out a straggler whose kernels of groups run factor times longer: the straggler's extra time
// in those groups per transformer layer, spread over the layer's collectives (a collective
// ends together on every rank). Used by the simulator's RUNNER_SIM_SLOW_RANK.
func CommStretch(flavor string, groups []string, factor float64) float64 {
	layer := ditLayer
	if flavor == FlavorLLM {
		layer = llmLayerDecode
	}
	slow := map[string]bool{}
	for _, g := range groups {
		slow[g] = true
	}
	var comp, comm float64
	for _, k := range layer {
		switch {
		case k.onComm:
			comm += k.weight
		case slow[k.group]:
			comp += k.weight
		}
	}
	if comm == 0 {
		return 1
	}
	return 1 + comp*(factor-1)/comm
}

func (g *gen) factor(ks *kspec) float64 {
	f := 1.0
	if v, ok := g.scale[ks.group]; ok {
		f *= v
	}
	if v, ok := g.scale[g.stage]; ok {
		f *= v
	}
	return f
}

func (g *gen) run() {
	g.cpuT = 50_000 // 50 µs of profiler start-up before the first op
	g.gpuT[computeStream] = g.cpuT
	g.gpuT[commStream] = g.cpuT
	c := &g.cfg
	if c.StageOnly == StageTextEncoding || c.StageOnly == StageDecoding {
		g.stage = c.StageOnly
		dur := c.StageNS[c.StageOnly]
		if dur <= 0 {
			dur = c.StepNS / 5
		}
		g.block(c.StageOnly, func() {
			if c.StageOnly == StageTextEncoding {
				g.layers(textEncLayer, 28, dur, nil, nil)
			} else {
				g.layers(vaeOps, 12, dur, nil, vaeEpilogue)
			}
		})
		return
	}
	if c.Flavor == FlavorDiffusion && c.AllStages {
		g.stage = StageTextEncoding
		dur := c.StageNS[StageTextEncoding]
		if dur <= 0 {
			dur = c.StepNS / 6
		}
		g.block(StageTextEncoding, func() {
			g.layers(textEncLayer, 28, dur, nil, nil)
		})
	}
	g.stage = StageDenoising
	if c.Flavor == FlavorDiffusion && c.AllStages {
		start, gstart := g.cpuT, g.gpuT[computeStream]
		g.steps()
		g.annotate(StageDenoising, start, g.cpuT-start, gstart, g.gpuT[computeStream]-gstart)
		g.stage = StageDecoding
		dur := c.StageNS[StageDecoding]
		if dur <= 0 {
			dur = c.StepNS / 4
		}
		g.block(StageDecoding, func() {
			g.layers(vaeOps, 12, dur, nil, vaeEpilogue)
		})
	} else {
		g.steps()
	}
	g.cpuT += 20_000
}

// steps emits denoising or LLM steps until Steps are done and TargetBytes is met.
func (g *gen) steps() {
	c := &g.cfg
	for i := 0; ; i++ {
		if i >= c.Steps && (c.TargetBytes <= 0 || g.sink.full()) {
			break
		}
		dur := c.StepNS
		if i < len(c.StepDurNS) && c.StepDurNS[i] > 0 {
			dur = c.StepDurNS[i]
		}
		g.stats.Steps++
		if c.Flavor == FlavorLLM {
			g.llmStep(i, dur)
			continue
		}
		name := "denoising_step_" + strconv.Itoa(c.FirstStep+i)
		g.block(name, func() {
			g.layers(ditLayer, c.Layers, dur, ditPrologue, ditEpilogue)
		})
	}
}

// block runs body inside a user_annotation (CPU) and its gpu_user_annotation mirror, then
// synchronises the host with the GPU the way a .item() at the end of a step does.
func (g *gen) block(name string, body func()) {
	py := g.pyEnter(name)
	start := g.cpuT
	g.cpuT += 2_000
	gstart := max(g.gpuT[computeStream], g.cpuT)
	g.gpuT[computeStream] = gstart
	body()
	// host waits for the device
	gend := max(g.gpuT[computeStream], g.gpuT[commStream])
	if g.cpuT < gend {
		g.cpuT = gend
	}
	g.cpuT += 3_000
	g.annotate(name, start, g.cpuT-start, gstart, gend-gstart)
	g.pyExit(py, start)
}

func (g *gen) annotate(name string, start, dur, gstart, gdur int64) {
	ext := g.nextExt()
	op := g.reset(OpAnnotation, name)
	op.StartNS, op.DurNS, op.ExternalID = start, dur, ext
	g.sink.emit(op)
	op = g.reset(OpGPUAnnotation, name)
	op.PID, op.TID, op.Device, op.Stream = g.dev, computeStream, g.dev, computeStream
	op.StartNS, op.DurNS, op.ExternalID = gstart-1, gdur+2, ext
	if op.StartNS < 0 {
		op.StartNS = 0
	}
	g.sink.emit(op)
}

func (g *gen) pyEnter(name string) int64 {
	if !g.cfg.WithStack {
		return 0
	}
	id := g.pyID
	g.pyID += 2 // the step's forward frame and the model's module frame
	g.curPy = id + 1
	_ = name
	return id
}

// pyExit writes the python_function frames for a block: the step's forward, the model and
// one frame per transformer block, nested by Python id/parent id.
func (g *gen) pyExit(id, start int64) {
	if id == 0 {
		return
	}
	end := g.cpuT
	op := g.reset(OpPython, "sglang/multimodal_gen/runtime/pipelines_core/stages/denoising.py(1024): forward")
	if g.cfg.Flavor == FlavorLLM {
		op.Name = "sglang/srt/managers/scheduler.py(1180): run_batch"
	}
	op.StartNS, op.DurNS, op.PyID, op.PyParent = start, end-start, id, 0
	g.sink.emit(op)
	mid := id + 1
	g.curPy = 0
	op = g.reset(OpPython, "nn.Module: Transformer2DModel_0")
	op.StartNS, op.DurNS, op.PyID, op.PyParent = start+1_000, end-start-2_000, mid, id
	g.sink.emit(op)
}

func (g *gen) reset(kind OpKind, name string) *Op {
	g.op = Op{Kind: kind, Name: name, PID: g.pid, TID: g.tid, Device: -1, Stream: -1}
	return &g.op
}

func (g *gen) nextExt() int64 { g.extID++; return g.extID }
func (g *gen) nextCorr() int64 {
	g.corr++
	return g.corr
}

// jitter returns a factor in [1-a, 1+a].
func (g *gen) jitter(a float64) float64 { return 1 + a*(2*g.rng.Float64()-1) }

// layers launches pro, n copies of layer and epi, with kernel durations normalised so their
// GPU time adds up to total (before StepScale).
func (g *gen) layers(layer []kspec, n int, total int64, pro, epi []kspec) {
	var w float64
	for i := range layer {
		if layer[i].onComm {
			continue
		}
		w += layer[i].weight * float64(n)
	}
	for _, s := range [][]kspec{pro, epi} {
		for i := range s {
			w += s[i].weight
		}
	}
	unit := float64(total) / w
	for i := range pro {
		g.launch(&pro[i], unit, -1)
	}
	for l := 0; l < n; l++ {
		ls := g.cpuT
		for i := range layer {
			g.launch(&layer[i], unit, l)
		}
		if g.curPy != 0 {
			op := g.reset(OpPython, g.blockFrame(l))
			op.StartNS, op.DurNS, op.PyID, op.PyParent = ls, g.cpuT-ls, g.pyID, g.curPy
			g.pyID++
			g.sink.emit(op)
		}
	}
	for i := range epi {
		g.launch(&epi[i], unit, -1)
	}
}

// launch emits the CPU op, the runtime call and the GPU activity of one kernel or memcpy.
func (g *gen) launch(ks *kspec, unit float64, layer int) {
	if ks.onComm && !g.cfg.CommStream {
		return
	}
	ext := g.nextExt()
	corr := g.nextCorr()
	opStart := g.cpuT
	g.cpuT += 4_000 + int64(g.rng.IntN(3000)) // dispatcher overhead before the launch
	rtStart := g.cpuT
	rtDur := int64(3_500 + g.rng.IntN(2500))
	rtName := "cudaLaunchKernel"
	if ks.memcpy != "" {
		rtName = "cudaMemcpyAsync"
	}
	end := g.gpuOp(ks, unit, corr, ext, rtStart+rtDur, 0, 0)
	if ks.memcpy == "DtoH" {
		// a copy into pageable memory blocks the host until the stream has drained, which
		// is how the end-of-step .item() shows up in real traces
		rtDur = max(rtDur, end+1_500-rtStart)
	}
	g.cpuT = rtStart + rtDur + 1_000
	op := g.reset(OpCPU, ks.cpuOp)
	op.StartNS, op.DurNS, op.ExternalID = opStart, g.cpuT-opStart, ext
	g.sink.emit(op)
	op = g.reset(OpRuntime, rtName)
	op.StartNS, op.DurNS, op.ExternalID, op.Correlation, op.Flow = rtStart, rtDur, ext, corr, true
	g.sink.emit(op)
}

// gpuOp places a kernel or memcpy on its stream after launchEnd and after the previous work,
// and returns when it ends.
func (g *gen) gpuOp(ks *kspec, unit float64, corr, ext, launchEnd int64, graph int32, node int64) int64 {
	stream := computeStream
	if ks.onComm {
		stream = commStream
	}
	dur := int64(ks.weight * unit * g.factor(ks) * g.jitter(0.03))
	if ks.onComm {
		dur = int64(ks.weight * unit * g.factor(ks) * g.jitter(0.1))
	}
	if dur < 1_000 {
		dur = 1_000 + int64(g.rng.IntN(800))
	}
	start := launchEnd + 2_500
	if graph > 0 {
		start = launchEnd
	}
	// comm waits for the compute stream's producer; compute waits for an all-reduce whose
	// output it consumes (the next kernel after it), not for other comm (overlap)
	ready := g.gpuT[computeStream]
	if ks.onComm {
		ready = max(ready, g.gpuT[commStream])
		// Diffusion only: the LLM flavor keeps its all-reduces overlapping compute, the
		// comm/compute overlap its tests look for.
		g.reduced = ks.collect == "allreduce" && g.cfg.Flavor != FlavorLLM
	} else if g.reduced {
		ready = max(ready, g.gpuT[commStream])
		g.reduced = false
	}
	if start < ready {
		start = ready + int64(g.rng.IntN(1200))
	}
	if ks.onComm && ks.collect != "" {
		// After every random draw, so that a late rank and the ranks waiting for it draw
		// the same numbers and keep identical timelines apart from the late arrival.
		start += g.cfg.CommLateNS
		dur += g.cfg.CommWaitNS
	}
	g.gpuT[stream] = start + dur
	kind := OpKernel
	if ks.memcpy != "" {
		kind = OpMemcpy
	}
	op := g.reset(kind, ks.name)
	op.Group, op.PID, op.TID, op.Device, op.Stream = ks.group, g.dev, stream, g.dev, stream
	op.StartNS, op.DurNS, op.Correlation, op.ExternalID = start, dur, corr, ext
	op.GraphID, op.GraphNode = graph, node
	if kind == OpMemcpy {
		op.Bytes, op.CopyKind = ks.bytes, ks.memcpy
		g.stats.Memcpys++
	} else {
		op.Grid, op.Block, op.Registers, op.SharedMem, op.Collective = ks.grid, ks.block, ks.regs, ks.smem, ks.collect
		g.stats.Kernels++
		g.stats.KernelNS += dur
		g.stats.KernelNSByName[ks.name] += dur
	}
	g.sink.emit(op)
	return start + dur
}

// llmStep emits one scheduler step: an EXTEND batch every 16 steps (and first), DECODE
// otherwise; decode steps are one CUDA-graph replay when CUDAGraph is set.
func (g *gen) llmStep(i int, dur int64) {
	c := &g.cfg
	extend := i%16 == 0
	var name string
	layer := llmLayerDecode
	if extend {
		toks := 2048 * (1 + i%4)
		name = "step[EXTEND bs=" + strconv.Itoa(4+i%4) + " toks=" + strconv.Itoa(toks) + "]"
		layer = llmLayerPrefill
		dur *= 6
	} else {
		name = "step[DECODE bs=32]"
	}
	if extend || !c.CUDAGraph {
		g.block(name, func() { g.layers(layer, c.Layers, dur, llmPrologue, llmEpilogue) })
		return
	}
	// CUDA graph replay: input upload, one cudaGraphLaunch, every kernel shares its correlation.
	g.block(name, func() {
		var w float64
		for j := range layer {
			if !layer[j].onComm {
				w += layer[j].weight * float64(c.Layers)
			}
		}
		for j := range llmEpilogue {
			w += llmEpilogue[j].weight
		}
		w += llmPrologue[0].weight
		unit := float64(dur) / w
		g.launch(&llmPrologue[0], unit, -1)
		ext := g.nextExt()
		corr := g.nextCorr()
		opStart := g.cpuT
		g.cpuT += 6_000
		rtStart := g.cpuT
		rtDur := int64(9_000 + g.rng.IntN(4000))
		g.cpuT += rtDur + 2_000
		op := g.reset(OpCPU, "CUDAGraph::replay")
		op.StartNS, op.DurNS, op.ExternalID = opStart, g.cpuT-opStart, ext
		g.sink.emit(op)
		op = g.reset(OpRuntime, "cudaGraphLaunch")
		op.StartNS, op.DurNS, op.ExternalID, op.Correlation, op.Flow = rtStart, rtDur, ext, corr, true
		g.sink.emit(op)
		g.graph++
		if g.graph == 1 {
			g.graph = 2 // graph id 1 is the capture pool's
		}
		var node int64
		launchEnd := rtStart + rtDur
		for l := 0; l < c.Layers; l++ {
			for j := range layer {
				if layer[j].onComm && !c.CommStream {
					continue
				}
				node++
				g.gpuOp(&layer[j], unit, corr, ext, launchEnd, g.graph, node)
			}
		}
		for j := 0; j < len(llmEpilogue)-1; j++ {
			node++
			g.gpuOp(&llmEpilogue[j], unit, corr, ext, launchEnd, g.graph, node)
		}
		g.launch(&llmEpilogue[len(llmEpilogue)-1], unit, -1)
	})
}

func (g *gen) blockFrame(l int) string {
	for len(g.frames) <= l {
		g.frames = append(g.frames, "nn.Module: TransformerBlock_"+strconv.Itoa(len(g.frames)))
	}
	return g.frames[l]
}

// KernelNames lists the kernel names a flavor can produce, sorted; tests and docs use it.
func KernelNames(flavor string) []string {
	seen := map[string]bool{}
	var sets [][]kspec
	if flavor == FlavorLLM {
		sets = [][]kspec{llmLayerPrefill, llmLayerDecode, llmPrologue, llmEpilogue}
	} else {
		sets = [][]kspec{ditLayer, ditPrologue, ditEpilogue, textEncLayer, vaeOps, vaeEpilogue}
	}
	var out []string
	for _, s := range sets {
		for _, k := range s {
			if k.memcpy == "" && !seen[k.name] {
				seen[k.name] = true
				out = append(out, k.name)
			}
		}
	}
	sort.Strings(out)
	return out
}
