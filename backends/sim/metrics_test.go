package sim

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Both namings' pages parse with the Prometheus text parser and carry the view's values under
// the names upstream uses.
func TestMetricsPage(t *testing.T) {
	v := metricsView{Running: 3, Queued: 5, UsedTokens: 100, MaxTokens: 400, GenThroughput: 12.5,
		PromptTokens: 1000, CachedTokens: 250, GenTokens: 64, Requests: 4, CacheHitRate: 0.25}
	for naming, want := range map[metricsNaming]map[string]float64{
		namingSGLang: {"sglang:num_running_reqs": 3, "sglang:num_queue_reqs": 5, "sglang:token_usage": 0.25,
			"sglang:cache_hit_rate": 0.25, "sglang:cached_tokens_total": 250, "sglang:prompt_tokens_total": 1000, "sglang:gen_throughput": 12.5},
		namingVLLM: {"vllm:num_requests_running": 3, "vllm:num_requests_waiting": 5, "vllm:kv_cache_usage_perc": 0.25,
			"vllm:prefix_cache_queries_total": 1000, "vllm:prefix_cache_hits_total": 250},
	} {
		var b bytes.Buffer
		writeMetrics(&b, naming, v, `org/model "x"`)
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(&b)
		if err != nil {
			t.Fatalf("naming %d: %v", naming, err)
		}
		for name, val := range want {
			f, ok := fams[name]
			if !ok || len(f.GetMetric()) != 1 {
				t.Errorf("naming %d: no %s", naming, name)
				continue
			}
			m := f.GetMetric()[0]
			got := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			if got != val {
				t.Errorf("%s = %v, want %v", name, got, val)
			}
			if m.GetLabel()[len(m.GetLabel())-1].GetValue() != `org/model "x"` {
				t.Errorf("%s labels %v", name, m.GetLabel())
			}
		}
	}
}

// The prefix cache finds a shared prefix in whole blocks, only from the start, and is bounded.
func TestPrefixLookup(t *testing.T) {
	words := func(prefix, n int, tag string) []string {
		var out []string
		for i := range n {
			if i < prefix {
				out = append(out, strconv.Itoa(i))
			} else {
				out = append(out, tag+strconv.Itoa(i))
			}
		}
		return out
	}
	var m llmMetrics
	if got := m.prefixLookup(words(40, 64, "a"), false); got != 0 {
		t.Errorf("cold cache hit %d", got)
	}
	// 40 shared tokens: two whole blocks of 16.
	if got := m.prefixLookup(words(40, 64, "b"), false); got != 32 {
		t.Errorf("shared prefix hit %d, want 32", got)
	}
	if got := m.prefixLookup(words(40, 64, "b"), true); got != 0 {
		t.Errorf("a disabled cache hit %d", got)
	}
	// A block equal to a cached one but after a miss is not a prefix hit (hashes are chained).
	other := append([]string{"x"}, words(40, 64, "a")[1:]...)
	if got := m.prefixLookup(other, false); got != 0 {
		t.Errorf("a different first token hit %d", got)
	}
	for i := range simKVTokens/prefixBlock + 10 {
		m.prefixLookup(words(0, prefixBlock, "z"+strconv.Itoa(i)), false)
	}
	if len(m.blocks) > simKVTokens/prefixBlock || len(m.order) != len(m.blocks) {
		t.Errorf("cache holds %d blocks (%d in order)", len(m.blocks), len(m.order))
	}
}
