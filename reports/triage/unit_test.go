package triage

import (
	"cmp"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sglprof/runner/reports/trace"
)

// bruteOverlap is the oracle: cut time at every boundary and, per elementary segment, count an
// interval as hidden when an interval on another stream covers the segment too.
func bruteOverlap(iv []Interval) (hidden []int64, busy, multi int64, peak int) {
	var ts []int64
	for _, x := range iv {
		ts = append(ts, x.Start, x.End)
	}
	sortInt64(ts)
	hidden = make([]int64, len(iv))
	for k := 0; k+1 < len(ts); k++ {
		a, b := ts[k], ts[k+1]
		if a == b {
			continue
		}
		streams := map[int32]bool{}
		for _, x := range iv {
			if x.Start <= a && b <= x.End {
				streams[x.Stream] = true
			}
		}
		if len(streams) > 0 {
			busy += b - a
		}
		if len(streams) >= 2 {
			multi += b - a
		}
		if len(streams) > peak {
			peak = len(streams)
		}
		for i, x := range iv {
			if x.Start <= a && b <= x.End {
				for s := range streams {
					if s != x.Stream {
						hidden[i] += b - a
						break
					}
				}
			}
		}
	}
	return
}

func sortInt64(a []int64) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

func TestSweepMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for trial := 0; trial < 500; trial++ {
		n := 1 + r.IntN(25)
		streams := 1 + r.IntN(4)
		iv := make([]Interval, n)
		for i := range iv {
			s := int64(r.IntN(100))
			d := int64(r.IntN(30)) // zero-length intervals included
			iv[i] = Interval{Start: s, End: s + d, Stream: int32(r.IntN(streams))}
		}
		sw := SweepOverlap(iv)
		h, busy, multi, peak := bruteOverlap(iv)
		if sw.BusyNS != busy || sw.MultiNS != multi || sw.Peak != peak {
			t.Fatalf("trial %d %v: sweep busy/multi/peak %d/%d/%d, oracle %d/%d/%d", trial, iv, sw.BusyNS, sw.MultiNS, sw.Peak, busy, multi, peak)
		}
		for i := range iv {
			if sw.Hidden[i] != h[i] {
				t.Fatalf("trial %d %v: interval %d hidden %d, oracle %d", trial, iv, i, sw.Hidden[i], h[i])
			}
		}
		for p, i := range sw.Order {
			if sw.Pos[i] != int32(p) {
				t.Fatalf("Pos is not the inverse of Order")
			}
			// The triage finds positions by binary search instead of keeping Pos.
			if q := sw.posOf(&spans{iv: iv}, i); q != int32(p) {
				t.Fatalf("trial %d %v: posOf(%d) = %d, want %d", trial, iv, i, q, p)
			}
		}
	}
}

func TestSweepTouchingIsNotOverlap(t *testing.T) {
	sw := SweepOverlap([]Interval{{0, 10, 1}, {10, 20, 2}, {5, 8, 1}})
	if sw.MultiNS != 0 || sw.Hidden[0] != 0 || sw.Hidden[1] != 0 || sw.Peak != 1 {
		t.Errorf("touching intervals on two streams overlap: %+v", sw)
	}
	if sw.BusyNS != 20 {
		t.Errorf("busy = %d, want 20", sw.BusyNS)
	}
}

// Real kernel names from the fixtures and from SGLang/H100 traces.
func TestClassifier(t *testing.T) {
	cases := []struct{ name, want string }{
		{"void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, 128, cutlass::bfloat16_t> > > >(flash::FlashAttnFwdSm90<...>::Params)", CatAttention},
		{"nvjet_tst_64x8_64x16_4x1_v_bz_TNT", CatGEMM},
		{"void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, true>(flash::Flash_fwd_params)", CatAttention},
		{"void flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t> >(flash::Flash_bwd_params)", CatAttention},
		{"nvjet_tst_256x128_64x4_1x2_h_bz_coopA_TNT", CatGEMM},
		{"fused_qknorm_warp", CatNorm},
		{"void fused_qknorm_warp<__nv_bfloat16, 128>(__nv_bfloat16*, float)", CatNorm},
		{"fused_scale_shift_gate_kernel", CatNorm},
		{"void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<c10::BFloat16>", CatNorm},
		{"ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", CatCommunication},
		{"ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", CatCommunication},
		{"ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", CatCommunication},
		{"ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", CatCommunication},
		{"void sglang::cross_device_reduce_1stage<__nv_bfloat16, 2>(sglang::RankData*, sglang::RankSignals, sglang::Signal*, __nv_bfloat16*, int, int)", CatCommunication},
		{"multimem_all_reduce_kernel", CatCommunication},
		{"sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_g1_tensor16x8x8_execute_kernel_cudnn_infer", CatConv},
		{"sm80_xmma_wgrad_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16_stage4_warpsize2x2x1_g1_tensor16x8x8_execute_kernel_cudnn_train", CatConv},
		{"void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688dgrad_optimized_tf32_64x128_32x3_nhwc_align4>(cutlass_tensorop_s1688dgrad_optimized_tf32_64x128_32x3_nhwc_align4::Params)", CatConv},
		{"cudnn_infer_ampere_scudnn_128x64_relu_xregs_large_nn_v1", CatConv},
		{"_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock22ImplicitGemmMultistage", CatConv},
		{"void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>(cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4::Params)", CatGEMM},
		{"ampere_sgemm_32x32_sliced1x4_tn", CatGEMM},
		{"void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, true, true, false>(cublasLt::cublasSplitKParams<float>, float const*)", CatGEMM},
		{"Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x32x64_MI16x16x1_SN_LDSB1_AFC1", CatGEMM},
		{"void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 2, 2, false, false, cublasGemvParams<cublasGemvTensorStridedBatched<float const> > >(cublasGemvParams<cublasGemvTensorStridedBatched<float const> >, float, float)", CatGEMM},
		{"void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16, __hip_bfloat16, (vllm::Fp8KVCacheDataType)0, 1, 128, 256, false, 4, 1, ck_tile::ComposedAttention<0u, false> >(__hip_bfloat16 const*, int const*)", CatAttention},
		{"void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, 2u>(flashinfer::Params)", CatAttention},
		{"_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb1ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib", CatNorm},
		{"void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, unsigned int, float)", CatNorm},
		{"void flashinfer::norm::GemmaRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*)", CatNorm},
		{"void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>(cudnnTensorStruct, float const*)", CatNorm},
		{"_ZN7sgl_hip10activation18act_and_mul_kernelI14__hip_bfloat16TnPFT_RKS3_EXadL_Z4siluIS2_ES3_S5_EEEEvPS3_PS4_i", CatActivation},
		{"void rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, int)", CatRoPE},
		{"void (anonymous namespace)::store_kvcache<2048l, 4, false, long>((anonymous namespace)::StoreKVCacheParams)", CatMemory},
		{"Memcpy DtoD (Device -> Device)", CatMemory},
		{"[CUDA memcpy Host-to-Device]", CatMemory}, // nsys names the same copy so
		{"[CUDA memcpy Device-to-Host]", CatMemory},
		{"[CUDA memset]", CatMemory},
		{"Memcpy HtoD (Pageable -> Device)", CatMemory},
		{"Memset (Device)", CatMemory},
		{"void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)", CatMemory},
		{"void at::native::elementwise_kernel_manual_unroll<128, 8, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const> >(int)", CatMemory},
		{"void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>(cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)", CatMemory},
		{"void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)", CatElementwise},
		{"void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, at::native::(anonymous namespace)::threshold_kernel_impl<float>(at::TensorIteratorBase&, float, float)::{lambda(float, float)#1}>, at::detail::Array<char*, 3> >(int)", CatActivation},
		{"void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>, float, float>(int, int volatile*, TensorListMetadata<4>)", CatElementwise},
		{"void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4, 4> >(at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4, 4>)", CatReduce},
		{"void cub::DeviceRadixSortOnesweepKernel<cub::DeviceRadixSortPolicy<long, int, int>::Policy800, false, long, int, int, int>(int*)", CatReduce},
		{"void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>(float*, float const*, int, int, int, bool const*, int, bool)", CatSoftmax},
		{"triton_poi_fused_add_mul_0", CatElementwise},
		{"void topkGatingSoftmax<8, 128, 4, 16, int>(float const*, bool const*, float*, int, int*, int, int, int)", CatMoE},
		{"fused_moe_kernel", CatMoE},
		{"per_token_group_quant_8bit_kernel", CatQuantization},
		{"create_flashinfer_kv_indices_triton", CatOther},
	}
	for _, c := range cases {
		if got := Classify(c.name); got != c.want {
			t.Errorf("Classify(%.90q) = %s, want %s", c.name, got, c.want)
		}
	}
}

func TestParseClassifierErrors(t *testing.T) {
	for _, bad := range []string{"", "# only a comment\n", "gemm\n", "gemm re:(\n"} {
		if _, err := ParseClassifier(bad); err == nil {
			t.Errorf("ParseClassifier(%q): no error", bad)
		}
	}
	c, err := ParseClassifier("a foo\nb re:^bar\n")
	if err != nil {
		t.Fatal(err)
	}
	if c.Classify("xfoo") != "a" || c.Classify("barfoo") != "a" || c.Classify("bar") != "b" || c.Classify("baz") != CatOther {
		t.Error("rule order or regexp matching is wrong")
	}
}

func TestCanonical(t *testing.T) {
	cases := map[string]string{
		"void  foo<int>(float*,\n int)":                                              "void foo<int>",
		"ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
		"<built-in method x of PyCapsule object at 0x7f00aa>":                        "<built-in method x of PyCapsule object at 0xADDR>",
		"Memcpy DtoD (Device -> Device)":                                             "Memcpy DtoD (Device -> Device)",
		"nvjet_tst_64x8":                                                             "nvjet_tst_64x8",
		"(weird)":                                                                    "(weird)",
		"unbalanced)":                                                                "unbalanced)",
	}
	for in, want := range cases {
		if got := Canonical(in); got != want {
			t.Errorf("Canonical(%q) = %q, want %q", in, got, want)
		}
	}
	if got := baseName("void a<b<c>>::k<int>"); got != "void a::k" {
		t.Errorf("baseName = %q", got)
	}
}

func TestSiteSelection(t *testing.T) {
	cases := map[string]string{
		"sglang/srt/layers/linear.py(412): forward":                              "python/sglang/srt/layers/linear.py:412 forward",
		"/sgl-workspace/sglang/python/sglang/srt/layers/linear.py(412): forward": "python/sglang/srt/layers/linear.py:412 forward",
		"/usr/lib/python3/dist-packages/vllm/model_executor/x.py(1): f":          "vllm/model_executor/x.py:1 f",
		"torch/nn/modules/module.py(1773): _call_impl":                           "torch/nn/modules/module.py:1773 _call_impl",
		"<built-in method mm of type object at 0x1>":                             "<built-in method mm of type object at 0x1>",
	}
	for in, want := range cases {
		if got := siteName(in); got != want {
			t.Errorf("siteName(%q) = %q, want %q", in, got, want)
		}
	}
	if !(siteScore("python/sglang/srt/x.py:1 f") > siteScore("my_model.py:3 g") &&
		siteScore("my_model.py:3 g") > siteScore("torch/nn/modules/module.py:1773 _call_impl") &&
		siteScore("torch/nn/modules/module.py:1773 _call_impl") > siteScore("threading.py:1 run")) {
		t.Error("site scores do not rank framework > model code > torch > noise")
	}
	if siteScore("python/sglang/srt/model_executor/parameter.py:10 x") != scoreWrapper {
		t.Error("low-signal framework frames should score as wrappers")
	}
}

// --- discovery ---

func touch(t *testing.T, p string, mod time.Time, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, mod, mod); err != nil {
		t.Fatal(err)
	}
}

func bases(in Inputs) []string {
	var out []string
	for _, f := range in.Files {
		out = append(out, filepath.Base(f.Path))
	}
	return out
}

func TestDiscover(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	trc := `{"traceEvents":[]}`
	ip := func(i int) *int { return &i }
	type file struct {
		name string
		age  int // minutes after t0
	}
	cases := []struct {
		name      string
		files     []file
		root      string // relative root; "" = temp dir
		opts      DiscoverOptions
		want      []string
		stages    []string
		model     string
		tp        int
		warnLike  string
		errLike   string
		rankFirst RankID
	}{
		{name: "sglang ranks and stages, lowest rank",
			files: []file{{"p-TP-1-EXTEND.trace.json.gz", 1}, {"p-TP-0-EXTEND.trace.json.gz", 1}, {"p-TP-0-DECODE.trace.json.gz", 2}, {"p-TP-1-DECODE.trace.json.gz", 2}, {"merged-p.trace.json.gz", 3}, {"server_args.json", 0}},
			want:  []string{"p-TP-0-EXTEND.trace.json.gz", "p-TP-0-DECODE.trace.json.gz"}, stages: []string{StageExtend, StageDecode},
			warnLike: "use --rank N or --all-ranks", model: "Qwen/Qwen3-8B", tp: 2},
		{name: "rank option",
			files: []file{{"p-TP-0.trace.json.gz", 1}, {"p-TP-1.trace.json.gz", 1}},
			opts:  DiscoverOptions{Rank: ip(1)}, want: []string{"p-TP-1.trace.json.gz"}},
		{name: "missing rank",
			files: []file{{"p-TP-0.trace.json.gz", 1}},
			opts:  DiscoverOptions{Rank: ip(3)}, errLike: "ranks present: [0]"},
		{name: "all ranks",
			files: []file{{"p-TP-0.trace.json.gz", 1}, {"p-TP-1.trace.json.gz", 1}},
			opts:  DiscoverOptions{AllRanks: true}, want: []string{"p-TP-0.trace.json.gz", "p-TP-1.trace.json.gz"}},
		{name: "full rank tuple: DP groups are distinct ranks",
			files: []file{{"p-TP-0-DP-1-PP-0-EP-0.trace.json.gz", 1}, {"p-TP-0-DP-0-PP-0-EP-0.trace.json.gz", 1}},
			want:  []string{"p-TP-0-DP-0-PP-0-EP-0.trace.json.gz"}, warnLike: "TP-0-DP-1-PP-0-EP-0",
			rankFirst: RankID{TP: 0, DP: 0, PP: 0, EP: 0, Global: -1}},
		{name: "merged only",
			files: []file{{"merged-p.trace.json.gz", 1}}, want: []string{"merged-p.trace.json.gz"}},
		{name: "two jobs claim one rank and stage: refused",
			files:   []file{{"a-TP-0-DECODE.trace.json.gz", 1}, {"b-TP-0-DECODE.trace.json.gz", 5}},
			errLike: "2 traces with rank TP-0, stage decode"},
		{name: "two loose names claim rank 0 (the HTA fixtures): refused",
			files:   []file{{"hta-ddp-rank0.json.gz", 1}, {"hta-cudagraph-rank0.json.gz", 5}},
			errLike: "different jobs or profiles"},
		{name: "nsys export beside torch traces: refused",
			files:   []file{{"saxpy.sqlite", 1}, {"ddp-rank0.json.gz", 1}},
			errLike: "mixes nsys exports"},
		{name: "a rankless trace beside ranked ones: refused",
			files:   []file{{"profile.json", 1}, {"p-TP-0.trace.json.gz", 1}, {"p-TP-1.trace.json.gz", 1}},
			errLike: "carry no rank"},
		{name: "diffusion names",
			files: []file{{"req-5_steps-global-rank1.trace.json.gz", 1}, {"req-5_steps-global-rank0.trace.json.gz", 1}},
			want:  []string{"req-5_steps-global-rank0.trace.json.gz"}, stages: []string{""},
			rankFirst: RankID{TP: -1, DP: -1, PP: -1, EP: -1, Global: 0}},
		{name: "diffusion full stages",
			files: []file{{"u-full_stages-global-rank0.trace.json.gz", 1}}, want: []string{"u-full_stages-global-rank0.trace.json.gz"}},
		{name: "vllm-omni",
			files: []file{{"20260101-120000_p/trace_rank0.json.gz", 1}, {"20260101-120000_p/trace_rank1.json", 1}, {"20260101-120000_p/ops_rank0.xlsx", 1}},
			want:  []string{"trace_rank0.json.gz"}},
		{name: "nsys: export wins over report",
			files: []file{{"r.nsys-rep", 3}, {"r.sqlite", 2}},
			want:  []string{"r.sqlite"}},
		{name: "nsys: two unrelated exports refused",
			files:   []file{{"r.nsys-rep", 3}, {"r.sqlite", 2}, {"older.nsys-rep", 1}},
			errLike: "2 traces with no rank in their names"},
		{name: "staged layout, server_args one level down (W10)",
			files: []file{{"prefill/1700000000.1/server_args.json", 0}, {"prefill/1700000000.1/x-TP-0.trace.json.gz", 1}, {"decode/1700000001.2/x-TP-0.trace.json.gz", 2}},
			want:  []string{"x-TP-0.trace.json.gz", "x-TP-0.trace.json.gz"}, stages: []string{StageExtend, StageDecode}, model: "Qwen/Qwen3-8B", tp: 2},
		{name: "server_args in the parent of a timestamp dir",
			files: []file{{"server_args.json", 0}, {"1700000000.1/x-TP-0.trace.json.gz", 1}},
			root:  "1700000000.1", want: []string{"x-TP-0.trace.json.gz"}, model: "Qwen/Qwen3-8B", tp: 2},
		{name: "server_args one level down from the root",
			files: []file{{"1700000000.1/server_args.json", 0}, {"1700000000.1/x-TP-0.trace.json.gz", 1}},
			want:  []string{"x-TP-0.trace.json.gz"}, model: "Qwen/Qwen3-8B", tp: 2},
		{name: "newest of unstaged sibling dirs",
			files: []file{{"1/a-TP-0.trace.json.gz", 1}, {"2/b-TP-0.trace.json.gz", 9}},
			want:  []string{"b-TP-0.trace.json.gz"}, warnLike: "using the newest"},
		{name: "sniffed generic json",
			files: []file{{"profile.json", 1}, {"config.json", 1}, {"notes.json", 1}},
			want:  []string{"profile.json"}},
		{name: "nothing", files: []file{{"readme.txt", 1}}, errLike: "no trace files"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range c.files {
				body := trc
				switch {
				case strings.HasSuffix(f.name, "server_args.json"):
					body = `{"model_path":"Qwen/Qwen3-8B","tp_size":2}`
				case f.name == "notes.json" || f.name == "config.json":
					body = `{"hello":1}`
				}
				touch(t, filepath.Join(dir, f.name), t0.Add(time.Duration(f.age)*time.Minute), body)
			}
			root := dir
			if c.root != "" {
				root = filepath.Join(dir, c.root)
			}
			in, err := Discover(root, c.opts)
			if c.errLike != "" {
				if err == nil || !strings.Contains(err.Error(), c.errLike) {
					t.Fatalf("err = %v, want it to mention %q", err, c.errLike)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := bases(in); strings.Join(got, ",") != strings.Join(c.want, ",") {
				t.Errorf("files = %v, want %v", got, c.want)
			}
			for i, s := range c.stages {
				if i < len(in.Files) && in.Files[i].Stage != s {
					t.Errorf("file %d stage = %q, want %q", i, in.Files[i].Stage, s)
				}
			}
			if in.Model != c.model || in.TPSize != c.tp {
				t.Errorf("server args model=%q tp=%d, want %q %d (found %q)", in.Model, in.TPSize, c.model, c.tp, in.ServerArgsPath)
			}
			if c.warnLike != "" && !strings.Contains(strings.Join(in.Warnings, "\n"), c.warnLike) {
				t.Errorf("warnings %v lack %q", in.Warnings, c.warnLike)
			}
			if c.rankFirst != (RankID{}) && in.Files[0].Rank != c.rankFirst {
				t.Errorf("rank = %+v, want %+v", in.Files[0].Rank, c.rankFirst)
			}
		})
	}
}

func TestDiscoverFileAndErrors(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "run", "merged-x.trace.json.gz")
	touch(t, p, time.Now(), `{}`)
	touch(t, filepath.Join(dir, "server_args.json"), time.Now(), `{"model":"m","tp_size":"4"}`)
	in, err := Discover(p, DiscoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Files) != 1 || in.Files[0].Merged || in.Model != "m" || in.TPSize != 4 {
		t.Errorf("file input = %+v", in)
	}
	if _, err := Discover(filepath.Join(dir, "nope"), DiscoverOptions{}); err == nil || !strings.Contains(err.Error(), "pass a trace file") {
		t.Errorf("missing root: %v", err)
	}
	touch(t, filepath.Join(dir, "bad", "server_args.json"), time.Now(), `{`)
	touch(t, filepath.Join(dir, "bad", "y-TP-0.trace.json"), time.Now(), `{}`)
	in, err = Discover(filepath.Join(dir, "bad"), DiscoverOptions{})
	if err != nil || !strings.Contains(strings.Join(in.Warnings, "\n"), "not valid JSON") {
		t.Errorf("bad server_args: err=%v warnings=%v", err, in.Warnings)
	}
}

// --- fusion statuses ---

func row(name string, us float64, locs ...string) KernelRow {
	r := KernelRow{Name: Canonical(name), Category: Classify(name), TotalUS: us, totalNS: int64(us * 1000)}
	for _, l := range locs {
		r.Locations = append(r.Locations, Location{Location: l, CPUOp: "op", SharePct: 100})
	}
	return r
}

func statusOf(rows []FusionRow, pattern string) (string, *FusionRow) {
	for i := range rows {
		if rows[i].Pattern == pattern {
			return rows[i].Status, &rows[i]
		}
	}
	return "absent", nil
}

func TestFusionStatuses(t *testing.T) {
	const total = 100_000
	cat := DefaultCatalog()
	if n := len(cat.Patterns); n < 40 {
		t.Fatalf("catalog has %d patterns, want at least 40", n)
	}
	const act = "Fused activation-and-mul (SwiGLU/GeGLU)"
	present := cat.Match([]KernelRow{row("void sglang::act_and_mul_kernel<bf16>(bf16*)", 5)}, total, "", 0)
	if s, _ := statusOf(present, act); s != StatusPresent {
		t.Errorf("fused kernel: status %q, want present", s)
	}
	split := cat.Match([]KernelRow{row(kSilu, 5), row(kMul, 5)}, total, "", 0)
	s, fr := statusOf(split, act)
	if s != StatusAvailable || fr.Confidence != ConfHigh || fr.RelatedUS != 10 || len(fr.Evidence) != 2 {
		t.Errorf("split kernels: %q %+v, want available, high, 10 us, 2 evidence rows", s, fr)
	}
	absent := cat.Match([]KernelRow{row(kSilu, 5)}, total, "", 0)
	if s, _ := statusOf(absent, act); s != "absent" {
		t.Errorf("only SiLU: status %q, want absent", s)
	}
	// Too small to report.
	tiny := cat.Match([]KernelRow{row(kSilu, 0.01), row(kMul, 0.01)}, total, "", 0)
	if s, _ := statusOf(tiny, act); s != "absent" {
		t.Errorf("tiny split share: status %q, want absent (below min_share)", s)
	}
}

// The name-contradiction rule: the FlashAttention kernel whose Python location is
// flash_attn_with_kvcache must not count as the KV-cache-write kernel (the anchor inflated the
// pattern's related time with attention this way, W6), while a real store kernel does.
func TestFusionNameContradiction(t *testing.T) {
	const pat = "Fused QK RoPE reshape + KV cache write"
	cat := DefaultCatalog()
	attn := row(kAttn, 50, "python/sglang/srt/layers/attention/flashattention_backend.py:700 flash_attn_with_kvcache")
	rope := row("void rotary_embedding_kernel<c10::BFloat16, true>(long const*)", 3, "python/sglang/srt/layers/rotary_embedding.py:1 forward")
	got := cat.Match([]KernelRow{attn, rope}, 100_000, "", 0)
	if s, _ := statusOf(got, pat); s != "absent" {
		t.Errorf("attention + rope: status %q, want absent (attention cannot be the KV write)", s)
	}
	// A memory kernel whose only evidence is its location counts, with low confidence.
	store := row("void some_unnamed_kernel<long>", 2, "python/sglang/srt/mem_cache/memory_pool.py:500 set_kv_buffer")
	store.Category = CatMemory
	got = cat.Match([]KernelRow{attn, rope, store}, 100_000, "", 0)
	s, fr := statusOf(got, pat)
	if s != StatusAvailable || fr.Confidence != ConfLow || fr.RelatedUS != 5 {
		t.Errorf("rope + location-only store: %q %+v, want available, low confidence, 5 us (no attention time)", s, fr)
	}
	// A GEMM named "..._add..." does not satisfy an elementwise "add" group by its name.
	g := row("cutlass_gemm_bias_add_kernel", 10)
	got = cat.Match([]KernelRow{g, row("void rmsnorm_kernel<bf16>", 5)}, 100_000, "", 0)
	if s, _ := statusOf(got, "Fused residual add + RMSNorm"); s != "absent" {
		t.Errorf("GEMM named add + RMSNorm: %q, want absent", s)
	}
}

func TestFusionGates(t *testing.T) {
	cat := DefaultCatalog()
	rows := []KernelRow{row("ltx2_ada_values9_kernel", 5)}
	if s, _ := statusOf(cat.Match(rows, 100_000, "", 0), "SGLang LTX2 fused Ada values"); s != "absent" {
		t.Errorf("model-gated pattern without a model: %q", s)
	}
	if s, _ := statusOf(cat.Match(rows, 100_000, "Lightricks/LTX-2", 0), "SGLang LTX2 fused Ada values"); s != StatusPresent {
		t.Errorf("LTX model: %q, want present", s)
	}
	ar := []KernelRow{row(kNCCL, 10), row("void flashinfer::norm::RMSNormKernel<8u>", 10)}
	const fi = "FlashInfer unified allreduce_fusion (all-reduce + residual + RMSNorm)"
	if s, _ := statusOf(cat.Match(ar, 100_000, "", 1), fi); s != "absent" {
		t.Errorf("TP=1: %q, want absent", s)
	}
	s, fr := statusOf(cat.Match(ar, 100_000, "", 0), fi)
	if s != StatusAvailable || !strings.Contains(fr.Rationale, "TP size unknown") {
		t.Errorf("TP unknown: %q %+v", s, fr)
	}
	// Subsumption: the fused QK-norm+RoPE kernel hides the in-place QK-norm pattern...
	both := []KernelRow{row("fused_qknorm_rope_kernel", 5)}
	m := cat.Match(both, 100_000, "", 0)
	if s, _ := statusOf(m, "Fused QK RMSNorm + RoPE"); s != StatusPresent {
		t.Errorf("fused qknorm rope: %q", s)
	}
	// ...and the in-place QK-norm kernel beside a separate RoPE is the norm part of the more
	// specific QK-norm + RoPE fusion: cited once, there.
	m = cat.Match([]KernelRow{row("fused_qknorm_warp", 5), row("void rotary_embedding_kernel<bf16>", 5)}, 100_000, "", 0)
	if s, _ := statusOf(m, "In-place QK RMSNorm"); s != "absent" {
		t.Errorf("in-place qknorm cited twice: %q", s)
	}
	if s, _ := statusOf(m, "Fused QK RMSNorm + RoPE"); s != StatusAvailable {
		t.Errorf("qknorm + separate rope: %q, want available", s)
	}
}

func TestParseCatalogErrors(t *testing.T) {
	for _, bad := range []string{`{`, `{"patterns":[{"name":""}]}`, `{"patterns":[{"name":"a"}]}`,
		`{"patterns":[{"name":"a","fused":["re:("]}]}`, `{"patterns":[{"name":"a","fused":["x"]},{"name":"a","fused":["y"]}]}`,
		`{"patterns":[{"name":"a","fused":["x"],"subsumes":["b"]}]}`} {
		if _, err := ParseCatalog([]byte(bad)); err == nil {
			t.Errorf("ParseCatalog(%s): no error", bad)
		}
	}
}

// --- mapping-formal mode ---

func TestMappingFormal(t *testing.T) {
	// Mapping (graph-off): the decode GEMM is launched eagerly from unquant.py.
	mb := newTB("mapping.trace.json")
	root := mb.frame(pyMM, 0, 1_000_000, trace.NoID)
	c := mb.cpuop("aten::mm", 10, 20, root)
	mb.kernel(kGEMM, 0, 7, 100, 200, trace.NoID, c)
	mb.kernel(kAttn, 0, 7, 300, 400, trace.NoID, c) // conflicting site for attention
	// Formal (graph-on): both replayed by one graph launch, attention also eager elsewhere.
	fb := newTB("formal.trace.json")
	gfr := fb.frame(pyGraph, 0, 1_000, trace.NoID)
	gl := fb.launch("cudaGraphLaunch", 10, 20, true)
	fb.t.Launches[gl].Frame = gfr
	fb.kernel(kGEMM, 0, 7, 100, 300, gl, trace.NoID)
	af := fb.frame(pyAttn, 2_000, 3_000, trace.NoID)
	ac := fb.cpuop("sgl_kernel::fwd", 2_010, 2_020, af)
	fb.kernel(kAttn, 0, 7, 2_100, 2_300, trace.NoID, ac)
	fb.kernel("unknown_kernel_only_in_formal", 0, 7, 3_000, 3_100, gl, trace.NoID)
	open := opener(map[string]*trace.Trace{"mapping.trace.json": mb.t, "formal.trace.json": fb.t})
	mapping := &Inputs{Files: []Input{{Path: "mapping.trace.json", Stage: StageDecode, Rank: NoRank}}}
	r, err := Analyze(context.Background(), Inputs{Files: []Input{{Path: "formal.trace.json", Stage: StageDecode, Rank: NoRank}}},
		Options{Open: open, Mapping: mapping})
	if err != nil {
		t.Fatal(err)
	}
	if r.Mode != ModeMappingFormal || len(r.Mapping) != 1 {
		t.Fatalf("mode %q mapping %v", r.Mode, r.Mapping)
	}
	dec := findStage(t, r, StageDecode)
	g := findKernel(t, dec, kGEMM)
	if g.TotalUS != 0.2 || len(g.Locations) != 1 || g.Locations[0].Location != "python/sglang/srt/layers/quantization/unquant.py:134 apply" ||
		g.Locations[0].CPUOp != "aten::mm (mapping)" {
		t.Errorf("graph-replayed GEMM: %+v; want the formal time with the mapping trace's site", *g)
	}
	a := findKernel(t, dec, "void cutlass::device_kernel<flash::")
	if a.Locations[0].Location != "python/sglang/srt/layers/attention/flashattention_backend.py:700 forward_extend" {
		t.Errorf("attention keeps its own formal site, got %+v", a.Locations)
	}
	w := strings.Join(r.Warnings, "\n")
	if !strings.Contains(w, "attribution conflict") {
		t.Errorf("no attribution-conflict warning: %v", r.Warnings)
	}
	if !strings.Contains(w, "1 kernel names") || !strings.Contains(w, "no match in the mapping trace") || !strings.Contains(w, "first: unknown_kernel_only_in_formal") {
		t.Errorf("no unmatched-kernel warning: %v", r.Warnings)
	}
}

func TestPriorityTable(t *testing.T) {
	cases := []struct {
		verdict, cat string
		share, excl  float64
		hid          float64
		dep          string
		p, rec       string
	}{
		{VerdictHeadroom, CatCommunication, 5, 0.9, 0.1, DepLow, "P1", RecTryOverlap},
		{VerdictHeadroom, CatGEMM, 5, 0.9, 0.1, DepLow, "P1", RecTryFusion},
		{VerdictHeadroom, CatGEMM, 5, 0.9, 0.1, DepHigh, "P2", RecCheckDeps},
		{VerdictHeadroom, CatGEMM, 0.5, 0.9, 0.1, DepLow, "P5", RecSkip},
		{VerdictLowROI, CatElementwise, 5, 0.1, 0.9, DepLow, "P4", RecSkip},
		{VerdictOverlapped, CatCommunication, 5, 0.1, 0.9, DepLow, "P5", RecSkip},
		{VerdictOverlapped, CatCommunication, 5, 0.4, 0.6, DepHigh, "P4", RecCheckDeps},
		{VerdictOverlapped, CatCommunication, 5, 0.4, 0.6, DepUnclear, "P4", RecInspect},
		{VerdictOverlapped, CatCommunication, 5, 0.4, 0.6, DepLow, "P4", RecDefer},
	}
	for _, c := range cases {
		p, rec := priority(c.verdict, c.cat, 50_000, c.share, c.excl, c.hid, c.dep)
		if p != c.p || rec != c.rec {
			t.Errorf("priority(%+v) = %s %s, want %s %s", c, p, rec, c.p, c.rec)
		}
	}
}

func TestAnnotationStage(t *testing.T) {
	cases := map[string]string{
		"step[EXTEND bs=15 toks=15360]": StageExtend,
		"step[PREFILL bs=1]":            StageExtend,
		"prefill_step_3":                StageExtend,
		"step[DECODE bs=32]":            StageDecode,
		"decode_step_12":                StageDecode,
		"step[MIXED bs=2]":              StageMixed,
		"denoising_step_7":              "DenoisingStage",
		"DenoisingStage":                "DenoisingStage",
		"Ideogram4DenoisingStage":       "Ideogram4DenoisingStage",
		"DecodingStage":                 "DecodingStage",
		"ProfilerStep#3":                "",
		"aten::mm":                      "",
		"decoding something":            "",
	}
	for in, want := range cases {
		if got := annotationStage(in); got != want {
			t.Errorf("annotationStage(%q) = %q, want %q", in, got, want)
		}
	}
}

// Nested windows: the innermost wins; GPU windows are used with GPU time, CPU windows with the
// launch time of the op (a graph replay runs after its CPU window closed).
func TestOpStagesWindows(t *testing.T) {
	b := newTB("w.json")
	b.annot("DenoisingStage", 0, 1_000, true)
	b.annot("SomethingElseStage", 200, 300, true)
	b.annot("step[DECODE bs=1]", 5_000, 5_100, false)
	l := b.launch("cudaGraphLaunch", 5_050, 5_060, true)
	b.kernel("k1", 0, 7, 100, 150, trace.NoID, trace.NoID)       // DenoisingStage
	b.kernel("k2", 0, 7, 250, 260, trace.NoID, trace.NoID)       // nested stage
	b.kernel("k3", 0, 7, 9_000, 9_100, l, trace.NoID)            // decode via launch time
	b.kernel("k4", 0, 7, 20_000, 20_100, trace.NoID, trace.NoID) // nothing
	ops := []int32{0, 1, 2, 3}
	got := opStages(b.t, ops, 0)
	want := []string{"DenoisingStage", "SomethingElseStage", StageDecode, StageUnannotated}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("stages = %v, want %v", got, want)
	}
	// GPU annotations of another device are ignored.
	if got := opStages(b.t, ops, 3); got[0] != StageUnannotated {
		t.Errorf("device 3 used device 0's GPU windows: %v", got)
	}
	if opStages(newTB("x").t, nil, 0) != nil {
		t.Error("a trace without stage annotations should give nil")
	}
}

func TestAllRanksLabels(t *testing.T) {
	t0 := goldenTrace()
	t1 := goldenTrace()
	m := map[string]*trace.Trace{"a-TP-0-DECODE.trace.json.gz": t0, "a-TP-1-DECODE.trace.json.gz": t1}
	in := Inputs{Files: []Input{
		{Path: "a-TP-0-DECODE.trace.json.gz", Stage: StageDecode, Rank: RankID{0, -1, -1, -1, -1}},
		{Path: "a-TP-1-DECODE.trace.json.gz", Stage: StageDecode, Rank: RankID{1, -1, -1, -1, -1}},
	}}
	r, err := Analyze(context.Background(), in, Options{Open: opener(m)})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Stages) != 2 || r.Stages[0].Stage != "decode TP-0" || r.Stages[1].Stage != "decode TP-1" {
		t.Errorf("stage labels: %v / %v", r.Stages[0].Stage, r.Stages[len(r.Stages)-1].Stage)
	}
	if r.Inputs[1].Rank != 1 {
		t.Errorf("input rank = %d", r.Inputs[1].Rank)
	}
}

func TestOpenByFormat(t *testing.T) {
	k := func(context.Context, string) (*trace.Trace, error) { return trace.New("k", "kineto"), nil }
	n := func(context.Context, string) (*trace.Trace, error) { return trace.New("n", "nsys"), nil }
	ctx := context.Background()
	open := OpenByFormat(k, n)
	if tr, err := open(ctx, "/x/run.sqlite"); err != nil || tr.Format != "nsys" {
		t.Errorf("sqlite: %v %v", tr, err)
	}
	if tr, err := open(ctx, "/x/a-TP-0.trace.json.gz"); err != nil || tr.Format != "kineto" {
		t.Errorf("kineto: %v %v", tr, err)
	}
	if _, err := open(ctx, "/x/run.nsys-rep"); err == nil || !strings.Contains(err.Error(), "nsys export") {
		t.Errorf("nsys-rep: %v", err)
	}
	if _, err := OpenByFormat(k, nil)(ctx, "r.sqlite"); err == nil {
		t.Error("missing nsys reader: no error")
	}
	if _, err := OpenByFormat(nil, n)(ctx, "r.json"); err == nil {
		t.Error("missing kineto reader: no error")
	}
}

func TestStageFilter(t *testing.T) {
	tr := goldenTrace()
	open := opener(map[string]*trace.Trace{tr.Path: tr})
	in := Inputs{Files: []Input{{Path: tr.Path, Rank: NoRank}}}
	r, err := Analyze(context.Background(), in, Options{Open: open, Stage: StageDecode})
	if err != nil || len(r.Stages) != 1 || r.Stages[0].Stage != StageDecode {
		t.Fatalf("stage filter: %v %+v", err, r)
	}
	if _, err := Analyze(context.Background(), in, Options{Open: open, Stage: "DenoisingStage"}); err == nil ||
		!strings.Contains(err.Error(), "stages present: extend, decode") {
		t.Errorf("unknown stage: %v", err)
	}
}

// Split kernels are evidence only when they run back to back on one stream: a gate
// activation with its multiply as the very next launch is a SwiGLU candidate; with any kernel
// between them (the old window of 3 ops accepted two) it is not.
func TestFusionAdjacency(t *testing.T) {
	build := func(gap int) *trace.Trace {
		b := newTB("adj.json")
		var ts int64
		k := func(name string) {
			b.kernel(name, 0, 7, ts, ts+10_000, trace.NoID, trace.NoID)
			ts += 11_000
		}
		for i := 0; i < 3; i++ {
			k(kSilu)
			for j := 0; j < gap; j++ {
				k(kGEMM)
			}
			k(kMul)
			for j := 0; j < 5; j++ {
				k(kGEMM)
			}
		}
		return b.t
	}
	const act = "Fused activation-and-mul (SwiGLU/GeGLU)"
	for _, c := range []struct {
		gap  int
		want string
	}{{0, StatusAvailable}, {1, "absent"}, {2, "absent"}} {
		tr := build(c.gap)
		r, err := Analyze(context.Background(), Inputs{Files: []Input{{Path: "adj.json", Stage: StageAll, Rank: NoRank}}},
			Options{Open: opener(map[string]*trace.Trace{"adj.json": tr})})
		if err != nil {
			t.Fatal(err)
		}
		if s, fr := statusOf(r.Stages[0].Fusions, act); s != c.want {
			t.Errorf("gap %d: %q %+v, want %s", c.gap, s, fr, c.want)
		}
	}
}

// TestMergeRuns32 checks the run merge of the sweep's per-stream sort against slices.Sort: a
// few sorted runs (kernels, then copies), many runs (the fallback) and already sorted input.
func TestMergeRuns32(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	for _, runs := range []int{1, 2, 3, 7, 64, 65, 500} {
		var b []int32
		for range runs {
			n := r.IntN(40)
			v := int32(r.IntN(1000))
			for range n {
				v += int32(r.IntN(5))
				b = append(b, v)
			}
		}
		want := slices.Clone(b)
		slices.Sort(want)
		mergeRuns32(b, make([]int32, len(b)), func(x, y int32) int { return cmp.Compare(x, y) })
		if !slices.Equal(b, want) {
			t.Errorf("%d runs: %v, want %v", runs, b, want)
		}
	}
}

// The byte-pair prefilter and the regexp window must not change any category: on
// names long enough to use them, Classify agrees with a plain first-match over every rule.
func TestClassifyPrefilterAgrees(t *testing.T) {
	c := DefaultClassifier()
	naive := func(name string) string {
		s := strings.ToLower(Canonical(name))
		for _, r := range c.rules {
			if r.re != nil && r.re.MatchString(s) || r.re == nil && strings.Contains(s, r.sub) {
				return r.cat
			}
		}
		return CatOther
	}
	pad := strings.Repeat("cute::C<128>, ", 10)
	for _, base := range []string{
		"ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "sm90_xmma_fprop_implicit_gemm_bf16", "void mla_decode_kernel<",
		"void at::native::vectorized_elementwise_kernel<4, at::native::mul_kernel<", "void at::native::max_pool2d<",
		"deepep::dispatch<", "void oneshot_all_reduce<", "void conv2d_kernel<", "void ssd_chunk_scan<", "void foo_a2a_bar<",
		"[CUDA memcpy Host-to-Device]", "void some_mma_kernel<", "void x::sdpa_fwd<", "void cvt_fp16<", "triton_poi_fused_tanh_0",
	} {
		for _, name := range []string{base + pad + ">", base} {
			if got, want := c.Classify(name), naive(name); got != want {
				t.Errorf("Classify(%.60q…) = %s, plain rules say %s", name, got, want)
			}
		}
	}
	if got := requiredLiterals("(^|[^m])all_?reduce"); len(got) != 1 || got[0] != "reduce" {
		t.Errorf("requiredLiterals = %q, want [reduce]", got)
	}
	if got := requiredLiterals("(fprop|dgrad|wgrad)"); got == nil {
		t.Errorf("requiredLiterals of an alternation = nil")
	}
}

// Issue 17: a 2.4 GiB host-to-device copy got "try fusion". Copies get copy advice whatever
// the source's spelling.
func TestCopyAdvice(t *testing.T) {
	for name, want := range map[string]string{
		"[CUDA memcpy Host-to-Device]":                    RecCopyAsync,
		"[CUDA memcpy Device-to-Host]":                    RecCopyAsync,
		"Memcpy HtoD (Pageable -> Device)":                RecCopyAsync,
		"Memcpy HtoD (Pinned -> Device)":                  RecCopyPinned,
		"Memcpy DtoD (Device -> Device)":                  RecCopyAvoid,
		"[CUDA memset]":                                   RecCopyAvoid,
		"hipMemcpyWithStream":                             RecCopyAvoid,
		"void at::native::direct_copy_kernel_cuda<float>": "",
		"nvjet_tst_64x8_64x16_4x1_v_bz_TNT":               "",
	} {
		if got := copyAdvice(name); got != want {
			t.Errorf("copyAdvice(%q) = %q, want %q", name, got, want)
		}
	}
}

// Review of issue 17: triage.md's title lines ("Triage View", "Mode: ...", "Input traces: ...")
// and section names rendered as one paragraph on GitHub. Markdown makes them a heading, list
// items and section headings; text is unchanged.
func TestMarkdownHeaderStructure(t *testing.T) {
	r := &Report{Mode: ModeSingle, Model: "Qwen/Qwen3-8B", TPSize: 2, Inputs: []InputInfo{{Path: "runs/a_b/trace.json", Stage: StageAll}},
		Stages: []Stage{{Stage: StageAll}}}
	var md, txt strings.Builder
	if err := Render(&md, r, FormatMarkdown, 1); err != nil {
		t.Fatal(err)
	}
	if err := Render(&txt, r, FormatText, 1); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Triage View\n", "\n- Mode: single-trace\n", "\n- Input traces: `runs/a_b/trace.json`\n",
		"\n- Model: Qwen/Qwen3-8B\n", "\n- TP size: 2\n", "\n- Rows under 1.0% ", "\n## Kernel Table\n", "\n## Overlap Opportunity Table\n",
		"\n## Fuse Opportunity Table\n", "\n## Legend\n"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md.String())
		}
	}
	for _, want := range []string{"Triage View\nMode: single-trace\nInput traces: runs/a_b/trace.json\n", "== Kernel Table ==\n"} {
		if !strings.Contains(txt.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, txt.String())
		}
	}
}
