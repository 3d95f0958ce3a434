package load

// What the server itself reports: its Prometheus /metrics page, scraped before, during and after
// an LLM cell's load. The page is untrusted input: it is read through a size bound, parsed by
// parsePromText (promtext.go; the tests hold it to the Prometheus project's own parser), and
// every failure is recorded, never fatal to the cell.
//
// Names are SGLang's (python/sglang/srt/metrics/collector.py: the scheduler's gauges
// sglang:num_running_reqs, num_queue_reqs, token_usage, gen_throughput, cache_hit_rate and the
// tokenizer's counters sglang:prompt_tokens_total, cached_tokens_total,
// generation_tokens_total) and vLLM's (vllm/v1/metrics/loggers.py: the gauges
// vllm:num_requests_running, num_requests_waiting, kv_cache_usage_perc, the older
// gpu_cache_usage_perc, and the counters vllm:prefix_cache_queries_total, prefix_cache_hits_total,
// prompt_tokens_total, generation_tokens_total).

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sglprof/runner/reports/rundir"
)

// MaxMetricsPage bounds one /metrics page. A vLLM page with every histogram is a few hundred
// KiB; a larger one is refused rather than read on.
const MaxMetricsPage = 4 << 20

// MaxMetricsSamples bounds the samples one scrape series keeps: when full, every other sample is
// dropped and the interval doubles, so a long cell keeps a chart of the whole run in bounded
// memory.
const MaxMetricsSamples = 512

// ServerSample is one scrape: the values found, NaN for those the page did not have.
type ServerSample struct {
	// Engine is the naming the page used: "sglang" or "vllm" ("" when neither was found).
	Engine                     string
	Running, Queued            float64
	TokenUsage                 float64 // KV-cache (token pool) usage, 0..1
	GenThroughput              float64 // tokens/s, SGLang's gauge
	CacheHitRate               float64 // SGLang's gauge (since the scheduler's last log)
	PromptTokens, CachedTokens float64 // counters: prompt tokens and those served from the prefix cache
	GenTokens                  float64 // counter
	PrefixQueries, PrefixHits  float64 // vLLM's prefix-cache counters (tokens)
}

// metric names by engine. Counter names are as prometheus_client exposes them (with _total).
var (
	sglangNames = sampleNames{engine: "sglang", running: "sglang:num_running_reqs", queued: "sglang:num_queue_reqs",
		usage: []string{"sglang:token_usage"}, throughput: "sglang:gen_throughput", hitRate: "sglang:cache_hit_rate",
		prompt: "sglang:prompt_tokens_total", cached: "sglang:cached_tokens_total", gen: "sglang:generation_tokens_total"}
	vllmNames = sampleNames{engine: "vllm", running: "vllm:num_requests_running", queued: "vllm:num_requests_waiting",
		usage:  []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
		prompt: "vllm:prompt_tokens_total", gen: "vllm:generation_tokens_total",
		queries: "vllm:prefix_cache_queries_total", hits: "vllm:prefix_cache_hits_total"}
)

type sampleNames struct {
	engine                                                  string
	running, queued                                         string
	usage                                                   []string // the first found wins (vLLM renamed its gauge)
	throughput, hitRate, prompt, cached, gen, queries, hits string
}

// ParseServerMetrics reads one /metrics page (Prometheus text format) of at most MaxMetricsPage
// bytes and picks the serving metrics out of it. Series of one family (data-parallel engines,
// one per "engine" or "dp_rank" label) are summed, except usage, which takes the fullest
// engine's. A page with neither engine's names is not an error: the sample's Engine is "".
func ParseServerMetrics(r io.Reader) (ServerSample, error) {
	s := nanSample()
	b, err := io.ReadAll(io.LimitReader(r, MaxMetricsPage+1))
	if err != nil {
		return s, fmt.Errorf("read /metrics: %w", err)
	}
	if len(b) > MaxMetricsPage {
		return s, fmt.Errorf("/metrics page is over %d MiB; not read", MaxMetricsPage>>20)
	}
	fams, err := parsePromText(b)
	if err != nil {
		return s, fmt.Errorf("/metrics is not Prometheus text format: %w", err)
	}
	for _, n := range []sampleNames{sglangNames, vllmNames} {
		if !hasAny(fams, n) {
			continue
		}
		s.Engine = n.engine
		s.Running = familySum(fams[n.running])
		s.Queued = familySum(fams[n.queued])
		for _, u := range n.usage {
			if f, ok := fams[u]; ok {
				s.TokenUsage = familyMax(f)
				break
			}
		}
		s.GenThroughput = familySum(fams[n.throughput])
		s.CacheHitRate = familyMean(fams[n.hitRate])
		s.PromptTokens = familySum(fams[n.prompt])
		s.CachedTokens = familySum(fams[n.cached])
		s.GenTokens = familySum(fams[n.gen])
		s.PrefixQueries = familySum(fams[n.queries])
		s.PrefixHits = familySum(fams[n.hits])
		break
	}
	return s, nil
}

func nanSample() ServerSample {
	n := math.NaN()
	return ServerSample{Running: n, Queued: n, TokenUsage: n, GenThroughput: n, CacheHitRate: n,
		PromptTokens: n, CachedTokens: n, GenTokens: n, PrefixQueries: n, PrefixHits: n}
}

func hasAny(fams promValues, n sampleNames) bool {
	for _, name := range []string{n.running, n.queued} {
		if _, ok := fams[name]; ok {
			return true
		}
	}
	return false
}

// familyFold folds a family's finite values (NaN, and infinities, which a hostile page may send,
// are left out); NaN when there are none.
func familyFold(vals []float64, fold func(acc, v float64) float64) (float64, int) {
	acc, n := math.NaN(), 0
	for _, v := range vals {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		if n == 0 {
			acc = v
		} else {
			acc = fold(acc, v)
		}
		n++
	}
	return acc, n
}

func familySum(vals []float64) float64 {
	v, _ := familyFold(vals, func(a, b float64) float64 { return a + b })
	return v
}

func familyMax(vals []float64) float64 {
	v, _ := familyFold(vals, math.Max)
	return v
}

func familyMean(vals []float64) float64 {
	v, n := familyFold(vals, func(a, b float64) float64 { return a + b })
	if n > 0 {
		return v / float64(n)
	}
	return v
}

// Scraper scrapes a server's /metrics before, during (every Interval) and after a cell's load.
// Its zero value is not usable; make one with NewScraper.
type Scraper struct {
	url      string
	client   *http.Client
	clock    func() time.Duration // time since the scraper started
	interval time.Duration
	scale    float64

	mu      sync.Mutex
	before  *ServerSample
	after   *ServerSample
	samples []timedSample
	errs    []string
	scrapes int
}

type timedSample struct {
	at time.Duration
	s  ServerSample
}

// scrapeTimeout bounds one scrape: a server that stalls its /metrics page must not stall the
// cell's end.
const scrapeTimeout = 5 * time.Second

// NewScraper scrapes base+"/metrics" every interval (0: one second) of the run's clock with
// client (nil: a net/http client that follows no redirects). scale is the clock's real seconds
// per clock second (SimClock.Scale; 1 for RealClock): the scrapes are paced, and the samples
// stamped, on the same clock as the requests.
func NewScraper(base string, client *http.Client, interval time.Duration, scale float64) *Scraper {
	if client == nil {
		client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if interval <= 0 {
		interval = time.Second
	}
	if scale <= 0 || math.IsNaN(scale) || math.IsInf(scale, 0) {
		scale = 1
	}
	start := time.Now()
	return &Scraper{url: strings.TrimRight(base, "/") + "/metrics", client: client, interval: interval, scale: scale,
		clock: func() time.Duration { return time.Duration(float64(time.Since(start)) / scale) }}
}

// minScrapeWall is the shortest real time between scrapes, whatever the clock's scale: a
// simulator running a thousand times faster than real time is not scraped a thousand times
// as often.
const minScrapeWall = time.Millisecond

// ScaleOf is a clock's real seconds per clock second.
func ScaleOf(c Clock) float64 {
	if s, ok := c.(SimClock); ok && s.Scale > 0 {
		return s.Scale
	}
	return 1
}

// scrape takes one sample; errors are kept (the first few distinct ones) and returned.
func (sc *Scraper) scrape(ctx context.Context) (ServerSample, error) {
	ctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
	defer cancel()
	s, err := sc.get(ctx)
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.scrapes++
	if err != nil {
		msg := err.Error()
		if len(sc.errs) < 4 && !containsString(sc.errs, msg) {
			sc.errs = append(sc.errs, msg)
		}
	}
	return s, err
}

func (sc *Scraper) get(ctx context.Context) (ServerSample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, sc.url, nil)
	if err != nil {
		return nanSample(), fmt.Errorf("scrape /metrics: %w", err)
	}
	resp, err := sc.client.Do(req)
	if err != nil {
		return nanSample(), fmt.Errorf("scrape /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		hint := ""
		if resp.StatusCode == http.StatusNotFound {
			hint = " (SGLang serves it only with --enable-metrics in backend.extra_args)"
		}
		return nanSample(), fmt.Errorf("scrape /metrics: HTTP %d%s", resp.StatusCode, hint)
	}
	return ParseServerMetrics(resp.Body)
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// Before takes the sample before the load.
func (sc *Scraper) Before(ctx context.Context) {
	if s, err := sc.scrape(ctx); err == nil {
		sc.mu.Lock()
		sc.before = &s
		sc.mu.Unlock()
	}
}

// After takes the sample after the load.
func (sc *Scraper) After(ctx context.Context) {
	if s, err := sc.scrape(ctx); err == nil {
		sc.mu.Lock()
		sc.after = &s
		sc.mu.Unlock()
	}
}

// During scrapes every interval until ctx ends, keeping at most MaxMetricsSamples samples.
// Run it in a goroutine and cancel ctx when the load ends.
func (sc *Scraper) During(ctx context.Context) {
	every := max(time.Duration(float64(sc.interval)*sc.scale), minScrapeWall)
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		at := sc.clock()
		s, err := sc.scrape(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			sc.mu.Lock()
			if sc.add(timedSample{at, s}) {
				every *= 2
			}
			sc.mu.Unlock()
		}
		t.Reset(every)
	}
}

// add appends a sample and thins the series when full: it reports whether it did (the caller
// then halves its scrape rate).
func (sc *Scraper) add(ts timedSample) bool {
	sc.samples = append(sc.samples, ts)
	if len(sc.samples) < MaxMetricsSamples {
		return false
	}
	kept := sc.samples[:0]
	for i := 0; i < len(sc.samples); i += 2 {
		kept = append(kept, sc.samples[i])
	}
	sc.samples = kept
	return true
}

// Result is what the scrapes found, for result.json; nil when no scrape was made.
func (sc *Scraper) Result() *rundir.ServerMetrics {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return summarizeScrapes(sc.before, sc.after, sc.samples, sc.scrapes, sc.errs, sc.interval)
}

func summarizeScrapes(before, after *ServerSample, samples []timedSample, scrapes int, errs []string, interval time.Duration) *rundir.ServerMetrics {
	if scrapes == 0 {
		return nil
	}
	r := &rundir.ServerMetrics{Scrapes: scrapes, IntervalNS: int64(interval), Errors: append([]string(nil), errs...)}
	all := make([]ServerSample, 0, len(samples)+2)
	if before != nil {
		all = append(all, *before)
	}
	for _, ts := range samples {
		all = append(all, ts.s)
		r.Samples = append(r.Samples, rundir.ServerMetricsSample{AtNS: int64(ts.at),
			Running: finitePtr(ts.s.Running), Queued: finitePtr(ts.s.Queued), TokenUsage: finitePtr(ts.s.TokenUsage)})
	}
	if after != nil {
		all = append(all, *after)
	}
	var hitSum float64
	var hitN int
	for _, s := range all {
		if r.Engine == "" {
			r.Engine = s.Engine
		}
		r.PeakRunning = maxPtr(r.PeakRunning, s.Running)
		r.PeakQueued = maxPtr(r.PeakQueued, s.Queued)
		r.PeakTokenUsage = maxPtr(r.PeakTokenUsage, s.TokenUsage)
		r.PeakGenThroughput = maxPtr(r.PeakGenThroughput, s.GenThroughput)
		if !math.IsNaN(s.CacheHitRate) {
			hitSum += s.CacheHitRate
			hitN++
		}
	}
	// The hit rate over the cell is exact from counters (the tokens served from the prefix
	// cache over the prompt tokens between the before and after scrapes); SGLang's gauge only
	// covers the scheduler's last logging interval, so its mean is the fallback.
	if before != nil && after != nil {
		hits, queries := after.CachedTokens-before.CachedTokens, after.PromptTokens-before.PromptTokens
		if after.Engine == "vllm" {
			hits, queries = after.PrefixHits-before.PrefixHits, after.PrefixQueries-before.PrefixQueries
		}
		if queries > 0 && hits >= 0 && hits <= queries {
			r.CacheHitRate = ptr(hits / queries)
			r.HitRateFrom = "counters"
		}
		if d := after.GenTokens - before.GenTokens; d >= 0 {
			r.GenTokens = finitePtr(d)
		}
	}
	if r.CacheHitRate == nil && hitN > 0 {
		r.CacheHitRate = ptr(hitSum / float64(hitN))
		r.HitRateFrom = "gauge mean"
	}
	return r
}

func ptr(v float64) *float64 { return &v }

func finitePtr(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func maxPtr(p *float64, v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return p
	}
	if p == nil || v > *p {
		return &v
	}
	return p
}
