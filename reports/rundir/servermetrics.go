package rundir

// ServerMetrics is what an LLM server reported on its Prometheus /metrics page during a cell
// (result.json's llm.server_metrics): scraped before the load, every interval during it and
// after it. Values the server did not report are absent; errors are recorded, never fatal.
type ServerMetrics struct {
	// Engine is the metric naming found: "sglang" or "vllm" ("" when no scrape succeeded).
	Engine string `json:"engine,omitempty"`
	// Scrapes counts the attempts, successful or not; IntervalNS is the starting interval of
	// the scrapes during the load (it doubles when the sample series is thinned).
	Scrapes    int   `json:"scrapes"`
	IntervalNS int64 `json:"interval_ns"`
	// CacheHitRate is the prefix-cache hit rate over the cell (0..1); HitRateFrom says how it
	// was computed: "counters" (cached over prompt tokens between the before and after
	// scrapes, exact) or "gauge mean" (the mean of SGLang's sglang:cache_hit_rate gauge).
	CacheHitRate *float64 `json:"cache_hit_rate,omitempty"`
	HitRateFrom  string   `json:"cache_hit_rate_from,omitempty"`
	// The largest values any scrape saw: requests running and queued, the KV-cache (token)
	// usage 0..1 and the generation throughput in tokens/s (SGLang's gauge).
	PeakRunning       *float64 `json:"peak_running,omitempty"`
	PeakQueued        *float64 `json:"peak_queued,omitempty"`
	PeakTokenUsage    *float64 `json:"peak_token_usage,omitempty"`
	PeakGenThroughput *float64 `json:"peak_gen_throughput,omitempty"`
	// GenTokens is the generation-token counter's increase over the cell.
	GenTokens *float64 `json:"generation_tokens,omitempty"`
	// Samples are the scrapes during the load, oldest first, for the queue-depth chart.
	Samples []ServerMetricsSample `json:"samples,omitempty"`
	// Errors are the first distinct scrape errors.
	Errors []string `json:"errors,omitempty"`
}

// ServerMetricsSample is one scrape during the load; AtNS is from the scraper's start.
type ServerMetricsSample struct {
	AtNS       int64    `json:"at_ns"`
	Running    *float64 `json:"running,omitempty"`
	Queued     *float64 `json:"queued,omitempty"`
	TokenUsage *float64 `json:"token_usage,omitempty"`
}
