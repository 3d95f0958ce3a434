package sim

import (
	"encoding/json"
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
	srv := func(args ...string) *server {
		p, err := parseArgs(llmSpecs, append([]string{"--model-path", "m"}, args...))
		if err != nil {
			t.Fatal(err)
		}
		return &server{p: p, llm: true}
	}
	one, two := srv(), srv("--tp-size", "2")
	if one.decodeMS() != decodeTokenMS || one.prefillMS(100) != prefillBaseMS+100*prefillPerTokenMS {
		t.Errorf("tp 1, one request: decode %v, prefill %v; want the historical 11.5 ms and 19 ms", one.decodeMS(), one.prefillMS(100))
	}
	if !(two.decodeMS() < one.decodeMS()) || !(two.prefillMS(100) < one.prefillMS(100)) {
		t.Errorf("tp 2 is not faster: decode %v vs %v", two.decodeMS(), one.decodeMS())
	}
	if !(one.prefillMS(1000) > one.prefillMS(100)) {
		t.Error("prefill does not grow with the input")
	}
	d1 := one.decodeMS()
	one.active.Store(8)
	if !(one.decodeMS() > d1) {
		t.Error("decode does not grow with the batch")
	}
	if fa3 := srv("--attention-backend", "fa3"); !(fa3.decodeMS() < d1) {
		t.Error("fa3 is not faster than the default")
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
	s := &server{p: p, k: k, llm: true}
	if s.decodeMS() != decodeTokenMS*1.5 || s.prefillMS(0) != prefillBaseMS*2 {
		t.Errorf("decode %v, prefill %v", s.decodeMS(), s.prefillMS(0))
	}
}
