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
	// CacheHitRate and PeakQueued are what the server's /metrics reported (ServerMetrics);
	// QueueDepth is its queued requests over the cell, at most QueueDepthPoints points.
	CacheHitRate *float64     `json:"cache_hit_rate,omitempty"`
	PeakQueued   *float64     `json:"peak_queued,omitempty"`
	QueueDepth   []QueuePoint `json:"queue_depth,omitempty"`
	// Search is the SLA search of a [load.search] cell (its probes and best value).
	Search *LLMSearch `json:"search,omitempty"`
}

// QueuePoint is the server's queued requests AtNS into the cell.
type QueuePoint struct {
	AtNS   int64   `json:"at_ns"`
	Queued float64 `json:"queued"`
}

// QueueDepthPoints bounds a summary row's queue series: a longer one keeps the largest value
// of each run of samples, so no peak is lost.
const QueueDepthPoints = 64

func queueDepth(samples []ServerMetricsSample) []QueuePoint {
	var pts []QueuePoint
	for _, s := range samples {
		if s.Queued != nil {
			pts = append(pts, QueuePoint{AtNS: s.AtNS, Queued: *s.Queued})
		}
	}
	if len(pts) <= QueueDepthPoints {
		return pts
	}
	per := (len(pts) + QueueDepthPoints - 1) / QueueDepthPoints
	out := make([]QueuePoint, 0, QueueDepthPoints)
	for i := 0; i < len(pts); i += per {
		top := pts[i]
		for _, p := range pts[i:min(i+per, len(pts))] {
			if p.Queued > top.Queued {
				top = p
			}
		}
		out = append(out, top)
	}
	return out
}

// NewLLMRow takes a summary row's figures from an LLM result.
func NewLLMRow(l *LLMResult) *LLMRow {
	r := &LLMRow{TTFTMedianMS: l.TTFT.Median, TTFTP99MS: l.TTFT.P99, TPOTMedianMS: l.TPOT.Median, ITLP99MS: l.ITL.P99,
		OutputThroughput: l.OutputThroughput, Concurrency: l.Concurrency, Search: l.Search}
	if l.SLO != nil {
		g := l.Goodput
		r.Goodput = &g
	}
	if m := l.ServerMetrics; m != nil {
		r.CacheHitRate, r.PeakQueued, r.QueueDepth = m.CacheHitRate, m.PeakQueued, queueDepth(m.Samples)
	}
	return r
}

// VerdictNotRun marks a cell without result.json in a summary.
const VerdictNotRun = "not-run"
