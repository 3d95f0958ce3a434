package load

// The summaries of a run's records. Every serve cell records Summarize's load summary
// (load.json, result.json's serve.load); a cell of streamed LLM requests adds SummarizeLLM's
// bench_serving summary (serve.llm). Both are the run directory's types, which rundir owns.
//
// Definitions follow bench_serving (sgl-project/sglang python/sglang/benchmark/metrics.py and
// backends/*_client.py; see docs/upstream.md): TPOT is (E2E − TTFT)/(output tokens − 1) for
// requests of more than one token; a streamed chunk that carries k new tokens contributes k
// inter-token latencies of (gap/k) each; percentiles are numpy's linear interpolation and the
// standard deviation numpy's population one (reports/stats); concurrency is the sum of E2E
// latencies over the benchmark duration.

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/reports/stats"
)

// Summarize computes the load summary of measured records over wall: counts, error rate,
// latency statistics and throughput of the successful requests.
func Summarize(recs []Record, wall time.Duration) rundir.LoadSummary {
	s := rundir.LoadSummary{Count: len(recs), WallNS: wall.Nanoseconds(), Statuses: map[string]int{}}
	var lat []time.Duration
	var images, tokens int
	var inf []float64
	for i := range recs {
		r := &recs[i]
		key := fmt.Sprint(r.Status)
		if r.Status == 0 {
			key = "error"
		}
		s.Statuses[key]++
		if !r.OK() {
			s.Errors++
			if r.Violation {
				if s.ProtocolViolations++; s.FirstViolation == "" {
					s.FirstViolation = r.Error
				}
			}
			continue
		}
		lat = append(lat, r.Latency)
		images += r.Images
		tokens += r.OutputTokens
		inf = append(inf, r.InferenceTimeS)
		s.MaxPeakMemoryMB = max(s.MaxPeakMemoryMB, r.PeakMemoryMB)
	}
	if s.Count > 0 {
		s.ErrorRate = float64(s.Errors) / float64(s.Count)
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		s.MeanNS = roundNS(stats.Mean(lat))
		s.P50NS, s.P90NS, s.P99NS = roundNS(stats.Percentile(lat, 50)), roundNS(stats.Percentile(lat, 90)), roundNS(stats.Percentile(lat, 99))
		s.MaxNS = int64(lat[len(lat)-1])
		s.MeanInferenceTimeS = stats.Mean(inf)
	}
	if secs := wall.Seconds(); secs > 0 {
		s.RequestsPerS = float64(len(lat)) / secs
		s.ImagesPerS = float64(images) / secs
		s.TokensPerS = float64(tokens) / secs
	}
	return s
}

// roundNS rounds a statistic of nanosecond samples to the nanosecond.
func roundNS(ns float64) int64 { return int64(math.Round(ns)) }

// SummarizeLLM computes bench_serving's summary of a cell's streamed requests from their
// records and wall time; approxInput says that the input lengths are estimates.
func SummarizeLLM(rs []Record, wall time.Duration, slo rundir.LLMSLO, approxInput bool) rundir.LLMSummary {
	s := rundir.LLMSummary{Requests: len(rs), WallNS: wall.Nanoseconds(), ApproxInput: approxInput}
	var ttft, tpot, itl, e2e []float64
	sumE2E := 0.0 // s
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
		e2e = append(e2e, ms(r.Latency))
		sumE2E += r.Latency.Seconds()
		tp, ok := r.TPOT()
		if ok {
			tpot = append(tpot, ms(tp))
		}
		for _, d := range r.ITL {
			itl = append(itl, ms(d))
		}
		if slo.Set() && (slo.TTFT <= 0 || r.TTFT <= slo.TTFT) && (slo.E2E <= 0 || r.Latency <= slo.E2E) &&
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
	s.TTFT, s.TPOT, s.ITL, s.E2E = llmStats(ttft), llmStats(tpot), llmStats(itl), llmStats(e2e)
	s.PeakOutputPerS, s.PeakConcurrent = peaks(rs)
	return s
}

// peaks are bench_serving's max_output_tokens_per_s and max_concurrent_requests
// (python/sglang/bench_serving.py calculate_metrics): the completed requests' token arrivals
// (start + TTFT, then each ITL) and their spans [start, start+E2E] counted in one-second buckets
// from the first start, and the fullest bucket of each.
func peaks(rs []Record) (float64, int) {
	first, last, found := time.Duration(0), time.Duration(0), false
	for i := range rs {
		if r := &rs[i]; r.OK() {
			if !found || r.Start < first {
				first = r.Start
			}
			if end := r.Start + r.Latency; !found || end > last {
				last = end
			}
			found = true
		}
	}
	if !found {
		return 0, 0
	}
	n := int(math.Ceil((last - first).Seconds())) + 1
	tokens, inFlight := make([]float64, n), make([]int, n)
	bucket := func(t time.Duration) int { return int((t - first).Seconds()) }
	for i := range rs {
		r := &rs[i]
		if !r.OK() {
			continue
		}
		t := r.Start + r.TTFT
		if b := bucket(t); b >= 0 && b < n {
			tokens[b]++
		}
		for _, d := range r.ITL {
			t += d
			if b := bucket(t); b >= 0 && b < n {
				tokens[b]++
			}
		}
		for b := bucket(r.Start); b < min(bucket(r.Start+r.Latency)+1, n); b++ {
			inFlight[b]++
		}
	}
	return slices.Max(tokens), slices.Max(inFlight)
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// llmStats summarises millisecond samples xs (sorted in place) with bench_serving's
// definitions.
func llmStats(xs []float64) rundir.LLMStats {
	st := rundir.LLMStats{N: len(xs)}
	if len(xs) == 0 {
		return st
	}
	slices.Sort(xs)
	st.Mean = stats.Mean(xs)
	st.Std = stats.StdDev(xs, 0)
	st.Median = stats.Median(xs)
	st.P90, st.P95, st.P99 = stats.Percentile(xs, 90), stats.Percentile(xs, 95), stats.Percentile(xs, 99)
	st.Max = xs[len(xs)-1]
	return st
}
