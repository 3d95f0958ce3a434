package load

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

const trace = `{"timestamp": 400, "input_length": 1100, "output_length": 12, "hash_ids": [0, 1, 2]}
{"timestamp": 100, "input_length": 700, "output_length": 8, "hash_ids": [0, 3]}
{"timestamp": 100, "input_length": 1536, "output_length": 16, "hash_ids": [0, 1, 4]}
{"timestamp": 900, "input_length": 300, "output_length": 6}
`

// A trace replays at its times (from its earliest, times the slowdown, in arrival order) with
// exact lengths, and requests that share leading hash ids share those blocks of tokens.
func TestMooncakePrompts(t *testing.T) {
	ps, at, err := readMooncake(strings.NewReader(trace), "t.jsonl", 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	if !slices.Equal(at, []time.Duration{0, 0, ms(600), ms(1600)}) {
		t.Errorf("arrivals %v", at)
	}
	// Sorted stably by time: the 700-token request (line 2) before the 1536-token one (line 3).
	lens := []int{700, 1536, 1100, 300}
	for i, p := range ps {
		if p.InputLen != lens[i] || len(p.IDs) != lens[i] || p.ApproxInput {
			t.Errorf("request %d: %d tokens (%d ids), want %d exact", i, p.InputLen, len(p.IDs), lens[i])
		}
	}
	const b = 512
	if !slices.Equal(ps[0].IDs[:b], ps[1].IDs[:b]) || !slices.Equal(ps[1].IDs[:2*b], ps[2].IDs[:2*b]) {
		t.Error("requests with equal leading hash ids do not share those blocks")
	}
	if slices.Equal(ps[0].IDs[b:700], ps[1].IDs[b:700]) || slices.Equal(ps[1].IDs[2*b:1100], ps[2].IDs[2*b:1100]) {
		t.Error("different hash ids gave equal blocks")
	}
	if ps[3].IDs[0] == ps[0].IDs[0] && ps[3].IDs[1] == ps[0].IDs[1] {
		t.Error("a request without hash ids shares another's tokens")
	}
	// n limits the requests read (the first n lines), and a bad line is named.
	if ps, _, err := readMooncake(strings.NewReader(trace), "t.jsonl", 2, 1); err != nil || len(ps) != 2 {
		t.Errorf("n = 2: %d prompts, %v", len(ps), err)
	}
	if _, _, err := readMooncake(strings.NewReader(trace+"{\"timestamp\": 1}\n"), "t.jsonl", 0, 1); err == nil || !strings.Contains(err.Error(), "t.jsonl:5") {
		t.Errorf("bad line: %v", err)
	}
	if _, _, err := readMooncake(strings.NewReader("\n"), "t.jsonl", 0, 1); err == nil {
		t.Error("an empty trace was accepted")
	}
}

// A run on a trace's schedule sends each request at its time in the trace.
func TestRunOnTraceArrivals(t *testing.T) {
	ps, at, err := readMooncake(strings.NewReader(trace), "t.jsonl", 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, &stub{outTokens: 2})
	rs, _, err := Run(context.Background(), llm(t, url, APIGenerate, "", ps, Config{Requests: len(ps), Arrivals: at, Clock: SimClock{Scale: 0.01}}))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if r.Start != at[i] || !r.OK() {
			t.Errorf("request %d at %s (%s), want %s", i, r.Start, r.Error, at[i])
		}
	}
	if _, _, err := Run(context.Background(), llm(t, url, APIGenerate, "", ps, Config{Requests: 9, Arrivals: at})); err == nil {
		t.Error("more requests than the schedule were accepted")
	}
}

// Multi-turn: each request of a conversation carries the conversation so far, so consecutive
// requests share a prefix; conversations stay whole and in order.
func TestShareGPTTurnPrompts(t *testing.T) {
	const data = `[{"id": "a", "conversations": [
		{"from": "human", "value": "first question about rivers and stones"},
		{"from": "gpt", "value": "a first answer that is long enough"},
		{"from": "human", "value": "second question about the same rivers"},
		{"from": "gpt", "value": "a second answer, also long enough here"},
		{"from": "human", "value": "hi"}]},
	{"id": "b", "conversations": [{"from": "human", "value": "only one question here to ask"}]},
	{"id": "c", "conversations": [
		{"from": "human", "value": "another conversation opens with this"},
		{"from": "gpt", "value": "and gets a reply of some length"}]}]`
	ps, err := readShareGPTTurns(strings.NewReader(data), "s.json", 0, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 3 {
		t.Fatalf("%d requests, want 2 turns of a and 1 of c (b has no reply, a's last turn is too short)", len(ps))
	}
	var a0, a1 *Prompt
	for i := range ps {
		if strings.HasPrefix(ps[i].Text, "first question") {
			if strings.Contains(ps[i].Text, "second question") {
				a1 = &ps[i]
			} else {
				a0 = &ps[i]
			}
		}
	}
	if a0 == nil || a1 == nil || !strings.HasPrefix(a1.Text, a0.Text) || !strings.Contains(a1.Text, "a first answer") {
		t.Fatalf("turns of a: %+v", ps)
	}
	if &ps[0] != a0 && &ps[1] != a0 || !a0.ApproxInput || a1.InputLen <= a0.InputLen {
		t.Errorf("a's turns not consecutive and in order, or lengths not estimated: %+v", ps)
	}
	if ps, err := readShareGPTTurns(strings.NewReader(data), "s.json", 1, 7, 1); err != nil || len(ps) != 1 || ps[0].OutputLen != 7 {
		t.Errorf("n = 1, output 7: %+v %v", ps, err)
	}
}
