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
	"unicode"
	"unicode/utf8"

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
	// Violation marks an Error that is the server breaking the API's contract (a token count
	// beyond what was asked or negative, an over-long line, a redirect, ...): its numbers cannot
	// be trusted, so such a request fails its cell whatever max_error_rate allows.
	Violation bool `json:"protocol_violation,omitempty"`
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

// violation is a response that breaks the API's contract: the request fails with it, and
// do marks the record (Result.Violation).
type violation struct{ msg string }

func (v *violation) Error() string { return v.msg }

func violationf(format string, args ...any) error {
	return &violation{msg: fmt.Sprintf(format, args...)}
}

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

func askedOf(p Prompt, body []byte) asked {
	return asked{maxTokens: p.OutputLen, maxPrompt: len(body) + promptSlack}
}

// stream reads a server-sent-events response and fills r with the token times. It returns
// when the server sends [DONE] or closes the stream; a stream that ends without [DONE] is an
// error, since a server that died mid-response must not count as a short, fast completion.
//
// Every count the server reports is checked against what the request asked (a): no more output
// tokens than max_tokens, none negative, none going backwards. What r holds is bounded by it:
// at most a.maxTokens inter-token latencies, lines of at most MaxLine bytes.
//
// With simClock, times are the server's: each chunk's SimElapsedField (time since t0 on the
// simulated server's clock), and [DONE] is at the last chunk's time.
func stream(body io.Reader, api string, a asked, t0 time.Time, now func() time.Time, simClock bool, r *Result) error {
	br := bufio.NewReaderSize(body, 16<<10)
	var p fastjson.Parser
	var last time.Time
	var long []byte // a line longer than br's buffer, gathered
	simAt := t0
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
				if simClock {
					if ns := v.Get(SimElapsedField); ns != nil {
						simAt = t0.Add(time.Duration(ns.GetInt64()))
						ts = simAt
					}
				}
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
				if got && api != APIGenerate && !last.IsZero() && lastTokens >= a.maxTokens {
					return violationf("server streamed more than %d chunks of text for a request of max_tokens %d", lastTokens, a.maxTokens)
				}
				if got && (api != APIGenerate || last.IsZero() || n > lastTokens) {
					switch {
					case last.IsZero():
						r.TTFT = ts.Sub(t0)
						r.firstAt = ts
					case api == APIGenerate:
						// One chunk can carry several tokens: bench_serving spreads the gap
						// over them. n ≤ a.maxTokens (event checked it), so the ITLs are too.
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
					in, ierr := promptTokens(api, v, a)
					if ierr != nil {
						return ierr
					}
					if in > 0 {
						r.InputTokens = in
					}
				}
				r.E2E = ts.Sub(t0)
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

// SimElapsedField is the streamed chunks' key of the simulated server's time since the
// request arrived, in ns (the runner's LLM simulator sends it; see Config.SimClock).
const SimElapsedField = "sim_elapsed_ns"

// do sends one request and records it. The request's context carries the per-request timeout,
// so a stream that stalls ends as an error, never a hang. With simClock the token times are the
// simulated server's (see stream). A redirect is not followed (NewClient's client returns it):
// the runner measures the server it was pointed at or none.
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
	if err := redirected(url, resp); err != nil {
		r.E2E = time.Since(t0)
		r.Error, r.Violation = err.Error(), true
		return
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		r.E2E = time.Since(t0)
		r.Error = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, clip(strings.TrimSpace(string(b))))
		return
	}
	if err := stream(resp.Body, api, askedOf(p, body), t0, time.Now, simClock, r); err != nil {
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
			// A server that ignored "stream": true answers one JSON document: say so.
			err = fmt.Errorf("%w (the response's Content-Type is %q, not text/event-stream)", err, clip(ct))
		}
		r.Error = reqError(ctx, err)
		var v *violation
		r.Violation = errors.As(err, &v)
	}
	if r.OutputTokens == 0 && r.Error == "" {
		r.Error = "the server streamed no token"
	}
}

// redirected says why a response is not the asked server's answer: a redirect (NewClient does
// not follow them; a 307 to another port would measure another server), or a response a
// caller's own client got by following one.
func redirected(url string, resp *http.Response) error {
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		loc, err := resp.Location()
		if err != nil {
			return violationf("server answered %d redirect without a usable Location; not followed", resp.StatusCode)
		}
		return violationf("server answered %d redirect to %s; not followed", resp.StatusCode, clip(loc.String()))
	}
	if resp.Request != nil && resp.Request.URL != nil && resp.Request.URL.String() != url {
		return violationf("the request was redirected to %s; redirects are not measured", clip(resp.Request.URL.String()))
	}
	return nil
}

func reqError(ctx context.Context, err error) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return "request timed out (request_timeout): " + err.Error()
	}
	return err.Error()
}

// clip shortens a server's text for an error message and makes it printable: invalid UTF-8 and
// control characters (NUL, ESC, ...) become '?', so a hostile answer cannot drive a terminal
// that shows the cell's reasons.
func clip(s string) string {
	cut := len(s) > 300
	if cut {
		s = s[:300]
	}
	s = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s) // an invalid byte reads as utf8.RuneError
	if cut {
		s += "…"
	}
	return s
}
