package rundir

// The SLA search's part of result.json: a cell with [load.search] probes its load axis for the
// largest value that meets the latency SLOs (runner/load.Search), and records every probe.

// Values of LLMSearch.Axis (and of the plan's load.search.axis).
const (
	SearchRequestRate = "request_rate"
	SearchConcurrency = "concurrency"
)

// LLMSearch is one SLA search: the axis it moved, the SLOs it held the p99s to, the largest
// value that met them (Best; 0 when none did) and every probe in the order run.
type LLMSearch struct {
	Axis       string     `json:"axis"`
	SLOTTFTP99 float64    `json:"slo_ttft_p99_ms,omitempty"`
	SLOTPOTP99 float64    `json:"slo_tpot_p99_ms,omitempty"`
	Min        float64    `json:"min"`
	Max        float64    `json:"max"`
	Best       float64    `json:"best"`
	Probes     []LLMProbe `json:"probes"`
	// BestProbe is the index in Probes of the probe whose measurement is the cell's (the best
	// one; the first probe when none passed).
	BestProbe int `json:"best_probe"`
}

// LLMProbe is one measurement of an SLA search at one value of its axis.
type LLMProbe struct {
	Value float64 `json:"value"`
	Pass  bool    `json:"pass"`
	// TTFTP99 and TPOTP99 are the probe's p99 TTFT and TPOT in ms.
	TTFTP99 float64 `json:"ttft_p99_ms"`
	TPOTP99 float64 `json:"tpot_p99_ms"`
	// Failed is the probe's failed requests (any fails the probe); RequestThroughput its
	// completed requests per second.
	Failed            int     `json:"failed,omitempty"`
	RequestThroughput float64 `json:"request_throughput,omitempty"`
	// Sustained is the load the server kept up with: the completed requests per second of a
	// rate probe, the mean requests in flight of a concurrency probe (Little's law). A probe
	// above it only queues, which places the next probe.
	Sustained float64 `json:"sustained,omitempty"`
	// Records is the probe's per-request records file, relative to the cell.
	Records string `json:"records,omitempty"`
	// CacheReset is what became of the server's prefix cache before the probe
	// (LLMResult.CacheReset's values).
	CacheReset string `json:"cache_reset,omitempty"`
}

// LLMRampUp is the ramp-up an LLM cell's arrivals followed ([load] ramp_up_strategy): the
// request rate grew from StartRPS to EndRPS over the requests.
type LLMRampUp struct {
	Strategy string  `json:"strategy"`
	StartRPS float64 `json:"start_rps"`
	EndRPS   float64 `json:"end_rps"`
}
