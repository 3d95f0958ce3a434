package rundir

import (
	"encoding/json"
	"time"
)

// Manifest is manifest.json: the environment captured once per run, so a result can be
// explained and reproduced later. Every probe is best-effort and records why it is missing.
type Manifest struct {
	Runner    RunnerInfo `json:"runner"`
	Plan      string     `json:"plan"`
	RunDir    string     `json:"run_dir"`
	Args      []string   `json:"args,omitempty"`
	Simulated bool       `json:"simulated"`
	// Executor is where the cells ran ("local" or "slurm"); --resume keeps it.
	Executor string            `json:"executor,omitempty"`
	Cells    int               `json:"cells"`
	Start    time.Time         `json:"start"`
	End      time.Time         `json:"end,omitzero"`
	Resumed  []time.Time       `json:"resumed,omitempty"`
	Host     HostInfo          `json:"host"`
	GPUs     []GPUInfo         `json:"gpus,omitempty"`
	Probes   map[string]Probe  `json:"probes"`
	Env      map[string]string `json:"env"`
	Verdicts map[string]int    `json:"verdicts,omitempty"`
	// Slurm lists the job arrays the run submitted (the Slurm executor), oldest first.
	Slurm []SlurmJob `json:"slurm,omitempty"`
	// GPUEnv is what a maintainer asks for: devices, topology, clock locks, check_env and
	// library versions (runner/gpuenv.go).
	GPUEnv *GPUEnv `json:"gpu_env,omitempty"`
	// Attached lists the servers the run attached to ([backend] url) instead of starting:
	// what the server said about itself stands where a started server's command line would.
	Attached []AttachedServer `json:"attached,omitempty"`
}

// AttachedServer is a running server a run's cells used ([backend] url): its URL, the server
// record's directory and the server's own description (its info route's answer, or a string
// saying why there is none).
type AttachedServer struct {
	URL    string          `json:"url"`
	Server string          `json:"server"` // servers/<n>, relative to the run directory
	Info   json.RawMessage `json:"info,omitempty"`
}

// SlurmJob is one job array a run submitted. It is recorded before sbatch runs (Name, Script,
// Cells, with an empty JobID) and again with the job id sbatch printed, so a runner killed in
// between leaves a record by which --resume finds the array.
type SlurmJob struct {
	JobID string `json:"job_id"` // "" until sbatch has answered
	// Name is the job's name (slurm.JobName): it carries the run's id, and only a job of this
	// user with this name is waited for, collected or cancelled as the run's, whatever JobID says.
	Name   string   `json:"name,omitempty"`
	Script string   `json:"script"` // relative to the run directory
	Cells  []string `json:"cells"`  // task i runs Cells[i]
	// Nodes are the nodes the tasks ran on, filled as the runner collects them: task i ran on
	// Nodes[i] ("" for a task that never started, or one not collected yet).
	Nodes     []string  `json:"nodes,omitempty"`
	Submitted time.Time `json:"submitted"`
	// OverheadNS is the wall time the runner itself spent on the array: writing the script,
	// sbatch, the squeue/sacct polls and collecting results (not Slurm's queueing, nor cells).
	OverheadNS int64 `json:"overhead_ns"`
}

// RunnerInfo identifies the runner build.
type RunnerInfo struct {
	Version string `json:"version"`
	Go      string `json:"go"`
}

// HostInfo describes the machine.
type HostInfo struct {
	Hostname    string `json:"hostname"`
	OS          string `json:"os"`
	Arch        string `json:"arch"`
	CPUs        int    `json:"cpus"`
	CPUModel    string `json:"cpu_model,omitempty"`
	MemoryBytes int64  `json:"memory_bytes,omitempty"`
}

// GPUInfo is one row of `nvidia-smi --query-gpu=...`.
type GPUInfo struct {
	Name       string `json:"name"`
	Driver     string `json:"driver_version"`
	MemoryMiB  string `json:"memory_total"`
	SMClock    string `json:"clocks_sm"`
	MaxSMClock string `json:"clocks_max_sm"`
	PowerLimit string `json:"power_limit"`
}

// Probe is the outcome of one external command run to learn about the environment.
type Probe struct {
	Command   []string `json:"command"`
	Available bool     `json:"available"`
	Output    string   `json:"output,omitempty"`
	Error     string   `json:"error,omitempty"`
	WallNS    int64    `json:"wall_ns"`
}
