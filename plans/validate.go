package plans

import (
	"fmt"
	"strings"
	"time"
)

// Defaults applied to keys the plan leaves out.
const (
	DefaultOutputDir            = "runs"
	DefaultKind                 = "sglang"
	DefaultMode                 = "generate"
	DefaultTimeout              = 20 * time.Minute
	DefaultGrace                = 10 * time.Second
	DefaultNumProfiledTimesteps = 5
	DefaultCudaGraphTrace       = "node"
	DefaultDiffusersFallback    = "fail"

	// Serve mode.
	DefaultRestart        = RestartShared
	DefaultHost           = "127.0.0.1"
	DefaultReadyTimeout   = 20 * time.Minute // models load slowly
	DefaultStartStep      = -1               // -1: start_step is not sent; the window opens at once
	DefaultNumSteps       = 5
	DefaultFlushTimeout   = 10 * time.Minute // /stop_profile can take minutes to write traces
	DefaultWarmup         = 1
	DefaultRequests       = 5
	DefaultConcurrency    = 1
	DefaultRequestTimeout = 10 * time.Minute

	// [compare].
	DefaultAlpha        = 0.05
	DefaultBaselineRuns = 5
	DefaultConsecutive  = 2
)

// Values of backend.restart, backend.model_type and load.api.
const (
	RestartShared  = "shared"
	RestartPerCell = "per-cell"

	ModelTypeDiffusion = "diffusion"
	ModelTypeLLM       = "llm"

	APIImages      = "images"      // POST /v1/images/generations
	APIVideos      = "videos"      // POST /v1/videos, then GET /v1/videos/{id} until done
	APIGenerate    = "generate"    // SGLang POST /generate
	APICompletions = "completions" // OpenAI POST /v1/completions
)

// MaxCells bounds the matrix: a plan that expands to more cells is almost certainly a typo
// (repeats = 1000000) and would take days; split it into several plans instead.
const MaxCells = 10000

// Valid values, in the order error messages list them.
var (
	Kinds             = []string{"sglang", KindVLLM, "vllm-omni"}
	Modes             = []string{"generate", "serve"}
	Profilers         = []string{ProfilerNone, ProfilerTorch, ProfilerNsys}
	CudaGraphTraces   = []string{"node", "graph"}
	DiffusersFallback = []string{"fail", "warn"}
	Restarts          = []string{RestartShared, RestartPerCell}
	ModelTypes        = []string{ModelTypeDiffusion, ModelTypeLLM}
	LoadAPIs          = []string{APIImages, APIVideos, APIGenerate, APICompletions, APIChat}
	// NSysTraces is the set `nsys profile --trace` accepts.
	NSysTraces = []string{"cuda", "nvtx", "osrt", "cublas", "cudnn", "cusparse", "mpi", "ucx", "openacc",
		"openmp", "vulkan", "opengl", "oshmem", "nvvideo", "wddm", "dx11", "dx12", "none"}
)

func defaultCommand() []string { return []string{"sglang"} }
func defaultProfilers() []string {
	return []string{ProfilerNone}
}
func defaultTrace() []string { return []string{"cuda", "nvtx", "osrt"} }

// applyDefaults fills what the file left out. A key that was written keeps its value even when
// it is zero, so that `repeats = 0` is reported instead of silently becoming 1.
func applyDefaults(p *Plan, d *decoder) {
	d.defaultsGenerate(p)
	d.defaultsServe(p)
	d.defaultsCompare(p)
}

// set reports whether key k was written (or was written wrong: a bad value is not replaced by
// the default, it is reported).
func (d *decoder) set(k ...string) bool {
	return d.md.IsDefined(k...) || d.underBad(k)
}

// defaultsGenerate fills the keys every plan uses.
func (d *decoder) defaultsGenerate(p *Plan) {
	set := d.set
	if !set("output_dir") {
		p.OutputDir = DefaultOutputDir
	}
	b := &p.Backend
	if !set("backend", "kind") {
		b.Kind = DefaultKind
	}
	if !set("backend", "mode") {
		b.Mode = DefaultMode
	}
	if !set("backend", "command") {
		b.Command = defaultCommand()
	}
	if !set("backend", "timeout") {
		b.Timeout.Duration = DefaultTimeout
	}
	if !set("backend", "grace") {
		b.Grace.Duration = DefaultGrace
	}
	if !set("matrix", "seed") {
		p.Matrix.Seed = []int64{0}
	}
	if !set("matrix", "repeats") {
		p.Matrix.Repeats = 1
	}
	if !set("profile", "profilers") {
		p.Profile.Profilers = defaultProfilers()
	}
	if !set("profile", "num_profiled_timesteps") {
		p.Profile.NumProfiledTimesteps = DefaultNumProfiledTimesteps
	}
	if !set("nsys", "trace") {
		p.NSys.Trace = defaultTrace()
	}
	if !set("nsys", "cuda_graph_trace") {
		p.NSys.CudaGraphTrace = DefaultCudaGraphTrace
	}
	if !set("gate", "diffusers_fallback") {
		p.Gate.DiffusersFallback = DefaultDiffusersFallback
	}
	gpuGateDefaults(p, set)
}

// llmKeys reports whether the plan writes a key only an LLM plan has: a token-length or
// request-rate axis, or an LLM-only [load] key. Such a plan without
// backend.model_type is an LLM plan: asking for model_type = "llm" once per key would name
// the fix four times instead of applying it.
func (d *decoder) llmKeys() bool {
	for _, k := range [][]string{{"matrix", "input_len"}, {"matrix", "output_len"}, {"matrix", "request_rate"}} {
		if d.md.IsDefined(k...) {
			return true
		}
	}
	for _, key := range llmLoadKeys {
		if d.md.IsDefined("load", key) {
			return true
		}
	}
	// An LLM load API is not a sign: its own error names the fix, and a diffusion model with
	// the wrong API is likelier than an LLM plan that says nothing else.
	return false
}

// defaultsServe fills the serve keys. They are filled in whatever the mode, so code reading a
// plan never sees a zero timeout; a generate plan that writes these keys is rejected by validate.
func (d *decoder) defaultsServe(p *Plan) {
	set, b := d.set, &p.Backend
	if !set("backend", "restart") {
		b.Restart = DefaultRestart
	}
	if !set("backend", "host") {
		b.Host = DefaultHost
	}
	if !set("backend", "ready_timeout") {
		b.ReadyTimeout.Duration = DefaultReadyTimeout
	}
	if !set("backend", "model_type") {
		// Keys only an LLM has make the plan an LLM plan; anything else is a diffusion model.
		b.ModelType = ModelTypeDiffusion
		if d.llmKeys() {
			b.ModelType = ModelTypeLLM
		}
	}
	pr := &p.Profile
	if !set("profile", "start_step") {
		pr.StartStep = DefaultStartStep
	}
	if !set("profile", "num_steps") {
		pr.NumSteps = DefaultNumSteps
	}
	if !set("profile", "flush_timeout") {
		pr.FlushTimeout.Duration = DefaultFlushTimeout
	}
	l := &p.Load
	if !set("load", "api") {
		// Only from a model type that is valid (and trusted): a wrong one is reported on its
		// own, and a guessed API would add a second, misleading problem.
		switch {
		case !d.check("backend", "model_type"):
		case b.ModelType == ModelTypeDiffusion:
			l.API = APIImages
		case b.ModelType == ModelTypeLLM:
			l.API = defaultLLMAPI(p)
		}
	}
	if !set("load", "warmup") {
		l.Warmup = DefaultWarmup
	}
	if !set("load", "requests") {
		l.Requests = DefaultRequests
	}
	if !set("load", "concurrency") {
		l.Concurrency = DefaultConcurrency
	}
	if !set("load", "request_timeout") {
		l.RequestTimeout.Duration = DefaultRequestTimeout
	}
}

// defaultsCompare fills [compare].
func (d *decoder) defaultsCompare(p *Plan) {
	set := d.set
	applyLLMDefaults(p, set)
	c := &p.Compare
	if !set("compare", "alpha") {
		c.Alpha = DefaultAlpha
	}
	if !set("compare", "baseline_runs") {
		c.BaselineRuns = DefaultBaselineRuns
	}
	if !set("compare", "consecutive") {
		c.Consecutive = DefaultConsecutive
	}
}

// check reports whether the value at k may be checked: it decoded, and its key is trusted.
func (d *decoder) check(k ...string) bool {
	return !d.underBad(k)
}

// missing reports an absent required key, pointing at its table's header when there is one.
func (d *decoder) missing(k []string, msg string) {
	if d.underBad(k) || !d.room() {
		return
	}
	line := 0
	if len(k) > 1 && d.md.IsDefined(k[:len(k)-1]...) {
		line = d.positions().line(k[:len(k)-1])
	}
	col := 0
	if line > 0 {
		col = d.keyCol(line, k[len(k)-2])
	}
	d.problems = append(d.problems, Problem{Key: strings.Join(k, "."), Line: line, Col: col, Msg: msg})
}

func oneOf(v string, valid []string) bool { return inList(valid, v) }

func quoteList(l []string) string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// validate checks the decoded plan table by table (validate_*.go); values that failed to decode
// are skipped (decoder.bad).
func (d *decoder) validate(p *Plan) {
	d.validateTop(p)
	d.validateBackend(p)
	d.validateMatrix(p)
	d.validateProfile(p)
	d.validateNSys(p)
	d.validateGate(p)
	d.validateServe(p)
	d.validateLLM(p, d.file)
	d.validateEngine(p)
	d.validateProfilerOptions(p)
	d.validateAttach(p)
	d.validateNSysCapture(p)
	d.validateCompare(p)
	d.validateBundle(p)
	d.validateExecutor(p)
	d.validateGPUGate(p)
	d.validateSize(p)
	d.validateRules(p)
}

// validateSize checks the size of the matrix.
func (d *decoder) validateSize(p *Plan) {
	// The size of the matrix. An axis that failed to decode counts as empty, so "no cells" is
	// only worth saying when nothing else is wrong.
	if n, ok := cellCount(p); !ok {
		d.addKey([]string{"matrix"}, fmt.Sprintf("the matrix expands to more than %d cells; split the plan or shorten its axes", MaxCells))
	} else if n == 0 && len(d.problems) == 0 {
		d.addKey([]string{"matrix"}, "the matrix expands to no cells")
	}
}

// tableKeysSet reports whether the top-level table sets any key at all.
func (d *decoder) tableKeysSet(table string) bool {
	for _, k := range d.md.Keys() {
		if len(k) >= 2 && k[0] == table {
			return true
		}
	}
	return false
}

func (d *decoder) positiveDuration(k []string, v Duration, example string) {
	if d.check(k...) && v.Duration <= 0 {
		d.addKey(k, fmt.Sprintf("%v; it must be > 0, e.g. %s", v.Duration, example))
	}
}

func (d *decoder) noNUL(k []string, vals []string) {
	for i, s := range vals {
		if strings.ContainsRune(s, 0) {
			d.addElem(k, i, "", "contains a NUL byte, which cannot be passed as a command-line argument; remove it")
		}
	}
}
