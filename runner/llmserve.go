package runner

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/reports/stats"
	"github.com/sglprof/runner/runner/llmbench"
	"github.com/sglprof/runner/runner/load"
)

// bench_serving's defaults for what a plan leaves out: random-input-len 1024,
// random-output-len 128; the generated-shared-prefix dataset's groups and lengths.
const (
	llmDefaultInputLen  = 1024
	llmDefaultOutputLen = 128
	prefixGroups        = 4
	// llmDurationPrompts is the prompt pool of a duration-bounded cell (cycled when exhausted).
	llmDurationPrompts = 1000
)

// isLLMAPI reports whether a serve cell's API is measured by the streaming LLM benchmark.
func isLLMAPI(api string) bool { return llmbench.Path(api) != "" }

// llmWarmup sends an LLM cell's [load] warmup requests with the streaming client, unmeasured:
// the client phase calls it before the profiling window opens.
func llmWarmup(ctx context.Context, base string, c plans.Cell) error {
	cfg, _, err := llmConfig(base, c)
	if err != nil {
		return err
	}
	return llmbench.Warmup(ctx, cfg)
}

// measureLLM runs an LLM serve cell's measured requests (no warmup), measured as bench_serving
// measures them: streamed requests on the cell's seeded arrival schedule (request_rate,
// burstiness, max_concurrency or concurrency, requests or duration) drawn from its dataset. It
// writes the per-request records to the cell's llm_requests.jsonl (TTFT, every ITL, E2E,
// tokens, error) and, in runner/load's Record format, to requests (the cell's requests.jsonl,
// which compare's request_latency, the error-rate message and bundles read). It returns the
// load summary (result.json's serve.load and load.json: E2E latency over the same requests)
// and the LLM result (serve.llm). err is set when the benchmark could not run (a dataset that
// cannot be read) or ctx ended; failed requests are not errors but counted in the summary, for
// the caller's max_error_rate check.
//
// sim is the simulated server's time scale under --simulate (the benchmark then runs on the
// simulated clock: llmbench.Config.SimClock), or negative for a real server.
func measureLLM(ctx context.Context, base string, c plans.Cell, cellDir string, requests io.Writer, sim float64) (rundir.LoadSummary, *rundir.LLMResult, error) {
	c.Load.Warmup = 0
	return runLLM(ctx, base, c, cellDir, requests, nil, sim)
}

// runLLMLoad is a whole LLM client phase: the warmup, then beforeMeasured (a torch cell's
// /start_profile; nil for none), then measureLLM, with requests.jsonl created in cellDir.
func runLLMLoad(ctx context.Context, base string, c plans.Cell, cellDir string, beforeMeasured func() error) (rundir.LoadSummary, *rundir.LLMResult, error) {
	f, err := os.Create(filepath.Join(cellDir, rundir.RequestsFile))
	if err != nil {
		return rundir.LoadSummary{}, nil, fmt.Errorf("request records: %w", err)
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	sum, res, err := runLLM(ctx, base, c, cellDir, w, beforeMeasured, -1)
	if ferr := w.Flush(); ferr != nil && err == nil {
		err = fmt.Errorf("request records: %w", ferr)
	}
	return sum, res, err
}

func runLLM(ctx context.Context, base string, c plans.Cell, cellDir string, requests io.Writer, beforeMeasured func() error, sim float64) (rundir.LoadSummary, *rundir.LLMResult, error) {
	cfg, res, err := llmConfig(base, c)
	if err != nil {
		return rundir.LoadSummary{}, nil, err
	}
	cfg.BeforeMeasured = beforeMeasured
	cfg.SimClock, cfg.SimTimeScale = sim >= 0, sim
	rs, wall, runErr := llmbench.Run(ctx, cfg)
	slo := llmbench.SLO{TTFT: c.Load.SLOTTFT.Duration, TPOT: c.Load.SLOTPOT.Duration}
	res.LLMSummary = llmbench.Summarize(rs, wall, slo, approxLengths(cfg))
	if err := writeLLMRecords(cellDir, requests, rs); err != nil {
		return rundir.LoadSummary{}, nil, err
	}
	return llmLoadSummary(rs, wall), res, runErr
}

// llmConfig maps a cell to the benchmark's configuration and the result's load description.
func llmConfig(base string, c plans.Cell) (llmbench.Config, *rundir.LLMResult, error) {
	l := c.Load
	api := l.API
	if api == "" {
		api = llmbench.APIGenerate
	}
	conc := l.MaxConcurrency
	if conc <= 0 {
		conc = max(l.Concurrency, 1)
	}
	n := l.Requests
	if l.Duration.Duration > 0 {
		n = 0
	} else if n <= 0 {
		n = plans.DefaultRequests
	}
	burst := l.Burstiness
	if burst <= 0 {
		burst = plans.DefaultBurstiness
	}
	cfg := llmbench.Config{BaseURL: base, API: api, Model: c.Model, Requests: n, Duration: l.Duration.Duration,
		Rate: l.RequestRate, Burstiness: burst, MaxConcurrency: conc, Seed: uint64(c.Seed),
		Warmup: max(l.Warmup, 0), RequestTimeout: l.RequestTimeout.Duration}
	pool := n
	if pool == 0 {
		pool = llmDurationPrompts
	}
	prompts, err := llmPrompts(c, pool)
	if err != nil {
		return cfg, nil, err
	}
	cfg.Prompts = prompts
	dataset := l.Dataset
	if dataset == "" {
		dataset = plans.DefaultDataset
	}
	res := &rundir.LLMResult{API: api, Dataset: dataset, RequestRate: l.RequestRate, Burstiness: burst,
		MaxConcurrency: conc, Records: rundir.LLMRecordsFile}
	return cfg, res, nil
}

// llmPrompts draws n prompts from the cell's dataset, seeded by the cell's seed.
func llmPrompts(c plans.Cell, n int) ([]llmbench.Prompt, error) {
	in, out := c.InputLen, c.OutputLen
	if in <= 0 {
		in = llmDefaultInputLen
	}
	if out <= 0 {
		out = llmDefaultOutputLen
	}
	seed := uint64(c.Seed)
	ratio := c.Load.RandomRangeRatio
	if ratio <= 0 {
		ratio = plans.DefaultRandomRangeRatio
	}
	switch c.Load.Dataset {
	case plans.DatasetShareGPT:
		// An output_len axis fixes the output length; without one the reply's length is used.
		ps, err := llmbench.ShareGPTPrompts(c.Load.DatasetPath, n, c.OutputLen, seed)
		if err != nil {
			return nil, fmt.Errorf("%w; check [load] dataset_path", err)
		}
		for len(ps) < n { // a small file is cycled, as a duration-bounded run cycles prompts
			ps = append(ps, ps[:min(len(ps), n-len(ps))]...)
		}
		return ps, nil
	case plans.DatasetPrefix:
		// Three quarters of the input is the group's shared prefix, the rest the question.
		prefix := max(in*3/4, 1)
		return llmbench.PrefixPrompts(prefixGroups, (n+prefixGroups-1)/prefixGroups, prefix, max(in-prefix, 1), out, seed)[:n], nil
	}
	return llmbench.RandomPrompts(n, in, out, ratio, seed), nil
}

// approxLengths reports whether the input lengths are estimates: text prompts (the chat API,
// ShareGPT) go through the server's tokenizer, which the runner does not have.
func approxLengths(cfg llmbench.Config) bool {
	if !llmbench.Exact(cfg.API) {
		return true
	}
	return slices.ContainsFunc(cfg.Prompts, func(p llmbench.Prompt) bool { return p.IDs == nil })
}

// writeLLMRecords writes llm_requests.jsonl and the load records to requests.
func writeLLMRecords(cellDir string, requests io.Writer, rs []llmbench.Result) error {
	f, err := os.Create(filepath.Join(cellDir, rundir.LLMRecordsFile))
	if err != nil {
		return fmt.Errorf("request records: %w", err)
	}
	w := bufio.NewWriter(f)
	enc, lenc := json.NewEncoder(w), json.NewEncoder(requests)
	for i := range rs {
		r := &rs[i]
		status := 200
		if !r.OK() {
			status = 0
		}
		if err := enc.Encode(r); err != nil {
			f.Close()
			return fmt.Errorf("request records: %w", err)
		}
		if err := lenc.Encode(load.Record{Index: r.Index, Status: status, StartNS: int64(r.Start), LatencyNS: int64(r.E2E),
			Tokens: r.OutputTokens, Error: r.Error, Violation: r.Violation}); err != nil {
			f.Close()
			return fmt.Errorf("request records: %w", err)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("request records: %w", err)
	}
	return f.Close()
}

// llmLoadSummary is the load summary of the measured requests, with runner/load's definitions
// (latency = E2E of the completed requests), so summaries and compares read LLM cells as any
// serve cell.
func llmLoadSummary(rs []llmbench.Result, wall time.Duration) rundir.LoadSummary {
	s := rundir.LoadSummary{Count: len(rs), WallNS: int64(wall)}
	var lat []int64
	tokens := 0
	for i := range rs {
		if !rs[i].OK() {
			s.Errors++
			if rs[i].Violation {
				if s.ProtocolViolations++; s.FirstViolation == "" {
					s.FirstViolation = rs[i].Error
				}
			}
			continue
		}
		lat = append(lat, int64(rs[i].E2E))
		tokens += rs[i].OutputTokens
	}
	if s.Count > 0 {
		s.ErrorRate = float64(s.Errors) / float64(s.Count)
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		var sum int64
		for _, v := range lat {
			sum += v
		}
		s.MeanNS = sum / int64(len(lat))
		s.P50NS = int64(stats.Percentile(lat, 50))
		s.P90NS = int64(stats.Percentile(lat, 90))
		s.P99NS = int64(stats.Percentile(lat, 99))
		s.MaxNS = lat[len(lat)-1]
	}
	if secs := wall.Seconds(); secs > 0 {
		s.RequestsPerS = float64(len(lat)) / secs
		s.TokensPerS = float64(tokens) / secs
	}
	return s
}
