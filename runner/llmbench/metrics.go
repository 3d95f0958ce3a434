package llmbench

import (
	"math"
	"slices"
	"time"

	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/reports/stats"
)

// Stats, SLO and Summary are the run directory's types (rundir owns result.json's schema).
type (
	Stats   = rundir.LLMStats
	SLO     = rundir.LLMSLO
	Summary = rundir.LLMSummary
)

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
	s.PeakOutputPerS, s.PeakConcurrent = peaks(rs)
	return s
}

// peaks are bench_serving's max_output_tokens_per_s and max_concurrent_requests
// (python/sglang/bench_serving.py calculate_metrics): the completed requests' token arrivals
// (start + TTFT, then each ITL) and their spans [start, start+E2E] counted in one-second buckets
// from the first start, and the fullest bucket of each.
func peaks(rs []Result) (float64, int) {
	first, last, found := time.Duration(0), time.Duration(0), false
	for i := range rs {
		if r := &rs[i]; r.OK() {
			if !found || r.Start < first {
				first = r.Start
			}
			if end := r.Start + r.E2E; !found || end > last {
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
		for b := bucket(r.Start); b < min(bucket(r.Start+r.E2E)+1, n); b++ {
			inFlight[b]++
		}
	}
	return slices.Max(tokens), slices.Max(inFlight)
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
