package load

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sglprof/runner/reports/stats"
)

// pacedStub streams out tokens, /generate's layout (cumulative text), one every gap, with the
// chunks formatted once so the benchmark measures the client rather than the stub. It records
// when it flushed each request's first chunk, keyed by the request's first input id.
type pacedStub struct {
	chunks [][]byte
	gap    time.Duration
	// prefill is how long after the response headers the first token comes; stagger spreads
	// it over the requests (request k waits prefill + k%16·stagger), as a server's prefill
	// batches do.
	prefill, stagger time.Duration
	mu               sync.Mutex
	first            map[int]time.Time
}

func newPacedStub(out int, gap time.Duration) *pacedStub {
	s := &pacedStub{gap: gap, first: map[int]time.Time{}}
	for i := range out {
		s.chunks = append(s.chunks, fmt.Appendf(nil, "data: {\"text\":\"%s\",\"meta_info\":{\"prompt_tokens\":8,\"completion_tokens\":%d}}\n\n",
			strings.Repeat("tok ", i+1), i+1))
	}
	return s
}

func (s *pacedStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req struct {
		IDs []int `json:"input_ids"`
	}
	_ = json.NewDecoder(bytes.NewReader(body)).Decode(&req)
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	if s.prefill > 0 {
		k := 0
		if len(req.IDs) > 0 {
			k = req.IDs[0] % 16
		}
		time.Sleep(s.prefill + time.Duration(k)*s.stagger)
	}
	next := time.Now()
	for i, c := range s.chunks {
		w.Write(c)
		fl.Flush()
		if i == 0 && len(req.IDs) > 0 {
			s.mu.Lock()
			s.first[req.IDs[0]] = time.Now()
			s.mu.Unlock()
		}
		if s.gap > 0 {
			next = next.Add(s.gap)
			time.Sleep(time.Until(next))
		}
	}
	w.Write([]byte("data: [DONE]\n\n"))
}

// BenchmarkStreamingClient runs 256 concurrent streaming requests of 256 tokens, one a chunk,
// against a local stub that sends the response headers at once, the first token after a
// 50 ms prefill, then one token per 4 ms per stream (about 64k tokens/s in all, above the 50k
// the issue asks the client to parse). tokens/s is what the client parsed per second of wall
// time; added-ttft-p99-ms is the 99th percentile of the delay between the stub flushing a
// request's first token and the client having parsed it (stub and client share the machine's
// two cores, so this bounds the client's own delay from above). "burst" flushes all 256 first
// tokens at the same instant; "staggered" spreads them over 16 prefill batches 2 ms apart.
// Each runs through net/http (what TransportAuto picks for streams) and the own client (h1),
// the comparison behind that choice.
func BenchmarkStreamingClient(b *testing.B) {
	for _, c := range []struct {
		name    string
		stagger time.Duration
	}{{"burst", 0}, {"staggered", 2 * time.Millisecond}} {
		for _, tr := range transports {
			b.Run(c.name+"/"+strings.ReplaceAll(string(tr), "/", ""), func(b *testing.B) { benchStreaming(b, c.stagger, tr) })
		}
	}
}

func benchStreaming(b *testing.B, stagger time.Duration, tr Transport) {
	const conc, out = 256, 256
	stub := newPacedStub(out, 4*time.Millisecond)
	stub.prefill, stub.stagger = 50*time.Millisecond, stagger
	srv := httptest.NewServer(stub)
	defer srv.Close()
	prompts := RandomPrompts(conc, 8, out, 1, 11)
	var client *http.Client // the same connections across the iterations
	if tr == TransportNetHTTP {
		client = NewClient(conc)
	}
	var tokens int
	var wallSec float64
	var added []float64
	for b.Loop() {
		rs, wall, err := Run(context.Background(), llm(b, srv.URL, APIGenerate, "", prompts, Config{Requests: conc, Concurrency: conc, Client: client, Transport: tr}))
		if err != nil {
			b.Fatal(err)
		}
		for i, r := range rs {
			if !r.OK() {
				b.Fatal(r.Error)
			}
			tokens += r.OutputTokens
			stub.mu.Lock()
			f := stub.first[prompts[i].IDs[0]]
			stub.mu.Unlock()
			added = append(added, ms(r.firstAt.Sub(f)))
		}
		wallSec += wall.Seconds()
	}
	slices.Sort(added)
	b.ReportMetric(float64(tokens)/wallSec, "tokens/s")
	b.ReportMetric(stats.Percentile(added, 50), "added-ttft-p50-ms")
	b.ReportMetric(stats.Percentile(added, 99), "added-ttft-p99-ms")
}
