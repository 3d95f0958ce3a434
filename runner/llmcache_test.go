package runner

import (
	"context"
	"testing"

	"github.com/sglprof/runner/reports/rundir"
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
