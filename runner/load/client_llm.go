package load

// The streamed LLM requests, measured as bench_serving measures them (see the package doc and
// docs/llm-benchmark.md): the time to first token, every inter-token latency and the end-to-end
// latency, stamped on the run's clock, and the token counts the server reports, each checked
// against what the request asked.

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

// LLM APIs. Streamed (LLMRequests), they are the LLM benchmark; Build sends the first two
// unstreamed.
const (
	APIGenerate    = "generate"    // SGLang POST /generate (native; accepts input_ids)
	APICompletions = "completions" // OpenAI POST /v1/completions (accepts token id prompts)
	APIChat        = "chat"        // OpenAI POST /v1/chat/completions (text only)
)

// LLMPath is the URL path of a streamed LLM API, "" for any other API.
func LLMPath(api string) string {
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

// MaxLine bounds one line of a streamed response: a longer line fails its request without being
// read further. Every line is held whole while it is parsed, so a request in flight holds at
// most this much of its stream (a /generate event repeats the whole text so far: 16 MiB is
// millions of tokens).
const MaxLine = 16 << 20

// maxEventValues bounds the JSON values of one event for a request of maxTokens output tokens:
// the parser allocates about 100 bytes a value, so a 16 MiB event of `[0,0,0,…]` would cost
// close to a gigabyte. An event repeats at most the request's tokens (text, output ids) and a
// few dozen fields of metadata; 16 values a token and 4096 more are far beyond that.
func maxEventValues(maxTokens int) int { return 4096 + 16*maxTokens }

// asked is what a request asked for, against which every number its server reports is
// checked.
type asked struct {
	// maxTokens is the request's max_tokens (max_new_tokens on /generate).
	maxTokens int
	// maxPrompt bounds the prompt tokens a server may report: no tokenizer makes more than one
	// token a byte of the request, and a chat template adds at most a few thousand.
	maxPrompt int
}

// promptSlack is the chat template's allowance in asked.maxPrompt.
const promptSlack = 1 << 16

func askedOf(req Request) asked {
	return asked{maxTokens: req.Tokens, maxPrompt: len(req.Body) + promptSlack}
}

// stream reads a server-sent-events response and fills r with the token times. It returns
// when the server sends [DONE] or closes the stream; a stream that ends without [DONE] is an
// error, since a server that died mid-response must not count as a short, fast completion.
//
// Every count the server reports is checked against what the request asked (a): no more output
// tokens than max_tokens, none negative, none going backwards. What r holds is bounded by it:
// at most a.maxTokens inter-token latencies, lines of at most MaxLine bytes.
//
// Every time is the clock's stamp of an event read at that moment, t0 being when the request
// was sent: this machine's time since t0, or what a simulated server reports (SimClock).
func stream(body io.Reader, api string, a asked, t0 time.Time, clk Clock, r *Record) error {
	br := bufio.NewReaderSize(body, 16<<10)
	var p fastjson.Parser
	var long []byte            // a line longer than br's buffer, gathered
	var at, last time.Duration // the latest event's stamp; the latest token's
	first := true              // no token yet
	lastTokens := 0
	reported, lastReported := false, 0
	for {
		line, err := readLine(br, &long)
		if err != nil && !errors.Is(err, io.EOF) {
			// Not a partial line to parse: a timeout or a broken connection says so itself.
			var v *violation
			if errors.As(err, &v) {
				return err
			}
			return fmt.Errorf("reading the stream: %w", err)
		}
		line = bytes.TrimSpace(line)
		if len(line) > 0 {
			data, ok := bytes.CutPrefix(line, []byte("data:"))
			if ok {
				data = bytes.TrimSpace(data)
				el := time.Since(t0) // when the event was read, before its parse
				if bytes.Equal(data, []byte("[DONE]")) {
					r.Latency = clk.Event(el, nil, at)
					if !reported {
						// No usage in the stream: count the chunks that carried text.
						r.OutputTokens = lastTokens
					}
					return nil
				}
				if n, limit := jsonValues(data), maxEventValues(a.maxTokens); n > limit {
					return violationf("server sent an event of more than %d JSON values for a request of max_tokens %d", limit, a.maxTokens)
				}
				v, perr := p.ParseBytes(data)
				if perr != nil {
					return fmt.Errorf("bad event %q: %v", clip(string(data)), perr)
				}
				if msg := v.Get("error"); msg != nil {
					return fmt.Errorf("server error in stream: %s", clip(msg.String()))
				}
				at = clk.Event(el, v, at)
				n, got, counted, cerr := event(api, v, a)
				if cerr != nil {
					return cerr
				}
				if counted {
					if reported && n < lastReported {
						return violationf("server's completion token count went backwards from %d to %d", lastReported, n)
					}
					reported, lastReported = true, n
				}
				if got && api != APIGenerate && !first && lastTokens >= a.maxTokens {
					return violationf("server streamed more than %d chunks of text for a request of max_tokens %d", lastTokens, a.maxTokens)
				}
				if got && (api != APIGenerate || first || n > lastTokens) {
					switch {
					case first:
						r.TTFT = at
						r.firstAt = t0.Add(el)
					case api == APIGenerate:
						// One chunk can carry several tokens: bench_serving spreads the gap
						// over them. n ≤ a.maxTokens (event checked it), so the ITLs are too.
						k := n - lastTokens
						gap := (at - last) / time.Duration(k)
						for range k {
							r.ITL = append(r.ITL, gap)
						}
					default:
						r.ITL = append(r.ITL, at-last)
					}
					first, last = false, at
					if api == APIGenerate {
						lastTokens = n
					} else {
						lastTokens++
					}
				}
				if counted {
					r.OutputTokens = n
					in, ierr := promptTokens(api, v, a)
					if ierr != nil {
						return ierr
					}
					if in > 0 {
						r.InputTokens = in
					}
				}
				r.Latency = at
			}
		}
		if err != nil { // io.EOF
			return errors.New("the stream ended before [DONE]")
		}
	}
}

// readLine reads one line (with its newline) of at most MaxLine bytes. A line longer than br's
// buffer is gathered in *long, which the caller keeps for the next long line. A line that
// passes MaxLine is an error: nothing more of it is read.
func readLine(br *bufio.Reader, long *[]byte) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		return line, err
	}
	*long = append((*long)[:0], line...)
	for errors.Is(err, bufio.ErrBufferFull) {
		line, err = br.ReadSlice('\n')
		if len(*long)+len(line) > MaxLine {
			return nil, violationf("server sent a line longer than %d MiB; not read further", MaxLine>>20)
		}
		*long = append(*long, line...)
	}
	return *long, err
}

// jsonValues counts an upper bound of the values in JSON text (one more than its commas and
// opening brackets outside strings) without parsing it.
func jsonValues(b []byte) int {
	n, inStr, esc := 1, false, false
	for _, c := range b {
		switch {
		case esc:
			esc = false
		case inStr:
			switch c {
			case '\\':
				esc = true
			case '"':
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == ',' || c == '[' || c == '{':
			n++
		}
	}
	return n
}

// event reads one streamed chunk: whether it carries generated text, and the cumulative output
// token count when the chunk reports one (counted). A count that is not a whole number between
// 0 and the request's max_tokens is a violation.
func event(api string, v *fastjson.Value, a asked) (tokens int, text, counted bool, err error) {
	var m *fastjson.Value
	switch api {
	case APIGenerate:
		text = len(v.GetStringBytes("text")) > 0
		if m = v.Get("meta_info", "completion_tokens"); m == nil {
			return 0, text, false, nil
		}
	default:
		ch := v.GetArray("choices")
		if len(ch) > 0 {
			if api == APIChat {
				text = len(ch[0].GetStringBytes("delta", "content")) > 0
			} else {
				text = len(ch[0].GetStringBytes("text")) > 0
			}
		}
		u := v.Get("usage")
		if u == nil || u.Type() != fastjson.TypeObject {
			return 0, text, false, nil
		}
		if m = u.Get("completion_tokens"); m == nil {
			return 0, text, true, nil
		}
	}
	tokens, err = count(m, "completion")
	if err == nil && tokens > a.maxTokens {
		err = violationf("server reported %d completion tokens for a request of max_tokens %d", tokens, a.maxTokens)
	}
	return tokens, text, true, err
}

// count reads a reported token count: a whole number, not negative.
func count(m *fastjson.Value, what string) (int, error) {
	n, err := m.Int()
	if err != nil {
		return 0, violationf("server reported %s tokens %s, not a token count", what, clip(m.String()))
	}
	if n < 0 {
		return 0, violationf("server reported %d %s tokens; a count cannot be negative", n, what)
	}
	return n, nil
}

// promptTokens is the prompt token count an event reports (0 when none), checked against the
// request's size.
func promptTokens(api string, v *fastjson.Value, a asked) (int, error) {
	m := v.Get("usage", "prompt_tokens")
	if api == APIGenerate {
		m = v.Get("meta_info", "prompt_tokens")
	}
	if m == nil {
		return 0, nil
	}
	n, err := count(m, "prompt")
	if err == nil && n > a.maxPrompt {
		err = violationf("server reported %d prompt tokens for a request of %d bytes", n, a.maxPrompt-promptSlack)
	}
	return n, err
}

// LLMRequests returns the Build of a streamed LLM run: request i (warmup or measured) sends
// prompts[i mod len(prompts)] to api, its body built once per prompt.
func LLMRequests(api, model string, prompts []Prompt) (func(i int, measured bool) (Request, error), error) {
	if len(prompts) == 0 {
		return nil, errors.New("no prompts to send")
	}
	path := LLMPath(api)
	if path == "" {
		return nil, fmt.Errorf("unknown LLM API %q (want generate, completions or chat)", api)
	}
	reqs := make([]Request, len(prompts))
	for i, p := range prompts {
		if p.OutputLen < 1 {
			// Every count the server reports is checked against it (see stream).
			return nil, fmt.Errorf("prompt %d asks for %d output tokens; want at least 1", i, p.OutputLen)
		}
		b, err := Body(api, model, p)
		if err != nil {
			return nil, err
		}
		reqs[i] = Request{Method: http.MethodPost, Path: path, Body: b, Tokens: p.OutputLen, InputTokens: p.InputLen,
			Stream: true, API: api}
	}
	return func(i int, _ bool) (Request, error) { return reqs[i%len(reqs)], nil }, nil
}

// doStream sends a streamed request and reads its events as they come. A response that
// is not 200 fails the request with the start of its body.
func (l *loader) doStream(ctx context.Context, w *worker, req Request, t0 time.Time, rec *Record) error {
	resp, err := l.transport(req).roundTrip(ctx, w, req.Method, req.Path, req.Body, true)
	if err != nil {
		rec.Latency = l.clock.Event(time.Since(t0), nil, 0)
		return err
	}
	defer resp.Body.Close()
	rec.Status = resp.StatusCode
	if err := redirected(resp); err != nil {
		rec.Latency = l.clock.Event(time.Since(t0), nil, 0)
		return err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, MaxErrorBody))
		rec.Latency = l.clock.Event(time.Since(t0), nil, 0)
		rec.Body = clipBody(b)
		return httpError(resp.StatusCode, b)
	}
	cb := &countingReader{r: resp.Body}
	err = stream(cb, req.API, askedOf(req), t0, l.clock, rec)
	rec.Bytes = cb.n
	if err != nil {
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
			// A server that ignored "stream": true answers one JSON document: say so.
			err = fmt.Errorf("%w (the response's Content-Type is %q, not text/event-stream)", err, clip(ct))
		}
		return err
	}
	if rec.OutputTokens == 0 {
		return errors.New("the server streamed no token")
	}
	return nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
