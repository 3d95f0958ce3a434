package sim

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sglprof/runner/backends/simclock"
)

// helperEnv makes the test binary act as `sglang` or `nsys` (TestMain), so process-level
// behaviour (signals, nsys launching its application) is tested on real processes without
// building anything.
const helperEnv = "SIM_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "sglang":
		os.Exit(SGLang(context.Background(), os.Args[1:], EnvMap(os.Environ()), os.Stdout, os.Stderr))
	case "nsys":
		os.Exit(NSys(context.Background(), os.Args[1:], EnvMap(os.Environ()), os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

type result struct {
	rc             int
	stdout, stderr string
}

func (r result) all() string { return r.stdout + r.stderr }

// baseEnv also moves the test into a fresh working directory, where the simulator's
// relative defaults (outputs/, logs/) land.
func baseEnv(t *testing.T, kv ...string) map[string]string {
	t.Chdir(t.TempDir())
	env := map[string]string{simclock.EnvTimeScale: "0", "SGLANG_DIFFUSION_TORCH_PROFILER_DIR": filepath.Join(t.TempDir(), "traces")}
	for i := 0; i+1 < len(kv); i += 2 {
		env[kv[i]] = kv[i+1]
	}
	return env
}

func sglang(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	rc := SGLang(context.Background(), args, env, &out, &errb)
	return result{rc, out.String(), errb.String()}
}

func runGen(t *testing.T, env map[string]string, extra ...string) (result, string) {
	t.Helper()
	dir := t.TempDir()
	args := append([]string{"generate", "--model-path", "Qwen/Qwen-Image", "--prompt", "A Logo With Bold Large Text: SGL Diffusion",
		"--num-inference-steps", "6", "--seed", "0", "--perf-dump-path", filepath.Join(dir, "perf.json"), "--output-path", filepath.Join(dir, "outputs")}, extra...)
	return sglang(t, env, args...), dir
}

var tsPrefix = regexp.MustCompile(`^\[\d\d-\d\d \d\d:\d\d:\d\d\] `)

// inOrder checks that each want appears in s after the previous one.
func inOrder(t *testing.T, s string, wants ...string) {
	t.Helper()
	pos := 0
	for _, w := range wants {
		i := strings.Index(s[pos:], w)
		if i < 0 {
			t.Fatalf("missing (in order) %q after offset %d in:\n%s", w, pos, s)
		}
		pos += i + len(w)
	}
}

func TestArgparseRejectsUnknown(t *testing.T) {
	r := sglang(t, baseEnv(t), "generate", "--model-path", "Qwen/Qwen-Image", "--prompt", "x", "--foo", "bar", "--prompt-typo=1")
	if r.rc != 2 {
		t.Fatalf("rc = %d, want 2", r.rc)
	}
	if !strings.HasPrefix(r.stderr, "usage: sglang generate [-h]") {
		t.Errorf("no usage line: %q", r.stderr[:min(80, len(r.stderr))])
	}
	if !strings.HasSuffix(r.stderr, "sglang generate: error: unrecognized arguments: --foo bar --prompt-typo=1\n") {
		t.Errorf("stderr tail = %q", r.stderr[max(0, len(r.stderr)-120):])
	}
}

func TestArgparseErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--model-path"}, "argument --model-path: expected one argument"},
		{[]string{"--model-path", "m", "--width", "wide"}, "argument --width: invalid int value: 'wide'"},
		{[]string{"--model-path", "m", "--backend", "tensorrt"}, "argument --backend: invalid choice: 'tensorrt' (choose from 'auto', 'sglang', 'diffusers')"},
		{[]string{"--model-path", "m", "--prof"}, "ambiguous option: --prof could match --profile, --profile-all-stages"},
		{[]string{"--model-path", "m", "--profile=yes"}, "argument --profile: ignored explicit argument 'yes'"},
		{[]string{"--prompt", "x"}, "the following arguments are required: --model-path"},
		{[]string{"--model-path", "m", "--prompt"}, "argument --prompt: expected at least one argument"},
		{[]string{"--model-path", "m", "--dit-cpu-offload", "maybe"}, "argument --dit-cpu-offload: invalid bool value: 'maybe' (use true or false)"},
		{[]string{"--model-path", "m", "--width", "--height", "5"}, "argument --width: expected one argument"},
	}
	for _, c := range cases {
		r := sglang(t, baseEnv(t), append([]string{"generate"}, c.args...)...)
		if r.rc != 2 || !strings.Contains(r.stderr, "sglang generate: error: "+c.want+"\n") {
			t.Errorf("%v: rc=%d stderr tail %q, want error %q", c.args, r.rc, r.stderr[max(0, len(r.stderr)-150):], c.want)
		}
	}
}

func TestArgparseAcceptsRealForms(t *testing.T) {
	p, err := parseArgs(generateSpecs, []string{"--model-path=Qwen/Qwen-Image", "--prompt", "a", "b", "--seed", "1", "-2",
		"--num-inference=7", "--dit-cpu-offload", "false", "--vae-cpu-offload", "--720p", "--no-save-output", "--dp", "2", "--guidance-scale", "-1.5"})
	if err != nil {
		t.Fatal(err)
	}
	if p.str("model_path") != "Qwen/Qwen-Image" || len(p.strs("prompt")) != 2 || p.intv("num_inference_steps", 0) != 7 {
		t.Errorf("parsed %v", p)
	}
	if seeds := p["seed"].([]int); len(seeds) != 2 || seeds[1] != -2 {
		t.Errorf("seed = %v", p["seed"])
	}
	if p["dit_cpu_offload"] != false || p["vae_cpu_offload"] != true || p["720p"] != true || p["save_output"] != false || p.intv("data_parallel_size", 0) != 2 || p["guidance_scale"] != -1.5 {
		t.Errorf("parsed %v", p)
	}
	r := sglang(t, baseEnv(t), "generate", "--help")
	if r.rc != 0 || !strings.Contains(r.stdout, "--num-inference-steps") {
		t.Errorf("--help: rc=%d", r.rc)
	}
}

// TestArgparseLeadingDashPrompts pins how argparse (_parse_optional) reads prompts that start
// with '-': a value after "--prompt" only when it has a space and no registered short option
// prefix; as "--prompt=TEXT" always.
func TestArgparseLeadingDashPrompts(t *testing.T) {
	for _, prompt := range []string{"-x leading dash", "-x", "--not-a-flag", "-hello world", "--prompt", "-1", "a=b", "-"} {
		p, err := parseArgs(generateSpecs, []string{"--model-path", "m", "--prompt=" + prompt})
		if err != nil {
			t.Errorf("--prompt=%q: %v", prompt, err)
			continue
		}
		if got := p.strs("prompt"); len(got) != 1 || got[0] != prompt {
			t.Errorf("--prompt=%q parsed as %q", prompt, got)
		}
	}
	cases := []struct {
		prompt string
		err    string // "" when argparse takes the separate token as the prompt
	}{
		{"-x leading dash", ""},
		{"--x y", ""},
		{"-1", ""},
		{"-", ""},
		{"-x", "argument --prompt: expected at least one argument"},
		{"--not-a-flag", "argument --prompt: expected at least one argument"},
		{"-hello world", "argument --prompt: expected at least one argument"},
		{"--seed", "argument --prompt: expected at least one argument"},
	}
	for _, c := range cases {
		p, err := parseArgs(generateSpecs, []string{"--model-path", "m", "--prompt", c.prompt})
		switch {
		case c.err == "" && err != nil:
			t.Errorf("--prompt %q: %v", c.prompt, err)
		case c.err == "" && (len(p.strs("prompt")) != 1 || p.strs("prompt")[0] != c.prompt):
			t.Errorf("--prompt %q parsed as %q", c.prompt, p.strs("prompt"))
		case c.err != "" && (err == nil || err.Error() != c.err):
			t.Errorf("--prompt %q: error %v, want %q", c.prompt, err, c.err)
		}
	}
	if _, err := parseArgs(generateSpecs, []string{"--model-path", "m", "-hello world"}); err == nil || err.Error() != "argument -h/--help: ignored explicit argument 'ello world'" {
		t.Errorf("-hello world: %v", err)
	}
	// End to end: the prompt reaches the pipeline (and the log) intact.
	r := sglang(t, baseEnv(t), "generate", "--model-path", "Qwen/Qwen-Image", "--prompt=-x leading dash", "--num-inference-steps", "2", "--width", "64", "--height", "64")
	if r.rc != 0 || !strings.Contains(r.stdout+r.stderr, "Processing prompt 1/1: -x leading dash") {
		out := r.stdout + r.stderr
		t.Errorf("rc=%d, log tail %q", r.rc, out[max(0, len(out)-300):])
	}
}

func TestConfigAndPromptFile(t *testing.T) {
	env := baseEnv(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.json")
	os.WriteFile(cfg, []byte(`{"model_path": "Tongyi-MAI/Z-Image-Turbo", "prompt": ["from config"], "num_inference_steps": 3, "seed": [5]}`), 0o644)
	r := sglang(t, env, "generate", "--config", cfg, "--num-inference-steps", "2", "--perf-dump-path", filepath.Join(dir, "p.json"))
	if r.rc != 0 || !strings.Contains(r.stderr, "Processing prompt 1/1: from config") || !strings.Contains(r.stderr, "| 2/2 [") {
		t.Errorf("--config: rc=%d (the command line must win over the file)\n%s", r.rc, r.stderr)
	}
	r = sglang(t, env, "generate", "--model-path", "Qwen/Qwen-Image", "--prompt", "p", "--num-inference-steps", "1", "--output-file-path", filepath.Join(dir, "o", "img.jpg"))
	if b, err := os.ReadFile(filepath.Join(dir, "o", "img.jpg")); r.rc != 0 || err != nil || !bytes.HasPrefix(b, []byte{0xff, 0xd8}) {
		t.Errorf("--output-file-path img.jpg: rc=%d err=%v", r.rc, err)
	}
	r = sglang(t, env, "generate", "--model-path", "Qwen/Qwen-Image", "--prompt", "p", "--num-inference-steps", "1", "--output-path", "")
	if r.rc != 0 || strings.Contains(r.stderr, "Output saved") {
		t.Errorf("--output-path '' must not save")
	}
	prompts := filepath.Join(dir, "prompts.txt")
	os.WriteFile(prompts, []byte("first\n\nsecond\n"), 0o644)
	r = sglang(t, env, "generate", "--model-path", "Qwen/Qwen-Image", "--prompt-path", prompts, "--num-inference-steps", "1")
	if r.rc != 0 || !strings.Contains(r.stderr, "Processing prompt 2/2: second") || !strings.Contains(r.stderr, "Generated 2 outputs") {
		t.Errorf("--prompt-path: rc=%d\n%s", r.rc, r.stderr)
	}
	os.WriteFile(cfg, []byte("model_path: x\n"), 0o644)
	if r = sglang(t, env, "generate", "--config", cfg); r.rc != 1 || !strings.Contains(r.stderr, "Failed to load config") {
		t.Errorf("YAML config: rc=%d %q", r.rc, r.stderr)
	}
	if r = sglang(t, env, "generate", "--model-path", "Qwen/Qwen-Image", "--prompt", "p", "--num-inference-steps", "0"); r.rc != 1 {
		t.Errorf("zero steps accepted")
	}
}

func TestVersion(t *testing.T) {
	r := sglang(t, nil, "version")
	if r.rc != 0 || !regexp.MustCompile(`^sglang version: 0\.5\.\d+-sim\ngit revision: [0-9a-f]{7}\n$`).MatchString(r.stdout) {
		t.Errorf("version: rc=%d %q", r.rc, r.stdout)
	}
	r = sglang(t, nil, "bogus")
	if r.rc != 2 || !strings.Contains(r.stderr, "invalid choice: 'bogus'") {
		t.Errorf("bogus command: rc=%d %q", r.rc, r.stderr)
	}
}

func readGzipJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("trace is not gzip: %v", err)
	}
	var m map[string]any
	if err := json.NewDecoder(zr).Decode(&m); err != nil {
		t.Fatalf("trace is not JSON: %v", err)
	}
	return m
}

func countEvents(m map[string]any, cat, namePrefix string) int {
	n := 0
	for _, e := range m["traceEvents"].([]any) {
		ev := e.(map[string]any)
		if ev["cat"] == cat && strings.HasPrefix(ev["name"].(string), namePrefix) {
			n++
		}
	}
	return n
}

func TestGenerateNativeProfile(t *testing.T) {
	env := baseEnv(t)
	r, dir := runGen(t, env, "--profile", "--num-profiled-timesteps", "2")
	if r.rc != 0 {
		t.Fatalf("rc = %d\n%s", r.rc, r.stderr)
	}
	traceDir := env["SGLANG_DIFFUSION_TORCH_PROFILER_DIR"]
	perf := filepath.Join(dir, "perf.json")
	inOrder(t, r.stderr,
		"] server_args: {\"model_path\": \"Qwen/Qwen-Image\"",
		"Using FlashAttention (FA3 for hopper, FA4 for blackwell) backend",
		"Processing prompt 1/1: A Logo With Bold Large Text: SGL Diffusion",
		"[TextEncodingStage] started...", "[TextEncodingStage] finished in ",
		"[DenoisingStage] started...", "Starting Profiler...",
		"  0%|          | 0/6 [00:00<?, ?it/s]", " 50%|█████     | 3/6 [",
		"Stopping Profiler...", "Saved profiler traces to: \x1b[1;36m"+traceDir+"/",
		"100%|██████████| 6/6 [",
		"[DenoisingStage] average time per step: ", "[DenoisingStage] finished in ",
		"[DecodingStage] finished in ", "Peak GPU memory: ", "Output saved to ",
		"Pixel data generated successfully in \x1b[92m", "Completed batch processing. Generated 1 outputs",
		"Metrics dumped to: \x1b[1;36m"+perf+"\x1b[0;0m")
	for _, l := range strings.Split(strings.ReplaceAll(r.stderr, "\r", "\n"), "\n") {
		if strings.Contains(l, "Falling back") || strings.Contains(l, "diffusers") {
			t.Errorf("native run printed a fallback marker: %q", l)
		}
		if strings.HasPrefix(l, "[") && !tsPrefix.MatchString(l) {
			t.Errorf("log line without sglang's timestamp format: %q", l)
		}
	}
	// perf dump schema
	b, err := os.ReadFile(perf)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Timestamp  string
		RequestID  string `json:"request_id"`
		CommitHash string `json:"commit_hash"`
		Tag        string
		Total      float64 `json:"total_duration_ms"`
		Steps      []struct {
			Name       string
			DurationMS float64 `json:"duration_ms"`
		}
		Denoise []struct {
			Step       int
			DurationMS float64 `json:"duration_ms"`
		} `json:"denoise_steps_ms"`
		Mem  map[string]map[string]float64 `json:"memory_checkpoints"`
		Meta map[string]string
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.Tag != "cli_generate" || len(d.Denoise) != 6 || d.Meta["model"] != "Qwen/Qwen-Image" || d.Mem["after_DenoisingStage"]["peak_reserved_mb"] <= 0 {
		t.Errorf("perf dump: %s", b)
	}
	var names []string
	var denoiseMS, sum float64
	for _, s := range d.Steps {
		names = append(names, s.Name)
		if s.Name == "DenoisingStage" {
			denoiseMS = s.DurationMS
		}
	}
	for _, s := range d.Denoise {
		sum += s.DurationMS
		if s.DurationMS < 100 || s.DurationMS > 2000 {
			t.Errorf("implausible step time %v ms", s.DurationMS)
		}
	}
	if strings.Join(names, ",") != "InputValidationStage,TextEncodingStage,ConditioningStage,TimestepPreparationStage,LatentPreparationStage,DenoisingStage,DecodingStage" {
		t.Errorf("stages %v", names)
	}
	if d := denoiseMS - sum; d > 1 || d < -1 {
		t.Errorf("DenoisingStage %v ms != sum of steps %v ms", denoiseMS, sum)
	}
	for _, k := range []string{"\"timestamp\"", "\"request_id\"", "\"commit_hash\"", "\"total_duration_ms\"", "\"memory_checkpoints\"", "\"meta\""} {
		if !bytes.Contains(b, []byte(k)) {
			t.Errorf("perf dump lacks %s", k)
		}
	}
	// trace
	traces, _ := filepath.Glob(filepath.Join(traceDir, "*.trace.json.gz"))
	if len(traces) != 1 {
		t.Fatalf("traces: %v", traces)
	}
	if !regexp.MustCompile(`/` + d.RequestID + `-2_steps-global-rank0\.trace\.json\.gz$`).MatchString(traces[0]) {
		t.Errorf("trace name %s (request %s)", traces[0], d.RequestID)
	}
	m := readGzipJSON(t, traces[0])
	if n := countEvents(m, "user_annotation", "denoising_step_"); n != 3 {
		t.Errorf("trace has %d denoising steps, want N+1 = 3", n)
	}
	if countEvents(m, "user_annotation", "denoising_step_0") != 0 || countEvents(m, "user_annotation", "denoising_step_3") != 1 {
		t.Errorf("profiled steps should be 1..3 (step 0 is the profiler's warmup)")
	}
	if countEvents(m, "kernel", "void flash::FlashAttnFwdSm90") == 0 || countEvents(m, "kernel", "nvjet_") == 0 || countEvents(m, "gpu_memcpy", "Memcpy HtoD") == 0 {
		t.Errorf("trace lacks attention/GEMM kernels or memcpys")
	}
	outs, _ := filepath.Glob(filepath.Join(dir, "outputs", "A_Logo_With_Bold_Large_Text__SGL_Diffusion_*.png"))
	if len(outs) != 1 {
		t.Fatalf("outputs: %v", outs)
	}
	if png, _ := os.ReadFile(outs[0]); !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("output is not a PNG")
	}
}

func TestProfileAllStagesAndAllSteps(t *testing.T) {
	env := baseEnv(t)
	r, _ := runGen(t, env, "--profile", "--profile-all-stages")
	if r.rc != 0 {
		t.Fatal(r.stderr)
	}
	traces, _ := filepath.Glob(filepath.Join(env["SGLANG_DIFFUSION_TORCH_PROFILER_DIR"], "*-full_stages-global-rank0.trace.json.gz"))
	if len(traces) != 1 {
		t.Fatalf("traces %v\n%s", traces, r.stderr)
	}
	m := readGzipJSON(t, traces[0])
	if countEvents(m, "user_annotation", "TextEncodingStage") != 1 || countEvents(m, "user_annotation", "denoising_step_") != 6 ||
		countEvents(m, "kernel", "sm90_xmma_fprop_implicit_gemm") == 0 {
		t.Errorf("full-stages trace lacks stages, steps or VAE convolutions")
	}
	if !strings.Contains(r.stderr, "Profiling request: ") || !strings.Contains(r.stderr, " for full stages...") {
		t.Errorf("no profiling request line")
	}
	env = baseEnv(t)
	r, _ = runGen(t, env, "--profile", "--num-profiled-timesteps", "-1")
	traces, _ = filepath.Glob(filepath.Join(env["SGLANG_DIFFUSION_TORCH_PROFILER_DIR"], "*-6_steps-global-rank0.trace.json.gz"))
	if r.rc != 0 || len(traces) != 1 {
		t.Fatalf("-1 profiled steps: rc=%d traces=%v", r.rc, traces)
	}
}

func TestTraceDirResolution(t *testing.T) {
	diff, torch := t.TempDir(), t.TempDir()
	env := baseEnv(t, "SGLANG_DIFFUSION_TORCH_PROFILER_DIR", diff, "SGLANG_TORCH_PROFILER_DIR", torch)
	runGen(t, env, "--profile")
	if n, _ := filepath.Glob(filepath.Join(diff, "*.gz")); len(n) != 1 {
		t.Errorf("SGLANG_DIFFUSION_TORCH_PROFILER_DIR not preferred")
	}
	env = baseEnv(t, "SGLANG_TORCH_PROFILER_DIR", torch)
	delete(env, "SGLANG_DIFFUSION_TORCH_PROFILER_DIR")
	runGen(t, env, "--profile")
	if n, _ := filepath.Glob(filepath.Join(torch, "*.gz")); len(n) != 1 {
		t.Errorf("SGLANG_TORCH_PROFILER_DIR not used")
	}
	env = baseEnv(t)
	cwd := t.TempDir()
	t.Chdir(cwd)
	delete(env, "SGLANG_DIFFUSION_TORCH_PROFILER_DIR")
	r := sglang(t, env, "generate", "--model-path", "Qwen/Qwen-Image", "--prompt", "p", "--num-inference-steps", "3", "--profile", "--perf-dump-path", "perf.json")
	if n, _ := filepath.Glob(filepath.Join(cwd, "logs", "*.gz")); len(n) != 1 {
		t.Errorf("default ./logs not used: %v", n)
	}
	if !strings.Contains(r.stderr, "Metrics dumped to: \x1b[1;36m"+filepath.Join(cwd, "perf.json")+"\x1b[0;0m") {
		t.Errorf("relative perf dump path not made absolute")
	}
	if n, _ := filepath.Glob(filepath.Join(cwd, "outputs", "*.png")); len(n) != 1 {
		t.Errorf("default outputs/ not used")
	}
}

func TestDiffusersFallback(t *testing.T) {
	env := baseEnv(t)
	dir := t.TempDir()
	r := sglang(t, env, "generate", "--model-path", "/models/my-local-qwen", "--prompt", "p", "--num-inference-steps", "4",
		"--perf-dump-path", filepath.Join(dir, "perf.json"), "--profile", "--output-path", dir)
	if r.rc != 0 {
		t.Fatalf("fallback must exit 0 like real sglang, got %d", r.rc)
	}
	inOrder(t, r.stderr,
		"Could not resolve native configuration for model '/models/my-local-qwen'. Falling back to diffusers backend.",
		"Loading diffusers pipeline from /models/my-local-qwen",
		"Loaded diffusers pipeline: DiffusionPipeline",
		"Running pipeline stages: ['diffusers_execution']",
		"Saved profiler traces to: ", "Metrics dumped to: ")
	if _, err := os.Stat(filepath.Join(dir, "perf.json")); err != nil {
		t.Errorf("fallback wrote no perf dump")
	}
	// a local dir named like a known model resolves natively; --model-id fixes odd names
	for _, args := range [][]string{{"--model-path", "/models/Qwen-Image"}, {"--model-path", "/models/odd", "--model-id", "Qwen-Image"}} {
		r = sglang(t, env, append([]string{"generate", "--prompt", "p", "--num-inference-steps", "2"}, args...)...)
		if r.rc != 0 || strings.Contains(r.stderr, "diffusers") {
			t.Errorf("%v fell back", args)
		}
	}
	r = sglang(t, env, "generate", "--model-path", "org/Model-awq", "--prompt", "p", "--num-inference-steps", "2")
	if !strings.Contains(r.stderr, "Detected a quantized model format ('org/Model-awq'). The native sglang-diffusion engine currently only supports BF16/FP16. Falling back to diffusers backend.") {
		t.Errorf("quantized fallback line missing")
	}
}

func TestBackendChoice(t *testing.T) {
	env := baseEnv(t)
	r := sglang(t, env, "generate", "--model-path", "acme/Unknown", "--prompt", "p", "--backend", "sglang")
	if r.rc != 1 || !strings.Contains(r.stderr, "Could not resolve configuration for model 'acme/Unknown'. It is not a registered model path") ||
		strings.Contains(r.stderr, "Falling back") {
		t.Errorf("--backend sglang with unknown model: rc=%d\n%s", r.rc, r.stderr)
	}
	r = sglang(t, env, "generate", "--model-path", "Qwen/Qwen-Image", "--prompt", "p", "--backend", "diffusers", "--num-inference-steps", "2")
	if r.rc != 0 || !strings.Contains(r.stderr, "Using diffusers backend for model 'Qwen/Qwen-Image' (explicitly requested)") ||
		!strings.Contains(r.stderr, "Loaded diffusers pipeline: QwenImagePipeline") {
		t.Errorf("--backend diffusers: rc=%d\n%s", r.rc, r.stderr)
	}
	r = sglang(t, env, "generate", "--model-path", "Qwen/Qwen-Image", "--prompt", "p", "--backend", "sglang", "--num-inference-steps", "2")
	if r.rc != 0 || strings.Contains(r.stderr, "diffusers") {
		t.Errorf("--backend sglang known model: rc=%d", r.rc)
	}
}

func TestFailureModes(t *testing.T) {
	t.Run("oom", func(t *testing.T) {
		r, dir := runGen(t, baseEnv(t, EnvFail, "oom"))
		if r.rc != 1 {
			t.Errorf("rc = %d", r.rc)
		}
		inOrder(t, r.stderr, "[DenoisingStage] Error during execution after ", "Failed to generate output for prompt 1: CUDA out of memory. Tried to allocate ",
			"Traceback (most recent call last):", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ")
		if _, err := os.Stat(filepath.Join(dir, "perf.json")); err == nil {
			t.Errorf("OOM run wrote a perf dump")
		}
	})
	t.Run("crash", func(t *testing.T) {
		r, _ := runGen(t, baseEnv(t, EnvFail, "crash"))
		if r.rc != 1 || !strings.Contains(r.stderr, "Rank 0 scheduler is dead. Please check if there are relevant logs.") {
			t.Errorf("rc=%d\n%s", r.rc, r.stderr)
		}
	})
	t.Run("trace-fail", func(t *testing.T) {
		env := baseEnv(t, EnvFail, "trace-fail")
		r, _ := runGen(t, env, "--profile")
		if r.rc != 0 || !strings.Contains(r.stderr, "Failed to save trace: ") || strings.Contains(r.stderr, "Saved profiler traces") {
			t.Errorf("rc=%d\n%s", r.rc, r.stderr)
		}
		if n, _ := filepath.Glob(filepath.Join(env["SGLANG_DIFFUSION_TORCH_PROFILER_DIR"], "*")); len(n) != 0 {
			t.Errorf("trace-fail left files: %v", n)
		}
	})
	t.Run("trace-truncated", func(t *testing.T) {
		env := baseEnv(t, EnvFail, "trace-truncated")
		r, _ := runGen(t, env, "--profile")
		n, _ := filepath.Glob(filepath.Join(env["SGLANG_DIFFUSION_TORCH_PROFILER_DIR"], "*.trace.json.gz"))
		if r.rc != 0 || len(n) != 1 {
			t.Fatalf("rc=%d files=%v", r.rc, n)
		}
		f, _ := os.Open(n[0])
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err == nil {
			_, err = io.Copy(io.Discard, zr)
		}
		if err == nil {
			t.Errorf("truncated trace decompressed cleanly")
		}
	})
	t.Run("no-perf-dump", func(t *testing.T) {
		r, dir := runGen(t, baseEnv(t, EnvFail, "no-perf-dump"))
		if _, err := os.Stat(filepath.Join(dir, "perf.json")); err == nil || strings.Contains(r.stderr, "Metrics dumped to") || r.rc != 0 {
			t.Errorf("no-perf-dump: rc=%d, dump written or announced", r.rc)
		}
	})
	t.Run("bad knobs", func(t *testing.T) {
		for _, env := range []map[string]string{{simclock.EnvTimeScale: "fast"}, {EnvFail: "explode"}, {EnvSlowdown: "DenoisingStage"}, {EnvSlowdown: "gemm=-2"}, {EnvJitterSeed: "x"}, {EnvRunCV: "2"}, {EnvRunCV: "x"}} {
			r, _ := runGen(t, env)
			if r.rc != 2 || !strings.Contains(r.stderr, "runner sim: RUNNER_SIM_") {
				t.Errorf("%v: rc=%d %q", env, r.rc, r.stderr)
			}
		}
	})
}

func meanStep(t *testing.T, dir string) float64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "perf.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Denoise []struct {
			DurationMS float64 `json:"duration_ms"`
		} `json:"denoise_steps_ms"`
	}
	json.Unmarshal(b, &d)
	var s float64
	for _, x := range d.Denoise {
		s += x.DurationMS
	}
	return s / float64(len(d.Denoise))
}

func TestTimingKnobs(t *testing.T) {
	_, d0 := runGen(t, baseEnv(t))
	_, d1 := runGen(t, baseEnv(t, EnvSlowdown, "DenoisingStage=1.5"))
	_, d2 := runGen(t, baseEnv(t, EnvFail, "slow"))
	_, d3 := runGen(t, baseEnv(t), "--720p")
	_, d4 := runGen(t, baseEnv(t), "--width", "2048", "--height", "2048")
	base := meanStep(t, d0)
	if base < 380 || base > 440 {
		t.Errorf("Qwen-Image 1024x1024 step %.1f ms, want ≈400", base)
	}
	if f := meanStep(t, d1) / base; f < 1.45 || f > 1.55 {
		t.Errorf("DenoisingStage=1.5 scaled steps by %.3f", f)
	}
	if f := meanStep(t, d2) / base; f < 9.5 || f > 10.5 {
		t.Errorf("slow scaled steps by %.3f", f)
	}
	if meanStep(t, d3) >= base || meanStep(t, d4) < 4*base {
		t.Errorf("step time does not follow pixel count: 720p %.1f, 2048² %.1f, 1024² %.1f", meanStep(t, d3), meanStep(t, d4), base)
	}
	// same seed, same numbers (the jitter is deterministic)
	_, d5 := runGen(t, baseEnv(t))
	if meanStep(t, d5) != base {
		t.Errorf("same seed gave different step times")
	}
	_, d6 := runGen(t, baseEnv(t, EnvJitterSeed, "2"))
	if j := meanStep(t, d6); j == base || j/base < 0.98 || j/base > 1.02 {
		t.Errorf("jitter seed 2: mean step %.3f vs %.3f; want a small difference", j, base)
	}
}

// Repeats (jitter seeds) of one cell differ by a run-level factor of about RUNNER_SIM_RUN_CV,
// not only by per-step jitter that averages out over the steps; RUNNER_SIM_RUN_CV=0 turns it
// off.
func TestRunLevelNoise(t *testing.T) {
	cv := func(extra ...string) float64 {
		var logs []float64
		for seed := 1; seed <= 30; seed++ {
			_, d := runGen(t, baseEnv(t, append([]string{EnvJitterSeed, strconv.Itoa(seed)}, extra...)...))
			logs = append(logs, math.Log(meanStep(t, d)))
		}
		var m, ss float64
		for _, l := range logs {
			m += l / float64(len(logs))
		}
		for _, l := range logs {
			ss += (l - m) * (l - m)
		}
		return math.Sqrt(ss / float64(len(logs)-1))
	}
	if c := cv(); c < 0.006 || c > 0.016 {
		t.Errorf("run-to-run CV of the mean step = %.4f, want about %.2f", c, DefaultRunCV)
	}
	if c := cv(EnvRunCV, "0"); c > 0.005 {
		t.Errorf("RUNNER_SIM_RUN_CV=0: CV %.4f, want only the per-step jitter's", c)
	}
	if c := cv(EnvRunCV, "0.05"); c < 0.03 {
		t.Errorf("RUNNER_SIM_RUN_CV=0.05: CV %.4f", c)
	}
}

func TestSlowdownReachesTrace(t *testing.T) {
	env0, env1 := baseEnv(t), baseEnv(t, EnvSlowdown, "attention=2")
	runGen(t, env0, "--profile")
	runGen(t, env1, "--profile")
	fa := func(env map[string]string) float64 {
		n, _ := filepath.Glob(filepath.Join(env["SGLANG_DIFFUSION_TORCH_PROFILER_DIR"], "*.gz"))
		m := readGzipJSON(t, n[0])
		var s float64
		for _, e := range m["traceEvents"].([]any) {
			ev := e.(map[string]any)
			if ev["cat"] == "kernel" && strings.HasPrefix(ev["name"].(string), "void flash::FlashAttnFwdSm90") {
				s += ev["dur"].(float64)
			}
		}
		return s
	}
	if f := fa(env1) / fa(env0); f < 1.9 || f > 2.1 {
		t.Errorf("attention=2 scaled attention kernel time by %.3f", f)
	}
}

func TestTqdmFrames(t *testing.T) {
	for _, c := range []struct {
		n, total int
		elapsed  float64
		want     string
	}{
		{0, 50, 0, "\r  0%|          | 0/50 [00:00<?, ?it/s]"},
		{20, 50, 2.026, "\r 40%|████      | 20/50 [00:02<00:03,  9.87it/s]"},
		{3, 8, 7.5, "\r 38%|███▊      | 3/8 [00:07<00:12,  2.50s/it]"},
		{50, 50, 20.1, "\r100%|██████████| 50/50 [00:20<00:00,  2.49it/s]"},
	} {
		if got := tqdm(c.n, c.total, c.elapsed); got != c.want {
			t.Errorf("tqdm(%d, %d, %v) = %q, want %q", c.n, c.total, c.elapsed, got, c.want)
		}
	}
}

func TestHangHonoursContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var out, errb bytes.Buffer
	start := time.Now()
	rc := SGLang(ctx, []string{"generate", "--model-path", "Qwen/Qwen-Image", "--prompt", "p"}, baseEnv(t, EnvFail, "hang"), &out, &errb)
	if rc == 0 || time.Since(start) > 5*time.Second {
		t.Errorf("hang: rc=%d after %v", rc, time.Since(start))
	}
	if strings.Contains(errb.String(), "Pixel data generated") {
		t.Errorf("hung run finished")
	}
}

// helper starts the test binary as `sglang`/`nsys` in its own process group and returns a
// line waiter over its combined output.
type proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  strings.Builder
	done chan struct{}
}

func startHelper(t *testing.T, mode string, env map[string]string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = []string{helperEnv + "=" + mode, "PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Dir = t.TempDir()
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	p := &proc{cmd: cmd, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	})
	go func() {
		cmd.Wait()
		pw.Close()
	}()
	go func() {
		sc := bufio.NewReader(pr)
		buf := make([]byte, 4096)
		for {
			n, err := sc.Read(buf)
			p.mu.Lock()
			p.out.Write(buf[:n])
			p.mu.Unlock()
			if err != nil {
				close(p.done)
				return
			}
		}
	}()
	return p
}

func (p *proc) waitFor(t *testing.T, s string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		ok := strings.Contains(p.out.String(), s)
		p.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %q in:\n%s", s, p.output())
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *proc) exit(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("process did not exit:\n%s", p.output())
	}
	return p.cmd.ProcessState.ExitCode()
}

func TestHangSIGINTIsKeyboardInterrupt(t *testing.T) {
	p := startHelper(t, "sglang", map[string]string{simclock.EnvTimeScale: "0", EnvFail: "hang"}, "generate", "--model-path", "Qwen/Qwen-Image", "--prompt", "p")
	p.waitFor(t, "[DenoisingStage] started...") // its SIGINT handler is set up before the stages
	p.cmd.Process.Signal(syscall.SIGINT)
	if rc := p.exit(t); rc != 130 {
		t.Errorf("rc = %d, want 130", rc)
	}
	if !strings.HasSuffix(p.output(), "KeyboardInterrupt\n") {
		t.Errorf("no KeyboardInterrupt traceback:\n%s", p.output())
	}
}

func TestHangHardNeedsSIGKILL(t *testing.T) {
	p := startHelper(t, "sglang", map[string]string{simclock.EnvTimeScale: "0", EnvFail: "hang-hard"}, "generate", "--model-path", "Qwen/Qwen-Image", "--prompt", "p")
	p.waitFor(t, "[DenoisingStage] started...")
	pgid := p.cmd.Process.Pid
	members := func() []string { return groupMembers(pgid) }
	// The grandchild was started before the stages; wait for it to have become sleep(1).
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(strings.Join(members(), " "), "sleep"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no grandchild sleep in the process group: %v", members())
		}
	}
	syscall.Kill(-pgid, syscall.SIGINT)
	syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
		t.Fatalf("hang-hard exited on SIGINT/SIGTERM")
	case <-time.After(300 * time.Millisecond):
	}
	syscall.Kill(-pgid, syscall.SIGKILL)
	p.exit(t)
	deadline := time.Now().Add(5 * time.Second)
	for len(members()) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if m := members(); len(m) > 0 {
		t.Errorf("processes left in the group after SIGKILL: %v", m)
	}
}

// groupMembers lists "pid:comm" of the live processes whose process group is pgid.
func groupMembers(pgid int) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		r := strings.LastIndexByte(s, ')')
		if r < 0 {
			continue
		}
		f := strings.Fields(s[r+1:])
		if len(f) > 2 && f[0] != "Z" && f[2] == strconv.Itoa(pgid) {
			out = append(out, e.Name()+":"+s[strings.IndexByte(s, '(')+1:r])
		}
	}
	return out
}

func nsysRun(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	rc := NSys(context.Background(), args, env, &out, &errb)
	return result{rc, out.String(), errb.String()}
}

func TestNSysCLI(t *testing.T) {
	r := nsysRun(t, nil, "--version")
	if r.rc != 0 || r.stdout != "NVIDIA Nsight Systems version 2025.5.1.121-255136380782v0\n" {
		t.Errorf("--version: %d %q", r.rc, r.stdout)
	}
	r = nsysRun(t, nil, "profile", "--trace=cuda", "--frobnicate=1", "sglang")
	if r.rc != 1 || !strings.Contains(r.stderr, "unrecognised option '--frobnicate'") || !strings.Contains(r.stderr, "usage: nsys profile") {
		t.Errorf("unknown option: %d %q", r.rc, r.stderr)
	}
	for _, bad := range [][]string{{"--cuda-graph-trace=nodes", "x"}, {"--trace=cuda,gpu", "x"}, {"--delay", "soon", "x"}, {"--force-overwrite=maybe", "x"}, {"--trace=cuda"}} {
		r = nsysRun(t, nil, append([]string{"profile"}, bad...)...)
		if r.rc != 1 || !strings.HasPrefix(r.stderr, "Error: ") {
			t.Errorf("%v: rc=%d %q", bad, r.rc, r.stderr)
		}
	}
	r = nsysRun(t, nil, "stats", "x")
	if r.rc != 1 {
		t.Errorf("unknown command accepted")
	}
}

func profileArgs(out string, steps int, extra ...string) []string {
	a := []string{"profile", "--trace-fork-before-exec=true", "--cuda-graph-trace=node", "--force-overwrite=true", "--trace=cuda,nvtx,osrt"}
	a = append(a, extra...)
	return append(a, "-o", out, os.Args[0], "generate", "--model-path", "Qwen/Qwen-Image", "--prompt", "p", "--num-inference-steps", strconv.Itoa(steps))
}

func openSQLite(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func count(t *testing.T, db *sql.DB, q string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(q).Scan(&n); err != nil {
		if strings.Contains(err.Error(), "no such table") {
			return 0
		}
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func TestNSysProfileExportRoundTrip(t *testing.T) {
	dir := t.TempDir()
	env := baseEnv(t, helperEnv, "sglang")
	r := nsysRun(t, env, append(profileArgs(filepath.Join(dir, "nsys", "report"), 8), "--perf-dump-path", filepath.Join(dir, "perf.json"))...)
	rep := filepath.Join(dir, "nsys", "report.nsys-rep")
	if r.rc != 0 {
		t.Fatalf("rc=%d\n%s", r.rc, r.all())
	}
	inOrder(t, r.stdout, "Collecting data...", "Generating '", ".qdstrm'", "[1/1] [========================100%] report.nsys-rep", "Generated:\n    "+rep+"\n")
	if !strings.Contains(r.stderr, "Pixel data generated successfully") {
		t.Errorf("the application's output was not passed through")
	}
	out := filepath.Join(dir, "nsys", "report.sqlite")
	r = nsysRun(t, nil, "export", "--type", "sqlite", "--force-overwrite=true", "-o", out, rep)
	if r.rc != 0 {
		t.Fatalf("export rc=%d %s", r.rc, r.stderr)
	}
	db := openSQLite(t, out)
	k := count(t, db, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")
	if k < 8*60 {
		t.Errorf("%d kernels for 8 steps of 60 blocks", k)
	}
	if n := count(t, db, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId JOIN StringIds s ON s.id = r.nameId WHERE s.value = 'cudaLaunchKernel_v7000'"); n != k {
		t.Errorf("%d of %d kernels join a cudaLaunchKernel_v7000 call", n, k)
	}
	if n := count(t, db, "SELECT count(*) FROM NVTX_EVENTS WHERE coalesce(text, (SELECT value FROM StringIds WHERE id = textId)) LIKE 'denoising_step_%'"); n != 8 {
		t.Errorf("%d denoising_step NVTX ranges, want 8", n)
	}
	if n := count(t, db, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY"); n == 0 {
		t.Errorf("no memcpys")
	}
	// the NVTX step ranges last what the perf dump of the same run says
	rows, err := db.Query("SELECT coalesce(text, (SELECT value FROM StringIds WHERE id = textId)), \"end\" - start FROM NVTX_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	stepNS := map[string]int64{}
	for rows.Next() {
		var name string
		var d int64
		rows.Scan(&name, &d)
		stepNS[name] = d
	}
	rows.Close()
	b, err := os.ReadFile(filepath.Join(dir, "perf.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dump struct {
		Denoise []struct {
			Step       int     `json:"step"`
			DurationMS float64 `json:"duration_ms"`
		} `json:"denoise_steps_ms"`
	}
	json.Unmarshal(b, &dump)
	if len(dump.Denoise) != 8 {
		t.Fatalf("perf dump has %d steps", len(dump.Denoise))
	}
	for _, s := range dump.Denoise {
		got := float64(stepNS["denoising_step_"+strconv.Itoa(s.Step)]) / 1e6
		if got < s.DurationMS-0.01 || got > s.DurationMS+0.01 {
			t.Errorf("step %d: NVTX %.4f ms, perf dump %.4f ms", s.Step, got, s.DurationMS)
		}
	}
	// overwrite protection, and bad input files
	r = nsysRun(t, nil, "export", "--type", "sqlite", "-o", out, rep)
	if r.rc != 1 || !strings.Contains(r.stderr, "already exists") {
		t.Errorf("export over an existing file without --force-overwrite: %d %q", r.rc, r.stderr)
	}
	bad := filepath.Join(dir, "bad.nsys-rep")
	os.WriteFile(bad, []byte("not a report"), 0o644)
	b, _ = os.ReadFile(rep)
	trunc := filepath.Join(dir, "trunc.nsys-rep")
	os.WriteFile(trunc, b[:len(b)/2], 0o644)
	for _, in := range []string{bad, trunc, filepath.Join(dir, "missing.nsys-rep")} {
		r = nsysRun(t, nil, "export", "--type=sqlite", "--output="+in+".sqlite", in)
		if r.rc != 1 || !strings.Contains(r.stderr, "ERROR: Failed to open report '"+in+"'") {
			t.Errorf("%s: rc=%d %q", in, r.rc, r.stderr)
		}
	}
	r = nsysRun(t, nil, "export", "--type", "json", rep)
	if r.rc != 1 {
		t.Errorf("unsupported export type accepted")
	}
}

func TestNSysWindow(t *testing.T) {
	dir := t.TempDir()
	// the run (≈7.7 s load and text encoding + 8 × 0.4 s) ends before a 100 s delay: no kernels, nsys warns
	env := baseEnv(t, helperEnv, "sglang")
	r := nsysRun(t, env, profileArgs(filepath.Join(dir, "late"), 8, "--delay", "100")...)
	if r.rc != 0 || !strings.Contains(r.stdout, "No CUDA kernel data was collected") {
		t.Errorf("late window: rc=%d\n%s", r.rc, r.stdout)
	}
	rep, err := readReport(filepath.Join(dir, "late.nsys-rep"))
	if err != nil || len(rep.Kernels) != 0 {
		t.Errorf("late window report: %v, %d kernels", err, len(rep.Kernels))
	}
	// diffusion has no cudaProfilerApi hook: a capture range never opens
	r = nsysRun(t, env, profileArgs(filepath.Join(dir, "capture"), 4, "--capture-range=cudaProfilerApi", "--capture-range-end=stop")...)
	rep, err = readReport(filepath.Join(dir, "capture.nsys-rep"))
	if r.rc != 0 || err != nil || len(rep.Kernels) != 0 || !strings.Contains(r.stdout, "No CUDA kernel data was collected") {
		t.Errorf("cudaProfilerApi capture range: rc=%d err=%v\n%s", r.rc, err, r.stdout)
	}
	// a window in the middle of the denoising loop; the app is killed when it ends
	env = baseEnv(t, helperEnv, "sglang", simclock.EnvTimeScale, "0.002")
	r = nsysRun(t, env, profileArgs(filepath.Join(dir, "mid"), 60, "--delay", "9", "--duration", "2")...)
	rep, err = readReport(filepath.Join(dir, "mid.nsys-rep"))
	if err != nil {
		t.Fatal(err)
	}
	if r.rc != 128+int(syscall.SIGTERM) || rep.AppSignal == "" && rep.AppExitCode != 143 {
		t.Errorf("app not terminated at the end of --duration: rc=%d app=%d %s", r.rc, rep.AppExitCode, rep.AppSignal)
	}
	if len(rep.Kernels) == 0 {
		t.Fatalf("no kernels inside the window")
	}
	for _, k := range rep.Kernels {
		if k.Start < rep.WindowStartNS || k.End > rep.WindowEndNS {
			t.Fatalf("kernel outside the window")
		}
	}
	if strings.Contains(r.stderr, "Pixel data generated") {
		t.Errorf("app finished despite --duration")
	}
}

func TestNSysSIGINTStillWritesReport(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "report")
	// nsys passes its environment on, so the application is started through env(1) to turn
	// the test binary into sglang
	p := startHelper(t, "nsys", map[string]string{simclock.EnvTimeScale: "0", EnvFail: "hang"},
		"profile", "--trace=cuda,nvtx,osrt", "--force-overwrite=true", "-o", out,
		"env", helperEnv+"=sglang", os.Args[0], "generate", "--model-path", "Qwen/Qwen-Image", "--prompt", "p")
	p.waitFor(t, "[DenoisingStage] started...") // nsys handles SIGINT before it starts the application
	p.cmd.Process.Signal(syscall.SIGINT)        // nsys only, as a runner does first
	if rc := p.exit(t); rc != 130 {
		t.Errorf("nsys rc = %d, want the application's 130", rc)
	}
	o := p.output()
	inOrder(t, o, "KeyboardInterrupt", "Generated:\n    "+out+".nsys-rep")
	rep, err := readReport(out + ".nsys-rep")
	if err != nil || !rep.Interrupted || rep.AppExitCode != 130 {
		t.Fatalf("report after SIGINT: %v %+v", err, rep)
	}
	if len(rep.NVTX) == 0 {
		t.Errorf("report lost the activity collected before the interrupt")
	}
}

func FuzzParseArgs(f *testing.F) {
	for _, s := range []string{
		"--model-path Qwen/Qwen-Image --prompt a b --seed 1 -2",
		"--model-path=m --prof --profile=x",
		"--width --height 5 -- --foo",
		"--dit-cpu-offload maybe --720p --num-inference=3",
		"--backend tensorrt --log-requests-level 7",
		"-h --config c.json",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		args := strings.Split(s, " ")
		p, err := parseArgs(generateSpecs, args)
		if err == nil && !p.has("model_path") && !p.has("config") {
			t.Fatalf("accepted without --model-path: %q", s)
		}
		parseProfile(args)
	})
}

func FuzzReadActivity(f *testing.F) {
	f.Add([]byte(`{"k":"name","id":1,"v":"k"}` + "\n" + `{"k":"kernel","s":1,"e":2,"n":1,"g":[1,1,1]}` + "\n" + `{"k":"nvtx","s":1,"e":3,"text":"denoising_step_0"}`))
	f.Add([]byte("{\"k\":\"rt\",\"s\":1,\"e\":2,\"n\":7}\n{\"k\":\"mem\",\"s\":1,\"e\""))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := readActivity(bytes.NewReader(b))
		if err == nil {
			for _, k := range a.Kernels {
				_ = k.Name
			}
		}
	})
}

// generate sees only CUDA_VISIBLE_DEVICES, as torch does: more ranks than visible GPUs fail at
// start, and the devices it was given are logged (the runner's GPU-slot tests read that line).
func TestGenerateHonoursVisibleDevices(t *testing.T) {
	r, _ := runGen(t, baseEnv(t, "CUDA_VISIBLE_DEVICES", "3"), "--num-gpus", "2")
	if r.rc != 1 || !strings.Contains(r.stderr, "invalid device ordinal") {
		t.Errorf("--num-gpus 2 with one visible GPU: rc=%d\n%s", r.rc, r.stderr)
	}
	r, _ = runGen(t, baseEnv(t, "CUDA_VISIBLE_DEVICES", "2,3"), "--num-gpus", "2")
	if r.rc != 0 || !strings.Contains(r.stderr, "CUDA_VISIBLE_DEVICES=2,3") {
		t.Errorf("--num-gpus 2 with GPUs 2,3: rc=%d\n%s", r.rc, r.stderr)
	}
}
