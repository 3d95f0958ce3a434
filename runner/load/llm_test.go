package load

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sglprof/runner/reports/rundir"
	"github.com/valyala/fastjson"
)

// stub is a streaming LLM server for the tests: it answers /generate, /v1/completions and
// /v1/chat/completions with outTokens tokens, perChunk tokens a chunk, gap between chunks.
type stub struct {
	outTokens, perChunk int
	gap                 time.Duration
	cutAfter            int // close the stream after this many chunks without [DONE] (0: never)
	stallAfter          int // stop writing after this many chunks and hold the stream open
	inFlight, maxSeen   atomic.Int64
	bodies              atomic.Value // last request body
}

func (s *stub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := s.inFlight.Add(1)
	// A request stops counting before its last bytes go out: once the client has read [DONE]
	// it may start the next request before this handler returns.
	finished := sync.OnceFunc(func() { s.inFlight.Add(-1) })
	defer finished()
	for {
		m := s.maxSeen.Load()
		if n <= m || s.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	body, _ := io.ReadAll(r.Body)
	s.bodies.Store(body)
	var req map[string]any
	if err := json.Unmarshal(body, &req); err != nil || req["stream"] != true {
		http.Error(w, "want a JSON streaming request", http.StatusBadRequest)
		return
	}
	prompt := 7
	if ids, ok := req["input_ids"].([]any); ok {
		prompt = len(ids)
	}
	if ids, ok := req["prompt"].([]any); ok {
		prompt = len(ids)
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	per := max(s.perChunk, 1)
	chunks := 0
	for done := 0; done < s.outTokens; {
		k := min(per, s.outTokens-done)
		done += k
		chunks++
		if s.stallAfter > 0 && chunks > s.stallAfter {
			<-r.Context().Done()
			return
		}
		var ev string
		switch r.URL.Path {
		case "/generate":
			ev = fmt.Sprintf(`{"text":"%s","meta_info":{"prompt_tokens":%d,"completion_tokens":%d}}`, strings.Repeat("ab ", done), prompt, done)
		case "/v1/completions":
			ev = fmt.Sprintf(`{"choices":[{"index":0,"text":"%s"}]}`, strings.Repeat("x", k))
		default:
			ev = fmt.Sprintf(`{"choices":[{"index":0,"delta":{"content":"%s"}}]}`, strings.Repeat("x", k))
		}
		fmt.Fprintf(w, "data: %s\n\n", ev)
		fl.Flush()
		if s.cutAfter > 0 && chunks >= s.cutAfter {
			panic(http.ErrAbortHandler) // drop the connection mid-stream
		}
		if s.gap > 0 {
			time.Sleep(s.gap)
		}
	}
	if r.URL.Path != "/generate" {
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d}}\n\n", prompt, s.outTokens)
	}
	finished()
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
}

// llm is cfg with BaseURL base and the streamed requests of api, model and prompts.
func llm(tb testing.TB, base, api, model string, prompts []Prompt, cfg Config) Config {
	tb.Helper()
	build, err := LLMRequests(api, model, prompts)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.BaseURL, cfg.Build = base, build
	return cfg
}

// tickClock is a clock whose every event comes a millisecond after the one before.
type tickClock struct{ RealClock }

func (*tickClock) Event(_ time.Duration, _ *fastjson.Value, last time.Duration) time.Duration {
	return last + time.Millisecond
}

func serve(t testing.TB, s *stub) string {
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestGenerateStreamRecordsTokens(t *testing.T) {
	s := &stub{outTokens: 9, perChunk: 2, gap: 2 * time.Millisecond}
	url := serve(t, s)
	rs, wall, err := Run(context.Background(), llm(t, url, APIGenerate, "", RandomPrompts(1, 16, 9, 1, 1), Config{Requests: 3, Concurrency: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 || wall <= 0 {
		t.Fatalf("%d results, wall %s", len(rs), wall)
	}
	var body map[string]any
	if err := json.Unmarshal(s.bodies.Load().([]byte), &body); err != nil {
		t.Fatal(err)
	}
	if ids, _ := body["input_ids"].([]any); len(ids) != 16 {
		t.Errorf("sent %v, want 16 input_ids (exact lengths on /generate)", body["input_ids"])
	}
	for _, r := range rs {
		if !r.OK() {
			t.Fatalf("request %d: %s", r.Index, r.Error)
		}
		if r.OutputTokens != 9 || r.InputTokens != 16 {
			t.Errorf("tokens in/out = %d/%d, want 16/9 as the server reported", r.InputTokens, r.OutputTokens)
		}
		// 5 chunks of 2,2,2,2,1 tokens: the first chunk's 2 tokens give TTFT, the other 7
		// tokens each get an ITL (a 2-token chunk spreads its gap over both).
		if len(r.ITL) != 7 {
			t.Errorf("ITLs = %d, want 7", len(r.ITL))
		}
		if r.TTFT <= 0 || r.Latency < r.TTFT+6*time.Millisecond {
			t.Errorf("TTFT %s E2E %s: want E2E ≥ TTFT + 4 gaps", r.TTFT, r.Latency)
		}
		tp, ok := r.TPOT()
		if !ok || tp != (r.Latency-r.TTFT)/8 {
			t.Errorf("TPOT = %s %v, want (E2E−TTFT)/8", tp, ok)
		}
	}
}

func TestOpenAIStreams(t *testing.T) {
	for _, api := range []string{APICompletions, APIChat} {
		t.Run(api, func(t *testing.T) {
			s := &stub{outTokens: 5, perChunk: 1}
			rs, _, err := Run(context.Background(), llm(t, serve(t, s), api, "m", RandomPrompts(2, 12, 5, 1, 2), Config{Requests: 2}))
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				if !r.OK() || r.OutputTokens != 5 || len(r.ITL) != 4 {
					t.Fatalf("result %+v: want 5 tokens, 4 ITLs", r)
				}
			}
			var body map[string]any
			_ = json.Unmarshal(s.bodies.Load().([]byte), &body)
			if body["model"] != "m" || body["stream_options"] == nil {
				t.Errorf("body %v: want the model and stream_options.include_usage", body)
			}
			if api == APIChat && body["messages"] == nil || api == APICompletions && body["prompt"] == nil {
				t.Errorf("body %v lacks its prompt", body)
			}
			if got := rs[0].InputTokens; got != 12 && api == APICompletions {
				t.Errorf("completions input tokens %d, want the server's 12", got)
			}
		})
	}
}

func TestStreamCutOrStalledIsAnError(t *testing.T) {
	cut := &stub{outTokens: 10, cutAfter: 3}
	rs, _, err := Run(context.Background(), llm(t, serve(t, cut), APIGenerate, "", RandomPrompts(1, 4, 10, 1, 1), Config{Requests: 2}))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.OK() {
			t.Fatalf("a stream cut after 3 chunks counted as complete: %+v", r)
		}
	}
	stall := &stub{outTokens: 10, stallAfter: 2}
	t0 := time.Now()
	rs, _, err = Run(context.Background(), llm(t, serve(t, stall), APICompletions, "", RandomPrompts(1, 4, 10, 1, 1), Config{Requests: 1, Timeout: 300 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].OK() || !strings.Contains(rs[0].Error, "request_timeout") {
		t.Fatalf("a stalled stream: %+v, want a request_timeout error", rs[0])
	}
	if time.Since(t0) > 30*time.Second {
		t.Fatalf("a stalled stream held the run for %s", time.Since(t0))
	}
	s := SummarizeLLM(rs, time.Second, rundir.LLMSLO{}, false)
	if s.Failed != 1 || s.Completed != 0 || len(s.Errors) != 1 {
		t.Errorf("summary %+v", s)
	}
}

func TestMaxConcurrencyAndDuration(t *testing.T) {
	s := &stub{outTokens: 3, gap: 5 * time.Millisecond}
	rs, _, err := Run(context.Background(), llm(t, serve(t, s), APIGenerate, "", RandomPrompts(4, 4, 3, 1, 1), Config{Requests: 24, Concurrency: 3}))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 24 || s.maxSeen.Load() > 3 || s.maxSeen.Load() < 2 {
		t.Fatalf("%d results, %d in flight at most: want 24 and a cap of 3 reached", len(rs), s.maxSeen.Load())
	}
	for i, r := range rs {
		if r.Index != i {
			t.Fatalf("results out of order at %d", i)
		}
	}
	rs, wall, err := Run(context.Background(), llm(t, serve(t, s), APIGenerate, "", RandomPrompts(4, 4, 3, 1, 1), Config{Duration: 300 * time.Millisecond, Rate: 50, Seed: 3}))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) < 5 || len(rs) > 30 {
		t.Errorf("%d requests in 300 ms at 50/s", len(rs))
	}
	for _, r := range rs {
		if r.Start > 300*time.Millisecond+50*time.Millisecond {
			t.Errorf("request %d sent at %s, after the duration", r.Index, r.Start)
		}
	}
	_ = wall
	if _, _, err := Run(context.Background(), llm(t, "http://x", APIGenerate, "", RandomPrompts(1, 4, 3, 1, 1), Config{Duration: time.Second})); err == nil {
		t.Error("an unbounded burst for a duration was accepted")
	}
}

func TestScheduleSeededAndShaped(t *testing.T) {
	a, b := Schedule(2000, 10, 1, 42), Schedule(2000, 10, 1, 42)
	if !slices.Equal(a, b) {
		t.Fatal("the same seed gave two schedules")
	}
	if c := Schedule(2000, 10, 1, 43); slices.Equal(a, c) {
		t.Fatal("another seed gave the same schedule")
	}
	if got := a[len(a)-1]; got != 200*time.Second {
		t.Errorf("last send at %s, want n/rate = 200s", got)
	}
	cv := func(s []time.Duration) float64 {
		var xs []float64
		prev := time.Duration(0)
		for _, t := range s {
			xs = append(xs, (t - prev).Seconds())
			prev = t
		}
		m, v := 0.0, 0.0
		for _, x := range xs {
			m += x
		}
		m /= float64(len(xs))
		for _, x := range xs {
			v += (x - m) * (x - m)
		}
		return math.Sqrt(v/float64(len(xs))) / m
	}
	// Gamma(k) intervals have a coefficient of variation of 1/√k.
	for _, c := range []struct{ k, want float64 }{{1, 1}, {4, 0.5}, {0.25, 2}} {
		if got := cv(Schedule(20000, 10, c.k, 7)); math.Abs(got-c.want) > 0.1*c.want {
			t.Errorf("burstiness %g: CV %.3f, want %.2f", c.k, got, c.want)
		}
	}
	for _, d := range Schedule(5, math.Inf(1), 1, 1) {
		if d != 0 {
			t.Fatal("rate inf must send everything at once")
		}
	}
	fixed := Schedule(4, 2, math.Inf(1), 1)
	if !slices.Equal(fixed, []time.Duration{500 * time.Millisecond, time.Second, 1500 * time.Millisecond, 2 * time.Second}) {
		t.Errorf("burstiness inf = %v, want a fixed 500 ms interval", fixed)
	}
}

func TestSummarizeGoodputAndDefinitions(t *testing.T) {
	rs := []Record{
		{Status: 200, TTFT: 100 * time.Millisecond, Latency: 1100 * time.Millisecond, OutputTokens: 11, InputTokens: 5,
			ITL: []time.Duration{100 * time.Millisecond}},
		{Status: 200, TTFT: 300 * time.Millisecond, Latency: 800 * time.Millisecond, OutputTokens: 6, InputTokens: 5},
		{Status: 200, TTFT: 50 * time.Millisecond, Latency: 50 * time.Millisecond, OutputTokens: 1, InputTokens: 5},
		{Error: "boom"},
	}
	s := SummarizeLLM(rs, 2*time.Second, rundir.LLMSLO{TTFT: 200 * time.Millisecond, TPOT: 150 * time.Millisecond}, false)
	if s.Completed != 3 || s.Failed != 1 || s.TotalOutput != 18 || s.TotalInput != 15 {
		t.Fatalf("%+v", s)
	}
	// TPOTs: 1000/10 = 100 ms and 500/5 = 100 ms; the one-token request has none.
	if s.TPOT.N != 2 || s.TPOT.Mean != 100 {
		t.Errorf("TPOT %+v", s.TPOT)
	}
	// Good: request 0 (TTFT 100 ≤ 200, TPOT 100 ≤ 150) and request 2 (TTFT 50; no TPOT).
	if s.GoodRequests != 2 || s.Goodput != 1 {
		t.Errorf("good %d goodput %g, want 2 and 1/s", s.GoodRequests, s.Goodput)
	}
	if want := (1.1 + 0.8 + 0.05) / 2; math.Abs(s.Concurrency-want) > 1e-9 {
		t.Errorf("concurrency %g, want Σ E2E / duration = %g", s.Concurrency, want)
	}
	if s.RequestThroughput != 1.5 || s.OutputThroughput != 9 {
		t.Errorf("throughput %g req/s %g tok/s", s.RequestThroughput, s.OutputThroughput)
	}
}

func TestShareGPT(t *testing.T) {
	path := filepath.Join("..", "..", "testdata", "sharegpt-sample.json")
	ps, err := ShareGPTPrompts(path, 0, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 20 {
		t.Errorf("%d prompts, want the 20 conversations of two or more turns", len(ps))
	}
	for _, p := range ps {
		if p.Text == "" || p.IDs != nil || !p.ApproxInput || p.OutputLen < 4 {
			t.Fatalf("prompt %+v", p)
		}
	}
	again, _ := ShareGPTPrompts(path, 5, 64, 1)
	if len(again) != 5 || again[0].Text != ps[0].Text || again[0].OutputLen != 64 {
		t.Errorf("n=5 with output_len 64: %d prompts, first %+v", len(again), again[0])
	}
	dir := t.TempDir()
	for name, c := range map[string]struct{ body, want string }{
		"object":   {`{"conversations": []}`, "want a JSON array"},
		"layout":   {`[{"id":"a","conversations":[{"from":"human","value":"hello there friend"},{"from":"gpt","value":"hi, how are you today"}]}, {"id":"b","turns":[]}]`, `record 1 (id "b"): no "conversations"`},
		"not json": {`[{"id": }]`, "record 0"},
	} {
		p := filepath.Join(dir, name+".json")
		if err := os.WriteFile(p, []byte(c.body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ShareGPTPrompts(p, 0, 0, 1)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: err = %v, want the file and %q", name, err, c.want)
		}
	}
	if _, err := ShareGPTPrompts(filepath.Join(dir, "absent.json"), 0, 0, 1); err == nil {
		t.Error("a missing file was accepted")
	}
}

func TestDatasets(t *testing.T) {
	ps := RandomPrompts(500, 100, 50, 0.5, 9)
	for _, p := range ps {
		if p.InputLen < 50 || p.InputLen > 100 || len(p.IDs) != p.InputLen || p.OutputLen < 25 || p.OutputLen > 50 {
			t.Fatalf("prompt lengths %d/%d outside [50,100]/[25,50]", p.InputLen, p.OutputLen)
		}
	}
	if !slices.Equal(RandomPrompts(3, 10, 5, 1, 9)[2].IDs, RandomPrompts(3, 10, 5, 1, 9)[2].IDs) {
		t.Error("random prompts are not seeded")
	}
	pp := PrefixPrompts(3, 4, 20, 5, 8, 1)
	if len(pp) != 12 || pp[0].InputLen != 25 {
		t.Fatalf("%d prefix prompts of %d tokens", len(pp), pp[0].InputLen)
	}
	// Interleaved: prompts 0 and 3 share group 0's prefix, 0 and 1 do not.
	if !slices.Equal(pp[0].IDs[:20], pp[3].IDs[:20]) || slices.Equal(pp[0].IDs[:20], pp[1].IDs[:20]) {
		t.Error("prefix groups are not shared or not interleaved")
	}
}

// TestBenchServingExportFields: the export carries every key either upstream version writes for
// the runner's quantities: metrics.py's (total_input, ...) and bench_serving.py's
// (total_input_tokens, ..., p90_e2e_latency_ms, max_concurrent_requests), with the same values.
func TestBenchServingExportFields(t *testing.T) {
	rs := []Record{
		{Status: 200, Start: 0, TTFT: time.Millisecond, Latency: 3 * time.Millisecond, OutputTokens: 3, InputTokens: 5, ITL: []time.Duration{time.Millisecond, time.Millisecond}},
		{Status: 200, Start: time.Millisecond, TTFT: time.Millisecond, Latency: 2 * time.Millisecond, OutputTokens: 2, InputTokens: 4, ITL: []time.Duration{time.Millisecond}},
	}
	s := SummarizeLLM(rs, time.Second, rundir.LLMSLO{}, false)
	var b strings.Builder
	if err := WriteBenchServing(&b, ToBenchServing(s, Load{API: APIGenerate, Dataset: "random", MaxConcurrency: 8})); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(b.String()), &m); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	want := strings.Fields(`backend dataset_name request_rate max_concurrency sharegpt_output_len random_input_len
		random_output_len random_range_ratio duration completed total_input total_output total_output_retokenized
		total_input_tokens total_output_tokens total_output_tokens_retokenized
		request_throughput input_throughput output_throughput output_throughput_retokenized total_throughput
		total_throughput_retokenized mean_ttft_ms median_ttft_ms std_ttft_ms p99_ttft_ms mean_tpot_ms median_tpot_ms
		std_tpot_ms p99_tpot_ms mean_itl_ms median_itl_ms std_itl_ms p95_itl_ms p99_itl_ms max_itl_ms
		mean_e2e_latency_ms median_e2e_latency_ms std_e2e_latency_ms p90_e2e_latency_ms p99_e2e_latency_ms concurrency
		max_output_tokens_per_s max_concurrent_requests`)
	var got []string
	for k := range m {
		got = append(got, k)
	}
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("fields\n got %v\nwant %v", got, want)
	}
	if m["request_rate"] != "inf" || m["max_concurrency"] != 8.0 || m["mean_ttft_ms"] != 1.0 {
		t.Errorf("values %v", m)
	}
	for _, pair := range [][2]string{{"total_input", "total_input_tokens"}, {"total_output", "total_output_tokens"},
		{"total_output_retokenized", "total_output_tokens_retokenized"}} {
		if m[pair[0]] != m[pair[1]] || m[pair[0]] == 0.0 {
			t.Errorf("%s = %v, %s = %v: the two spellings differ", pair[0], m[pair[0]], pair[1], m[pair[1]])
		}
	}
	// Both requests overlap in the first second, and all 5 tokens arrive in it.
	if m["max_concurrent_requests"] != 2.0 || m["max_output_tokens_per_s"] != 5.0 {
		t.Errorf("peaks: %v concurrent, %v tokens/s; want 2 and 5", m["max_concurrent_requests"], m["max_output_tokens_per_s"])
	}
	if m["p90_e2e_latency_ms"] != s.E2E.P90 || s.E2E.P90 == 0 {
		t.Errorf("p90_e2e_latency_ms %v, summary %v", m["p90_e2e_latency_ms"], s.E2E.P90)
	}
}

// TestBenchServingExportRampUp: a ramped cell's export says so as vLLM's benchmark does:
// request_rate inf and the ramp's strategy and end rates; a cell without a ramp has none of them.
func TestBenchServingExportRampUp(t *testing.T) {
	s := SummarizeLLM([]Record{{Status: 200, TTFT: time.Millisecond, Latency: time.Millisecond, OutputTokens: 1}}, time.Second, rundir.LLMSLO{}, false)
	for _, ramp := range []*rundir.LLMRampUp{{Strategy: "linear", StartRPS: 1, EndRPS: 8}, nil} {
		var b strings.Builder
		if err := WriteBenchServing(&b, ToBenchServing(s, Load{API: APICompletions, Dataset: "random", RampUp: ramp})); err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(b.String()), &m); err != nil {
			t.Fatal(err)
		}
		if ramp == nil {
			for _, k := range []string{"ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps"} {
				if _, ok := m[k]; ok {
					t.Errorf("%s in an export without a ramp", k)
				}
			}
			continue
		}
		if m["request_rate"] != "inf" || m["ramp_up_strategy"] != "linear" || m["ramp_up_start_rps"] != 1.0 || m["ramp_up_end_rps"] != 8.0 {
			t.Errorf("ramped export: rate %v, strategy %v, %v..%v rps", m["request_rate"], m["ramp_up_strategy"], m["ramp_up_start_rps"], m["ramp_up_end_rps"])
		}
	}
}

// TestPeaksBuckets: bench_serving's one-second buckets, counted from the first start: a request
// spanning seconds 0 to 2 is in flight in three buckets, and tokens land where they arrive.
func TestPeaksBuckets(t *testing.T) {
	rs := []Record{
		{Status: 200, Start: 0, TTFT: 100 * time.Millisecond, Latency: 2500 * time.Millisecond, OutputTokens: 3, ITL: []time.Duration{time.Second, time.Second}},
		{Status: 200, Start: 2100 * time.Millisecond, TTFT: 100 * time.Millisecond, Latency: 300 * time.Millisecond, OutputTokens: 2, ITL: []time.Duration{100 * time.Millisecond}},
		{Start: 0, Error: "boom"},
	}
	tok, conc := peaks(rs)
	if tok != 3 || conc != 2 {
		t.Errorf("peaks %v tokens/s, %d concurrent; want 3 (second 2: 1 + 2) and 2", tok, conc)
	}
	if tok, conc := peaks(rs[2:]); tok != 0 || conc != 0 {
		t.Errorf("failed requests only: %v, %d", tok, conc)
	}
}

func FuzzStream(f *testing.F) {
	f.Add("data: {\"text\":\"a\",\"meta_info\":{\"completion_tokens\":1}}\n\ndata: [DONE]\n\n", APIGenerate)
	f.Add("data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"completion_tokens\":3}}\n\ndata: [DONE]\n", APICompletions)
	f.Add("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\ndata: {\"error\":\"oom\"}\n", APIChat)
	f.Add("data: {\"text\":\"a\",\"meta_info\":{\"completion_tokens\":1}}\n\ndata: {\"text\":\"ab\",\"meta_info\":{\"completion_tokens\":50000000}}\n\ndata: [DONE]\n\n", APIGenerate)
	f.Add("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":-1,\"completion_tokens\":-5}}\n\ndata: [DONE]\n", APIChat)
	const maxTokens = 16
	f.Fuzz(func(t *testing.T, body, api string) {
		var r Record
		err := stream(strings.NewReader(body), api, asked{maxTokens: maxTokens, maxPrompt: 1 << 20}, time.Now(), &tickClock{}, &r)
		if err == nil && !strings.Contains(body, "[DONE]") {
			t.Fatal("a stream without [DONE] completed")
		}
		// What the server reports never makes the record grow past what was asked.
		if len(r.ITL) > maxTokens {
			t.Fatalf("%d ITLs for a request of %d tokens", len(r.ITL), maxTokens)
		}
		if err == nil && (r.OutputTokens < 0 || r.OutputTokens > maxTokens || r.InputTokens < 0) {
			t.Fatalf("a completed stream recorded %d/%d tokens", r.InputTokens, r.OutputTokens)
		}
		for _, d := range r.ITL {
			if d < 0 {
				t.Fatalf("negative ITL %s", d)
			}
		}
		if r.TTFT < 0 || r.Latency < r.TTFT {
			t.Fatalf("TTFT %s E2E %s", r.TTFT, r.Latency)
		}
	})
}
