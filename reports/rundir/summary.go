package rundir

// Summary is summary.json: one row per cell and the run's exit code.
type Summary struct {
	Plan        string         `json:"plan"`
	RunDir      string         `json:"run_dir"`
	Cells       []SummaryRow   `json:"cells"`
	Counts      map[string]int `json:"counts"`
	Interrupted bool           `json:"interrupted"`
	// Simulated is set for a run of the simulators (--simulate): its timings are invented.
	Simulated bool `json:"simulated,omitempty"`
	ExitCode  int  `json:"exit_code"`
	// Parity is the parity check of a plan with an engine axis (parity.json); nil without one.
	Parity *Parity `json:"parity,omitempty"`
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
	// LLM is set for LLM serve cells: the headline figures of result.json's serve.llm.
	LLM *LLMRow `json:"llm,omitempty"`
}

// LLMRow is what the summary shows of an LLM serve cell (milliseconds, per second).
type LLMRow struct {
	TTFTMedianMS     float64  `json:"ttft_median_ms"`
	TTFTP99MS        float64  `json:"ttft_p99_ms"`
	TPOTMedianMS     float64  `json:"tpot_median_ms"`
	ITLP99MS         float64  `json:"itl_p99_ms"`
	OutputThroughput float64  `json:"output_throughput"`
	Concurrency      float64  `json:"concurrency"`
	Goodput          *float64 `json:"request_goodput,omitempty"` // with an SLO
}

// NewLLMRow takes a summary row's figures from an LLM result.
func NewLLMRow(l *LLMResult) *LLMRow {
	r := &LLMRow{TTFTMedianMS: l.TTFT.Median, TTFTP99MS: l.TTFT.P99, TPOTMedianMS: l.TPOT.Median, ITLP99MS: l.ITL.P99,
		OutputThroughput: l.OutputThroughput, Concurrency: l.Concurrency}
	if l.SLO != nil {
		g := l.Goodput
		r.Goodput = &g
	}
	return r
}

// VerdictNotRun marks a cell without result.json in a summary.
const VerdictNotRun = "not-run"
