package llmbench

import (
	"math"
	"slices"
	"time"

	"github.com/sglprof/runner/reports/stats"
)

// Stats summarises one latency in milliseconds, with bench_serving's definitions: the mean, the
// median and the percentiles by numpy's linear interpolation, the population standard deviation
// (numpy's default ddof=0) and the maximum.
type Stats struct {
	Mean   float64 `json:"mean_ms"`
	Median float64 `json:"median_ms"`
	Std    float64 `json:"std_ms"`
	P90    float64 `json:"p90_ms"`
	P95    float64 `json:"p95_ms"`
	P99    float64 `json:"p99_ms"`
	Max    float64 `json:"max_ms"`
	N      int     `json:"n"`
}

// SLO is the service-level objective of goodput: a request is good when every set bound holds.
type SLO struct {
	TTFT time.Duration `json:"ttft_ns,omitempty"`
	TPOT time.Duration `json:"tpot_ns,omitempty"`
	E2E  time.Duration `json:"e2e_ns,omitempty"`
}

// Set reports whether any bound is set.
func (s SLO) Set() bool { return s.TTFT > 0 || s.TPOT > 0 || s.E2E > 0 }

// Summary is one cell's LLM serving result.
type Summary struct {
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
	TTFT        Stats   `json:"ttft"`
	TPOT        Stats   `json:"tpot"`
	ITL         Stats   `json:"itl"`
	E2E         Stats   `json:"e2e"`
	// Goodput is the completed requests per second that met the SLO; set only with an SLO.
	SLO          *SLO    `json:"slo,omitempty"`
	GoodRequests int     `json:"good_requests,omitempty"`
	Goodput      float64 `json:"request_goodput,omitempty"`
	// Errors are the first distinct request errors, for the result's reasons.
	Errors []string `json:"errors,omitempty"`
}

// Summarize computes a cell's summary from its request records and wall time.
func Summarize(rs []Result, wall time.Duration, slo SLO, approxInput bool) Summary {
	s := Summary{Requests: len(rs), WallNS: wall.Nanoseconds(), ApproxInput: approxInput}
	var ttft, tpot, itl, e2e []float64
	sumE2E := 0.0
	seen := map[string]bool{}
	for i := range rs {
		r := &rs[i]
		if !r.OK() {
			s.Failed++
			if !seen[r.Error] && len(s.Errors) < 5 {
				seen[r.Error] = true
				s.Errors = append(s.Errors, r.Error)
			}
			continue
		}
		s.Completed++
		s.TotalInput += r.InputTokens
		s.TotalOutput += r.OutputTokens
		ttft = append(ttft, ms(r.TTFT))
		e2e = append(e2e, ms(r.E2E))
		sumE2E += r.E2E.Seconds()
		tp, ok := r.TPOT()
		if ok {
			tpot = append(tpot, ms(tp))
		}
		for _, d := range r.ITL {
			itl = append(itl, ms(d))
		}
		if slo.Set() && (slo.TTFT <= 0 || r.TTFT <= slo.TTFT) && (slo.E2E <= 0 || r.E2E <= slo.E2E) &&
			(slo.TPOT <= 0 || !ok || tp <= slo.TPOT) {
			s.GoodRequests++
		}
	}
	if sec := wall.Seconds(); sec > 0 {
		s.RequestThroughput = float64(s.Completed) / sec
		s.InputThroughput = float64(s.TotalInput) / sec
		s.OutputThroughput = float64(s.TotalOutput) / sec
		s.TotalThroughput = float64(s.TotalInput+s.TotalOutput) / sec
		s.Concurrency = sumE2E / sec
		if slo.Set() {
			s.Goodput = float64(s.GoodRequests) / sec
		}
	}
	if slo.Set() {
		s.SLO = &slo
	}
	s.TTFT, s.TPOT, s.ITL, s.E2E = summarize(ttft), summarize(tpot), summarize(itl), summarize(e2e)
	return s
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// summarize summarises xs (sorted in place).
func summarize(xs []float64) Stats {
	st := Stats{N: len(xs)}
	if len(xs) == 0 {
		return st
	}
	slices.Sort(xs)
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	st.Mean = sum / float64(len(xs))
	v := 0.0
	for _, x := range xs {
		v += (x - st.Mean) * (x - st.Mean)
	}
	st.Std = math.Sqrt(v / float64(len(xs)))
	st.Median = stats.Percentile(xs, 50)
	st.P90, st.P95, st.P99 = stats.Percentile(xs, 90), stats.Percentile(xs, 95), stats.Percentile(xs, 99)
	st.Max = xs[len(xs)-1]
	return st
}
