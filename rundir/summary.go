package rundir

// Summary is summary.json: one row per cell and the run's exit code.
type Summary struct {
	Plan        string         `json:"plan"`
	RunDir      string         `json:"run_dir"`
	Cells       []SummaryRow   `json:"cells"`
	Counts      map[string]int `json:"counts"`
	Interrupted bool           `json:"interrupted"`
	ExitCode    int            `json:"exit_code"`
	// Detached is set when runner run --detach returned after submitting a Slurm job array;
	// no summary was written yet.
	Detached bool `json:"-"`
}

// SummaryRow is one cell of the summary.
type SummaryRow struct {
	ID       string   `json:"id"`
	Key      string   `json:"key"`
	Profiler string   `json:"profiler"`
	Verdict  string   `json:"verdict"` // "not-run" when the cell has no result
	Reasons  []string `json:"reasons,omitempty"`
	// Cause is the one reason the terminal summary shows: the root cause, not its consequences
	// (a missing perf dump after an OOM). Every reason stays in Reasons and result.json.
	Cause string `json:"cause,omitempty"`
	// Warnings are the cell's warnings (an ok cell can have them: an nsys capture that ended
	// the program, a trace attributed by time); summary.md lists them.
	Warnings          []string      `json:"warnings,omitempty"`
	WallNS            int64         `json:"wall_ns"`
	E2ENS             int64         `json:"e2e_ns,omitempty"`
	MeanDenoiseStepNS int64         `json:"mean_denoise_step_ns,omitempty"`
	TopKernels        []KernelShare `json:"top_kernels,omitempty"`
}

// VerdictNotRun marks a cell without result.json in a summary.
const VerdictNotRun = "not-run"
