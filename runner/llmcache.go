package runner

// The prefix cache between LLM cells. Cells with the same server arguments share one server,
// and a seeded dataset gives every cell the same prompts, so from the second cell on the
// server's prefix cache would hold every prompt and the cells' order would decide their TTFT.
// Before each cell's measured requests (after its warmup, before its profiling window, as
// SGLang's bench_serving --flush-cache does) and before each SLA probe, the runner asks the
// server to empty its cache ([load] flush_cache).

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sglprof/runner/backends/vllm"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
)

// A reset refused with 400 (SGLang: requests still running or waiting, e.g. a request whose
// client gave up) is tried cacheResetTries times in all, cacheResetWait apart.
const (
	cacheResetTries   = 5
	cacheResetTimeout = 30 * time.Second
)

// cacheResetWait is a var so that tests need not wait.
var cacheResetWait = 200 * time.Millisecond

// cacheReset is an LLM cell's prefix-cache reset: the outcome of the reset before its measured
// requests, and the reset to call again before each further SLA probe (nil: none).
type cacheReset struct {
	first string
	again func(context.Context) string
}

// resetPrefixCache empties the prefix cache of the server at base through its route (POST) when
// flush is on, and returns the outcome for result.json's serve.llm.cache_reset:
// rundir.CacheFlushed, or rundir.CacheNotReset and why.
func resetPrefixCache(ctx context.Context, base, route string, flush bool) string {
	switch {
	case !flush:
		return rundir.CacheNotReset + "[load] flush_cache = false"
	case route == "":
		return rundir.CacheNotReset + "the server has no route that resets its prefix cache"
	}
	var code int
	var body string
	for try := 1; ; try++ {
		code, body = post(ctx, base+route, nil, cacheResetTimeout)
		if code == http.StatusOK {
			return rundir.CacheFlushed
		}
		if code != http.StatusBadRequest || try >= cacheResetTries || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(cacheResetWait):
		}
	}
	if code == 0 {
		return rundir.CacheNotReset + fmt.Sprintf("POST %s failed: %s", route, body)
	}
	msg := fmt.Sprintf("POST %s answered %d", route, code)
	if first, _, _ := strings.Cut(strings.TrimSpace(body), "\n"); first != "" {
		msg += " (" + first + ")"
	}
	switch {
	case code == http.StatusBadRequest:
		msg += fmt.Sprintf(" %d times: requests were still running or waiting on the server", cacheResetTries)
	case code == http.StatusNotFound && route == vllm.ResetPrefixCachePath:
		msg += "; vLLM serves it only with " + vllm.EnvDevMode + "=1 in the server's environment (drop the value backend.env gives it)"
	}
	return rundir.CacheNotReset + msg
}

// cacheResetter is the reset of one cell's server: it logs and warns on the cell when a reset
// that was asked for did not happen.
func (ss *serveSession) cacheResetter(c plans.Cell, srv *server, res *cellResult) func(context.Context) string {
	warned := false
	return func(ctx context.Context) string {
		out := resetPrefixCache(ctx, srv.baseURL(), srv.proto.CacheReset, c.Load.FlushCache)
		if out == rundir.CacheFlushed || !c.Load.FlushCache || ctx.Err() != nil {
			return out
		}
		why := strings.TrimPrefix(out, rundir.CacheNotReset)
		ss.opts.Logger.Warn("prefix cache not reset: the cell may find earlier cells' prompts cached", "cell", c.ID, "why", why)
		if !warned {
			warned = true
			res.Warnings = append(res.Warnings, rundir.Reason{Code: "cache-not-reset", Message: "the server's prefix cache was not reset before the measured requests, so prompts of earlier cells may be cached (see serve.llm.cache_reset): " + why})
		}
		return out
	}
}
