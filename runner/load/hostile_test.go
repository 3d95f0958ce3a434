package load

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sglprof/runner/reports/rundir"
)

// answerServer answers each request on a raw connection with answer, so a test can send what
// net/http's server would not (endless headers, bad chunk lengths, HTTP/1.0 bodies).
func answerServer(t *testing.T, answer func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	t.Cleanup(func() { close(done); ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				go func() { <-done; c.Close() }()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				answer(c)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// endless writes head and then filler until the client stops reading, and counts what it wrote.
func endless(head, filler string, written *atomic.Int64) func(net.Conn) {
	return func(c net.Conn) {
		io.WriteString(c, head)
		b := []byte(strings.Repeat(filler, (64<<10)/len(filler)))
		for range (256 << 20) / len(b) {
			n, err := c.Write(b)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}
}

// runOne sends one request of spec to base and returns its record.
func runOne(t *testing.T, base string, spec Spec, timeout time.Duration) (Record, rundir.LoadSummary) {
	t.Helper()
	sum, recs, err := runSummarized(context.Background(), Config{BaseURL: base, Requests: 1, Timeout: timeout,
		Build: func(i int, measured bool) (Request, error) { return Build(spec, measured) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("record: status %d error %q body %q", recs[0].Status, recs[0].Error, recs[0].Body)
	return recs[0], sum
}

// What a server reports is checked against what was asked: no more tokens than max_tokens, no
// more images than n, nothing negative. A violating response fails its request, marked, and the
// summary counts it with its reason.
func TestLoadReportedNumbersAreChecked(t *testing.T) {
	llm := Spec{API: APICompletions, OutputLen: 8}
	img := Spec{API: APIImages, Prompt: "p", N: 1}
	for _, tc := range []struct {
		name string
		spec Spec
		body string
		want string
	}{
		{"50 million tokens", llm, `{"usage":{"completion_tokens":50000000}}`, "server reported 50000000 completion tokens for a request of max_tokens 8"},
		{"negative tokens", Spec{API: APIGenerate, OutputLen: 8}, `{"meta_info":{"completion_tokens":-5}}`, "server reported -5 completion tokens; a count cannot be negative"},
		{"more images than n", img, `{"data":[{},{},{}]}`, "server returned 3 images for a request of n = 1"},
		{"negative inference time", img, `{"data":[{}],"inference_time_s":-2}`, "server reported inference_time_s -2; a time cannot be negative"},
		{"negative peak memory", img, `{"data":[{}],"peak_memory_mb":-1}`, "server reported peak_memory_mb -1; a memory size cannot be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, tc.body) }))
			defer srv.Close()
			r, sum := runOne(t, srv.URL, tc.spec, time.Minute)
			if r.OK() || !r.Violation || r.Error != tc.want {
				t.Fatalf("record %+v, want the violation %q", r, tc.want)
			}
			if sum.Errors != 1 || sum.ProtocolViolations != 1 || sum.FirstViolation != tc.want || sum.TokensPerS != 0 || sum.ImagesPerS != 0 {
				t.Fatalf("summary %+v", sum)
			}
		})
	}
}

// Neither client follows a redirect (a 307 to another port measured the other server): the
// request fails naming where it pointed, and a redirect loop ends at its first answer.
func TestLoadRedirectIsNotFollowed(t *testing.T) {
	var otherHits atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		otherHits.Add(1)
		io.WriteString(w, `{"data":[{}]}`)
	}))
	defer other.Close()
	var self *httptest.Server
	self = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		to := other.URL
		if r.URL.Path == "/v1/videos" {
			to = self.URL // a loop
		}
		http.Redirect(w, r, to+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer self.Close()
	cases := map[string]string{APIImages: other.URL + "/v1/images/generations", APIVideos: self.URL + "/v1/videos"}
	for api, to := range cases {
		want := "server answered 307 redirect to " + to + "; not followed"
		r, sum := runOne(t, self.URL, Spec{API: api, Prompt: "p"}, time.Minute)
		if r.OK() || !r.Violation || !strings.Contains(r.Error, want) || sum.ProtocolViolations != 1 {
			t.Fatalf("%s (own client): record %+v, want %q", api, r, want)
		}
		// The net/http client of https servers.
		req, _ := Build(Spec{API: api, Prompt: "p"}, true)
		l := testLoader(t, Config{BaseURL: self.URL, Timeout: time.Minute, Transport: TransportNetHTTP})
		r = l.do(context.Background(), &worker{}, req)
		if r.OK() || !r.Violation || !strings.Contains(r.Error, want) {
			t.Fatalf("%s (net/http): record %+v, want %q", api, r, want)
		}
	}
	if otherHits.Load() != 0 {
		t.Fatalf("the other server got %d requests", otherHits.Load())
	}
}

// A response is read up to its bounds and no further: headers past MaxResponseHeader (an
// endless header line, or endless 103s, were held whole by http.ReadResponse), a body past
// MaxResponseBody, chunk framing and trailers past the body's budget.
func TestLoadResponseBounds(t *testing.T) {
	for _, tc := range []struct {
		name, head, filler, want string
		violation                bool
	}{
		{"endless header line", "HTTP/1.1 200 OK\r\nX-Big: ", "h", "server sent response headers longer than 1 MiB; not read further", false},
		{"endless 103s", "", "HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n", "server sent response headers longer than 1 MiB", false},
		{"body without end", "HTTP/1.1 200 OK\r\n\r\n", "b", "server sent a response body longer than 64 MiB; not read further", true},
		{"chunked body without end", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "4\r\nbbbb\r\n", "server sent more than 65 MiB after the headers of one response", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var written atomic.Int64
			r, sum := runOne(t, answerServer(t, endless(tc.head, tc.filler, &written)), Spec{API: APIImages, Prompt: "p"}, time.Minute)
			if r.OK() || !strings.Contains(r.Error, tc.want) || r.Violation != tc.violation || (sum.ProtocolViolations == 1) != tc.violation {
				t.Fatalf("record %+v, want %q (violation %v)", r, tc.want, tc.violation)
			}
			if w := written.Load(); w > 128<<20 {
				t.Fatalf("the client read %d MiB of one response", w>>20)
			}
		})
	}
	// (The net/http client of https servers reads bodies with the same readBody.)
}

// Broken and hostile servers end each request within the request timeout with a clear error
// whose text and kept body are printable (no NUL, no escape sequence, valid UTF-8).
func TestLoadHostileServersEndWithAClearError(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(net.Conn)
		want   string // "" for a request that completes
	}{
		{"HTTP/1.0 body to the close", func(c net.Conn) { io.WriteString(c, "HTTP/1.0 200 OK\r\n\r\n{\"data\":[{}]}") }, ""},
		{"bad chunk length", func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nxx\r\n")
		}, "reading the response: invalid byte in chunk length"},
		{"wrong Content-Type", func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 4\r\n\r\n\x89PNG")
		}, ""},
		{"slowloris", func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
			for {
				if _, err := io.WriteString(c, "a"); err != nil {
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}, "context deadline exceeded"},
		{"never answers", func(c net.Conn) { io.Copy(io.Discard, c) }, "context deadline exceeded"},
		{"NUL bytes and invalid UTF-8 in an error body", func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 13\r\n\r\n\x00\x1b[2J\xff\xfeboom!\n")
		}, "HTTP 500"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := runOne(t, answerServer(t, tc.answer), Spec{API: APIImages, Prompt: "p"}, 300*time.Millisecond)
			if tc.want == "" {
				if !r.OK() || r.Images != 1 {
					t.Fatalf("record %+v, want one image", r)
				}
				return
			}
			if r.OK() || !strings.Contains(r.Error, tc.want) {
				t.Fatalf("error %q, want %q", r.Error, tc.want)
			}
			for _, s := range []string{r.Error, r.Body} {
				if !utf8.ValidString(s) || strings.ContainsFunc(s, func(c rune) bool { return unicode.IsControl(c) && c != '\n' }) {
					t.Fatalf("%q is not printable", s)
				}
			}
		})
	}
}
