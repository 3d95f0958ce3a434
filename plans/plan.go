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

// Plan is a decoded and validated plan file.
type Plan struct {
	Name      string  `toml:"name" json:"name"`
	OutputDir string  `toml:"output_dir" json:"output_dir"`
	Backend   Backend `toml:"backend" json:"backend"`
	Matrix    Matrix  `toml:"matrix" json:"matrix"`
	Profile   Profile `toml:"profile" json:"profile"`
	NSys      NSys    `toml:"nsys" json:"nsys"`
	Gate      Gate    `toml:"gate" json:"gate"`

	// Path is the file the plan was read from (as given); Source is its exact bytes, which the
	// run directory keeps as plan.toml.
	Path   string `toml:"-" json:"-"`
	Source []byte `toml:"-" json:"-"`
}

// Backend says which program runs the cells and how.
type Backend struct {
	Kind      string            `toml:"kind" json:"kind"`             // sglang | vllm-omni
	Mode      string            `toml:"mode" json:"mode"`             // generate | serve
	Command   []string          `toml:"command" json:"command"`       // argv prefix, e.g. ["sglang"] or a venv python path
	ExtraArgs []string          `toml:"extra_args" json:"extra_args"` // appended after the runner's own flags
	Env       map[string]string `toml:"env" json:"env"`               // added to the inherited environment
	Timeout   Duration          `toml:"timeout" json:"timeout"`       // per cell; default 20m
	// Grace is how long the stop ladder waits after SIGINT and again after SIGTERM before
	// escalating; default 10s (nsys cells wait at least 60s after SIGINT so nsys can write its report).
	Grace Duration `toml:"grace" json:"grace"`
}

// Matrix is the set of axes whose cross product is the list of cells.
type Matrix struct {
	Model             []string `toml:"model" json:"model"`
	Prompt            []string `toml:"prompt" json:"prompt"`
	Resolution        []string `toml:"resolution" json:"resolution"` // "WxH" or a preset: 720p, 1080p, 2k, 4k
	NumInferenceSteps []int    `toml:"num_inference_steps" json:"num_inference_steps"`
	Seed              []int64  `toml:"seed" json:"seed"`
	Repeats           int      `toml:"repeats" json:"repeats"` // default 1
}

// Profile selects profilers and sglang's torch-profiler options.
type Profile struct {
	Profilers            []string `toml:"profilers" json:"profilers"`                           // none | torch | nsys; default ["none"]
	NumProfiledTimesteps int      `toml:"num_profiled_timesteps" json:"num_profiled_timesteps"` // default 5; -1 = all steps
	ProfileAllStages     bool     `toml:"profile_all_stages" json:"profile_all_stages"`
}

// NSys holds the `nsys profile` options used by cells whose profiler is nsys.
type NSys struct {
	Delay          Duration `toml:"delay" json:"delay"`                       // --delay (0 = unset)
	Duration       Duration `toml:"duration" json:"duration"`                 // --duration (0 = unset)
	Trace          []string `toml:"trace" json:"trace"`                       // --trace list; default cuda,nvtx,osrt
	CudaGraphTrace string   `toml:"cuda_graph_trace" json:"cuda_graph_trace"` // node | graph; default node
}

// Gate configures how log evidence changes a cell's verdict.
type Gate struct {
	DiffusersFallback string `toml:"diffusers_fallback" json:"diffusers_fallback"` // fail (default) | warn
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
	// Key identifies the configuration independent of repeat and profiler, so that repeats of
	// the same configuration can be pooled and two runs compared cell by cell.
	Key string `json:"key"`

	Backend Backend `json:"backend"`
	Profile Profile `json:"profile"`
	NSys    NSys    `json:"nsys"`
	Gate    Gate    `json:"gate"`
}
