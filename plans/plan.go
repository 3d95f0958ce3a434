// Package plans reads a runner plan file (TOML), validates it strictly and expands its matrix
// into cells: one cell is one process the runner will start. It is pure: no I/O but reading the
// plan file, and it imports nothing else of this module.
package plans

import "time"

// Profiler names accepted in [profile] profilers.
const (
	ProfilerNone  = "none"  // the clean timing pass: no profiler attached
	ProfilerTorch = "torch" // sglang's own torch-profiler flags
	ProfilerNsys  = "nsys"  // the process runs under `nsys profile`
)

// Verdict of a cell, shared by every package that judges or reports cells.
const (
	VerdictOK          = "ok"
	VerdictInvalid     = "invalid"     // the process ran but did not measure what the cell claims (diffusers fallback)
	VerdictFailed      = "failed"      // crash, OOM, non-zero exit, missing artifact
	VerdictTimeout     = "timeout"     // killed by the per-cell timeout
	VerdictInterrupted = "interrupted" // stopped by Ctrl-C / SIGTERM to the runner
)

// Verdicts lists every verdict a cell's result may hold.
var Verdicts = []string{VerdictOK, VerdictInvalid, VerdictFailed, VerdictTimeout, VerdictInterrupted}

// Plan is a decoded and validated plan file.
type Plan struct {
	Name      string   `toml:"name" json:"name"`
	OutputDir string   `toml:"output_dir" json:"output_dir"`
	Backend   Backend  `toml:"backend" json:"backend"`
	Matrix    Matrix   `toml:"matrix" json:"matrix"`
	Profile   Profile  `toml:"profile" json:"profile"`
	NSys      NSys     `toml:"nsys" json:"nsys"`
	Gate      Gate     `toml:"gate" json:"gate"`
	Load      LoadSpec `toml:"load" json:"load"`         // serve mode: the requests of each cell
	Compare   Compare  `toml:"compare" json:"compare"`   // regression rules of runner compare
	Bundle    Bundle   `toml:"bundle" json:"bundle"`     // runner bundle options
	Executor  Executor `toml:"executor" json:"executor"` // where cells run (local GPU slots, Slurm)

	// Path is the file the plan was read from (as given); Source is its exact bytes, which the
	// run directory keeps as plan.toml.
	Path   string `toml:"-" json:"-"`
	Source []byte `toml:"-" json:"-"`
}

// Backend says which program runs the cells and how.
type Backend struct {
	Kind      string   `toml:"kind" json:"kind"`             // sglang | vllm | vllm-omni
	Mode      string   `toml:"mode" json:"mode"`             // generate | serve
	Command   []string `toml:"command" json:"command"`       // argv prefix, e.g. ["sglang"] or a venv python path
	ExtraArgs []string `toml:"extra_args" json:"extra_args"` // appended after the runner's own flags
	// EngineArgs are [backend.engine_args]: flags for one engine's server only, by
	// backend.kind, appended after extra_args to the cells of that engine (the engine axis
	// runs two programs that spell their flags differently). A cell's ExtraArgs carry them.
	EngineArgs map[string][]string `toml:"engine_args" json:"engine_args,omitempty"`
	Env        map[string]string   `toml:"env" json:"env"`         // added to the inherited environment
	Timeout    Duration            `toml:"timeout" json:"timeout"` // per cell; default 20m
	// Grace is how long the stop ladder waits after SIGINT and again after SIGTERM before
	// escalating; default 10s (nsys cells wait at least 60s after SIGINT so nsys can write its report).
	Grace Duration `toml:"grace" json:"grace"`

	// Serve mode only.
	// Restart is "shared" (default: cells with the same model and server arguments share one
	// server) or "per-cell" (a fresh server for every cell).
	Restart string `toml:"restart" json:"restart,omitempty"`
	// Host and Port of the server; Port 0 (default) means a free port chosen by the runner.
	Host string `toml:"host" json:"host,omitempty"`
	Port int    `toml:"port" json:"port,omitempty"`
	// ReadyTimeout bounds the wait for the server to become ready; default 20m.
	ReadyTimeout Duration `toml:"ready_timeout" json:"ready_timeout"`
	// ModelType is "diffusion" or "llm"; default: "llm" when the matrix has input_len or
	// output_len, "diffusion" otherwise. It picks the load API and sglang serve's --model-type.
	ModelType string `toml:"model_type" json:"model_type,omitempty"`
	// URL attaches to a running server instead of starting one (plans/attach.go).
	URL string `toml:"url" json:"url,omitempty"`
}

// Matrix is the set of axes whose cross product is the list of cells.
type Matrix struct {
	Model             []string `toml:"model" json:"model"`
	Prompt            []string `toml:"prompt" json:"prompt"`
	Resolution        []string `toml:"resolution" json:"resolution"` // "WxH" or a preset: 720p, 1080p, 2k, 4k
	NumInferenceSteps []int    `toml:"num_inference_steps" json:"num_inference_steps"`
	Seed              []int64  `toml:"seed" json:"seed"`
	Repeats           int      `toml:"repeats" json:"repeats"` // default 1
	// LLM serve axes (tokens); absent means not used.
	InputLen  []int `toml:"input_len" json:"input_len,omitempty"`
	OutputLen []int `toml:"output_len" json:"output_len,omitempty"`
	// LLM benchmark axes: server flags ([matrix.server_args], in file order), the client's
	// concurrency and the request rate (requests/s; 0 = "inf").
	ServerArgs []ServerArg `toml:"-" json:"server_args,omitempty"`
	// Args is [matrix.args]: the same for the flags of `sglang generate` (generate plans).
	Args        []ServerArg `toml:"-" json:"args,omitempty"`
	Concurrency []int       `toml:"concurrency" json:"concurrency,omitempty"`
	RequestRate []float64   `toml:"-" json:"request_rate,omitempty"`
	// Engine is the engine axis (engine.go): the LLM server program of each cell ("sglang" or
	// "vllm"), so one plan runs the same load against both.
	Engine []string `toml:"engine" json:"engine,omitempty"`
	// Exclude and Include are [[matrix.exclude]] and [[matrix.include]] (matrixrules.go): the
	// cells of the cross product that match an exclude rule are dropped unless they match an
	// include rule.
	Exclude []CellRule `toml:"-" json:"exclude,omitempty"`
	Include []CellRule `toml:"-" json:"include,omitempty"`
}

// Profile selects profilers and sglang's torch-profiler options.
type Profile struct {
	Profilers            []string `toml:"profilers" json:"profilers"`                           // none | torch | nsys; default ["none"]
	NumProfiledTimesteps int      `toml:"num_profiled_timesteps" json:"num_profiled_timesteps"` // default 5; -1 = all steps
	ProfileAllStages     bool     `toml:"profile_all_stages" json:"profile_all_stages"`
	// MaxTraceMB is the trace budget of one torch-profiled cell in MB (0: none). Expand caps
	// the cell's profiled steps to fit at TraceMBPerStep each; StepsCappedFrom records the
	// step count the plan asked for when it did (0: not capped).
	MaxTraceMB      int `toml:"max_trace_mb" json:"max_trace_mb,omitempty"`
	StepsCappedFrom int `toml:"-" json:"steps_capped_from,omitempty"`

	// Serve mode (LLM /start_profile window and the flush after /stop_profile).
	StartStep      int      `toml:"start_step" json:"start_step"`             // -1 (default): not sent
	NumSteps       int      `toml:"num_steps" json:"num_steps"`               // default 5
	ProfileByStage bool     `toml:"profile_by_stage" json:"profile_by_stage"` // one trace per stage (EXTEND/DECODE)
	MergeProfiles  bool     `toml:"merge_profiles" json:"merge_profiles"`
	FlushTimeout   Duration `toml:"flush_timeout" json:"flush_timeout"` // default 10m

	// Profiler options of the serve window (profile_opts.go); unset: not sent, the server's default.
	Activities    []string           `toml:"activities" json:"activities,omitempty"` // default ["CPU", "GPU"]
	WithStack     *bool              `toml:"with_stack" json:"with_stack,omitempty"`
	RecordShapes  *bool              `toml:"record_shapes" json:"record_shapes,omitempty"`
	ProfileStages []string           `toml:"profile_stages" json:"profile_stages,omitempty"`
	VLLM          VLLMProfilerConfig `toml:"vllm_profiler_config" json:"vllm_profiler_config,omitempty"`
}

// LoadSpec describes the client phase of a serve cell (the [load] table).
type LoadSpec struct {
	// API is "images" (POST /v1/images/generations), "videos" (POST /v1/videos + polling),
	// "generate" (SGLang POST /generate) or "completions" (POST /v1/completions); default
	// "images" for diffusion and "generate" for llm.
	API            string   `toml:"api" json:"api,omitempty"`
	Warmup         int      `toml:"warmup" json:"warmup"`                   // unmeasured requests first; default 1
	Requests       int      `toml:"requests" json:"requests"`               // measured requests; default 5
	Concurrency    int      `toml:"concurrency" json:"concurrency"`         // default 1
	MaxErrorRate   float64  `toml:"max_error_rate" json:"max_error_rate"`   // 0..1; default 0
	RequestTimeout Duration `toml:"request_timeout" json:"request_timeout"` // default 10m

	// LLM benchmark (runner/load, bench_serving's definitions); see docs/llm-benchmark.md.
	RequestRate      float64  `toml:"-" json:"request_rate,omitempty"`                  // requests/s; 0 = "inf" (all at once)
	Burstiness       float64  `toml:"burstiness" json:"burstiness,omitempty"`           // gamma shape; default 1 (Poisson)
	MaxConcurrency   int      `toml:"max_concurrency" json:"max_concurrency,omitempty"` // 0 = concurrency
	Duration         Duration `toml:"duration" json:"duration,omitzero"`                // instead of requests
	Dataset          string   `toml:"dataset" json:"dataset,omitempty"`                 // random | sharegpt | prefix
	RandomRangeRatio float64  `toml:"random_range_ratio" json:"random_range_ratio,omitempty"`
	DatasetPath      string   `toml:"dataset_path" json:"dataset_path,omitempty"` // sharegpt JSON (resolved from the plan's directory)
	SLOTTFT          Duration `toml:"slo_ttft" json:"slo_ttft,omitzero"`          // goodput bound on TTFT
	SLOTPOT          Duration `toml:"slo_tpot" json:"slo_tpot,omitzero"`          // goodput bound on TPOT
	// Clients is how many client processes share the load (each sends its share of one
	// arrival schedule; their records are merged); 0 or 1 = the runner itself.
	Clients int `toml:"clients" json:"clients,omitempty"`
	// TraceSlowdown multiplies a Mooncake trace's arrival times (2 = half the rate); 0 means 1.
	TraceSlowdown float64 `toml:"trace_slowdown" json:"trace_slowdown,omitempty"`
	// Search makes the cell an SLA search ([load.search], plans/search.go); nil: one load.
	Search *LoadSearch `toml:"-" json:"search,omitempty"`
	// RampUpStrategy ("linear", "exponential"; "" none) makes the request rate grow from
	// RampUpStartRPS to RampUpEndRPS over the requests (plans/search.go).
	RampUpStrategy string  `toml:"ramp_up_strategy" json:"ramp_up_strategy,omitempty"`
	RampUpStartRPS float64 `toml:"ramp_up_start_rps" json:"ramp_up_start_rps,omitempty"`
	RampUpEndRPS   float64 `toml:"ramp_up_end_rps" json:"ramp_up_end_rps,omitempty"`
	// FlushCache resets the server's prefix cache right before each cell's measured requests
	// (and each SLA probe), so that a cell does not find the prompts of the cells before it
	// cached: SGLang POST /flush_cache, vLLM POST /reset_prefix_cache. Default true for a
	// server the runner starts, false for an attached one (backend.url: flushing someone
	// else's server is a side effect the plan must ask for).
	FlushCache bool `toml:"flush_cache" json:"flush_cache,omitempty"`
}

// Compare holds the regression rules of runner compare and runner run --baseline.
type Compare struct {
	Alpha        float64 `toml:"alpha" json:"alpha"`                 // significance level; default 0.05
	BaselineRuns int     `toml:"baseline_runs" json:"baseline_runs"` // history: rolling median of the last N valid runs; default 5
	Consecutive  int     `toml:"consecutive" json:"consecutive"`     // history: violations in a row before a regression; default 2
	// Tolerances override the per-metric defaults: metric name -> "<rel>%" or
	// "<rel>% or <abs>", where abs is a duration ("120ms") or a size ("256MB"); a change
	// counts as a regression only beyond max(rel, abs).
	Tolerances map[string]Tolerance `toml:"tolerances" json:"tolerances,omitempty"`
}

// Tolerance is a parsed tolerance: relative fraction with an optional absolute floor.
type Tolerance struct {
	Rel   float64 `json:"rel"`              // 0.10 for "10%"
	AbsNS int64   `json:"abs_ns,omitempty"` // duration floor
	AbsMB float64 `json:"abs_mb,omitempty"` // memory floor
	Text  string  `json:"text"`             // as written
}

// Bundle holds runner bundle options.
type Bundle struct {
	// Redact lists extra regular expressions whose matches are replaced by <redacted> in
	// every file of a bundle (on top of the built-in secret patterns).
	Redact []string `toml:"redact" json:"redact,omitempty"`
}

// NSys holds the `nsys profile` options used by cells whose profiler is nsys.
type NSys struct {
	Delay          Duration `toml:"delay" json:"delay"`                       // --delay (0 = unset)
	Duration       Duration `toml:"duration" json:"duration"`                 // --duration (0 = unset)
	Trace          []string `toml:"trace" json:"trace"`                       // --trace list; default cuda,nvtx,osrt
	CudaGraphTrace string   `toml:"cuda_graph_trace" json:"cuda_graph_trace"` // node | graph; default node
	// CaptureRange is "none" (default) or "cudaProfilerApi"; CaptureRangeEnd "stop" (default
	// with cudaProfilerApi) or "repeat" (plans/nsys_capture.go).
	CaptureRange    string `toml:"capture_range" json:"capture_range,omitempty"`
	CaptureRangeEnd string `toml:"capture_range_end" json:"capture_range_end,omitempty"`
}

// Gate configures how log evidence changes a cell's verdict.
type Gate struct {
	DiffusersFallback string `toml:"diffusers_fallback" json:"diffusers_fallback"` // fail (default) | warn
	// BusyGPU is what a compute process of someone else on the cell's GPUs does to the cell:
	// warn (default), fail, or wait up to BusyWait for the GPU to come free (validate_gate.go).
	BusyGPU  string   `toml:"busy_gpu" json:"busy_gpu"`
	BusyWait Duration `toml:"busy_wait" json:"busy_wait"`
	// RequireLockedClocks fails a cell whose GPU clocks are not locked (or cannot be read).
	RequireLockedClocks bool `toml:"require_locked_clocks" json:"require_locked_clocks,omitempty"`
}

// Duration is a plan duration. It is written as a string ("30s", "2m"); a bare number is
// rejected because TOML integers would otherwise silently mean nanoseconds.
type Duration struct {
	time.Duration
}

// Resolution is a parsed matrix resolution.
type Resolution struct {
	Width  int    `json:"width"`
	Height int    `json:"height"`
	Preset string `json:"preset,omitempty"` // "720p", "1080p", "2k", "4k" when given as a preset
}

// Cell is one process the runner will start: one point of the matrix with one profiler and one
// repeat. A cell carries every setting it needs so that cells.json alone can resume a run.
type Cell struct {
	Index      int        `json:"index"`
	ID         string     `json:"id"` // e.g. "000-qwen-image-1024x1024-s0-torch-r1"; stable across re-reads
	Model      string     `json:"model"`
	Prompt     string     `json:"prompt"`
	Resolution Resolution `json:"resolution"`
	Steps      int        `json:"num_inference_steps"`
	Seed       int64      `json:"seed"`
	Repeat     int        `json:"repeat"` // 1-based
	Profiler   string     `json:"profiler"`
	InputLen   int        `json:"input_len,omitempty"`  // LLM serve cells
	OutputLen  int        `json:"output_len,omitempty"` // LLM serve cells
	// ServerArgs are the cell's [matrix.server_args] (or, for generate, [matrix.args]) values in
	// command-line form; they are also appended to Backend.ExtraArgs, so the command line and
	// the server key carry them.
	ServerArgs []string `json:"server_args,omitempty"`
	// Key identifies the configuration independent of repeat and profiler, so that repeats of
	// the same configuration can be pooled and two runs compared cell by cell.
	Key string `json:"key"`

	Backend Backend  `json:"backend"`
	Profile Profile  `json:"profile"`
	NSys    NSys     `json:"nsys"`
	Gate    Gate     `json:"gate"`
	Load    LoadSpec `json:"load"`
}
