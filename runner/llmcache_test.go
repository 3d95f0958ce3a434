package runner

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sglprof/runner/backends/vllm"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/load"
)

// sharedServerPlan has two LLM cells on one launched server, each sending the same seeded
// prompts (the random dataset): the second cell finds the first's prompts in the server's
// prefix cache unless it is flushed between them.
const sharedServerPlan = `name = "flush"
[backend]
mode = "serve"
model_type = "llm"
extra_args = ["--enable-metrics"]
[matrix]
model = ["meta-llama/Llama-3.1-8B-Instruct"]
input_len = [64]
output_len = [2]
concurrency = [1, 2]
[load]
warmup = 1
requests = 4
`

// The prefix cache between cells of a shared server: with [load] flush_cache (the default for a
// launched server) the second cell's hit rate is the first's and result.json says the cache was
// flushed; with it off the second cell finds every prompt cached (hit rate ~100%), which is
// what made the later cells of a sweep look faster than the first.
func TestSharedServerCacheFlushedBetweenCells(t *testing.T) {
	rates := func(src string) (first, second *rundir.LLMResult) {
		t.Helper()
		sum, err := Run(context.Background(), testPlan(t, src), simOptions(t))
		if err != nil {
			t.Fatal(err)
		}
		if sum.ExitCode != 0 || len(sum.Cells) != 2 {
			t.Fatalf("summary %+v", sum)
		}
		var out []*rundir.LLMResult
		for _, row := range sum.Cells {
			r := serveResult(t, sum, row.ID)
			if r.Serve == nil || r.Serve.LLM == nil || r.Serve.LLM.ServerMetrics == nil || r.Serve.LLM.ServerMetrics.CacheHitRate == nil {
				t.Fatalf("%s: no hit rate in %+v", row.ID, r.Serve)
			}
			out = append(out, r.Serve.LLM)
		}
		if out[0].MaxConcurrency != 1 || out[1].MaxConcurrency != 2 {
			t.Fatalf("cells out of order: concurrency %d, %d", out[0].MaxConcurrency, out[1].MaxConcurrency)
		}
		return out[0], out[1]
	}
	a, b := rates(sharedServerPlan)
	ra, rb := *a.ServerMetrics.CacheHitRate, *b.ServerMetrics.CacheHitRate
	t.Logf("flushed: hit rate %.3f, then %.3f", ra, rb)
	if rb != ra || rb > 0.5 {
		t.Errorf("flushed: hit rate %.3f in the first cell, %.3f in the second; want the same (the cache emptied before each)", ra, rb)
	}
	if a.CacheReset != rundir.CacheFlushed || b.CacheReset != rundir.CacheFlushed {
		t.Errorf("cache_reset %q, %q; want %q", a.CacheReset, b.CacheReset, rundir.CacheFlushed)
	}
	_, b = rates(sharedServerPlan + "flush_cache = false\n")
	if r := *b.ServerMetrics.CacheHitRate; r < 0.9 {
		t.Errorf("not flushed: hit rate %.3f in the second cell, want ~1 (every prompt cached by the first)", r)
	}
	if want := rundir.CacheNotReset + "[load] flush_cache = false"; b.CacheReset != want {
		t.Errorf("cache_reset %q, want %q", b.CacheReset, want)
	}
}

// resetPrefixCache: 200 is "flushed"; a 400 (requests still draining) is tried again, at most
// cacheResetTries times in all; vLLM's 404 names the development-mode variable; with
// flush_cache off or no route nothing is sent.
func TestResetPrefixCacheOutcomes(t *testing.T) {
	var calls atomic.Int32
	refuse := atomic.Int32{} // the number of 400s before a 200; < 0: always 400
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		switch {
		case r.Method != http.MethodPost:
			w.WriteHeader(http.StatusMethodNotAllowed)
		case r.URL.Path == vllm.ResetPrefixCachePath:
			w.WriteHeader(http.StatusNotFound)
		case refuse.Load() < 0 || n <= refuse.Load():
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, "Cache flushed.\nPlease check backend logs for more details.\n")
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	wait := cacheResetWait
	cacheResetWait = time.Millisecond
	t.Cleanup(func() { cacheResetWait = wait })
	refuse.Store(2)
	if got := resetPrefixCache(ctx, srv.URL, "/flush_cache", true); got != rundir.CacheFlushed || calls.Load() != 3 {
		t.Errorf("two 400s then 200: %q after %d calls, want flushed after 3", got, calls.Load())
	}
	calls.Store(0)
	refuse.Store(-1)
	got := resetPrefixCache(ctx, srv.URL, "/flush_cache", true)
	if calls.Load() != cacheResetTries || !strings.HasPrefix(got, rundir.CacheNotReset+"POST /flush_cache answered 400 (Cache flushed.)") ||
		!strings.Contains(got, "still running or waiting") {
		t.Errorf("always 400: %q after %d calls, want not reset after %d", got, calls.Load(), cacheResetTries)
	}
	if got := resetPrefixCache(ctx, srv.URL, vllm.ResetPrefixCachePath, true); !strings.Contains(got, "answered 404") || !strings.Contains(got, "VLLM_SERVER_DEV_MODE=1") {
		t.Errorf("vLLM without development mode: %q", got)
	}
	calls.Store(0)
	if got := resetPrefixCache(ctx, srv.URL, "/flush_cache", false); got != rundir.CacheNotReset+"[load] flush_cache = false" || calls.Load() != 0 {
		t.Errorf("flush_cache off: %q after %d calls", got, calls.Load())
	}
	if got := resetPrefixCache(ctx, srv.URL, "", true); !strings.HasPrefix(got, rundir.CacheNotReset) || calls.Load() != 0 {
		t.Errorf("no route: %q after %d calls", got, calls.Load())
	}
}

// An SLA search resets the cache before every probe after the first (whose reset the cell's
// client phase did), and records each probe's outcome. The SLO is below the cost model's TTFT
// of a lone request (15 ms + 0.04 ms a token), so every probe fails and the search goes on
// however the requests overlapped.
func TestSearchResetsCacheBeforeEachProbe(t *testing.T) {
	base := startLLMSim(t, "0")
	c := testPlan(t, `name = "s"
[backend]
mode = "serve"
model_type = "llm"
[matrix]
model = ["m/M"]
input_len = [32]
output_len = [2]
[load]
requests = 4
[load.search]
axis = "concurrency"
slo_ttft_p99 = "10ms"
max = 4
max_probes = 3
`).Expand()[0]
	resets := 0
	reset := cacheReset{first: "first", again: func(context.Context) string { resets++; return "again " + strconv.Itoa(resets) }}
	_, res, err := searchLLM(context.Background(), base, c, t.TempDir(), io.Discard, load.SimClock{}, nil, slog.New(slog.DiscardHandler), reset)
	if err != nil {
		t.Fatal(err)
	}
	probes := res.Search.Probes
	if len(probes) < 2 || resets != len(probes)-1 {
		t.Fatalf("%d probes (%+v), %d resets; want a reset before each probe but the first", len(probes), probes, resets)
	}
	for i, p := range probes {
		want := "first"
		if i > 0 {
			want = "again " + strconv.Itoa(i)
		}
		if p.CacheReset != want {
			t.Errorf("probe %d: cache_reset %q, want %q", i, p.CacheReset, want)
		}
	}
	if res.CacheReset == "" {
		t.Errorf("the cell's cache_reset is empty; want its best probe's")
	}
}
