package load

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// sglangPage is a /metrics page as prometheus_client writes SGLang's collector, with two DP ranks.
const sglangPage = `# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",dp_rank="0"} 3.0
sglang:num_running_reqs{model_name="m",dp_rank="1"} 2.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m",dp_rank="0"} 4.0
sglang:num_queue_reqs{model_name="m",dp_rank="1"} 1.0
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m",dp_rank="0"} 0.25
sglang:token_usage{model_name="m",dp_rank="1"} 0.5
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{model_name="m",dp_rank="0"} 100.0
sglang:gen_throughput{model_name="m",dp_rank="1"} 50.0
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="m",dp_rank="0"} 0.5
sglang:cache_hit_rate{model_name="m",dp_rank="1"} 0.25
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="m"} 1000.0
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{model_name="m"} 250.0
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="m"} 64.0
# TYPE sglang:e2e_request_latency_seconds histogram
sglang:e2e_request_latency_seconds_bucket{le="0.1",model_name="m"} 1.0
sglang:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 2.0
sglang:e2e_request_latency_seconds_sum{model_name="m"} 0.3
sglang:e2e_request_latency_seconds_count{model_name="m"} 2.0
`

const vllmPage = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 7.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 9.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.1
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.75
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 400.0
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 100.0
# TYPE vllm:prefix_cache_hits_created gauge
vllm:prefix_cache_hits_created{engine="0",model_name="m"} 1.7e9
`

func TestParseServerMetrics(t *testing.T) {
	s, err := ParseServerMetrics(strings.NewReader(sglangPage))
	if err != nil {
		t.Fatal(err)
	}
	// DP ranks sum for counts and throughput, take the fullest for usage, average the hit rate.
	if s.Engine != "sglang" || s.Running != 5 || s.Queued != 5 || s.TokenUsage != 0.5 || s.GenThroughput != 150 ||
		s.CacheHitRate != 0.375 || s.PromptTokens != 1000 || s.CachedTokens != 250 || s.GenTokens != 64 {
		t.Errorf("sglang page: %+v", s)
	}
	v, err := ParseServerMetrics(strings.NewReader(vllmPage))
	if err != nil {
		t.Fatal(err)
	}
	// kv_cache_usage_perc is preferred to the older gpu_cache_usage_perc.
	if v.Engine != "vllm" || v.Running != 7 || v.Queued != 9 || v.TokenUsage != 0.75 || v.PrefixQueries != 400 || v.PrefixHits != 100 || !math.IsNaN(v.GenThroughput) {
		t.Errorf("vllm page: %+v", v)
	}
	n, err := ParseServerMetrics(strings.NewReader("# TYPE up gauge\nup 1\n"))
	if err != nil || n.Engine != "" || !math.IsNaN(n.Running) {
		t.Errorf("a page without serving metrics: %+v, %v", n, err)
	}
	if _, err := ParseServerMetrics(strings.NewReader("<html>not metrics</html>\n")); err == nil {
		t.Error("an HTML page parsed")
	}
	// A page over the bound is refused, not read on.
	big := strings.Repeat("# filler comment line to make the page large\n", MaxMetricsPage/40)
	if _, err := ParseServerMetrics(strings.NewReader(big)); err == nil || !strings.Contains(err.Error(), "MiB") {
		t.Errorf("an oversized page: %v", err)
	}
	// Non-finite values (a hostile page) are not values.
	h, err := ParseServerMetrics(strings.NewReader("sglang:num_running_reqs +Inf\nsglang:num_queue_reqs NaN\n"))
	if err != nil || !math.IsNaN(h.Running) || !math.IsNaN(h.Queued) {
		t.Errorf("non-finite values: %+v, %v", h, err)
	}
}

func FuzzParseServerMetrics(f *testing.F) {
	f.Add(sglangPage)
	f.Add(vllmPage)
	f.Add("sglang:num_running_reqs{a=\"\\\"\"} 1e308\n")
	f.Fuzz(func(t *testing.T, page string) {
		s, err := ParseServerMetrics(strings.NewReader(page))
		if err != nil {
			return
		}
		for _, v := range []float64{s.Running, s.Queued, s.TokenUsage, s.PromptTokens, s.PrefixHits} {
			if math.IsInf(v, 0) {
				t.Fatalf("infinite value from %q", page)
			}
		}
		// Whatever the page, the summary must be writable as JSON (no NaN or Inf in it).
		r := summarizeScrapes(&s, &s, []timedSample{{0, s}}, 3, nil, time.Second)
		for _, p := range []*float64{r.CacheHitRate, r.PeakQueued, r.PeakRunning, r.PeakTokenUsage, r.GenTokens} {
			if p != nil && (math.IsNaN(*p) || math.IsInf(*p, 0)) {
				t.Fatalf("non-finite summary value from %q", page)
			}
		}
	})
}

func sample(engine string, running, queued, prompt, cached float64) ServerSample {
	s := nanSample()
	s.Engine, s.Running, s.Queued = engine, running, queued
	if engine == "vllm" {
		s.PrefixQueries, s.PrefixHits = prompt, cached
	} else {
		s.PromptTokens, s.CachedTokens = prompt, cached
	}
	return s
}

func TestSummarizeScrapes(t *testing.T) {
	before, after := sample("sglang", 0, 0, 1000, 100), sample("sglang", 0, 0, 3000, 1100)
	during := []timedSample{{time.Second, sample("sglang", 4, 6, 2000, 500)}, {2 * time.Second, sample("sglang", 8, 2, 2500, 800)}}
	r := summarizeScrapes(&before, &after, during, 4, nil, time.Second)
	// The hit rate over the cell is the counters' increase: (1100-100)/(3000-1000).
	if r.Engine != "sglang" || r.CacheHitRate == nil || *r.CacheHitRate != 0.5 || r.HitRateFrom != "counters" {
		t.Errorf("hit rate: %+v", r)
	}
	if r.PeakQueued == nil || *r.PeakQueued != 6 || r.PeakRunning == nil || *r.PeakRunning != 8 || len(r.Samples) != 2 || *r.Samples[1].Queued != 2 {
		t.Errorf("peaks and samples: %+v", r)
	}
	// vLLM's counters are the prefix-cache queries and hits.
	vb, va := sample("vllm", 0, 0, 100, 0), sample("vllm", 0, 0, 500, 100)
	if r := summarizeScrapes(&vb, &va, nil, 2, nil, time.Second); r.CacheHitRate == nil || *r.CacheHitRate != 0.25 {
		t.Errorf("vllm hit rate: %+v", r)
	}
	// Counters that went backwards (a restarted server) or claim more hits than queries give no
	// counter rate; SGLang's gauge mean is the fallback, labelled so.
	bad := sample("sglang", 0, 0, 10, 50)
	bad.CacheHitRate = 0.2
	if r := summarizeScrapes(&after, &bad, nil, 2, nil, time.Second); r.CacheHitRate == nil || r.HitRateFrom != "gauge mean" || *r.CacheHitRate != 0.2 {
		t.Errorf("bad counters: %+v", r)
	}
	if r := summarizeScrapes(nil, nil, nil, 0, nil, time.Second); r != nil {
		t.Errorf("no scrapes: %+v", r)
	}
}

// The sample series stays bounded however long the cell runs.
func TestScraperThins(t *testing.T) {
	sc := NewScraper("http://127.0.0.1:1", nil, time.Second, 1)
	thinned := 0
	for i := range 10 * MaxMetricsSamples {
		if sc.add(timedSample{time.Duration(i), nanSample()}) {
			thinned++
		}
	}
	if len(sc.samples) >= MaxMetricsSamples || thinned == 0 {
		t.Errorf("%d samples kept after %d thinnings", len(sc.samples), thinned)
	}
}

// A server without /metrics (SGLang without --enable-metrics), or one that stalls it, costs the
// cell nothing but a recorded error.
func TestScraperRecordsErrors(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	sc := NewScraper(srv.URL, nil, time.Second, 1)
	ctx := context.Background()
	sc.Before(ctx)
	sc.After(ctx)
	r := sc.Result()
	if r == nil || r.Scrapes != 2 || len(r.Errors) != 1 || !strings.Contains(r.Errors[0], "--enable-metrics") || r.CacheHitRate != nil {
		t.Errorf("404: %+v", r)
	}

	stall := make(chan struct{})
	defer close(stall)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stall:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	sc = NewScraper(slow.URL, nil, time.Second, 1)
	cctx, cancel := context.WithCancel(ctx)
	cancel() // an ended cell does not wait for the stalled page
	sc.After(cctx)
	if r := sc.Result(); r == nil || len(r.Errors) != 1 {
		t.Errorf("stalled: %+v", r)
	}
}

// During scrapes a live page on the clock's scale and stops when its context ends.
func TestScraperDuring(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Scrapes are sequential: the fourth comes after the third sample was kept.
		if served.Add(1) == 4 {
			cancel()
		}
		w.Write([]byte(sglangPage))
	}))
	defer srv.Close()
	sc := NewScraper(srv.URL, nil, time.Second, 0.001) // a simulated second is a real millisecond
	done := make(chan struct{})
	go func() { defer close(done); sc.During(ctx) }()
	<-done
	r := sc.Result()
	if r.PeakQueued == nil || *r.PeakQueued != 5 || r.Engine != "sglang" {
		t.Errorf("%+v", r)
	}
	// Samples are stamped on the run's clock: the third is at least three simulated seconds in.
	if r.Samples[2].AtNS < int64(3*time.Second) {
		t.Errorf("sample times %v", r.Samples)
	}
}
