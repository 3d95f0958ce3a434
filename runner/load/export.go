package load

import (
	"encoding/json"
	"github.com/sglprof/runner/reports/rundir"
	"io"
	"math"
)

// BenchServing is one line of bench_serving's --output-file JSONL, so dashboards that read
// bench_serving's results read the runner's. Two upstream versions write the same quantities
// under different keys: the refactored python/sglang/benchmark/metrics.py save_results writes
// BenchmarkMetrics' field names (total_input, total_output, total_output_retokenized), the
// long-standing python/sglang/bench_serving.py writes total_input_tokens, total_output_tokens,
// total_output_tokens_retokenized, and its newer copies add p90_e2e_latency_ms,
// max_output_tokens_per_s and max_concurrent_requests. The record carries every spelling, so a
// dashboard built on either finds its keys. The retokenized counts equal the server-reported
// ones: the runner loads no tokenizer. Goodput is vLLM's request_goodput, present only with an
// SLO.
type BenchServing struct {
	Backend                    string   `json:"backend"`
	DatasetName                string   `json:"dataset_name"`
	RequestRate                any      `json:"request_rate"`
	MaxConcurrency             *int     `json:"max_concurrency"`
	SharegptOutputLen          *int     `json:"sharegpt_output_len"`
	RandomInputLen             int      `json:"random_input_len"`
	RandomOutputLen            int      `json:"random_output_len"`
	RandomRangeRatio           float64  `json:"random_range_ratio"`
	Duration                   float64  `json:"duration"`
	Completed                  int      `json:"completed"`
	TotalInput                 int      `json:"total_input"`
	TotalOutput                int      `json:"total_output"`
	TotalOutputRetokenized     int      `json:"total_output_retokenized"`
	TotalInputTokens           int      `json:"total_input_tokens"`
	TotalOutputTokens          int      `json:"total_output_tokens"`
	TotalOutputTokensRetok     int      `json:"total_output_tokens_retokenized"`
	RequestThroughput          float64  `json:"request_throughput"`
	InputThroughput            float64  `json:"input_throughput"`
	OutputThroughput           float64  `json:"output_throughput"`
	OutputThroughputRetokenzed float64  `json:"output_throughput_retokenized"`
	TotalThroughput            float64  `json:"total_throughput"`
	TotalThroughputRetokenized float64  `json:"total_throughput_retokenized"`
	MeanTTFTms                 float64  `json:"mean_ttft_ms"`
	MedianTTFTms               float64  `json:"median_ttft_ms"`
	StdTTFTms                  float64  `json:"std_ttft_ms"`
	P99TTFTms                  float64  `json:"p99_ttft_ms"`
	MeanTPOTms                 float64  `json:"mean_tpot_ms"`
	MedianTPOTms               float64  `json:"median_tpot_ms"`
	StdTPOTms                  float64  `json:"std_tpot_ms"`
	P99TPOTms                  float64  `json:"p99_tpot_ms"`
	MeanITLms                  float64  `json:"mean_itl_ms"`
	MedianITLms                float64  `json:"median_itl_ms"`
	StdITLms                   float64  `json:"std_itl_ms"`
	P95ITLms                   float64  `json:"p95_itl_ms"`
	P99ITLms                   float64  `json:"p99_itl_ms"`
	MaxITLms                   float64  `json:"max_itl_ms"`
	MeanE2Ems                  float64  `json:"mean_e2e_latency_ms"`
	MedianE2Ems                float64  `json:"median_e2e_latency_ms"`
	StdE2Ems                   float64  `json:"std_e2e_latency_ms"`
	P90E2Ems                   float64  `json:"p90_e2e_latency_ms"`
	P99E2Ems                   float64  `json:"p99_e2e_latency_ms"`
	Concurrency                float64  `json:"concurrency"`
	MaxOutputTokensPerS        float64  `json:"max_output_tokens_per_s"`
	MaxConcurrentRequests      int      `json:"max_concurrent_requests"`
	RequestGoodput             *float64 `json:"request_goodput,omitempty"`
	// The ramp-up fields vLLM's benchmark adds when its arrival rate ramped (request_rate
	// then stays inf): vllm/benchmarks/serve.py.
	RampUpStrategy string   `json:"ramp_up_strategy,omitempty"`
	RampUpStartRPS *float64 `json:"ramp_up_start_rps,omitempty"`
	RampUpEndRPS   *float64 `json:"ramp_up_end_rps,omitempty"`
}

// Load describes the load a summary was measured under, for the export's argument fields.
type Load struct {
	// Engine is the server's backend.kind ("sglang", "vllm"; "" for sglang), which picks
	// bench_serving's --backend name.
	Engine         string
	API            string
	Dataset        string
	Rate           float64
	MaxConcurrency int
	InputLen       int
	OutputLen      int
	RangeRatio     float64
	// RampUp is the cell's rate ramp (nil: none).
	RampUp *rundir.LLMRampUp
}

// backendName maps an API to bench_serving's --backend value for the same endpoint.
func backendName(engine, api string) string {
	if engine == "vllm" {
		// bench_serving's --backend vllm streams /v1/completions; vllm-chat the chat API.
		if api == APIChat {
			return "vllm-chat"
		}
		return "vllm"
	}
	switch api {
	case APICompletions:
		return "sglang-oai"
	case APIChat:
		return "sglang-oai-chat"
	}
	return "sglang"
}

// ToBenchServing converts a summary to bench_serving's record.
func ToBenchServing(s rundir.LLMSummary, l Load) BenchServing {
	b := BenchServing{
		Backend:                    backendName(l.Engine, l.API),
		DatasetName:                l.Dataset,
		RequestRate:                rateField(l.Rate),
		RandomInputLen:             l.InputLen,
		RandomOutputLen:            l.OutputLen,
		RandomRangeRatio:           l.RangeRatio,
		Duration:                   float64(s.WallNS) / 1e9,
		Completed:                  s.Completed,
		TotalInput:                 s.TotalInput,
		TotalOutput:                s.TotalOutput,
		TotalOutputRetokenized:     s.TotalOutput,
		TotalInputTokens:           s.TotalInput,
		TotalOutputTokens:          s.TotalOutput,
		TotalOutputTokensRetok:     s.TotalOutput,
		RequestThroughput:          s.RequestThroughput,
		InputThroughput:            s.InputThroughput,
		OutputThroughput:           s.OutputThroughput,
		OutputThroughputRetokenzed: s.OutputThroughput,
		TotalThroughput:            s.TotalThroughput,
		TotalThroughputRetokenized: s.TotalThroughput,
		MeanTTFTms:                 s.TTFT.Mean, MedianTTFTms: s.TTFT.Median, StdTTFTms: s.TTFT.Std, P99TTFTms: s.TTFT.P99,
		MeanTPOTms: s.TPOT.Mean, MedianTPOTms: s.TPOT.Median, StdTPOTms: s.TPOT.Std, P99TPOTms: s.TPOT.P99,
		MeanITLms: s.ITL.Mean, MedianITLms: s.ITL.Median, StdITLms: s.ITL.Std, P95ITLms: s.ITL.P95,
		P99ITLms: s.ITL.P99, MaxITLms: s.ITL.Max,
		MeanE2Ems: s.E2E.Mean, MedianE2Ems: s.E2E.Median, StdE2Ems: s.E2E.Std, P90E2Ems: s.E2E.P90, P99E2Ems: s.E2E.P99,
		Concurrency: s.Concurrency, MaxOutputTokensPerS: s.PeakOutputPerS, MaxConcurrentRequests: s.PeakConcurrent,
	}
	if l.MaxConcurrency > 0 {
		c := l.MaxConcurrency
		b.MaxConcurrency = &c
	}
	if s.SLO != nil {
		g := s.Goodput
		b.RequestGoodput = &g
	}
	if r := l.RampUp; r != nil {
		start, end := r.StartRPS, r.EndRPS
		b.RampUpStrategy, b.RampUpStartRPS, b.RampUpEndRPS = r.Strategy, &start, &end
	}
	return b
}

// rateField writes the rate as bench_serving does: a number, or the float inf that Python's
// json.dumps prints as the bare token Infinity. JSON has no such token and encoding/json refuses
// to write one (a MarshalJSON returning it fails the encoder's validity check), so the string
// "inf" stands in for it: valid JSON for every reader, and what Python's float("inf") parses
// back (docs/decisions.md).
func rateField(rate float64) any {
	if rate <= 0 || math.IsInf(rate, 1) {
		return "inf"
	}
	return rate
}

// WriteBenchServing writes records as JSONL, one per line, as bench_serving's --output-file.
func WriteBenchServing(w io.Writer, recs ...BenchServing) error {
	enc := json.NewEncoder(w)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}
