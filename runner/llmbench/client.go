package llmbench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/valyala/fastjson"
)

// APIs the benchmark drives.
const (
	APIGenerate    = "generate"    // SGLang POST /generate (native; accepts input_ids)
	APICompletions = "completions" // OpenAI POST /v1/completions (accepts token id prompts)
	APIChat        = "chat"        // OpenAI POST /v1/chat/completions (text only)
)

// Path is the URL path of an API.
func Path(api string) string {
	switch api {
	case APIGenerate:
		return "/generate"
	case APICompletions:
		return "/v1/completions"
	case APIChat:
		return "/v1/chat/completions"
	}
	return ""
}

// Exact reports whether an API receives prompts as token ids, so input lengths are exact.
func Exact(api string) bool { return api == APIGenerate || api == APICompletions }

// Result is one request's record. Times are offsets (Start from the benchmark's start, the rest
// from the request's own start). Tokens are the counts the server reported; when it reported
// none, the lengths asked for.
type Result struct {
	Index        int             `json:"index"`
	Start        time.Duration   `json:"start_ns"`
	TTFT         time.Duration   `json:"ttft_ns"`
	E2E          time.Duration   `json:"e2e_ns"`
	ITL          []time.Duration `json:"itl_ns,omitempty"`
	InputTokens  int             `json:"input_tokens"`
	OutputTokens int             `json:"output_tokens"`
	Error        string          `json:"error,omitempty"`
	// firstAt is when the first token was read, for the benchmark of the client's own delay.
	firstAt time.Time
}

// OK reports whether the request completed.
func (r *Result) OK() bool { return r.Error == "" }

// TPOT is (E2E − TTFT)/(output tokens − 1), bench_serving's time per output token after the
// first; ok is false for requests of one token or less.
func (r *Result) TPOT() (time.Duration, bool) {
	if r.OutputTokens <= 1 {
		return 0, false
	}
	return (r.E2E - r.TTFT) / time.Duration(r.OutputTokens-1), true
}

// Body builds the JSON request body of a prompt for an API, streamed, greedy, with ignore_eos so
// every request generates the asked-for output length (bench_serving's defaults).
func Body(api, model string, p Prompt) ([]byte, error) {
	var v any
	switch api {
	case APIGenerate:
		m := map[string]any{
			"sampling_params": map[string]any{"temperature": 0.0, "max_new_tokens": p.OutputLen, "ignore_eos": true},
			"stream":          true,
		}
		if p.IDs != nil {
			m["input_ids"] = p.IDs
		} else {
			m["text"] = p.Text
		}
		v = m
	case APICompletions, APIChat:
		m := map[string]any{
			"model":          model,
			"temperature":    0.0,
			"max_tokens":     p.OutputLen,
			"stream":         true,
			"ignore_eos":     true,
			"stream_options": map[string]any{"include_usage": true},
		}
		if api == APIChat {
			m["messages"] = []map[string]string{{"role": "user", "content": p.Text}}
		} else if p.IDs != nil {
			m["prompt"] = p.IDs
		} else {
			m["prompt"] = p.Text
		}
		v = m
	default:
		return nil, fmt.Errorf("unknown LLM API %q (want generate, completions or chat)", api)
	}
	return json.Marshal(v)
}

// stream reads a server-sent-events response and fills r with the token times. It returns
// when the server sends [DONE] or closes the stream; a stream that ends without [DONE] is an
// error, since a server that died mid-response must not count as a short, fast completion.
//
// With simClock, times are the server's: each chunk's SimElapsedField (time since t0 on the
// simulated server's clock), and [DONE] is at the last chunk's time.
func stream(body io.Reader, api string, t0 time.Time, now func() time.Time, simClock bool, r *Result) error {
	br := bufio.NewReaderSize(body, 16<<10)
	var p fastjson.Parser
	var last time.Time
	simAt := t0
	lastTokens := 0
	reported := false
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// An event longer than the buffer: gather it whole.
			rest, err2 := br.ReadBytes('\n')
			line = append(append([]byte(nil), line...), rest...)
			err = err2
		}
		line = bytes.TrimSpace(line)
		if len(line) > 0 {
			data, ok := bytes.CutPrefix(line, []byte("data:"))
			if ok {
				data = bytes.TrimSpace(data)
				ts := now()
				if simClock {
					ts = simAt
				}
				if bytes.Equal(data, []byte("[DONE]")) {
					r.E2E = ts.Sub(t0)
					if !reported {
						// No usage in the stream: count the chunks that carried text.
						r.OutputTokens = lastTokens
					}
					return nil
				}
				v, perr := p.ParseBytes(data)
				if perr != nil {
					return fmt.Errorf("bad event %q: %v", clip(string(data)), perr)
				}
				if msg := v.Get("error"); msg != nil {
					return fmt.Errorf("server error in stream: %s", clip(msg.String()))
				}
				if simClock {
					if ns := v.Get(SimElapsedField); ns != nil {
						simAt = t0.Add(time.Duration(ns.GetInt64()))
						ts = simAt
					}
				}
				n, got, counted := event(api, v)
				if counted {
					reported = true
				}
				if got && (api != APIGenerate || last.IsZero() || n > lastTokens) {
					switch {
					case last.IsZero():
						r.TTFT = ts.Sub(t0)
						r.firstAt = ts
					case api == APIGenerate:
						// One chunk can carry several tokens: bench_serving spreads the gap
						// over them.
						k := n - lastTokens
						gap := ts.Sub(last) / time.Duration(k)
						for range k {
							r.ITL = append(r.ITL, gap)
						}
					default:
						r.ITL = append(r.ITL, ts.Sub(last))
					}
					last = ts
					if api == APIGenerate {
						lastTokens = n
					} else {
						lastTokens++
					}
				}
				if counted {
					r.OutputTokens = n
					if in := promptTokens(api, v); in > 0 {
						r.InputTokens = in
					}
				}
				r.E2E = ts.Sub(t0)
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return errors.New("the stream ended before [DONE]")
			}
			return err
		}
	}
}

// event reads one streamed chunk: whether it carries generated text, and the cumulative output
// token count when the chunk reports one (counted).
func event(api string, v *fastjson.Value) (tokens int, text, counted bool) {
	switch api {
	case APIGenerate:
		text = len(v.GetStringBytes("text")) > 0
		if m := v.Get("meta_info", "completion_tokens"); m != nil {
			return m.GetInt(), text, true
		}
		return 0, text, false
	default:
		ch := v.GetArray("choices")
		if len(ch) > 0 {
			if api == APIChat {
				text = len(ch[0].GetStringBytes("delta", "content")) > 0
			} else {
				text = len(ch[0].GetStringBytes("text")) > 0
			}
		}
		if u := v.Get("usage"); u != nil && u.Type() == fastjson.TypeObject {
			return u.GetInt("completion_tokens"), text, true
		}
		return 0, text, false
	}
}

func promptTokens(api string, v *fastjson.Value) int {
	if api == APIGenerate {
		return v.GetInt("meta_info", "prompt_tokens")
	}
	return v.GetInt("usage", "prompt_tokens")
}

// SimElapsedField is the streamed chunks' key of the simulated server's time since the
// request arrived, in ns (the runner's LLM simulator sends it; see Config.SimClock).
const SimElapsedField = "sim_elapsed_ns"

// do sends one request and records it. The request's context carries the per-request timeout,
// so a stream that stalls ends as an error, never a hang. With simClock the token times are the
// simulated server's (see stream).
func do(ctx context.Context, c *http.Client, url, api string, body []byte, p Prompt, simClock bool, r *Result) {
	r.InputTokens, r.OutputTokens = p.InputLen, 0
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		r.Error = err.Error()
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		r.E2E = time.Since(t0)
		r.Error = reqError(ctx, err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		r.E2E = time.Since(t0)
		r.Error = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, clip(strings.TrimSpace(string(b))))
		return
	}
	if err := stream(resp.Body, api, t0, time.Now, simClock, r); err != nil {
		r.Error = reqError(ctx, err)
	}
	if r.OutputTokens == 0 && r.Error == "" {
		r.Error = "the server streamed no token"
	}
}

func reqError(ctx context.Context, err error) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return "request timed out (request_timeout): " + err.Error()
	}
	return err.Error()
}

func clip(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}
