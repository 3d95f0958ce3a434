package sim

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// sseEvents posts body to url and returns the data of each event, [DONE] included.
func sseEvents(t *testing.T, url string, body any) []string {
	t.Helper()
	code, b := postJSON(t, url, body)
	if code != 200 {
		t.Fatalf("POST %s = %d %s", url, code, b)
	}
	var out []string
	for _, ev := range strings.Split(string(b), "\n\n") {
		if d, ok := strings.CutPrefix(ev, "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

func TestServeLLMStreams(t *testing.T) {
	s := startServe(t, baseEnv(t), "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--tp-size", "1")
	s.waitHealth(t)

	// /generate with input_ids: one event per token, cumulative text and counts, then [DONE].
	ev := sseEvents(t, s.base+"/generate", map[string]any{"input_ids": []int{5, 6, 7, 8, 9, 10, 11}, "stream": true,
		"sampling_params": map[string]any{"max_new_tokens": 5, "ignore_eos": true}})
	if len(ev) != 6 || ev[5] != "[DONE]" {
		t.Fatalf("events %q", ev)
	}
	var last struct {
		Text string `json:"text"`
		Meta struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
		} `json:"meta_info"`
	}
	if err := json.Unmarshal([]byte(ev[4]), &last); err != nil {
		t.Fatal(err)
	}
	if last.Meta.Prompt != 7 || last.Meta.Completion != 5 || strings.Count(last.Text, "the") != 5 {
		t.Errorf("last event %s: want 7 prompt tokens (the input_ids), 5 completion tokens", ev[4])
	}

	// /v1/completions with a token-id prompt and include_usage: 4 chunks, a usage chunk, [DONE].
	ev = sseEvents(t, s.base+"/v1/completions", map[string]any{"model": "m", "prompt": []int{1, 2, 3}, "max_tokens": 4,
		"stream": true, "stream_options": map[string]any{"include_usage": true}})
	if len(ev) != 6 || !strings.Contains(ev[3], `"finish_reason":"length"`) || !strings.Contains(ev[4], `"prompt_tokens":3`) ||
		!strings.Contains(ev[4], `"completion_tokens":4`) || ev[5] != "[DONE]" {
		t.Errorf("completions events %q", ev)
	}

	// /v1/chat/completions: a role chunk, then content deltas.
	ev = sseEvents(t, s.base+"/v1/chat/completions", map[string]any{"model": "m", "messages": []map[string]string{{"role": "user", "content": "a b c"}},
		"max_tokens": 2, "stream": true})
	if len(ev) != 4 || !strings.Contains(ev[0], `"role":"assistant"`) || !strings.Contains(ev[1], `"delta":{"content":" the"}`) ||
		!strings.Contains(ev[1], `"object":"chat.completion.chunk"`) || ev[3] != "[DONE]" {
		t.Errorf("chat events %q", ev)
	}
}

func TestLLMCosts(t *testing.T) {
	cost := func(args ...string) llmCost {
		p, err := parseArgs(llmSpecs, append([]string{"--model-path", "m"}, args...))
		if err != nil {
			t.Fatal(err)
		}
		return (&server{p: p, llm: true}).llmCostOf()
	}
	one, two := cost(), cost("--tp-size", "2")
	if one.decodeMS(1) != decodeTokenMS || one.prefillMS(100) != prefillBaseMS+100*prefillPerTokenMS {
		t.Errorf("tp 1, one request: decode %v, prefill %v; want the historical 11.5 ms and 19 ms", one.decodeMS(1), one.prefillMS(100))
	}
	if !(two.decodeMS(1) < one.decodeMS(1)) || !(two.prefillMS(100) < one.prefillMS(100)) {
		t.Errorf("tp 2 is not faster: decode %v vs %v", two.decodeMS(1), one.decodeMS(1))
	}
	if !(one.prefillMS(1000) > one.prefillMS(100)) {
		t.Error("prefill does not grow with the input")
	}
	if !(one.decodeMS(8) > one.decodeMS(1)) {
		t.Error("decode does not grow with the batch")
	}
	if !(one.mixedMS(8, 100) > one.decodeMS(8)) || one.mixedMS(0, 100) != one.prefillMS(100) {
		t.Errorf("mixed step %v: want a decode step plus the prompt tokens", one.mixedMS(8, 100))
	}
	if fa3 := cost("--attention-backend", "fa3"); !(fa3.decodeMS(1) < one.decodeMS(1)) {
		t.Error("fa3 is not faster than the default")
	}
	limits := cost("--max-total-tokens", "5000", "--max-running-requests", "7", "--chunked-prefill-size", "-1")
	if limits.KVTokens != 5000 || limits.MaxRunning != 7 || limits.ChunkTokens < 1<<30 {
		t.Errorf("limits %+v: want the flags' KV 5000, 7 running, no chunking", limits)
	}
	if one.KVTokens != defaultKVTokensPerGPU || two.KVTokens != 2*defaultKVTokensPerGPU || one.ChunkTokens != defaultChunkTokens {
		t.Errorf("defaults %+v / %+v", one, two)
	}
}

func TestLLMServerRejectsUnknownFlag(t *testing.T) {
	r := sglang(t, baseEnv(t), "serve", "--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--model-type", "llm", "--tp-size", "2", "--bogus", "1")
	if r.rc != 2 || !strings.Contains(r.stderr, "error: unrecognized arguments: --bogus 1") {
		t.Fatalf("rc %d, stderr %s", r.rc, r.stderr)
	}
}

func TestLLMSlowdownKnob(t *testing.T) {
	p, err := parseArgs(llmSpecs, []string{"--model-path", "m"})
	if err != nil {
		t.Fatal(err)
	}
	k, err := readKnobs(map[string]string{EnvSlowdown: "decode=1.5,prefill=2"})
	if err != nil {
		t.Fatal(err)
	}
	c := (&server{p: p, k: k, llm: true}).llmCostOf()
	if c.decodeMS(1) != decodeTokenMS*1.5 || c.prefillMS(0) != prefillBaseMS*2 {
		t.Errorf("decode %v, prefill %v", c.decodeMS(1), c.prefillMS(0))
	}
}

// TestPrefixHitSkipsPrefill: a prompt the prefix cache holds is not prefilled again, as on a
// real server: the second of two identical requests reports its cached tokens and finishes
// sooner on the simulated clock.
func TestPrefixHitSkipsPrefill(t *testing.T) {
	s := startServe(t, baseEnv(t), "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--tp-size", "1")
	s.waitHealth(t)
	ids := make([]int, 2048)
	for i := range ids {
		ids[i] = i + 7
	}
	type meta struct {
		Cached int     `json:"cached_tokens"`
		E2E    float64 `json:"e2e_latency"`
	}
	run := func() meta {
		ev := sseEvents(t, s.base+"/generate", map[string]any{"input_ids": ids, "stream": true,
			"sampling_params": map[string]any{"max_new_tokens": 2, "ignore_eos": true}})
		var last struct {
			Meta meta `json:"meta_info"`
		}
		if len(ev) < 2 {
			t.Fatalf("events %q", ev)
		}
		if err := json.Unmarshal([]byte(ev[len(ev)-2]), &last); err != nil {
			t.Fatal(err)
		}
		return last.Meta
	}
	cold, warm := run(), run()
	if cold.Cached != 0 || warm.Cached < 2000 {
		t.Fatalf("cached tokens: cold %d, warm %d; want 0 then the prompt's whole blocks", cold.Cached, warm.Cached)
	}
	if warm.E2E >= cold.E2E {
		t.Errorf("e2e %.4f s with the prompt cached, %.4f s without: a cached prompt must not be prefilled again", warm.E2E, cold.E2E)
	}
	// /flush_cache (GET or POST, as upstream's api_route) empties the cache: the prompt is
	// prefilled whole again.
	if code, body := postJSON(t, s.base+"/flush_cache", nil); code != 200 || string(body) != flushCacheBody {
		t.Fatalf("POST /flush_cache: %d %q", code, body)
	}
	if again := run(); again.Cached != 0 {
		t.Errorf("after /flush_cache %d tokens were cached, want 0", again.Cached)
	}
	if code, _ := getBody(t, s.base+"/flush_cache"); code != 200 {
		t.Errorf("GET /flush_cache: %d", code)
	}
	req, _ := http.NewRequest(http.MethodPut, s.base+"/flush_cache", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("PUT /flush_cache: %v %v, want 405", resp, err)
	} else {
		resp.Body.Close()
	}
}
