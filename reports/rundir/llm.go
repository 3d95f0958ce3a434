package rundir

import "time"

// The LLM serving benchmark's part of result.json (runner/load.SummarizeLLM computes it), with
// bench_serving's definitions.

// LLMStats summarises one latency in milliseconds, with bench_serving's definitions: the mean, the
// median and the percentiles by numpy's linear interpolation, the population standard deviation
// (numpy's default ddof=0) and the maximum.
type LLMStats struct {
	Mean   float64 `json:"mean_ms"`
	Median float64 `json:"median_ms"`
	Std    float64 `json:"std_ms"`
	P90    float64 `json:"p90_ms"`
	P95    float64 `json:"p95_ms"`
	P99    float64 `json:"p99_ms"`
	Max    float64 `json:"max_ms"`
	N      int     `json:"n"`
}

// LLMSLO is the service-level objective of goodput: a request is good when every set bound holds.
type LLMSLO struct {
	TTFT time.Duration `json:"ttft_ns,omitempty"`
	TPOT time.Duration `json:"tpot_ns,omitempty"`
	E2E  time.Duration `json:"e2e_ns,omitempty"`
}

// Set reports whether any bound is set.
func (s LLMSLO) Set() bool { return s.TTFT > 0 || s.TPOT > 0 || s.E2E > 0 }

// LLMSummary is one cell's LLM serving result.
type LLMSummary struct {
	Requests  int   `json:"requests"`
	Completed int   `json:"completed"`
	Failed    int   `json:"failed"`
	WallNS    int64 `json:"duration_ns"`
	// Token totals of the completed requests, as the server reported them.
	TotalInput  int `json:"total_input_tokens"`
	TotalOutput int `json:"total_output_tokens"`
	// ApproxInput is set when input lengths are estimates (text prompts without a tokenizer
	// and no count from the server).
	ApproxInput bool `json:"approx_input_lengths,omitempty"`
	// Throughputs per second of wall time.
	RequestThroughput float64 `json:"request_throughput"`
	InputThroughput   float64 `json:"input_throughput"`
	OutputThroughput  float64 `json:"output_throughput"`
	TotalThroughput   float64 `json:"total_throughput"`
	// Concurrency is the mean number of requests in flight: Σ E2E / duration.
	Concurrency float64 `json:"concurrency"`
	// PeakOutputPerS and PeakConcurrent are the largest one-second buckets of tokens received
	// and of requests in flight (bench_serving's max_output_tokens_per_s and
	// max_concurrent_requests): the burst a mean hides.
	PeakOutputPerS float64  `json:"max_output_tokens_per_s,omitempty"`
	PeakConcurrent int      `json:"max_concurrent_requests,omitempty"`
	TTFT           LLMStats `json:"ttft"`
	TPOT           LLMStats `json:"tpot"`
	ITL            LLMStats `json:"itl"`
	E2E            LLMStats `json:"e2e"`
	// Goodput is the completed requests per second that met the SLO; set only with an SLO.
	SLO          *LLMSLO `json:"slo,omitempty"`
	GoodRequests int     `json:"good_requests,omitempty"`
	Goodput      float64 `json:"request_goodput,omitempty"`
	// Errors are the first distinct request errors, for the result's reasons.
	Errors []string `json:"errors,omitempty"`
}

// LLMResult is the "llm" part of a serve cell's result.json: the summary, how it was measured
// and where the per-request records are.
type LLMResult struct {
	LLMSummary // its approx_input_lengths says whether input lengths are estimates
	// API, Dataset, RequestRate (requests/s; 0 = all at once), Burstiness and MaxConcurrency are the
	// load the summary was measured under.
	API            string  `json:"api"`
	Dataset        string  `json:"dataset"`
	RequestRate    float64 `json:"request_rate"`
	Burstiness     float64 `json:"burstiness"`
	MaxConcurrency int     `json:"max_concurrency"`
	// Records is the per-request records file, relative to the cell.
	Records string `json:"records"`
	// ServerMetrics is what the server's /metrics page reported during the cell (nil: not
	// scraped).
	ServerMetrics *ServerMetrics `json:"server_metrics,omitempty"`
	// Search is set for a cell with [load.search]: every probe; the summary above is the
	// best probe's (search.go).
	Search *LLMSearch `json:"search,omitempty"`
	// RampUp is set when the arrival rate ramped up over the cell (then RequestRate is 0).
	RampUp *LLMRampUp `json:"ramp_up,omitempty"`
	// CacheReset is what became of the server's prefix cache before the measured requests
	// ([load] flush_cache): CacheFlushed, or "not reset: " and why (flush_cache off, the
	// server refused or has no such route). Empty in runs from before the key existed.
	CacheReset string `json:"cache_reset,omitempty"`
}

// CacheFlushed is LLMResult.CacheReset when the server answered the reset with 200 (vLLM's
// route does not say whether the engine reset anything; it cannot while requests run).
const CacheFlushed = "flushed"

// CacheNotReset starts LLMResult.CacheReset when the cache was not reset; the reason follows.
const CacheNotReset = "not reset: "

// LLMRecordsFile is a serve LLM cell's per-request records (one JSON object a line: start,
// TTFT, ITLs, E2E, token counts, error), next to result.json.
const LLMRecordsFile = "llm_requests.jsonl"
