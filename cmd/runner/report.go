package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/urfave/cli/v3"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/history"
	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/reports/render"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner"
	"github.com/sglprof/runner/runner/exitcode"
)

// Files `runner report` writes into the run directory.
const (
	reportMD   = "report.md"
	reportHTML = "report.html"
)

func reportCommand(std stdio) *cli.Command {
	return &cli.Command{
		Name:      "report",
		Usage:     "write report.md and report.html (self-contained, inline SVG charts) for a run",
		ArgsUsage: "RUN_DIR",
		Description: `Writes RUN_DIR/report.md (fits a GitHub job summary; appended to $GITHUB_STEP_SUMMARY
when that is set) and RUN_DIR/report.html: one file, no network, with the comparison table
and per configuration the per-denoise-step latency (with the baseline band), the stage
breakdown, the top kernels from triage and the e2e history trend.

--baseline history|DIR adds the comparison (as runner compare). Exit status: 0, or 4 when the
comparison found a regression, 2 for unusable input.`,
		Flags: append(comparisonFlags(),
			&cli.StringFlag{Name: "baseline", Usage: "compare with `history` or a run directory"},
		),
		Action: func(ctx context.Context, c *cli.Command) error {
			args, err := positional(c, 1, 1, "RUN_DIR")
			if err != nil {
				return err
			}
			dir := args[0]
			n, err := nightlyOptions(ctx, c)
			if err != nil {
				return err
			}
			// Everything up to the report is read-only and runs under interruptibly, so Ctrl-C
			// ends a read that does not watch the context (summary.json a FIFO); the files are
			// written only after it.
			rr, err := interruptibly(ctx, func() (*readReport, error) { return readReportInputs(ctx, std, dir, &n) })
			if err != nil {
				return err
			}
			rep := rr.rep
			md, err := writeReportFiles(dir, rep)
			if err != nil {
				return err
			}
			if p := os.Getenv("GITHUB_STEP_SUMMARY"); p != "" {
				switch err := appendStepSummary(p, md); {
				case errors.Is(err, rundir.ErrNotRegular):
					fmt.Fprintf(std.err, "runner: warning: GITHUB_STEP_SUMMARY: %v; report.md was not appended to it\n", err)
				case err != nil:
					return fmt.Errorf("GITHUB_STEP_SUMMARY %s: %w", p, err)
				}
			}
			fmt.Fprintf(std.out, "%s\n%s\n%s\n", rep.Headline, filepath.Join(dir, reportMD), filepath.Join(dir, reportHTML))
			if rr.regressed {
				return &exitError{code: exitcode.Regression}
			}
			return nil
		},
	}
}

// readReportInputs reads what a report of dir shows: its timings, the baseline comparison the
// options ask for, the history trend and the cells. It only reads.
func readReportInputs(ctx context.Context, std stdio, dir string, n *runner.NightlyOptions) (*readReport, error) {
	cur, err := perf.Load(dir, perf.LoadOptions{Profilers: n.Profilers})
	if err != nil {
		return nil, &exitError{code: exitcode.Usage, err: err}
	}
	hpath := n.History
	if hpath == "" {
		hpath = runner.HistoryPath(dir)
	}
	var db *history.DB
	if _, err := os.Stat(hpath); err == nil {
		if db, err = history.Open(ctx, hpath); err != nil {
			return nil, &exitError{code: exitcode.Usage, err: err}
		}
		defer db.Close()
	}
	res, base, err := n.CompareBaseline(ctx, cur, planOf(dir), db)
	switch {
	case errors.Is(err, runner.ErrNoHistory):
		return nil, usageErr("--baseline history: no history database at %s; pass --history PATH", hpath)
	case runner.NoBaselineYet(err):
		fmt.Fprintf(std.err, "runner: %v\n", err)
	case err != nil:
		return nil, err
	}
	trend := map[string][]render.TrendPoint{}
	if db != nil {
		entries, err := db.List(ctx, history.Filter{Plan: cur.Plan, GPU: cur.GPU})
		if err != nil {
			return nil, err
		}
		series := map[string][]history.RunPoint{}
		for _, e := range entries {
			if e.Metric == perf.MetricE2E {
				trend[e.Config] = append(trend[e.Config], render.TrendPoint{RunID: e.RunID, Time: e.Time, Median: e.Median})
				p := history.RunPoint{RunID: e.RunID, Median: e.Median, N: e.N, Spread: math.NaN()}
				if e.Spread != nil {
					p.Spread = *e.Spread
				}
				series[e.Config] = append(series[e.Config], p)
			}
		}
		// Mark where step changes began, by the rule of the history verdict.
		_, bo := n.CompareOptions(planOf(dir))
		for key, s := range series {
			for _, i := range history.TrendChanges(s, perf.MetricE2E, bo) {
				trend[key][i].Change = true
			}
		}
	}
	title := "Run report"
	if cur.Plan != "" {
		title = "Run report: " + cur.Plan
	}
	cells, err := reportCells(dir)
	if err != nil {
		return nil, err
	}
	rep := render.BuildReport(title, dir, cur, base, res, trend).WithCells(cells)
	rep.Prompts = reportPrompts(dir)
	if man, err := rundir.ReadManifest(dir); err == nil {
		rep.Simulated = man.Simulated // the manifest says how the run was made
	}
	if sum, err := rundir.ReadSummary(dir); err == nil {
		rep.Parity = sum.Parity
	}
	return &readReport{rep: rep, regressed: res != nil && res.Regressed()}, nil
}

// writeReportFiles renders rep and writes report.md and report.html into dir, returning the
// Markdown (for $GITHUB_STEP_SUMMARY). The reports are the runner's files in the run
// directory, replaced on every call: through the atomic writer, so a symlink planted as
// report.md is replaced rather than written through, and after refusing a name that is
// something else (a FIFO would block the write). Both are checked before either is written.
func writeReportFiles(dir string, rep *render.Report) ([]byte, error) {
	var md, html bytes.Buffer
	if err := render.WriteReportMarkdown(&md, rep); err != nil {
		return nil, err
	}
	if err := render.WriteReportHTML(&html, rep); err != nil {
		return nil, err
	}
	files := []struct {
		name string
		data []byte
	}{{reportMD, md.Bytes()}, {reportHTML, html.Bytes()}}
	for _, f := range files {
		if err := rundir.CheckReplaceable(filepath.Join(dir, f.name)); err != nil {
			return nil, usageErr("%v", err)
		}
	}
	for _, f := range files {
		if err := rundir.WriteFileAtomicPerm(filepath.Join(dir, f.name), f.data, 0o644); err != nil {
			return nil, err
		}
	}
	return md.Bytes(), nil
}

// appendStepSummary appends md to the job summary file p (GitHub Actions' $GITHUB_STEP_SUMMARY),
// creating it when missing. Only a regular file (or a link to one) is appended to: a FIFO
// would block the write and a device is no summary. The path is checked before it is opened
// and the open descriptor again, opened non-blocking so that not even the open can block.
func appendStepSummary(p string, md []byte) error {
	if st, err := os.Stat(p); err == nil && !st.Mode().IsRegular() {
		return fmt.Errorf("%s is %w (%s)", p, rundir.ErrNotRegular, st.Mode().Type())
	}
	f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY|syscall.O_NONBLOCK, 0o644)
	if err != nil {
		return err
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%s is %w (%s)", p, rundir.ErrNotRegular, st.Mode().Type())
		}
		return err
	}
	_, err = f.Write(md)
	return errors.Join(err, f.Close())
}

// readReport is what runner report reads before it writes anything.
type readReport struct {
	rep       *render.Report
	regressed bool
}

// reportCells reads the run's cells, verdicts and timings from summary.json for the report's
// cells table; a run without one (still in progress, or a single cell) gets no table. One that
// cannot be read (not JSON, not a regular file) is an error that names it.
func reportCells(dir string) ([]render.CellLine, error) {
	s, err := rundir.ReadSummary(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &exitError{code: exitcode.Usage, err: err}
	}
	cells := make([]render.CellLine, 0, len(s.Cells))
	for _, r := range s.Cells {
		line := render.CellLine{ID: r.ID, Profiler: r.Profiler, Verdict: r.Verdict,
			E2E: float64(r.E2ENS), Step: float64(r.MeanDenoiseStepNS), Warnings: len(r.Warnings), Cause: r.Cause, Key: r.Key}
		line.LLM = render.LLMPointOf(r.LLM)
		if r.LLM != nil {
			// The timeline is an extra: a cell whose records are missing or unreadable has none.
			if spans, more, err := rundir.ReadLLMSpans(rundir.CellDir(dir, r.ID)); err == nil {
				line.Timeline, line.TimelineLeft = spans, more
			}
		}
		cells = append(cells, line)
	}
	return cells, nil
}

// reportPrompts pairs the prompt parts of the run's keys ("p7cfb7d39") with the prompts they
// hash, from cells.json, so the report can say what the part stands for. A run without a
// readable cells.json gets no note: the report is still useful without it.
func reportPrompts(dir string) []render.PromptKey {
	cells, err := rundir.ReadCells(dir)
	if err != nil {
		return nil
	}
	var out []render.PromptKey
	seen := map[string]bool{}
	for _, c := range cells.Cells {
		part := "p" + plans.PromptHash(c.Cell.Prompt)
		if seen[part] || !slices.Contains(strings.Split(c.Cell.Key, "/"), part) {
			continue
		}
		seen[part] = true
		out = append(out, render.PromptKey{Part: part, Prompt: c.Cell.Prompt})
	}
	return out
}
