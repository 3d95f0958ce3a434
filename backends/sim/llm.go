package sim

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sglprof/runner/backends/simclock"
)

// sse writes server-sent events as upstream's StreamingResponse does: `data: <json>\n\n` per
// chunk, flushed, and `data: [DONE]\n\n` at the end (srt/entrypoints/http_server.py).
type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func newSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(200)
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f}
}

func (e *sse) send(v any) {
	b, _ := json.Marshal(v)
	e.w.Write([]byte("data: "))
	e.w.Write(b)
	e.w.Write([]byte("\n\n"))
	if e.f != nil {
		e.f.Flush()
	}
}

func (e *sse) done() {
	io.WriteString(e.w, "data: [DONE]\n\n")
	if e.f != nil {
		e.f.Flush()
	}
}

// simNS is a simulated time in ms as simclock.ElapsedField carries it.
func simNS(ms float64) int64 { return int64(ms * 1e6) }

// abort ends a stream without [DONE], as a server that dies mid-response does.
func abort() { panic(http.ErrAbortHandler) }

// badCompletionTokens is what the bad-counts failure mode reports in the last /generate chunk
// (its OpenAI usage says -5): counts a hostile server sent, which the runner must refuse.
const badCompletionTokens = 50_000_000

// streamGenerate is /generate with stream: true. Each chunk carries the text so far and
// meta_info with the cumulative completion_tokens (upstream's non-incremental stream output).
func (s *server) streamGenerate(w http.ResponseWriter, due *simDue, in, out, cached int) {
	e := newSSE(w)
	id := strings.ReplaceAll(uuid4(), "-", "")
	// e2e_latency is on the simulated clock, as the non-streamed /generate reports it.
	meta := func(n int, finish any, ms float64) map[string]any {
		return map[string]any{"id": id, "finish_reason": finish, "prompt_tokens": in, "completion_tokens": n,
			"cached_tokens": cached, "e2e_latency": round4(ms / 1000)}
	}
	_, err := s.llmRunDue(due, in, out, cached, func(n int, ms float64) {
		var finish any
		reported := n
		if n == out {
			finish = map[string]any{"type": "length", "length": out}
			if s.k.fail["bad-counts"] {
				reported = badCompletionTokens
			}
		}
		e.send(map[string]any{"text": strings.Repeat(" the", n), "meta_info": meta(reported, finish, ms), simclock.ElapsedField: simNS(ms)})
	})
	if err != nil {
		abort()
	}
	e.done()
}

// promptTokens counts a completions prompt: a list of token ids (exact) or text (a token a word).
func promptTokens(raw json.RawMessage) (int, bool) {
	var ids []int
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		return len(ids), true
	}
	var text string
	if json.Unmarshal(raw, &text) == nil && text != "" {
		return tokens(text), true
	}
	return 0, false
}

func openAIError(w http.ResponseWriter, msg string) {
	writeJSON(w, 400, map[string]any{"object": "error", "message": msg, "type": "BadRequestError", "code": 400})
}

// llmCompletions is POST /v1/completions, streamed or not.
func (s *server) llmCompletions(w http.ResponseWriter, r *http.Request) {
	var q llmReq
	if err := json.NewDecoder(io.LimitReader(r.Body, 16<<20)).Decode(&q); err != nil {
		openAIError(w, "Invalid request body: "+err.Error())
		return
	}
	in, ok := promptTokens(q.Prompt)
	if !ok {
		openAIError(w, "prompt is required")
		return
	}
	cached, done := s.trackOpenAI(q, in) // metrics.go
	defer done()
	s.openAI(w, q, in, cached, "text_completion", func(n int) map[string]any {
		return map[string]any{"index": 0, "text": " the", "logprobs": nil, "finish_reason": nil}
	})
}

// llmChat is POST /v1/chat/completions, streamed or not.
func (s *server) llmChat(w http.ResponseWriter, r *http.Request) {
	var q llmReq
	if err := json.NewDecoder(io.LimitReader(r.Body, 16<<20)).Decode(&q); err != nil || len(q.Messages) == 0 {
		openAIError(w, "messages is required")
		return
	}
	in := 0
	for _, m := range q.Messages {
		in += tokens(m.Content)
	}
	cached, done := s.trackOpenAI(q, in) // metrics.go
	defer done()
	s.openAI(w, q, in, cached, "chat.completion", func(n int) map[string]any {
		return map[string]any{"index": 0, "delta": map[string]any{"content": " the"}, "logprobs": nil, "finish_reason": nil}
	})
}

// openAI runs an OpenAI-style request. Streamed, it sends one chunk per token (object
// "<kind>.chunk" for chat), a last chunk with finish_reason "length", a usage chunk with empty
// choices when stream_options.include_usage is set, then [DONE]; as sglang's OpenAI serving
// does (srt/entrypoints/openai/serving_completions.py, serving_chat.py).
func (s *server) openAI(w http.ResponseWriter, q llmReq, in, cached int, kind string, chunk func(n int) map[string]any) {
	if !s.admit(w) {
		return
	}
	out := 16
	if q.MaxTokens != nil {
		out = *q.MaxTokens
	}
	id := strings.ReplaceAll(uuid4(), "-", "")
	usage := map[string]any{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out}
	if s.k.fail["bad-counts"] {
		usage["completion_tokens"] = -5
	}
	if !q.Stream {
		if _, err := s.llmRunDue(q.due(), in, out, cached, nil); err != nil {
			http.Error(w, "server shutting down", http.StatusServiceUnavailable)
			return
		}
		choice := map[string]any{"index": 0, "text": strings.Repeat(" the", out), "finish_reason": "length"}
		if kind == "chat.completion" {
			choice = map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": strings.Repeat(" the", out)}, "finish_reason": "length"}
		}
		writeJSON(w, 200, map[string]any{"id": id, "object": kind, "created": time.Now().Unix(), "model": s.served,
			"choices": []map[string]any{choice}, "usage": usage})
		return
	}
	e := newSSE(w)
	obj := kind
	if kind == "chat.completion" {
		obj = "chat.completion.chunk"
		e.send(map[string]any{"id": id, "object": obj, "created": time.Now().Unix(), "model": s.served,
			"choices": []map[string]any{{"index": 0, "delta": map[string]any{"role": "assistant", "content": ""}, "finish_reason": nil}}, simclock.ElapsedField: 0})
	}
	last := 0.0
	_, err := s.llmRunDue(q.due(), in, out, cached, func(n int, ms float64) {
		last = ms
		c := chunk(n)
		if n == out {
			c["finish_reason"] = "length"
		}
		e.send(map[string]any{"id": id, "object": obj, "created": time.Now().Unix(), "model": s.served, "choices": []map[string]any{c}, simclock.ElapsedField: simNS(ms)})
	})
	if err != nil {
		abort()
	}
	if q.StreamOptions != nil && q.StreamOptions.IncludeUsage {
		e.send(map[string]any{"id": id, "object": obj, "created": time.Now().Unix(), "model": s.served, "choices": []any{}, "usage": usage, simclock.ElapsedField: simNS(last)})
	}
	e.done()
}
