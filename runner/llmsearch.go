package runner

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/plans/infile"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/load"
)

// SearchDir is where an SLA search cell keeps its probes: search/NN/llm_requests.jsonl, one
// directory a probe in the order run.
const SearchDir = "search"

// searchLLM is an SLA search cell's measurement ([load.search]): probes of the cell's load at
// values of the search axis chosen by load.Search, each a whole measureLLM with its records in
// search/NN/. The cell's result is its best probe's (the first probe's when none passed), with
// every probe in serve.llm.search; the best probe's records become the cell's
// llm_requests.jsonl and requests.jsonl, so compare and report read it as any LLM cell.
//
// reset.first is the outcome of the prefix-cache reset before the first probe; reset.again
// (nil: none) resets the cache before each later one, so that no probe finds the prompts of
// the probes before it cached.
func searchLLM(ctx context.Context, base string, c plans.Cell, cellDir string, requests io.Writer, clock load.Clock, clients clientStarter, log *slog.Logger, reset cacheReset) (rundir.LoadSummary, *rundir.LLMResult, error) {
	s := c.Load.Search
	type measured struct {
		sum rundir.LoadSummary
		res *rundir.LLMResult
		dir string
	}
	var runs []measured
	spec := load.SearchSpec{Axis: s.Axis, Min: s.Min, Max: s.Max, MaxProbes: s.MaxProbes,
		SLOTTFTP99: nsToMS(s.SLOTTFTP99.Duration.Nanoseconds()), SLOTPOTP99: nsToMS(s.SLOTPOTP99.Duration.Nanoseconds())}
	found, err := load.Search(ctx, spec, func(ctx context.Context, v float64) (rundir.LLMProbe, error) {
		pc := c
		switch s.Axis {
		case plans.SearchRequestRate:
			pc.Load.RequestRate = v
		case plans.SearchConcurrency:
			pc.Load.Concurrency, pc.Load.MaxConcurrency = int(v), 0
		}
		rel := filepath.Join(SearchDir, fmt.Sprintf("%02d", len(runs)))
		dir := filepath.Join(cellDir, rel)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return rundir.LLMProbe{}, fmt.Errorf("SLA probe: %w", err)
		}
		log.Info("SLA probe", "cell", c.ID, "probe", len(runs)+1, s.Axis, v)
		cacheReset := reset.first
		if len(runs) > 0 && reset.again != nil {
			cacheReset = reset.again(ctx)
		}
		sum, res, err := measureLLM(ctx, base, pc, dir, io.Discard, clock, clients)
		if err != nil {
			return rundir.LLMProbe{}, err
		}
		res.CacheReset = cacheReset
		runs = append(runs, measured{sum, res, rel})
		p := rundir.LLMProbe{TTFTP99: res.TTFT.P99, TPOTP99: res.TPOT.P99, Failed: res.Requests - res.Completed,
			RequestThroughput: res.RequestThroughput, Records: filepath.ToSlash(filepath.Join(rel, rundir.LLMRecordsFile)), CacheReset: cacheReset}
		p.Sustained = res.RequestThroughput
		if s.Axis == plans.SearchConcurrency {
			p.Sustained = res.Concurrency // Little's law: the requests the server kept in flight
		}
		return p, nil
	})
	if len(runs) == 0 {
		if err == nil {
			err = fmt.Errorf("SLA search over %s ran no probe", s.Axis)
		}
		return rundir.LoadSummary{}, nil, err
	}
	best := runs[min(found.BestProbe, len(runs)-1)]
	if cerr := copyRecords(filepath.Join(cellDir, best.dir, rundir.LLMRecordsFile), filepath.Join(cellDir, rundir.LLMRecordsFile), requests); cerr != nil && err == nil {
		err = cerr
	}
	best.res.Search = &found
	return best.sum, best.res, err
}

// copyRecords copies a probe's records to the cell's llm_requests.jsonl and to requests.
func copyRecords(from, to string, requests io.Writer) error {
	in, err := infile.Open(from)
	if err != nil {
		return fmt.Errorf("request records: %w", err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return fmt.Errorf("request records: %w", err)
	}
	if _, err := io.Copy(io.MultiWriter(out, requests), in); err != nil {
		out.Close()
		return fmt.Errorf("request records: %w", err)
	}
	return out.Close()
}

func nsToMS(ns int64) float64 { return float64(ns) / 1e6 }
