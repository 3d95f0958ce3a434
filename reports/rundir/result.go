package rundir

import (
	"fmt"
	"time"

	"github.com/sglprof/runner/plans"
)

// CellResult is a cell's result.json, its single source of truth.
type CellResult struct {
	ID         string        `json:"id"`
	Index      int           `json:"index"`
	Key        string        `json:"key"`
	Profiler   string        `json:"profiler"`
	Verdict    string        `json:"verdict"`
	Reasons    []Reason      `json:"reasons,omitempty"`
	Warnings   []Reason      `json:"warnings,omitempty"`
	Exit       Exit          `json:"exit"`
	StoppedBy  string        `json:"stopped_by,omitempty"` // the last signal the stop ladder needed
	Start      time.Time     `json:"start"`
	End        time.Time     `json:"end"`
	Timings    Timings       `json:"timings"`
	Artifacts  []Artifact    `json:"artifacts"`
	TopKernels []KernelShare `json:"top_kernels,omitempty"`
	// Serve is set for serve-mode cells (runner/serve.go): the server used and the load summary.
	Serve *ServeResult `json:"serve,omitempty"`
	// GPUs are the GPU indices the local executor gave the cell (its CUDA_VISIBLE_DEVICES);
	// empty when the cell ran one at a time without [executor] gpus.
	GPUs []int `json:"gpus,omitempty"`
	// Slurm is set for cells that ran as a Slurm array task: the job, task and node.
	Slurm *SlurmTask `json:"slurm,omitempty"`
	// GPU is what the GPU noise guard saw before and after the cell (runner/gpucheck.go).
	GPU *GPUCheck `json:"gpu,omitempty"`
	// Trace is the size of a torch cell's traces against [profile] max_trace_mb.
	Trace *TraceSize `json:"trace,omitempty"`
}

// TraceSize is what a torch cell's traces took: the measured figure per profiled step that
// [profile] max_trace_mb's estimate can be checked against, and the cap the budget set.
type TraceSize struct {
	MB         float64 `json:"mb"`
	Steps      int     `json:"steps"`                 // profiled steps
	MBPerStep  float64 `json:"mb_per_step,omitempty"` // MB / Steps
	BudgetMB   int     `json:"budget_mb,omitempty"`   // [profile] max_trace_mb; 0: none
	CappedFrom int     `json:"capped_from,omitempty"` // the steps the plan asked for, when the budget capped them
}

// SlurmTask is the Slurm side of a cell's result: which job ran it and where.
type SlurmTask struct {
	JobID string `json:"job_id"`
	Task  int    `json:"task"`
	Node  string `json:"node,omitempty"`
	State string `json:"state,omitempty"` // the task's Slurm state, when the runner saw it end
}

// OK reports whether the cell measured what it claims.
func (r *CellResult) OK() bool { return r.Verdict == plans.VerdictOK }

// Artifact is one file a cell produced, with its size and digest so a result can be checked
// against the files later (and a bundle verified on another machine).
type Artifact struct {
	Path   string `json:"path"` // relative to the cell directory
	Kind   string `json:"kind"` // trace, perf-dump, nsys-report, nsys-export, output, triage, log
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// Timings are the cell's measured times: the wall time the runner saw and the times sglang
// reported in its perf dump.
type Timings struct {
	WallNS            int64       `json:"wall_ns"`
	E2ENS             int64       `json:"e2e_ns,omitempty"`
	MeanDenoiseStepNS int64       `json:"mean_denoise_step_ns,omitempty"`
	DenoiseStepsNS    []int64     `json:"denoise_steps_ns,omitempty"`
	Stages            []StageTime `json:"stages,omitempty"`
	PeakMemoryMB      float64     `json:"peak_memory_mb,omitempty"`
	PerfDumpSchema    string      `json:"perf_dump_schema,omitempty"`
}

// StageTime is one pipeline stage's time from the perf dump.
type StageTime struct {
	Name string `json:"name"`
	NS   int64  `json:"ns"`
}

// KernelShare is one of a cell's top kernels from its triage.
type KernelShare struct {
	Name     string  `json:"name"`
	Category string  `json:"category"`
	TotalUS  float64 `json:"total_us"`
	SharePct float64 `json:"share_pct"`
	// Roof is the kernel's place on the roofline when the trace recorded shapes (absent
	// otherwise); report.html draws it.
	Roof *Roof `json:"roofline,omitempty"`
}

// Roof is one kernel's roofline figures as the triage computed them (its kernel table's
// flops_per_byte, tflops, gbps, pct_of_peak, bound), with the roofs of the GPU they were
// measured against: PeakTFLOPS for the kernel's input type and PeakGBps (0 for a GPU the
// peak table does not know).
type Roof struct {
	Intensity  float64 `json:"flops_per_byte,omitempty"`
	TFLOPS     float64 `json:"tflops,omitempty"`
	GBps       float64 `json:"gbps,omitempty"`
	PctOfPeak  float64 `json:"pct_of_peak,omitempty"`
	Bound      string  `json:"bound,omitempty"`
	GPU        string  `json:"gpu,omitempty"`
	PeakTFLOPS float64 `json:"peak_tflops,omitempty"`
	PeakGBps   float64 `json:"peak_gbps,omitempty"`
}

// Launch is the process for one cell (or server): argv (never passed through a shell), the
// variables to add to the inherited environment, and the working directory. It is
// command.json and the launch of each entry of cells.json; backends.Launch is this type.
type Launch struct {
	Argv []string          `json:"argv"`
	Env  map[string]string `json:"env"`
	Dir  string            `json:"dir"`
}

// Evidence is one log line that supports a finding, with its 1-based line number in log.txt.
type Evidence struct {
	Line   int    `json:"line"`
	Text   string `json:"text"`
	Stream string `json:"stream,omitempty"`
}

// Reason is one cause of a verdict (or a warning), with the log lines that show it.
type Reason struct {
	Code    string     `json:"code"`    // e.g. "diffusers-fallback", "cuda-oom", "trace-missing", "exit-status"
	Message string     `json:"message"` // says what happened and what to do
	Lines   []Evidence `json:"lines,omitempty"`
}

// Exit is how the cell's process ended, as the runner's process layer saw it.
type Exit struct {
	Code     int    `json:"code"`             // exit status; -1 when killed by a signal or never started
	Signal   string `json:"signal,omitempty"` // e.g. "killed", "interrupt"
	StartErr string `json:"start_error,omitempty"`
}

// ServeResult is the serve part of a cell's result.json.
type ServeResult struct {
	Server      string       `json:"server"` // servers/<n>, relative to the run directory
	Port        int          `json:"port"`
	ServedModel string       `json:"served_model,omitempty"`
	API         string       `json:"api"`
	Load        *LoadSummary `json:"load,omitempty"`
	// LLM is set for LLM cells measured by the streaming benchmark (runner/load).
	LLM *LLMResult `json:"llm,omitempty"`
	// Profile describes the profiling window of a torch cell.
	Profile *ProfileWindow `json:"profile,omitempty"`
}

// ProfileWindow is what the runner asked the server to profile and how long the flush took.
type ProfileWindow struct {
	Kind    string         `json:"kind"` // start-stop: /start_profile ... /stop_profile (backends.WindowStartStop)
	Request map[string]any `json:"request,omitempty"`
	FlushNS int64          `json:"flush_ns,omitempty"`
	Traces  []string       `json:"traces,omitempty"` // relative to the cell
}

// LoadSummary summarises the measured requests of a serve cell's client phase: load.json and
// the load of result.json's serve part. runner/load computes it (load.Summarize).
type LoadSummary struct {
	Count        int     `json:"count"`
	Errors       int     `json:"errors"`
	ErrorRate    float64 `json:"error_rate"`
	WallNS       int64   `json:"wall_ns"`
	MeanNS       int64   `json:"mean_ns"`
	P50NS        int64   `json:"p50_ns"`
	P90NS        int64   `json:"p90_ns"`
	P99NS        int64   `json:"p99_ns"`
	MaxNS        int64   `json:"max_ns"`
	RequestsPerS float64 `json:"requests_per_s"`
	ImagesPerS   float64 `json:"images_per_s,omitempty"`
	TokensPerS   float64 `json:"tokens_per_s,omitempty"`
	// Server-reported figures over the successful requests.
	MeanInferenceTimeS float64        `json:"mean_inference_time_s,omitempty"`
	MaxPeakMemoryMB    float64        `json:"max_peak_memory_mb,omitempty"`
	Statuses           map[string]int `json:"statuses,omitempty"`
	// ProtocolViolations counts the failed requests whose server broke the API's contract (a
	// token count beyond max_tokens or negative, an over-long line or response, a redirect);
	// FirstViolation is the first one's reason. They are among Errors, and they fail the cell
	// whatever max_error_rate allows: the server's numbers cannot be trusted.
	ProtocolViolations int    `json:"protocol_violations,omitempty"`
	FirstViolation     string `json:"first_protocol_violation,omitempty"`
}

// Line is the reason on one line: its code and message, and the first log line that shows it.
func (r Reason) Line() string {
	if len(r.Lines) > 0 {
		return fmt.Sprintf("%s: %s (log line %d: %q)", r.Code, r.Message, r.Lines[0].Line, r.Lines[0].Text)
	}
	return r.Code + ": " + r.Message
}
