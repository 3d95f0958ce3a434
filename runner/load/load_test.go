package load

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sglprof/runner/reports/stats"
	"github.com/valyala/fastjson"
)

func TestBuildImages(t *testing.T) {
	for _, measured := range []bool{true, false} {
		r, err := Build(Spec{API: APIImages, Prompt: "a cat", Width: 512, Height: 768, Steps: 8, Seed: 3, N: 2}, measured)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		json.Unmarshal(r.Body, &m)
		if r.Path != "/v1/images/generations" || m["size"] != "512x768" || m["num_inference_steps"] != 8.0 || m["seed"] != 3.0 || m["n"] != 2.0 || r.Images != 2 {
			t.Fatalf("request = %s %s", r.Path, r.Body)
		}
		// ImageGenerationsRequest has no profiling fields upstream: none are sent.
		if bytes.Contains(r.Body, []byte("profile")) {
			t.Fatalf("request carries profiling fields: %s", r.Body)
		}
	}
}

func TestBuildIndexedPerfDump(t *testing.T) {
	spec := Spec{API: APIImages, Prompt: "p", PerfDumpDir: "/cell/perf"}
	r, err := BuildIndexed(spec, 7, true)
	if err != nil || !bytes.Contains(r.Body, []byte(`"perf_dump_path":"/cell/perf/request-007.json"`)) {
		t.Fatalf("measured: %s %v", r.Body, err)
	}
	if w, _ := BuildIndexed(spec, 0, false); bytes.Contains(w.Body, []byte("perf_dump_path")) {
		t.Fatalf("warmup asks for a perf dump: %s", w.Body)
	}
	if g, _ := BuildIndexed(Spec{API: APIGenerate, OutputLen: 1, PerfDumpDir: "/x"}, 0, true); bytes.Contains(g.Body, []byte("perf_dump_path")) {
		t.Fatalf("LLM request with perf_dump_path: %s", g.Body)
	}
}

func TestBuildLLM(t *testing.T) {
	r, err := Build(Spec{API: APIGenerate, InputLen: 16, OutputLen: 7}, true)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Text           string `json:"text"`
		SamplingParams struct {
			MaxNewTokens int `json:"max_new_tokens"`
		} `json:"sampling_params"`
	}
	json.Unmarshal(r.Body, &m)
	if r.Path != "/generate" || len(strings.Fields(m.Text)) != 16 || m.SamplingParams.MaxNewTokens != 7 {
		t.Fatalf("generate = %s", r.Body)
	}
	c, _ := Build(Spec{API: APICompletions, Model: "m", InputLen: 4, OutputLen: 9}, true)
	if c.Path != "/v1/completions" || !bytes.Contains(c.Body, []byte(`"max_tokens":9`)) {
		t.Fatalf("completions = %s", c.Body)
	}
	if _, err := Build(Spec{API: APIGenerate}, true); err == nil {
		t.Fatal("generate without output_len accepted")
	}
	if _, err := Build(Spec{API: "chat"}, true); err == nil {
		t.Fatal("unknown api accepted")
	}
}

func TestRunRecordsAndSummary(t *testing.T) {
	var n atomic.Int64
	var inflight, peak atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := inflight.Add(1)
		defer inflight.Add(-1)
		for {
			p := peak.Load()
			if c <= p || peak.CompareAndSwap(p, c) {
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
		i := n.Add(1)
		if i%4 == 0 {
			w.WriteHeader(400)
			io.WriteString(w, `{"detail":"Invalid size format: 12"}`)
			return
		}
		fmt.Fprintf(w, `{"id":"r%d","data":[{"b64_json":"x"}],"inference_time_s":0.5,"peak_memory_mb":1000.5}`, i)
	}))
	defer srv.Close()
	var buf bytes.Buffer
	sum, recs, err := runSummarized(context.Background(), Config{BaseURL: srv.URL, Warmup: 2, Requests: 14, Concurrency: 3, Records: &buf,
		Build: func(int, bool) (Request, error) { return Build(Spec{API: APIImages, Prompt: "p"}, true) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 14 || sum.Count != 14 {
		t.Fatalf("records %d, count %d", len(recs), sum.Count)
	}
	// 16 requests, every 4th fails: 4 failures, of which the warmup ones are not counted.
	errs := 0
	lines := 0
	warm := 0
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		lines++
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if r.Warmup {
			warm++
			continue
		}
		if !r.OK() {
			errs++
			if r.Status != 400 || !strings.Contains(r.Body, "Invalid size") {
				t.Fatalf("error record %+v", r)
			}
		} else if r.InferenceTimeS != 0.5 || r.PeakMemoryMB != 1000.5 || r.Images != 1 || r.ID == "" || r.Bytes == 0 {
			t.Fatalf("ok record %+v", r)
		}
	}
	if lines != 16 || warm != 2 || errs != sum.Errors || sum.Errors == 0 {
		t.Fatalf("lines %d warm %d errs %d summary %+v", lines, warm, errs, sum)
	}
	if peak.Load() > 3 || peak.Load() < 2 {
		t.Fatalf("peak concurrency %d, want 3 at most (and some overlap)", peak.Load())
	}
	if sum.P50NS < int64(5*time.Millisecond) || sum.P99NS < sum.P50NS || sum.MeanInferenceTimeS != 0.5 || sum.MaxPeakMemoryMB != 1000.5 || sum.ImagesPerS <= 0 {
		t.Fatalf("summary %+v", sum)
	}
	if sum.Statuses["400"] != errs {
		t.Fatalf("statuses %v", sum.Statuses)
	}
}

func TestRunVideoPolling(t *testing.T) {
	var polls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "POST" && r.URL.Path == "/v1/videos":
			io.WriteString(w, `{"id":"video_1","status":"queued"}`)
		case r.URL.Path == "/v1/videos/video_1":
			if polls.Add(1) < 3 {
				io.WriteString(w, `{"id":"video_1","status":"in_progress"}`)
				return
			}
			io.WriteString(w, `{"id":"video_1","status":"completed","inference_time_s":2.5,"peak_memory_mb":42}`)
		case r.URL.Path == "/v1/videos/video_2":
			io.WriteString(w, `{"id":"video_2","status":"failed","error":{"message":"boom"}}`)
		}
	}))
	defer srv.Close()
	sum, recs, err := runSummarized(context.Background(), Config{BaseURL: srv.URL, Requests: 1, PollEvery: time.Millisecond,
		Build: func(int, bool) (Request, error) { return Build(Spec{API: APIVideos, Prompt: "p"}, true) }})
	if err != nil || sum.Errors != 0 || recs[0].InferenceTimeS != 2.5 || polls.Load() != 3 {
		t.Fatalf("err %v sum %+v rec %+v polls %d", err, sum, recs[0], polls.Load())
	}
}

func TestRunConnectionErrorAndCancel(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	url := srv.URL
	srv.Close()
	sum, recs, err := runSummarized(context.Background(), Config{BaseURL: url, Requests: 2,
		Build: func(int, bool) (Request, error) { return Build(Spec{API: APIGenerate, OutputLen: 1}, true) }})
	if err != nil || sum.Errors != 2 || recs[0].Status != 0 || recs[0].Error == "" || sum.ErrorRate != 1 {
		t.Fatalf("err %v sum %+v", err, sum)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := runSummarized(ctx, Config{BaseURL: url, Requests: 2, Build: func(int, bool) (Request, error) { return Request{Method: "GET", Path: "/"}, nil }}); err == nil {
		t.Fatal("cancelled run returned no error")
	}
}

// TestSummaryPercentilesMatchBenchServing: the serve-cell latency percentiles are numpy's
// linear ones (bench_serving's), not nearest rank: numpy.percentile(1..100 ms, [50, 90, 99])
// is [50.5, 90.1, 99.01] ms where nearest rank said 50, 90 and 99.
func TestSummaryPercentilesMatchBenchServing(t *testing.T) {
	recs := make([]Record, 100)
	for i := range recs {
		recs[len(recs)-1-i] = Record{Status: 200, Latency: time.Duration(i+1) * time.Millisecond}
	}
	s := Summarize(recs, time.Second)
	if s.P50NS != 50_500_000 || s.P90NS != 90_100_000 || s.P99NS != 99_010_000 || s.MaxNS != 100e6 {
		t.Fatalf("p50 %d p90 %d p99 %d max %d; want 50.5, 90.1, 99.01 and 100 ms", s.P50NS, s.P90NS, s.P99NS, s.MaxNS)
	}
	two := Summarize([]Record{{Status: 200, Latency: 100}, {Status: 200, Latency: 200}}, time.Second)
	if two.P99NS != 199 || two.P50NS != 150 {
		t.Fatalf("two samples: p50 %d p99 %d, want 150 and 199 (numpy)", two.P50NS, two.P99NS)
	}
	if empty := Summarize(nil, time.Second); empty.P99NS != 0 {
		t.Fatalf("no samples: p99 %d, want 0", empty.P99NS)
	}
}

// BenchmarkClient measures the load generator against a trivial handler (it answers at once)
// in another process at concurrency 64: requests/s and the p99 latency, which against such a
// handler is the client's own overhead plus the loopback round trip and the server's framing.
func BenchmarkClient(b *testing.B) {
	base := startHelper(b, 0)
	req, _ := Build(Spec{API: APIImages, Prompt: "a cat", Width: 1024, Height: 1024, Steps: 50}, true)
	n := max(b.N, 20000)
	b.ResetTimer()
	sum, _, err := runSummarized(context.Background(), Config{BaseURL: base, Warmup: 64, Requests: n, Concurrency: 64,
		Build: func(int, bool) (Request, error) { return req, nil }})
	b.StopTimer()
	if err != nil || sum.Errors != 0 {
		b.Fatalf("err %v errors %d", err, sum.Errors)
	}
	b.ReportMetric(sum.RequestsPerS, "req/s")
	b.ReportMetric(float64(sum.P99NS)/1e6, "p99-ms")
	b.ReportMetric(float64(sum.P50NS)/1e6, "p50-ms")
}

// BenchmarkClientOverhead runs the scenario: concurrency 64 against a local handler
// that takes 30 ms (so 64 workers reach at most about 2,130 requests/s), served by the test
// binary re-executed as a separate process so that the server's goroutines and garbage
// collector are not the client's. The handler reports the time from its start to just
// before it writes the response in inference_time_s, as sglang does; the client measures
// from just before the request is written to just after the body is read. A request's
// overhead is the difference: HTTP framing on both sides, the loopback round trip, goroutine
// scheduling on 2 shared CPUs and the client's own work. Reported: its p50 and p99, the
// measured requests/s, and the client process's allocations and CPU time per request.
func BenchmarkClientOverhead(b *testing.B) {
	benchOverhead(b, startHelper(b, 30*time.Millisecond), nil)
}

// BenchmarkClientOverheadRawServer is BenchmarkClientOverhead against helperRawServer, a
// server without net/http's per-request machinery: how much of the overhead is the server's.
func BenchmarkClientOverheadRawServer(b *testing.B) {
	benchOverhead(b, startRawHelper(b, 30*time.Millisecond), nil)
}

// BenchmarkClientOverheadNetHTTP is BenchmarkClientOverhead through net/http's Client on
// NewTransport, its 64 connections dialled before the run as the package's own client does
// (preconnectedClient): the comparison that decides between the two (docs/performance.md).
func BenchmarkClientOverheadNetHTTP(b *testing.B) {
	base := startHelper(b, 30*time.Millisecond)
	benchOverhead(b, base, preconnectedClient(b, base, 64))
}

// BenchmarkClientOverheadRawServerNetHTTP is BenchmarkClientOverheadNetHTTP against
// helperRawServer: net/http's share of the overhead, against the package client's.
func BenchmarkClientOverheadRawServerNetHTTP(b *testing.B) {
	base := startRawHelper(b, 30*time.Millisecond)
	benchOverhead(b, base, preconnectedClient(b, base, 64))
}

// preconnectedClient returns a Client on NewTransport(n) whose dialer hands out n
// connections to base dialled in parallel beforehand, so that no request of the run pays
// for a handshake (a tuned net/http, not a handicapped one).
func preconnectedClient(tb testing.TB, base string, n int) *http.Client {
	u, err := url.Parse(base)
	if err != nil {
		tb.Fatal(err)
	}
	var mu sync.Mutex
	var idle []net.Conn
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c, err := net.Dial("tcp", u.Host); err == nil {
				mu.Lock()
				idle = append(idle, c)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	tr := NewTransport(n)
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		defer mu.Unlock()
		if k := len(idle); k > 0 && addr == u.Host {
			c := idle[k-1]
			idle = idle[:k-1]
			return c, nil
		}
		return dial(ctx, network, addr)
	}
	tb.Cleanup(func() {
		tr.CloseIdleConnections()
		for _, c := range idle {
			c.Close()
		}
	})
	return &http.Client{Transport: tr}
}

func benchOverhead(b *testing.B, base string, client *http.Client) {
	req, _ := Build(Spec{API: APIImages, Prompt: "a cat"}, true)
	n := max(b.N, 4000)
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0 := processCPU()
	b.ResetTimer()
	sum, recs, err := runSummarized(context.Background(), Config{BaseURL: base, Warmup: 64, Requests: n, Concurrency: 64, Client: client,
		Build: func(int, bool) (Request, error) { return req, nil }})
	b.StopTimer()
	cpu1 := processCPU()
	runtime.ReadMemStats(&m1)
	if err != nil || sum.Errors != 0 {
		b.Fatalf("err %v errors %d", err, sum.Errors)
	}
	over := make([]int64, len(recs))
	for i, r := range recs {
		over[i] = int64(r.Latency) - int64(r.InferenceTimeS*1e9)
	}
	sort.Slice(over, func(i, j int) bool { return over[i] < over[j] })
	b.ReportMetric(sum.RequestsPerS, "req/s")
	b.ReportMetric(float64(roundNS(stats.Percentile(over, 99)))/1e6, "overhead-p99-ms")
	b.ReportMetric(float64(roundNS(stats.Percentile(over, 50)))/1e6, "overhead-p50-ms")
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/float64(n+64), "client-allocs/req")
	b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/float64(n+64), "client-B/req")
	if cpu0 >= 0 && cpu1 >= 0 {
		// The client process's CPU per request (warmup included): what one request costs the
		// load generator, whatever the scheduling around it.
		b.ReportMetric(float64(cpu1-cpu0)/1e3/float64(n+64), "client-cpu-us/req")
	}
}

func TestParseResponse(t *testing.T) {
	var p fastjson.Parser
	var r Record
	parseResponse(&r, parsed(&p, `{"text":"x","meta_info":{"id":"abc","completion_tokens":7}}`))
	if r.ID != "abc" || r.OutputTokens != 7 {
		t.Fatalf("generate: %+v", r)
	}
	r = Record{}
	parseResponse(&r, parsed(&p, `{"id":"c1","usage":{"completion_tokens":3}}`))
	if r.ID != "c1" || r.OutputTokens != 3 {
		t.Fatalf("completions: %+v", r)
	}
	r = Record{}
	parseResponse(&r, parsed(&p, `not json`))
	if !reflect.DeepEqual(r, Record{}) {
		t.Fatalf("garbage changed the record: %+v", r)
	}
}

// parsed is b parsed, nil when it is not JSON (as doWhole hands it to parseResponse).
func parsed(p *fastjson.Parser, b string) *fastjson.Value {
	v, err := p.Parse(b)
	if err != nil {
		return nil
	}
	return v
}

func FuzzParseResponse(f *testing.F) {
	f.Add([]byte(`{"id":"r1","data":[{"b64_json":"x"}],"inference_time_s":0.5,"peak_memory_mb":1000.5}`))
	f.Add([]byte(`{"text":"x","meta_info":{"id":"abc","completion_tokens":7}}`))
	f.Add([]byte(`{"id":"c1","usage":{"completion_tokens":3}}`))
	f.Add([]byte(`{"data":{}}`))
	f.Add([]byte(`{"inference_time_s":1e999,"peak_memory_mb":-1e999}`))
	f.Add([]byte(``))
	f.Add([]byte(`{"usage":{"completion_tokens":-5},"data":[{},{},{}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var p fastjson.Parser
		var r Record
		parseResponse(&r, parsed(&p, string(b)))
		if r.Images < 0 {
			t.Fatalf("negative image count from %q", b)
		}
		if _, err := json.Marshal(r); err != nil {
			t.Fatalf("record does not encode: %v", err)
		}
		// A response that passes the check reports nothing beyond what was asked.
		if checkReported(&r, Request{Images: 2, Tokens: 8}) == "" &&
			(r.OutputTokens < 0 || r.OutputTokens > 8 || r.Images > 2 || r.InferenceTimeS < 0 || r.PeakMemoryMB < 0) {
			t.Fatalf("record %+v passed the check", r)
		}
	})
}

// TestRunVideoCancelledEndsPolling: a video job the server reports as cancelled is over; the
// request fails at once with that reason instead of polling until its timeout.
func TestRunVideoCancelledEndsPolling(t *testing.T) {
	var polls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "POST" && r.URL.Path == "/v1/videos":
			io.WriteString(w, `{"id":"video_1","status":"queued"}`)
		case r.URL.Path == "/v1/videos/video_1":
			polls.Add(1)
			io.WriteString(w, `{"id":"video_1","status":"cancelled"}`)
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sum, recs, err := runSummarized(ctx, Config{BaseURL: srv.URL, Requests: 1, PollEvery: time.Millisecond,
		Build: func(int, bool) (Request, error) { return Build(Spec{API: APIVideos, Prompt: "p"}, true) }})
	if err != nil || sum.Errors != 1 || polls.Load() != 1 || !strings.Contains(recs[0].Error, "was cancelled on the server") {
		t.Fatalf("err %v errors %d polls %d rec error %q", err, sum.Errors, polls.Load(), recs[0].Error)
	}
}
