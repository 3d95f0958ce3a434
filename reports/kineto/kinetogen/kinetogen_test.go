package kinetogen

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

type event struct {
	Ph   string         `json:"ph"`
	Cat  string         `json:"cat"`
	Name string         `json:"name"`
	Pid  any            `json:"pid"`
	Tid  any            `json:"tid"`
	Ts   json.Number    `json:"ts"`
	Dur  json.Number    `json:"dur"`
	ID   int64          `json:"id"`
	Bp   string         `json:"bp"`
	Args map[string]any `json:"args"`
}

type traceFile struct {
	SchemaVersion   int               `json:"schemaVersion"`
	DeviceProps     []map[string]any  `json:"deviceProperties"`
	DistributedInfo map[string]any    `json:"distributedInfo"`
	DisplayTimeUnit string            `json:"displayTimeUnit"`
	BaseTimeNS      int64             `json:"baseTimeNanoseconds"`
	TraceEvents     []event           `json:"traceEvents"`
	TraceName       string            `json:"traceName"`
	Extra           map[string]string `json:"-"`
}

// usToNS parses Kineto's "<µs>.<3 digits>" exactly.
func usToNS(t *testing.T, n json.Number) int64 {
	t.Helper()
	s := string(n)
	i := strings.IndexByte(s, '.')
	if i < 0 || len(s)-i != 4 {
		t.Fatalf("timestamp %q is not µs with exactly 3 decimals", s)
	}
	var v int64
	for _, c := range s[:i] + s[i+1:] {
		v = v*10 + int64(c-'0')
	}
	return v
}

func num(v any) float64 {
	switch x := v.(type) {
	case json.Number:
		f, _ := x.Float64()
		return f
	case float64:
		return x
	}
	return -1
}

func genTrace(t *testing.T, cfg Config) ([]byte, Stats, traceFile) {
	t.Helper()
	var buf bytes.Buffer
	st, err := Write(&buf, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var tf traceFile
	dec := json.NewDecoder(bytes.NewReader(buf.Bytes()))
	dec.UseNumber()
	if err := dec.Decode(&tf); err != nil {
		t.Fatalf("output is not valid JSON: %v", err)
	}
	return buf.Bytes(), st, tf
}

func check(t *testing.T, cfg Config) (Stats, traceFile) {
	t.Helper()
	raw, st, tf := genTrace(t, cfg)
	if st.Bytes != int64(len(raw)) {
		t.Errorf("Stats.Bytes = %d, wrote %d", st.Bytes, len(raw))
	}
	if int64(len(tf.TraceEvents)) != st.Events {
		t.Errorf("Stats.Events = %d, trace has %d", st.Events, len(tf.TraceEvents))
	}
	var kernels, memcpys, kns int64
	byName := map[string]int64{}
	launches := map[int64]bool{}
	corrKernels := map[int64]int{}
	flowsS, flowsF := map[int64]bool{}, 0
	for _, e := range tf.TraceEvents {
		switch {
		case e.Ph == "X" && e.Cat == "kernel":
			kernels++
			d := usToNS(t, e.Dur)
			kns += d
			byName[e.Name] += d
			corrKernels[int64(num(e.Args["correlation"]))]++
			if e.Args["stream"] == nil || e.Args["External id"] == nil || e.Args["grid"] == nil {
				t.Fatalf("kernel args incomplete: %v", e.Args)
			}
		case e.Ph == "X" && e.Cat == "gpu_memcpy":
			memcpys++
			corrKernels[int64(num(e.Args["correlation"]))]++
		case e.Ph == "X" && e.Cat == "cuda_runtime":
			launches[int64(num(e.Args["correlation"]))] = true
		case e.Ph == "s":
			flowsS[e.ID] = true
		case e.Ph == "f":
			flowsF++
			if e.Bp != "e" {
				t.Errorf("f flow without bp e")
			}
		}
		if e.Ph == "X" {
			usToNS(t, e.Ts)
		}
	}
	if kernels != st.Kernels || memcpys != st.Memcpys || kns != st.KernelNS {
		t.Errorf("stats kernels/memcpys/ns = %d/%d/%d, trace %d/%d/%d", st.Kernels, st.Memcpys, st.KernelNS, kernels, memcpys, kns)
	}
	for n, d := range byName {
		if st.KernelNSByName[n] != d {
			t.Errorf("KernelNSByName[%q] = %d, trace %d", n, st.KernelNSByName[n], d)
		}
	}
	for c := range corrKernels {
		if !launches[c] || !flowsS[c] {
			t.Errorf("GPU op correlation %d has no launch or no s flow", c)
		}
	}
	if int64(flowsF) != kernels+memcpys {
		t.Errorf("%d f flows for %d GPU ops", flowsF, kernels+memcpys)
	}
	if tf.SchemaVersion != 1 || tf.BaseTimeNS == 0 || tf.TraceName == "" || tf.DisplayTimeUnit != "ms" {
		t.Errorf("top-level keys wrong: %+v", tf.SchemaVersion)
	}
	// key order: traceEvents before traceName, baseTimeNanoseconds before traceEvents
	s := string(raw)
	if !(strings.Index(s, `"schemaVersion"`) < strings.Index(s, `"deviceProperties"`) &&
		strings.Index(s, `"distributedInfo"`) < strings.Index(s, `"baseTimeNanoseconds"`) &&
		strings.Index(s, `"baseTimeNanoseconds"`) < strings.Index(s, `"traceEvents"`) &&
		strings.LastIndex(s, `"traceName"`) > strings.LastIndex(s, `"ph"`)) {
		t.Errorf("top-level key order differs from Kineto's")
	}
	return st, tf
}

func names(tf traceFile, cat string) map[string]int {
	m := map[string]int{}
	for _, e := range tf.TraceEvents {
		if e.Cat == cat {
			m[e.Name]++
		}
	}
	return m
}

func TestDiffusionDenoiseOnly(t *testing.T) {
	st, tf := check(t, Config{Steps: 3, Layers: 4, Seed: 1, Model: "Qwen/Qwen-Image"})
	if st.Steps != 3 {
		t.Fatalf("Steps = %d", st.Steps)
	}
	ann := names(tf, "user_annotation")
	for _, n := range []string{"denoising_step_0", "denoising_step_1", "denoising_step_2"} {
		if ann[n] != 1 || names(tf, "gpu_user_annotation")[n] != 1 {
			t.Errorf("annotation %s missing: %v", n, ann)
		}
	}
	if _, tf2 := check(t, Config{Steps: 2, Layers: 1, FirstStep: 4}); names(tf2, "user_annotation")["denoising_step_5"] != 1 {
		t.Errorf("FirstStep not applied")
	}
	if ann[StageTextEncoding] != 0 {
		t.Errorf("denoise-only trace has a text-encoding stage")
	}
	k := names(tf, "kernel")
	for _, want := range []string{"void flash::FlashAttnFwdSm90<", "nvjet_tst_", "fused_qknorm_rope_kernel", "triton_poi_fused_gelu", "fused_scale_shift_gate_kernel"} {
		found := false
		for n := range k {
			if strings.HasPrefix(n, want) {
				found = true
			}
		}
		if !found {
			t.Errorf("no kernel named %s...", want)
		}
	}
	if names(tf, "gpu_memcpy")["Memcpy HtoD (Pageable -> Device)"] != 3 {
		t.Errorf("want one HtoD memcpy per step, got %v", names(tf, "gpu_memcpy"))
	}
	var m map[string]int
	for _, e := range tf.TraceEvents {
		if e.Ph == "M" && e.Name == "thread_name" {
			if m == nil {
				m = map[string]int{}
			}
			m[e.Args["name"].(string)]++
		}
	}
	if m["stream 7 "] != 1 {
		t.Errorf("no 'stream 7 ' thread name: %v", m)
	}
}

func TestDiffusionAllStagesStepTimes(t *testing.T) {
	steps := []int64{300_000_000, 310_000_000}
	st, tf := check(t, Config{Steps: 2, Layers: 3, AllStages: true, StepDurNS: steps,
		StageNS: map[string]int64{StageTextEncoding: 40_000_000, StageDecoding: 90_000_000}})
	ann := names(tf, "user_annotation")
	for _, n := range []string{StageTextEncoding, StageDenoising, StageDecoding} {
		if ann[n] != 1 {
			t.Errorf("stage %s missing", n)
		}
	}
	if names(tf, "kernel")[nameConv] == 0 {
		t.Errorf("no VAE convolution kernel")
	}
	// each step's GPU annotation lasts about its target (±10%)
	for _, e := range tf.TraceEvents {
		if e.Cat == "gpu_user_annotation" && strings.HasPrefix(e.Name, "denoising_step_") {
			i := int(e.Name[len(e.Name)-1] - '0')
			d := usToNS(t, e.Dur)
			if d < steps[i]*9/10 || d > steps[i]*11/10 {
				t.Errorf("%s lasts %d ns, want ≈%d", e.Name, d, steps[i])
			}
		}
	}
	_ = st
}

func TestStepScaleSlowsGroup(t *testing.T) {
	_, st0, _ := genTrace(t, Config{Steps: 2, Layers: 2, Seed: 3})
	_, st1, _ := genTrace(t, Config{Steps: 2, Layers: 2, Seed: 3, StepScale: map[string]float64{GroupAttention: 2}})
	a0, a1 := st0.KernelNSByName[nameFA3], st1.KernelNSByName[nameFA3]
	if a1 < a0*19/10 || a1 > a0*21/10 {
		t.Errorf("attention time %d → %d with factor 2", a0, a1)
	}
	f := StageFactor(FlavorDiffusion, StageDenoising, map[string]float64{GroupAttention: 2})
	if f < 1.2 || f > 1.6 {
		t.Errorf("StageFactor = %v, want attention share (≈0.35) added", f)
	}
	if _, err := Write(io.Discard, Config{StepScale: map[string]float64{"gemm": -1}}); err == nil {
		t.Errorf("negative factor accepted")
	}
}

func TestLLMCUDAGraphAndComm(t *testing.T) {
	_, tf := check(t, Config{Flavor: FlavorLLM, Steps: 4, Layers: 3, CUDAGraph: true, CommStream: true, WithStack: true})
	ann := names(tf, "user_annotation")
	if ann["step[DECODE bs=32]"] != 3 {
		t.Errorf("want 3 decode steps, got %v", ann)
	}
	ext := 0
	for n := range ann {
		if strings.HasPrefix(n, "step[EXTEND bs=") {
			ext++
		}
	}
	if ext != 1 {
		t.Errorf("want one EXTEND step: %v", ann)
	}
	// one cudaGraphLaunch per decode step, its correlation shared by many kernels
	rt := names(tf, "cuda_runtime")
	if rt["cudaGraphLaunch"] != 3 {
		t.Errorf("cudaGraphLaunch count = %d", rt["cudaGraphLaunch"])
	}
	graphCorr := map[int64]bool{}
	for _, e := range tf.TraceEvents {
		if e.Cat == "cuda_runtime" && e.Name == "cudaGraphLaunch" {
			graphCorr[int64(num(e.Args["correlation"]))] = true
		}
	}
	perCorr := map[int64]int{}
	commStreamSeen := false
	for _, e := range tf.TraceEvents {
		if e.Cat == "kernel" {
			c := int64(num(e.Args["correlation"]))
			if graphCorr[c] {
				perCorr[c]++
				if e.Args["graph id"] == nil {
					t.Fatalf("graph kernel without graph id")
				}
			}
			if num(e.Args["stream"]) == commStream {
				commStreamSeen = true
				if !strings.HasPrefix(e.Name, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL") && !strings.Contains(e.Name, "cross_device_reduce_1stage") {
					t.Errorf("unexpected kernel on comm stream: %s", e.Name)
				}
			}
		}
	}
	for c, n := range perCorr {
		if n < 10 {
			t.Errorf("graph launch %d replays only %d kernels", c, n)
		}
	}
	if !commStreamSeen {
		t.Errorf("no kernel on the comm stream")
	}
	if len(names(tf, "python_function")) == 0 {
		t.Errorf("WithStack produced no python_function events")
	}
	for _, e := range tf.TraceEvents {
		if e.Cat == "python_function" && (e.Args["Python id"] == nil || e.Args["Python parent id"] == nil) {
			t.Fatalf("python_function without ids")
		}
	}
}

func TestTargetBytes(t *testing.T) {
	var buf bytes.Buffer
	st, err := Write(&buf, Config{Flavor: FlavorLLM, Steps: 1, Layers: 4, TargetBytes: 3 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if st.Bytes < 3<<20 || int64(buf.Len()) != st.Bytes {
		t.Fatalf("wrote %d bytes (stats %d), want ≥ %d", buf.Len(), st.Bytes, 3<<20)
	}
	if st.Steps <= 1 {
		t.Errorf("TargetBytes did not add steps: %d", st.Steps)
	}
	if !json.Valid(buf.Bytes()) {
		t.Errorf("large output is not valid JSON")
	}
}

func TestDeterminism(t *testing.T) {
	cfg := Config{Steps: 2, Layers: 3, Seed: 42, CommStream: true, WithStack: true}
	a, _, _ := genTrace(t, cfg)
	b, _, _ := genTrace(t, cfg)
	if !bytes.Equal(a, b) {
		t.Fatal("same config, different bytes")
	}
	cfg.Seed = 43
	c, _, _ := genTrace(t, cfg)
	if bytes.Equal(a, c) {
		t.Fatal("different seed, same bytes")
	}
}

func TestWalkMatchesWrite(t *testing.T) {
	cfg := Config{Steps: 2, Layers: 3, Seed: 5, AllStages: true}
	_, wst, _ := genTrace(t, cfg)
	var kernels int64
	var first int64 = -1
	st, err := Walk(cfg, func(op *Op) {
		if op.Kind == OpKernel {
			kernels++
			if first < 0 {
				first = op.StartNS
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if kernels != wst.Kernels || st.KernelNS != wst.KernelNS {
		t.Errorf("Walk kernels %d/%d ns, Write %d/%d", kernels, st.KernelNS, wst.Kernels, wst.KernelNS)
	}
	if first < defaultBaseNS {
		t.Errorf("Walk times are not absolute: %d", first)
	}
}

func TestItemBlocksHost(t *testing.T) {
	_, tf := check(t, Config{Steps: 2, Layers: 2})
	// the DtoH copy's runtime call lasts until the copy ends: the host waited for the GPU
	copyEnd := map[int64]int64{}
	for _, e := range tf.TraceEvents {
		if e.Cat == "gpu_memcpy" && strings.HasPrefix(e.Name, "Memcpy DtoH") {
			copyEnd[int64(num(e.Args["correlation"]))] = usToNS(t, e.Ts) + usToNS(t, e.Dur)
		}
	}
	if len(copyEnd) != 2 {
		t.Fatalf("want one DtoH copy per step, got %d", len(copyEnd))
	}
	for _, e := range tf.TraceEvents {
		if end, ok := copyEnd[int64(num(e.Args["correlation"]))]; ok && e.Cat == "cuda_runtime" {
			if usToNS(t, e.Ts)+usToNS(t, e.Dur) < end {
				t.Errorf("cudaMemcpyAsync DtoH returns before its copy ends")
			}
		}
	}
}

func TestStageOnly(t *testing.T) {
	_, tf := check(t, Config{StageOnly: StageDecoding, StageNS: map[string]int64{StageDecoding: 50_000_000}})
	ann := names(tf, "user_annotation")
	if len(ann) != 1 || ann[StageDecoding] != 1 || names(tf, "kernel")[nameConv] == 0 {
		t.Errorf("StageOnly decoding: annotations %v", ann)
	}
}

func TestBadConfig(t *testing.T) {
	for _, c := range []Config{{Flavor: "video"}, {Steps: -1}, {TargetBytes: -5}, {StageOnly: "VAE"}} {
		if _, err := Write(io.Discard, c); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
	if _, err := Write(failWriter{}, Config{Steps: 1, Layers: 1}); err == nil {
		t.Errorf("write error not reported")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, io.ErrShortWrite }

func TestEscaping(t *testing.T) {
	_, _, tf := genTrace(t, Config{Steps: 1, Layers: 1, Model: "we\"ird\\model\n", TraceName: "a\"b"})
	if tf.TraceName != "a\"b" {
		t.Errorf("traceName = %q", tf.TraceName)
	}
}

func BenchmarkWriteLLM(b *testing.B) {
	cfg := Config{Flavor: FlavorLLM, Steps: 200, Layers: 32, CommStream: true, WithStack: true}
	var n int64
	for b.Loop() {
		st, err := Write(io.Discard, cfg)
		if err != nil {
			b.Fatal(err)
		}
		n = st.Bytes
	}
	b.SetBytes(n)
}

func BenchmarkWriteDiffusion(b *testing.B) {
	cfg := Config{Steps: 10, Layers: 60, AllStages: true}
	var n int64
	for b.Loop() {
		st, err := Write(io.Discard, cfg)
		if err != nil {
			b.Fatal(err)
		}
		n = st.Bytes
	}
	b.SetBytes(n)
}

// FuzzWrite drives the generator with arbitrary small configurations: it must never panic,
// and whatever it accepts must be valid JSON whose size matches Stats.
func FuzzWrite(f *testing.F) {
	f.Add("diffusion", 2, 2, true, false, true, int64(7), int64(300_000_000), "attention", 1.5, "DenoisingStage", true)
	f.Add("llm", 3, 1, true, true, false, int64(-1), int64(0), "gemm", 0.0, "", false)
	f.Add("video", 1, 1, false, false, false, int64(0), int64(-5), "x", -2.0, "VAE", false)
	f.Fuzz(func(t *testing.T, flavor string, steps, layers int, comm, graph, stack bool, seed, stepNS int64, key string, factor float64, only string, all bool) {
		cfg := Config{Flavor: flavor, Steps: steps % 4, Layers: layers % 4, CommStream: comm, CUDAGraph: graph, WithStack: stack,
			Seed: seed, StepNS: stepNS % 1_000_000_000, StepScale: map[string]float64{key: factor}, StageOnly: only, AllStages: all,
			StepDurNS: []int64{stepNS % 1_000_000_000}, Model: key}
		var buf bytes.Buffer
		st, err := Write(&buf, cfg)
		if err != nil {
			return
		}
		if st.Bytes != int64(buf.Len()) || !json.Valid(buf.Bytes()) {
			t.Fatalf("invalid output for %+v", cfg)
		}
	})
}
