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
	Kinds             = []string{"sglang", "vllm-omni"}
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
	set := func(k ...string) bool {
		return d.md.IsDefined(k...) || d.underBad(k)
	}
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

	// Serve mode. The defaults are filled in whatever the mode, so code reading a plan never
	// sees a zero timeout; a generate plan that writes these keys is rejected by validate.
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
		// Token-length axes only make sense for an LLM; anything else is a diffusion model.
		b.ModelType = ModelTypeDiffusion
		if d.md.IsDefined("matrix", "input_len") || d.md.IsDefined("matrix", "output_len") {
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
			l.API = APIGenerate
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
	if d.underBad(k) {
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

func (d *decoder) validate(p *Plan) {
	// name
	if d.check("name") {
		if !d.md.IsDefined("name") {
			d.missing([]string{"name"}, `required: add name = "my-plan" at the top of the file (run directories go under <output_dir>/<name>/)`)
		} else if msg := dirNameProblem(p.Name); msg != "" {
			d.addKey([]string{"name"}, msg)
		}
	}
	if d.check("output_dir") && d.md.IsDefined("output_dir") {
		if p.OutputDir == "" {
			d.addKey([]string{"output_dir"}, `empty; give a directory such as "runs", or drop the key for the default "runs"`)
		} else if strings.ContainsRune(p.OutputDir, 0) {
			d.addKey([]string{"output_dir"}, "contains a NUL byte, which no path can hold; remove it")
		}
	}

	// backend
	b := p.Backend
	if d.check("backend", "kind") && !oneOf(b.Kind, Kinds) {
		d.addKey(path("backend", "kind"), fmt.Sprintf("unknown backend kind %q; use one of %s", b.Kind, quoteList(Kinds)))
	}
	if d.check("backend", "mode") && !oneOf(b.Mode, Modes) {
		d.addKey(path("backend", "mode"), fmt.Sprintf("unknown mode %q; use one of %s", b.Mode, quoteList(Modes)))
	}
	if d.check("backend", "command") {
		switch {
		case len(b.Command) == 0:
			d.addKey(path("backend", "command"), `empty; give the program to run, e.g. ["sglang"] or ["/path/to/venv/bin/sglang"], or drop the key for the default ["sglang"]`)
		case b.Command[0] == "":
			d.addElem(path("backend", "command"), 0, "", "the program name is empty; give the program to run, e.g. \"sglang\"")
		}
		d.noNUL(path("backend", "command"), b.Command)
	}
	if d.check("backend", "extra_args") {
		d.noNUL(path("backend", "extra_args"), b.ExtraArgs)
	}
	if d.check("backend", "env") {
		for _, k := range sortedKeys(b.Env) {
			kp := path("backend", "env", k)
			if !d.check(kp...) {
				continue
			}
			switch {
			case k == "":
				d.addKey(kp, "empty environment variable name; give a name such as HF_HUB_OFFLINE")
			case strings.ContainsAny(k, "=\x00"):
				d.addKey(kp, fmt.Sprintf("environment variable name %q contains '=' or a NUL byte; names cannot", k))
			}
			if strings.ContainsRune(b.Env[k], 0) {
				d.addKey(kp, "value contains a NUL byte, which an environment variable cannot hold; remove it")
			}
		}
	}
	d.positiveDuration(path("backend", "timeout"), b.Timeout, `"20m"`)
	d.positiveDuration(path("backend", "grace"), b.Grace, `"10s"`)

	// matrix
	m := p.Matrix
	d.stringAxis(path("matrix", "model"), m.Model, true, `list at least one model, e.g. model = ["Qwen/Qwen-Image"] under [matrix]`)
	d.stringAxis(path("matrix", "prompt"), m.Prompt, true, `list at least one prompt, e.g. prompt = ["a red fox in the snow"] under [matrix]`)
	if k := path("matrix", "resolution"); d.check(k...) && m.Resolution != nil {
		if len(m.Resolution) == 0 {
			d.addKey(k, `empty axis; list at least one resolution such as ["1024x1024"], or drop the key to use the model's default`)
		}
		seen := map[string]int{}
		for i, s := range m.Resolution {
			r, err := ParseResolution(s)
			if err != nil {
				d.addElem(k, i, s, err.Error())
				continue
			}
			if j, dup := seen[r.size()]; dup {
				d.addElemN(k, i, s, occ(m.Resolution, i), fmt.Sprintf("%q is the same size as element %d; list each resolution once (use matrix.repeats to run a configuration more than once)", s, j))
			}
			seen[r.size()] = i
		}
	}
	if k := path("matrix", "num_inference_steps"); d.check(k...) && m.NumInferenceSteps != nil {
		if len(m.NumInferenceSteps) == 0 {
			d.addKey(k, "empty axis; list at least one step count such as [50], or drop the key to use the model's default")
		}
		seen := map[int]int{}
		for i, n := range m.NumInferenceSteps {
			if n <= 0 {
				d.addElem(k, i, "", fmt.Sprintf("%d steps: the number of inference steps must be > 0, e.g. 50", n))
				continue
			}
			if j, dup := seen[n]; dup {
				d.addElem(k, i, "", fmt.Sprintf("%d is listed twice (elements %d and %d); list each value once", n, j, i))
			}
			seen[n] = i
		}
	}
	if k := path("matrix", "seed"); d.check(k...) {
		if len(m.Seed) == 0 {
			d.addKey(k, "empty axis; list at least one seed such as [0], or drop the key for the default [0]")
		}
		seen := map[int64]int{}
		for i, s := range m.Seed {
			if s < 0 {
				d.addElem(k, i, "", fmt.Sprintf("seed %d is negative; seeds must be >= 0", s))
				continue
			}
			if j, dup := seen[s]; dup {
				d.addElem(k, i, "", fmt.Sprintf("seed %d is listed twice (elements %d and %d); list each seed once", s, j, i))
			}
			seen[s] = i
		}
	}
	if k := path("matrix", "repeats"); d.check(k...) && m.Repeats < 1 {
		d.addKey(k, fmt.Sprintf("repeats = %d; it must be >= 1 (1 runs each configuration once)", m.Repeats))
	}

	// profile
	pr := p.Profile
	if k := path("profile", "profilers"); d.check(k...) {
		if len(pr.Profilers) == 0 {
			d.addKey(k, `empty; list at least one of "none", "torch", "nsys", or drop the key for the default ["none"]`)
		}
		seen := map[string]int{}
		for i, s := range pr.Profilers {
			if !oneOf(s, Profilers) {
				d.addElem(k, i, s, fmt.Sprintf("unknown profiler %q; use %s", s, quoteList(Profilers)))
				continue
			}
			if j, dup := seen[s]; dup {
				d.addElemN(k, i, s, occ(pr.Profilers, i), fmt.Sprintf("profiler %q is listed twice (elements %d and %d); list it once and use matrix.repeats for more runs", s, j, i))
			}
			seen[s] = i
		}
	}
	if k := path("profile", "num_profiled_timesteps"); d.check(k...) {
		if n := pr.NumProfiledTimesteps; n <= 0 && n != -1 {
			d.addKey(k, fmt.Sprintf("%d; it must be > 0, or -1 to profile every denoising step", n))
		}
	}

	// nsys
	ns := p.NSys
	if d.check("nsys") && d.nsysKeysSet() && !inList(pr.Profilers, ProfilerNsys) && d.check("profile", "profilers") {
		d.addKey([]string{"nsys"}, `nsys options given but profile.profilers has no "nsys"; add it or drop [nsys]`)
	}
	if k := path("nsys", "delay"); d.check(k...) {
		if ns.Delay.Duration < 0 {
			d.addKey(k, fmt.Sprintf("%v is negative; use \"0s\" or more", ns.Delay.Duration))
		} else if ns.Delay.Duration%time.Second != 0 {
			d.addKey(k, fmt.Sprintf("%v is not whole seconds; nsys --delay takes seconds, so use e.g. %q", ns.Delay.Duration, wholeSeconds(ns.Delay.Duration)))
		}
	}
	if k := path("nsys", "duration"); d.check(k...) && d.md.IsDefined(k...) {
		if ns.Duration.Duration <= 0 {
			d.addKey(k, fmt.Sprintf("%v; it must be > 0 (drop the key to capture until the process exits)", ns.Duration.Duration))
		} else if ns.Duration.Duration%time.Second != 0 {
			d.addKey(k, fmt.Sprintf("%v is not whole seconds; nsys --duration takes seconds, so use e.g. %q", ns.Duration.Duration, wholeSeconds(ns.Duration.Duration)))
		}
	}
	if k := path("nsys", "trace"); d.check(k...) {
		if len(ns.Trace) == 0 {
			d.addKey(k, `empty; list what nsys should trace, e.g. ["cuda", "nvtx", "osrt"], or drop the key for that default`)
		}
		seen := map[string]int{}
		for i, s := range ns.Trace {
			if !oneOf(s, NSysTraces) {
				d.addElem(k, i, s, fmt.Sprintf("unknown nsys trace %q; use any of %s", s, strings.Join(NSysTraces, ", ")))
				continue
			}
			if j, dup := seen[s]; dup {
				d.addElemN(k, i, s, occ(ns.Trace, i), fmt.Sprintf("%q is listed twice (elements %d and %d); list it once", s, j, i))
			}
			seen[s] = i
		}
		if _, none := seen["none"]; none && len(seen) > 1 {
			d.addKey(k, `"none" cannot be combined with other trace APIs; use ["none"] alone or drop it`)
		}
	}
	if k := path("nsys", "cuda_graph_trace"); d.check(k...) && !oneOf(ns.CudaGraphTrace, CudaGraphTraces) {
		d.addKey(k, fmt.Sprintf("unknown value %q; use %s (node traces each kernel inside a CUDA graph)", ns.CudaGraphTrace, quoteList(CudaGraphTraces)))
	}

	// gate
	if k := path("gate", "diffusers_fallback"); d.check(k...) && !oneOf(p.Gate.DiffusersFallback, DiffusersFallback) {
		d.addKey(k, fmt.Sprintf("unknown value %q; use %s", p.Gate.DiffusersFallback, quoteList(DiffusersFallback)))
	}

	d.validateServe(p)
	d.validateLLM(p, d.file)
	d.validateCompare(p)
	d.validateBundle(p)
	d.validateExecutor(p)

	// The size of the matrix. An axis that failed to decode counts as empty, so "no cells" is
	// only worth saying when nothing else is wrong.
	if n, ok := cellCount(p); !ok {
		d.addKey([]string{"matrix"}, fmt.Sprintf("the matrix expands to more than %d cells; split the plan or shorten its axes", MaxCells))
	} else if n == 0 && len(d.problems) == 0 {
		d.addKey([]string{"matrix"}, "the matrix expands to no cells")
	}
}

// nsysKeysSet reports whether [nsys] sets any key at all (an empty [nsys] header is harmless).
func (d *decoder) nsysKeysSet() bool { return d.tableKeysSet("nsys") }

// tableKeysSet reports whether the top-level table sets any key at all.
func (d *decoder) tableKeysSet(table string) bool {
	for _, k := range d.md.Keys() {
		if len(k) >= 2 && k[0] == table {
			return true
		}
	}
	return false
}

func wholeSeconds(x time.Duration) string {
	s := x.Round(time.Second)
	if s <= 0 {
		s = time.Second
	}
	return fmt.Sprintf("%ds", int64(s/time.Second))
}

func (d *decoder) positiveDuration(k []string, v Duration, example string) {
	if d.check(k...) && v.Duration <= 0 {
		d.addKey(k, fmt.Sprintf("%v; it must be > 0, e.g. %s", v.Duration, example))
	}
}

// stringAxis checks a matrix axis of strings: present when required, not empty, no empty or
// duplicate values, nothing that cannot be an argv element.
func (d *decoder) stringAxis(k []string, vals []string, required bool, add string) {
	if !d.check(k...) {
		return
	}
	if vals == nil {
		if required && !d.md.IsDefined(k...) {
			d.missing(k, "required: "+add)
		}
		return
	}
	if len(vals) == 0 {
		d.addKey(k, "empty axis; "+add)
		return
	}
	seen := map[string]int{}
	for i, s := range vals {
		switch {
		case strings.TrimSpace(s) == "":
			d.addElem(k, i, s, "empty value; give a non-empty string")
		case strings.ContainsRune(s, 0):
			d.addElem(k, i, "", "contains a NUL byte, which cannot be passed as a command-line argument; remove it")
		default:
			if j, dup := seen[s]; dup {
				d.addElemN(k, i, s, occ(vals, i), fmt.Sprintf("listed twice (elements %d and %d); list each value once and use matrix.repeats to run a configuration more than once", j, i))
			}
			seen[s] = i
		}
	}
}

func (d *decoder) noNUL(k []string, vals []string) {
	for i, s := range vals {
		if strings.ContainsRune(s, 0) {
			d.addElem(k, i, "", "contains a NUL byte, which cannot be passed as a command-line argument; remove it")
		}
	}
}

// dirNameProblem says why name cannot be a directory name, or "".
func dirNameProblem(name string) string {
	const hint = `; use letters, digits, '.', '_', '-' or '+', starting with a letter or digit (e.g. "qwen-image")`
	switch {
	case name == "":
		return "empty" + hint
	case len(name) > 128:
		return fmt.Sprintf("%d bytes long; keep it to 128", len(name))
	}
	for i, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if !ok && (i == 0 || !strings.ContainsRune("._-+", r)) {
			return fmt.Sprintf("%q cannot be used as a directory name", name) + hint
		}
	}
	return ""
}

// cellCount is the number of cells Expand makes, or false when it exceeds MaxCells.
func cellCount(p *Plan) (int, bool) {
	n := 1
	for _, l := range []int{len(p.Matrix.Model), len(p.Matrix.Prompt), max(1, len(p.Matrix.Resolution)),
		max(1, len(p.Matrix.NumInferenceSteps)), max(1, len(p.Matrix.Seed)), max(1, len(p.Matrix.InputLen)),
		max(1, len(p.Matrix.OutputLen)), len(p.Profile.Profilers), max(1, p.Matrix.Repeats),
		max(1, len(p.Matrix.Concurrency)), max(1, len(p.Matrix.RequestRate)), serverArgCells(p.Matrix.ServerArgs)} {
		if l > MaxCells {
			return 0, false
		}
		n *= l
		if n > MaxCells {
			return 0, false
		}
	}
	return n, true
}

// occ counts the elements before i equal to vals[i]: which literal occurrence in the file is i.
func occ(vals []string, i int) int {
	n := 0
	for _, v := range vals[:i] {
		if v == vals[i] {
			n++
		}
	}
	return n
}
