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
	// metricsInterval is how often /metrics is scraped during an LLM cell, on the run's clock.
	metricsInterval = time.Second
)

// isLLMAPI reports whether a serve cell's API is measured by the streaming LLM benchmark.
func isLLMAPI(api string) bool { return load.LLMPath(api) != "" }

// measureLLM runs an LLM serve cell's measured requests (no warmup), measured as bench_serving
// measures them: streamed requests on the cell's seeded arrival schedule (request_rate,
// burstiness, max_concurrency or concurrency, requests or duration) drawn from its dataset, on
// clock. It writes the per-request records to the cell's llm_requests.jsonl and to requests
// (the cell's requests.jsonl, which compare's request_latency, the error-rate message and
// bundles read). It returns the load summary (result.json's serve.load and load.json: E2E
// latency over the same requests) and the LLM result (serve.llm). err is set when the
// benchmark could not run (a dataset that cannot be read) or ctx ended; failed requests are not
// errors but counted in the summary, for the caller's max_error_rate check.
//
// With [load] clients > 1 the measured requests are sent by client processes that clients
// starts (llmclients.go).
func measureLLM(ctx context.Context, base string, c plans.Cell, cellDir string, requests io.Writer, clock load.Clock, clients clientStarter) (rundir.LoadSummary, *rundir.LLMResult, error) {
	c.Load.Warmup = 0
	return runLLM(ctx, base, c, cellDir, requests, nil, clock, clients)
}

// runLLMLoad is a whole LLM client phase: the warmup, then beforeMeasured (a torch cell's
// /start_profile; nil for none), then measureLLM on the real clock, with requests.jsonl
// created in cellDir.
func runLLMLoad(ctx context.Context, base string, c plans.Cell, cellDir string, beforeMeasured func() error) (rundir.LoadSummary, *rundir.LLMResult, error) {
	f, err := os.Create(filepath.Join(cellDir, rundir.RequestsFile))
	if err != nil {
		return rundir.LoadSummary{}, nil, fmt.Errorf("request records: %w", err)
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	sum, res, err := runLLM(ctx, base, c, cellDir, w, beforeMeasured, load.RealClock{}, nil)
	if ferr := w.Flush(); ferr != nil && err == nil {
		err = fmt.Errorf("request records: %w", ferr)
	}
	return sum, res, err
}

func runLLM(ctx context.Context, base string, c plans.Cell, cellDir string, requests io.Writer, beforeMeasured func() error, clock load.Clock, clients clientStarter) (rundir.LoadSummary, *rundir.LLMResult, error) {
	cfg, res, approx, err := llmConfig(base, c)
	if err != nil {
		return rundir.LoadSummary{}, nil, err
	}
	cfg.Clock = clock
	// The server's own view (/metrics) is scraped from just before the first measured request
	// to just after the last; a failed scrape is recorded in the result, never fatal.
	sc := load.NewScraper(base, nil, metricsInterval, load.ScaleOf(clock))
	scrapeCtx, stopScrape := context.WithCancel(ctx)
	scraping := make(chan struct{})
	started := false
	cfg.BeforeMeasured = func() error {
		if beforeMeasured != nil {
			if err := beforeMeasured(); err != nil {
				return err
			}
		}
		sc.Before(scrapeCtx)
		started = true
		go func() { defer close(scraping); sc.During(scrapeCtx) }()
		return nil
	}
	var rs []load.Record
	var wall time.Duration
	var runErr error
	if c.Load.Clients > 1 {
		var scale float64 // the clients' clock: the simulated server's at its scale, else their own
		if sc, ok := clock.(load.SimClock); ok {
			scale = sc.Scale
		}
		rs, wall, runErr = runClients(ctx, base, c, cellDir, cfg, scale, clients)
		if rs == nil && runErr != nil {
			stopScrape()
			if started {
				<-scraping
			}
			return rundir.LoadSummary{}, nil, runErr
		}
	} else {
		rs, wall, runErr = load.Run(ctx, cfg)
	}
	stopScrape()
	if started {
		<-scraping
		sc.After(ctx)
	}
	res.ServerMetrics = sc.Result()
	slo := rundir.LLMSLO{TTFT: c.Load.SLOTTFT.Duration, TPOT: c.Load.SLOTPOT.Duration}
	res.LLMSummary = load.SummarizeLLM(rs, wall, slo, approx)
	if err := writeLLMRecords(cellDir, requests, rs); err != nil {
		return rundir.LoadSummary{}, nil, err
	}
	return load.Summarize(rs, wall), res, runErr
}

// llmConfig maps a cell to the benchmark's configuration and the result's load description;
// approx says whether the input lengths are estimates.
func llmConfig(base string, c plans.Cell) (cfg load.Config, res *rundir.LLMResult, approx bool, err error) {
	l := c.Load
	api := l.API
	if api == "" {
		api = load.APIGenerate
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
	cfg = load.Config{BaseURL: base, Requests: n, Duration: l.Duration.Duration,
		Rate: l.RequestRate, Burstiness: burst, Concurrency: conc, Seed: uint64(c.Seed),
		Warmup: max(l.Warmup, 0), Timeout: l.RequestTimeout.Duration}
	if l.RampUpStrategy != "" {
		cfg.RampUp = &load.RampUp{Strategy: l.RampUpStrategy, StartRPS: l.RampUpStartRPS, EndRPS: l.RampUpEndRPS}
	}
	pool := n
	if pool == 0 {
		pool = llmDurationPrompts
	}
	var prompts []load.Prompt
	if l.Dataset == plans.DatasetMooncake {
		// The trace's arrival times replace request_rate and burstiness; a count-bounded cell
		// replays its first requests (at most the trace's).
		prompts, cfg.Arrivals, err = load.MooncakePrompts(l.DatasetPath, pool, l.TraceSlowdown)
		if err != nil {
			return cfg, nil, false, fmt.Errorf("%w; check [load] dataset_path", err)
		}
		cfg.Requests = min(n, len(prompts))
	} else if prompts, err = llmPrompts(c, pool); err != nil {
		return cfg, nil, false, err
	}
	if cfg.Build, err = load.LLMRequests(api, c.Model, prompts); err != nil {
		return cfg, nil, false, err
	}
	dataset := l.Dataset
	if dataset == "" {
		dataset = plans.DefaultDataset
	}
	res = &rundir.LLMResult{API: api, Dataset: dataset, RequestRate: l.RequestRate, Burstiness: burst,
		MaxConcurrency: conc, Records: rundir.LLMRecordsFile}
	if cfg.RampUp != nil {
		res.RampUp = &rundir.LLMRampUp{Strategy: l.RampUpStrategy, StartRPS: l.RampUpStartRPS, EndRPS: l.RampUpEndRPS}
	}
	return cfg, res, approxLengths(api, prompts), nil
}

// llmPrompts draws n prompts from the cell's dataset, seeded by the cell's seed.
func llmPrompts(c plans.Cell, n int) ([]load.Prompt, error) {
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
		ps, err := load.ShareGPTPrompts(c.Load.DatasetPath, n, c.OutputLen, seed)
		if err != nil {
			return nil, fmt.Errorf("%w; check [load] dataset_path", err)
		}
		for len(ps) < n { // a small file is cycled, as a duration-bounded run cycles prompts
			ps = append(ps, ps[:min(len(ps), n-len(ps))]...)
		}
		return ps, nil
	case plans.DatasetMultiTurn:
		ps, err := load.ShareGPTTurnPrompts(c.Load.DatasetPath, n, c.OutputLen, seed)
		if err != nil {
			return nil, fmt.Errorf("%w; check [load] dataset_path", err)
		}
		for len(ps) < n { // a small file is cycled, whole conversations at a time
			ps = append(ps, ps[:min(len(ps), n-len(ps))]...)
		}
		return ps, nil
	case plans.DatasetPrefix:
		// Three quarters of the input is the group's shared prefix, the rest the question.
		prefix := max(in*3/4, 1)
		return load.PrefixPrompts(prefixGroups, (n+prefixGroups-1)/prefixGroups, prefix, max(in-prefix, 1), out, seed)[:n], nil
	}
	return load.RandomPrompts(n, in, out, ratio, seed), nil
}

// approxLengths reports whether the input lengths are estimates: text prompts (the chat API,
// ShareGPT) go through the server's tokenizer, which the runner does not have.
func approxLengths(api string, prompts []load.Prompt) bool {
	if !load.Exact(api) {
		return true
	}
	return slices.ContainsFunc(prompts, func(p load.Prompt) bool { return p.IDs == nil })
}

// writeLLMRecords writes the records to llm_requests.jsonl and to requests, in index order.
func writeLLMRecords(cellDir string, requests io.Writer, rs []load.Record) error {
	f, err := os.Create(filepath.Join(cellDir, rundir.LLMRecordsFile))
	if err != nil {
		return fmt.Errorf("request records: %w", err)
	}
	w := bufio.NewWriter(f)
	enc, lenc := json.NewEncoder(w), json.NewEncoder(requests)
	for i := range rs {
		if err := enc.Encode(&rs[i]); err != nil {
			f.Close()
			return fmt.Errorf("request records: %w", err)
		}
		if err := lenc.Encode(&rs[i]); err != nil {
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
