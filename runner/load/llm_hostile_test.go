package load

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sglprof/runner/reports/rundir"
)

// events serves every API path with the given SSE lines (each followed by a blank line).
func events(t *testing.T, lines ...string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, l := range lines {
			fmt.Fprintf(w, "%s\n\n", l)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// allocated runs f and returns the bytes the process allocated meanwhile (the tests of this
// file do not run in parallel, so that is f's and its server's).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// One request of max_tokens 8 (RandomPrompts(1, 4, 8, ...)) against a server that reports
// counts it was not asked for: the request fails with the reason, marked a violation, and the
// client holds at most max_tokens ITLs. A single event of 50 million tokens appended 50 million
// ITLs (400 MB; 2e9 ran the runner out of memory) and the request counted as complete; a chat
// usage of -5 tokens gave a negative throughput.
func TestServerReportedCountsAreChecked(t *testing.T) {
	gen := func(n string) string {
		return `data: {"text":"ab","meta_info":{"prompt_tokens":4,"completion_tokens":` + n + `}}`
	}
	chunk := `data: {"choices":[{"index":0,"delta":{"content":"x"},"text":"x"}]}`
	usage := func(in, out string) string {
		return `data: {"choices":[],"usage":{"prompt_tokens":` + in + `,"completion_tokens":` + out + `}}`
	}
	many := make([]string, 0, 12)
	for range 12 {
		many = append(many, chunk)
	}
	for _, tc := range []struct {
		name, api string
		lines     []string
		want      string
	}{
		{"generate 50 million tokens in one event", APIGenerate, []string{gen("1"), gen("50000000"), "data: [DONE]"},
			"server reported 50000000 completion tokens for a request of max_tokens 8"},
		{"generate negative tokens", APIGenerate, []string{gen("-3"), "data: [DONE]"}, "-3 completion tokens; a count cannot be negative"},
		{"generate count going backwards", APIGenerate, []string{gen("5"), gen("2"), "data: [DONE]"}, "went backwards from 5 to 2"},
		{"generate count not an integer", APIGenerate, []string{gen("1e20"), "data: [DONE]"}, "completion tokens 1e20, not a token count"},
		{"generate negative prompt tokens", APIGenerate, []string{`data: {"text":"a","meta_info":{"prompt_tokens":-1,"completion_tokens":1}}`, "data: [DONE]"},
			"-1 prompt tokens"},
		{"chat usage of -5 tokens", APIChat, []string{chunk, chunk, usage("4", "-5"), "data: [DONE]"}, "-5 completion tokens; a count cannot be negative"},
		{"completions usage of 50 million", APICompletions, []string{chunk, usage("4", "50000000"), "data: [DONE]"},
			"50000000 completion tokens for a request of max_tokens 8"},
		{"completions absurd prompt tokens", APICompletions, []string{chunk, usage("9000000000", "1"), "data: [DONE]"}, "9000000000 prompt tokens for a request of"},
		{"chat more chunks than max_tokens", APIChat, append(many, usage("4", "8"), "data: [DONE]"),
			"more than 8 chunks of text for a request of max_tokens 8"},
		{"an event of a million values", APIGenerate, []string{`data: {"text":"a","output_ids":[` + strings.Repeat("0,", 1<<20) + `0],"meta_info":{"completion_tokens":1}}`, "data: [DONE]"},
			"more than 4224 JSON values for a request of max_tokens 8"},
	} {
		for _, tr := range transports {
			t.Run(tc.name+"/"+string(tr), func(t *testing.T) {
				url := events(t, tc.lines...)
				var rs []Record
				var err error
				alloc := allocated(func() {
					rs, _, err = Run(context.Background(), llm(t, url, tc.api, "m", RandomPrompts(1, 4, 8, 1, 1), Config{Requests: 1, Transport: tr}))
				})
				if err != nil {
					t.Fatal(err)
				}
				r := rs[0]
				t.Logf("error: %s", r.Error)
				if r.OK() || !strings.Contains(r.Error, tc.want) || !r.Violation {
					t.Fatalf("error %q (violation %v), want the violation %q", r.Error, r.Violation, tc.want)
				}
				if len(r.ITL) > 8 || r.OutputTokens > 8 || r.OutputTokens < 0 {
					t.Fatalf("%d ITLs, %d output tokens recorded for a request of max_tokens 8", len(r.ITL), r.OutputTokens)
				}
				if alloc > 100<<20 {
					t.Fatalf("the client allocated %d MB for one request of 8 tokens", alloc>>20)
				}
				if s := SummarizeLLM(rs, time.Second, rundir.LLMSLO{}, false); s.Completed != 0 || s.Failed != 1 || s.OutputThroughput != 0 {
					t.Fatalf("summary %+v: the violating request must not count", s)
				}
			})
		}
	}
}

// A data line without its newline is read up to MaxLine and no further: a 1.2 GB line was
// read whole (3.6 GB). The server offers 256 MiB; the client must have stopped taking it
// long before (what it wrote is bounded by MaxLine plus the sockets' buffers).
func TestOverlongLineFailsWithoutBeingReadWhole(t *testing.T) {
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) { testOverlongLine(t, tr) })
	}
}

func testOverlongLine(t *testing.T, tr Transport) {
	var written atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, `data: {"text":"`)
		buf := []byte(strings.Repeat("a", 64<<10))
		for range 256 << 20 / len(buf) {
			n, err := w.Write(buf)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}))
	var rs []Record
	alloc := allocated(func() {
		var err error
		rs, _, err = Run(context.Background(), llm(t, srv.URL, APIGenerate, "", RandomPrompts(1, 4, 8, 1, 1), Config{Requests: 1, Transport: tr}))
		if err != nil {
			t.Fatal(err)
		}
	})
	srv.Close() // waits for the handler, which ends when its writes fail
	if r := rs[0]; r.OK() || !r.Violation || !strings.Contains(r.Error, "line longer than 16 MiB; not read further") {
		t.Fatalf("error %q (violation %v), want the over-long line", r.Error, r.Violation)
	}
	if w := written.Load(); w > 64<<20 {
		t.Fatalf("the client read %d MiB of one line", w>>20)
	}
	if alloc > 128<<20 {
		t.Fatalf("the client allocated %d MB for a line it may hold 16 MiB of", alloc>>20)
	}
}

// An event longer than the client's 16 KiB read buffer is read whole (a /generate event repeats
// the text so far, so a long output makes long events): the first 16 KiB of such a line were
// overwritten before they were copied, and the event was silently lost.
func TestLongEventIsReadWhole(t *testing.T) {
	text := strings.Repeat("word ", 20000) // 100 kB
	url := events(t, `data: {"text":"`+text+`","meta_info":{"prompt_tokens":4,"completion_tokens":8}}`, "data: [DONE]")
	for _, tr := range transports {
		rs, _, err := Run(context.Background(), llm(t, url, APIGenerate, "", RandomPrompts(1, 4, 8, 1, 1), Config{Requests: 1, Transport: tr}))
		if err != nil {
			t.Fatal(err)
		}
		if r := rs[0]; !r.OK() || r.OutputTokens != 8 || r.TTFT <= 0 {
			t.Fatalf("%s: error %q, %d tokens, TTFT %s: want the long event's 8 tokens", tr, r.Error, r.OutputTokens, r.TTFT)
		}
	}
}

// A redirect is not followed: a 307 to another port measured the other server. A redirect
// loop ends at the first answer.
func TestRedirectIsNotFollowed(t *testing.T) {
	var otherHits atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		otherHits.Add(1)
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"text\":\"a\",\"meta_info\":{\"completion_tokens\":8}}\n\ndata: [DONE]\n\n")
	}))
	defer other.Close()
	var selfHits atomic.Int64
	var self *httptest.Server
	self = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		selfHits.Add(1)
		target := other.URL + r.URL.Path
		if r.URL.Query().Has("loop") || r.URL.Path == "/v1/completions" {
			target = self.URL + r.URL.Path // a loop
		}
		http.Redirect(w, r, target, http.StatusTemporaryRedirect)
	}))
	defer self.Close()
	for _, tr := range transports {
		for api, to := range map[string]string{APIGenerate: other.URL + "/generate", APICompletions: self.URL + "/v1/completions"} {
			rs, _, err := Run(context.Background(), llm(t, self.URL, api, "m", RandomPrompts(1, 4, 8, 1, 1), Config{Requests: 1, Transport: tr}))
			if err != nil {
				t.Fatal(err)
			}
			want := "server answered 307 redirect to " + to + "; not followed"
			if r := rs[0]; r.OK() || !r.Violation || !strings.Contains(r.Error, want) {
				t.Fatalf("%s %s: error %q (violation %v), want %q", tr, api, r.Error, r.Violation, want)
			}
		}
	}
	if otherHits.Load() != 0 || selfHits.Load() != 2*int64(len(transports)) {
		t.Fatalf("the other server got %d requests, the asked one %d: want 0 and one per request", otherHits.Load(), selfHits.Load())
	}
}

func writes(s string) func(net.Conn) { return func(c net.Conn) { io.WriteString(c, s) } }

const okStream = "data: {\"text\":\"a\",\"meta_info\":{\"completion_tokens\":8}}\n\ndata: [DONE]\n\n"

// Broken and hostile servers end each request within request_timeout with a clear error that
// is printable (no NUL, no escape sequence, valid UTF-8), and never with a hang.
func TestHostileServersEndWithAClearError(t *testing.T) {
	sse := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
	for _, tc := range []struct {
		name   string
		answer func(net.Conn)
		want   string // "" for a request that completes
	}{
		{"malformed SSE", writes(sse + "data: {\"text\":\n\ndata: [DONE]\n\n"), "bad event"},
		{"wrong Content-Type", writes("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"text\":\"ab\"}"),
			`the stream ended before [DONE] (the response's Content-Type is "application/json", not text/event-stream)`},
		{"HTTP/1.0 body to the close", writes("HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + okStream), ""},
		{"HTTP/1.0 body cut", writes("HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: {\"text\":\"a\"}\n\n"), "the stream ended before [DONE]"},
		{"bad chunk length", writes("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\ndata\r\n"), "chunk"},
		{"2 MiB of headers", writes("HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("h", 2<<20) + "\r\n\r\n"), "headers exceeded 1048576 bytes"},
		{"slowloris", func(c net.Conn) {
			io.WriteString(c, sse+"data: {\"text\":\"")
			for {
				if _, err := io.WriteString(c, "a"); err != nil {
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}, "request timed out (request_timeout)"},
		{"never answers", func(c net.Conn) { io.Copy(io.Discard, c) }, "request timed out (request_timeout)"},
		{"NUL bytes in an event", writes(sse + "data: {\"text\":\"\x00\x1b[31m\"}\n\n"), "the stream ended before [DONE]"},
		{"NUL bytes in an error event", writes(sse + "data: {\"error\":\"\x00\x1b[31mboom\"}\n\n"), "server error in stream"},
		{"NUL bytes outside JSON", writes(sse + "data: \x00{}\n\n"), "bad event"},
		{"invalid UTF-8 event", writes(sse + "data: \xff\xfe\x1b]0;pwned\x07\n\n"), "bad event"},
		{"error body with control characters", writes("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 12\r\n\r\n\x00\x1b[2J\xffboom!"), "HTTP 500: ?"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, _, err := Run(context.Background(), llm(t, answerServer(t, tc.answer), APIGenerate, "", RandomPrompts(1, 4, 8, 1, 1), Config{Requests: 1, Timeout: 300 * time.Millisecond}))
			if err != nil {
				t.Fatal(err)
			}
			r := rs[0]
			t.Logf("error: %s", r.Error)
			if tc.want == "" {
				if !r.OK() || r.OutputTokens != 8 {
					t.Fatalf("error %q, %d tokens: want 8 tokens", r.Error, r.OutputTokens)
				}
				return
			}
			if r.OK() || !strings.Contains(r.Error, tc.want) {
				t.Fatalf("error %q, want %q", r.Error, tc.want)
			}
			if !utf8.ValidString(r.Error) || strings.ContainsFunc(r.Error, unicode.IsControl) {
				t.Fatalf("error %q is not printable", r.Error)
			}
		})
	}
}
