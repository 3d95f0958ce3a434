package sim

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// The LLM server's Prometheus /metrics page, in either engine's naming, as the runner scrapes it
// during a cell. SGLang serves it only when started with --enable-metrics
// (python/sglang/srt/metrics/collector.py: the scheduler's gauges and the tokenizer manager's
// counters); vLLM's OpenAI server always does (vllm/v1/metrics/loggers.py). The page reports a
// metricsView, which the handler reads through an accessor, so a server with a different
// scheduler model supplies its own view and mounts the same page.

// metricsNaming picks the metric names of an engine.
type metricsNaming int

const (
	namingSGLang metricsNaming = iota
	namingVLLM
)

// metricsView is what a /metrics page reports at one instant.
type metricsView struct {
	Running, Queued int
	// UsedTokens of MaxTokens KV-cache slots are held by the requests running.
	UsedTokens, MaxTokens int64
	// GenThroughput is the batch's decode rate in tokens per simulated second.
	GenThroughput float64
	// Counters since the server started: prompt tokens, those found in the prefix cache,
	// generated tokens, finished requests.
	PromptTokens, CachedTokens, GenTokens, Requests int64
	// CacheHitRate is SGLang's gauge: the hit rate of the prefills since the last scrape.
	CacheHitRate float64
}

// simKVTokens is the simulated KV-cache pool in tokens (sglang's max_total_num_tokens on an
// 80 GB GPU serving an 8B model is of this order).
const simKVTokens = 400_000

// prefixBlock is the prefix cache's granularity in tokens (vLLM's default block size; SGLang's
// radix cache matches single tokens, which a block granularity approximates).
const prefixBlock = 16

// llmMetrics is the simulated LLM server's metric state: counters, the tokens held by requests
// in flight and the prefix cache. Its zero value is ready.
type llmMetrics struct {
	inflight                      atomic.Int64 // requests admitted and not finished: running + queued
	used                          atomic.Int64 // tokens of the requests in flight
	prompt, cached, gen, requests atomic.Int64
	mu                            sync.Mutex
	blocks                        map[uint64]struct{} // hashes of cached prefix blocks
	order                         []uint64            // insertion order, for eviction
	lastPrompt, lastCached        int64               // counters at the last scrape (the gauge's window)
}

// prefixLookup returns how many leading tokens of the prompt (its token ids, or its words when
// it is text) are in the prefix cache, and caches the prompt's blocks. Blocks are chained hashes
// (each covers the whole prefix up to it), as vLLM's block hashes are; the cache holds at most
// the KV pool's worth of blocks and evicts the oldest first.
func (m *llmMetrics) prefixLookup(toks []string, disabled bool) int {
	if disabled || len(toks) < prefixBlock {
		return 0
	}
	h := fnv.New64a()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.blocks == nil {
		m.blocks = make(map[uint64]struct{})
	}
	hit, missed := 0, false
	for i := 0; i+prefixBlock <= len(toks); i += prefixBlock {
		for _, t := range toks[i : i+prefixBlock] {
			io.WriteString(h, t)
			h.Write([]byte{0})
		}
		key := h.Sum64()
		if _, ok := m.blocks[key]; ok && !missed {
			hit += prefixBlock
			continue
		}
		missed = true
		if _, ok := m.blocks[key]; ok {
			continue
		}
		m.blocks[key] = struct{}{}
		m.order = append(m.order, key)
		if len(m.order) > simKVTokens/prefixBlock {
			delete(m.blocks, m.order[0])
			m.order = m.order[1:]
		}
	}
	return hit
}

// flush empties the prefix cache (the counters stay: they are Prometheus counters).
func (m *llmMetrics) flush() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.blocks, m.order = nil, nil
}

// flushCacheBody is what SGLang's /flush_cache answers, with 200 when it flushed and 400 when
// it did not (python/sglang/srt/entrypoints/http_server.py).
const flushCacheBody = "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n"

// flushCache is SGLang's GET or POST /flush_cache: the radix cache is emptied unless the
// scheduler has requests running or waiting, which is answered 400 with the same body.
func (s *server) flushCache(w http.ResponseWriter, r *http.Request) {
	st := s.llmEngine().snapshot()
	if st.Running+st.Queued > 0 {
		s.log.log("Cache not flushed because there are pending requests. #queue-req: %d, #running-req: %d", st.Queued, st.Running)
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, flushCacheBody)
		return
	}
	s.met.flush()
	s.log.log("Cache flushed successfully!")
	w.WriteHeader(http.StatusOK)
	io.WriteString(w, flushCacheBody)
}

// resetPrefixCache is vLLM's POST /reset_prefix_cache (mounted only in development mode): it
// answers 200 with no body whatever happens; the engine resets nothing while requests hold
// cache blocks and logs a warning instead (v1/core/block_pool.py reset_prefix_cache).
func (s *server) resetPrefixCache(w http.ResponseWriter, r *http.Request) {
	s.log.log("Resetting prefix cache...")
	if st := s.llmEngine().snapshot(); st.Running+st.Queued > 0 {
		s.log.log("WARNING Failed to reset prefix cache because some blocks (%d) are not freed yet", max((st.KVUsedTokens+prefixBlock-1)/prefixBlock, 1))
	} else {
		s.met.flush()
	}
	w.WriteHeader(http.StatusOK)
}

// vllmDevMode is envs.VLLM_SERVER_DEV_MODE: bool(int(value)), false when unset; a value int()
// cannot read is an error, as it is in vLLM.
func vllmDevMode(env map[string]string) (bool, error) {
	v, ok := env["VLLM_SERVER_DEV_MODE"]
	if !ok {
		return false, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return false, fmt.Errorf("ValueError: invalid literal for int() with base 10: %s", pyQuote(v))
	}
	return n != 0, nil
}

// pyQuote is Python's repr of a str without quotes inside, enough for an error message.
func pyQuote(v string) string { return "'" + v + "'" }

// promptWords is a prompt's tokens for the prefix cache: token ids as text, or the words of a
// text prompt (the simulator's token is a word).
func promptWords(ids []int, text string) []string {
	if ids != nil {
		out := make([]string, len(ids))
		for i, id := range ids {
			out[i] = strconv.Itoa(id)
		}
		return out
	}
	return strings.Fields(text)
}

// track counts a request from its admission to its end: call it with its prompt's tokens and
// lengths, and the returned func when it ends (whatever the outcome). It returns the prompt
// tokens the prefix cache already holds, which the scheduler does not prefill again.
func (s *server) track(toks []string, in, out int) (cached int, done func()) {
	m := &s.met
	cached = m.prefixLookup(toks, s.p.boolv("disable_radix_cache"))
	m.prompt.Add(int64(in))
	m.cached.Add(int64(cached))
	m.inflight.Add(1)
	m.used.Add(int64(in + out))
	return cached, func() {
		m.inflight.Add(-1)
		m.used.Add(-int64(in + out))
		m.gen.Add(int64(out))
		m.requests.Add(1)
	}
}

// metricsView is the accessor the page reads: the scheduler's running batch, its queue and the
// KV tokens they hold (llmengine.go), and this page's own prefix-cache and token counters.
func (s *server) metricsView() metricsView {
	m := &s.met
	eng := s.llmEngine()
	st := eng.snapshot()
	v := metricsView{Running: st.Running, Queued: st.Queued,
		UsedTokens: int64(st.KVUsedTokens), MaxTokens: int64(st.KVCapTokens),
		PromptTokens: m.prompt.Load(), CachedTokens: m.cached.Load(), GenTokens: m.gen.Load(), Requests: m.requests.Load()}
	if st.Running > 0 {
		v.GenThroughput = float64(st.Running) * 1000 / eng.cost.decodeMS(st.Running)
	}
	m.mu.Lock()
	if dp := v.PromptTokens - m.lastPrompt; dp > 0 {
		v.CacheHitRate = float64(v.CachedTokens-m.lastCached) / float64(dp)
	}
	m.lastPrompt, m.lastCached = v.PromptTokens, v.CachedTokens
	m.mu.Unlock()
	return v
}

// metricsHandler serves view's page in naming, labelled with the served model name.
func metricsHandler(naming metricsNaming, view func() metricsView, model string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		writeMetrics(w, naming, view(), model)
	}
}

// writeMetrics writes the text exposition format as prometheus_client does: HELP and TYPE
// lines, counters with their _total name, values as floats.
func writeMetrics(w io.Writer, naming metricsNaming, v metricsView, model string) {
	labels := fmt.Sprintf(`{model_name=%s}`, strconv.Quote(model))
	if naming == namingVLLM {
		labels = fmt.Sprintf(`{engine="0",model_name=%s}`, strconv.Quote(model))
	}
	put := func(name, typ, help string, val float64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s%s %s\n", name, help, name, typ, name, labels, strconv.FormatFloat(val, 'g', -1, 64))
	}
	usage := float64(v.UsedTokens) / float64(max(v.MaxTokens, 1))
	if naming == namingVLLM {
		put("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", float64(v.Running))
		put("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", float64(v.Queued))
		put("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", usage)
		put("vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.", float64(v.PromptTokens))
		put("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.", float64(v.CachedTokens))
		put("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", float64(v.PromptTokens))
		put("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", float64(v.GenTokens))
		return
	}
	put("sglang:num_running_reqs", "gauge", "The number of running requests.", float64(v.Running))
	put("sglang:num_used_tokens", "gauge", "The number of used tokens.", float64(v.UsedTokens))
	put("sglang:token_usage", "gauge", "The token usage.", usage)
	put("sglang:gen_throughput", "gauge", "The generation throughput (token/s).", v.GenThroughput)
	put("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.", float64(v.Queued))
	put("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", v.CacheHitRate)
	put("sglang:max_total_num_tokens", "gauge", "Maximum total number of tokens in the KV cache pool.", float64(v.MaxTokens))
	put("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.", float64(v.PromptTokens))
	put("sglang:generation_tokens_total", "counter", "Number of generation tokens processed.", float64(v.GenTokens))
	put("sglang:cached_tokens_total", "counter", "Number of cached prompt tokens.", float64(v.CachedTokens))
	put("sglang:num_requests_total", "counter", "Number of requests processed.", float64(v.Requests))
}

// trackOpenAI is track for an OpenAI completions or chat request (16 tokens unless max_tokens
// says otherwise, as openAI defaults).
func (s *server) trackOpenAI(q llmReq, in int) (cached int, done func()) {
	out := 16
	if q.MaxTokens != nil {
		out = *q.MaxTokens
	}
	var ids []int
	text := ""
	if json.Unmarshal(q.Prompt, &ids) != nil || len(ids) == 0 {
		ids = nil
		json.Unmarshal(q.Prompt, &text)
	}
	for _, m := range q.Messages {
		text += " " + m.Content
	}
	return s.track(promptWords(ids, text), in, out)
}
