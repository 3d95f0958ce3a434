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
)

func TestNewH1(t *testing.T) {
	for base, want := range map[string]string{
		"http://127.0.0.1:8000": "127.0.0.1:8000",
		"http://localhost":      "localhost:80",
		"https://127.0.0.1:443": "",
		"http://u:p@host:1":     "",
		"::bad":                 "",
	} {
		h := newH1(base)
		got := ""
		if h != nil {
			got = h.addr
		}
		if got != want {
			t.Errorf("newH1(%q) dials %q, want %q", base, got, want)
		}
	}
}

// An empty method and path mean GET / (as they do to net/http), not a malformed request line.
func TestRunEmptyMethodAndPath(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "GET" || r.URL.Path != "/" {
			w.WriteHeader(400)
		}
	}))
	defer srv.Close()
	sum, recs, err := runSummarized(context.Background(), Config{BaseURL: srv.URL, Requests: 1,
		Build: func(int, bool) (Request, error) { return Request{}, nil }})
	if err != nil || sum.Errors != 0 {
		t.Fatalf("err %v record %+v", err, recs[0])
	}
}

// The measured phase starts with every worker's connection open, and the workers keep them:
// the connections preconnect dialled are the only ones the requests use. (A server learns of
// a connection when it accepts it, which can be after the client has written a request on
// another one, so the test waits for the preconnected ones to be accepted, then sends.)
func TestRunPreconnectsAndKeepsAlive(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"id":"x"}`)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	l := testLoader(t, Config{BaseURL: srv.URL, Timeout: time.Minute})
	workers := []*worker{{}, {}, {}, {}}
	defer func() {
		for _, w := range workers {
			w.close()
		}
	}()
	l.h1.preconnect(context.Background(), workers)
	waitFor(t, "4 preconnected connections accepted", func() bool { return conns.Load() >= 4 })
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				if r := l.do(context.Background(), w, Request{Method: "GET", Path: "/"}); !r.OK() {
					t.Errorf("request: %+v", r)
					return
				}
			}
		}()
	}
	wg.Wait()
	if conns.Load() != 4 {
		t.Fatalf("%d connections for 4 workers after preconnecting 4 (want 4)", conns.Load())
	}
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// rawServer answers every request on a connection with resp. With closeAfter it answers only
// the first: it reads the next request and closes the connection without a word, as a server
// does that timed the idle connection out just as the client wrote to it.
func rawServer(t *testing.T, resp string, closeAfter bool) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int64
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					io.WriteString(c, resp)
					if closeAfter {
						http.ReadRequest(br)
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String(), &conns
}

// An informational response is skipped, and the connection stays usable for the next request.
func TestRunSkipsInformationalResponse(t *testing.T) {
	base, conns := rawServer(t, "HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{\"id\":\"y\"}", false)
	sum, recs, err := runSummarized(context.Background(), Config{BaseURL: base, Requests: 3, Concurrency: 1,
		Build: func(int, bool) (Request, error) { return Request{Method: "GET", Path: "/"}, nil }})
	if err != nil || sum.Errors != 0 || recs[2].Status != 200 || recs[2].ID != "y" || conns.Load() != 1 {
		t.Fatalf("err %v records %+v connections %d", err, recs, conns.Load())
	}
}

// A keep-alive connection the server closed while idle is not a failed request: it is sent
// again on a fresh connection, as net/http's Transport does.
func TestRunRetriesOnServerClosedIdleConnection(t *testing.T) {
	base, conns := rawServer(t, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{\"id\":\"x\"}", true)
	l := testLoader(t, Config{BaseURL: base, Timeout: time.Minute})
	w := &worker{}
	defer w.close()
	for i := range 4 {
		r := l.do(context.Background(), w, Request{Method: "POST", Path: "/generate", Body: []byte(`{}`)})
		if !r.OK() || r.ID != "x" || r.Bytes != 10 {
			t.Fatalf("request %d: %+v", i, r)
		}
	}
	if conns.Load() != 4 {
		t.Fatalf("%d connections, want one per request", conns.Load())
	}
}

func TestRunConnectionCloseAndChunked(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"id":"a",`)
		w.(http.Flusher).Flush() // chunked from here on
		io.WriteString(w, `"usage":{"completion_tokens":5}}`)
	}))
	srv.Config.SetKeepAlivesEnabled(false) // Connection: close on every response
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	sum, recs, err := runSummarized(context.Background(), Config{BaseURL: srv.URL, Requests: 3, Concurrency: 1,
		Build: func(int, bool) (Request, error) { return Build(Spec{API: APICompletions, OutputLen: 8}, true) }})
	if err != nil || sum.Errors != 0 {
		t.Fatalf("err %v summary %+v", err, sum)
	}
	for _, r := range recs {
		if r.ID != "a" || r.OutputTokens != 5 || r.Bytes != int64(len(`{"id":"a","usage":{"completion_tokens":5}}`)) {
			t.Fatalf("record %+v", r)
		}
	}
	if conns.Load() != 3 {
		t.Fatalf("%d connections for 3 requests on Connection: close", conns.Load())
	}
}

func TestRunRequestTimeoutAndGarbage(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(5 * time.Second):
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	t0 := time.Now()
	sum, recs, err := runSummarized(context.Background(), Config{BaseURL: srv.URL, Requests: 2, Concurrency: 2, Timeout: 50 * time.Millisecond,
		Build: func(int, bool) (Request, error) { return Request{Method: "GET", Path: "/slow"}, nil }})
	if err != nil || sum.Errors != 2 || time.Since(t0) > 3*time.Second {
		t.Fatalf("err %v summary %+v after %v", err, sum, time.Since(t0))
	}
	if recs[0].Status != 0 || !strings.Contains(recs[0].Error, "context deadline exceeded") || !strings.Contains(recs[0].Error, "/slow") {
		t.Fatalf("timeout record %+v", recs[0])
	}

	base, _ := rawServer(t, "this is not HTTP\r\n\r\n", false)
	sum, recs, err = runSummarized(context.Background(), Config{BaseURL: base, Requests: 1,
		Build: func(int, bool) (Request, error) { return Request{Method: "GET", Path: "/"}, nil }})
	if err != nil || sum.Errors != 1 || recs[0].Status != 0 || !strings.Contains(recs[0].Error, "malformed HTTP") {
		t.Fatalf("garbage response: err %v record %+v", err, recs[0])
	}
}

// Cancelling the run aborts requests in flight instead of waiting for their responses.
func TestRunCancelInFlight(t *testing.T) {
	started := make(chan struct{}, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		select {
		case <-time.After(5 * time.Second):
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	t0 := time.Now()
	_, recs, err := runSummarized(ctx, Config{BaseURL: srv.URL, Requests: 3, Concurrency: 1,
		Build: func(int, bool) (Request, error) { return Request{Method: "GET", Path: "/"}, nil }})
	if err == nil || time.Since(t0) > 3*time.Second {
		t.Fatalf("err %v after %v", err, time.Since(t0))
	}
	if !strings.Contains(recs[0].Error, "context canceled") || !strings.HasPrefix(recs[2].Error, "not sent") {
		t.Fatalf("records %+v", recs)
	}
}

// The benchmarks' helper server reports its handler time, and the client's latency always
// covers it: the overhead the benchmark reports is never negative.
func TestHelperServer(t *testing.T) {
	for name, base := range map[string]string{"net/http": startHelper(t, 20*time.Millisecond), "raw": startRawHelper(t, 20*time.Millisecond)} {
		sum, recs, err := runSummarized(context.Background(), Config{BaseURL: base, Warmup: 1, Requests: 6, Concurrency: 3,
			Build: func(int, bool) (Request, error) { return Build(Spec{API: APIImages, Prompt: "p"}, true) }})
		if err != nil || sum.Errors != 0 {
			t.Fatalf("%s: err %v summary %+v", name, err, sum)
		}
		for _, r := range recs {
			if r.InferenceTimeS < 0.02 || int64(r.Latency) < int64(r.InferenceTimeS*1e9) || r.Images != 1 {
				t.Fatalf("%s: record %+v", name, r)
			}
		}
	}
}
