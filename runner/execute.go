package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/plans"
)

// execute runs the cells of recs that have no result yet, then writes the summary and the
// final manifest. Ctrl-C (ctx cancelled) stops the current cell through the stop ladder,
// records it as interrupted, leaves the remaining cells without a result (so --resume runs
// them) and still writes the summary.
func execute(ctx context.Context, p *plans.Plan, dir string, recs []cellRecord, man *Manifest, opts *Options) (*Summary, error) {
	var todo []int
	for i, r := range recs {
		if _, err := os.Stat(filepath.Join(r.abs, ResultFile)); err != nil {
			todo = append(todo, i)
		}
	}
	opts.Progress.Start(len(todo))
	interrupted := false
	// Serve mode (runner/serve.go): servers outlive single cells, so a session owns them and
	// stops the last one after the loop.
	var ss *serveSession
	if isServeCells(recs) {
		ss = newServeSession(dir, opts)
	}
	for n, i := range todo {
		rec := recs[i]
		if ctx.Err() != nil {
			interrupted = true
			break
		}
		opts.Progress.CellStart(n, len(todo), rec.Cell)
		var res *CellResult
		if ss != nil {
			res = ss.runCell(ctx, rec)
		} else {
			res = runCell(ctx, rec, opts)
		}
		if err := writeJSONAtomic(filepath.Join(rec.abs, ResultFile), res); err != nil {
			// Without result.json the cell counts as not run; say so and go on.
			opts.Logger.Error("cannot write result", "cell", rec.Cell.ID, "err", err)
		}
		opts.Progress.CellEnd(n, len(todo), rec.Cell, res)
		if res.Verdict == plans.VerdictInterrupted {
			interrupted = true
			break
		}
	}
	if ss != nil {
		ss.close()
	}
	opts.Progress.Finish()
	if ctx.Err() != nil {
		interrupted = true
	}
	sum := buildSummary(p, dir, recs, interrupted)
	man.End = opts.Now().UTC()
	man.Verdicts = sum.Counts
	if err := writeRedactedJSON(filepath.Join(dir, ManifestFile), man); err != nil {
		return sum, err
	}
	if err := writeSummaryFiles(dir, sum); err != nil {
		return sum, err
	}
	if err := WriteSummaryTable(opts.Out, sum); err != nil {
		return sum, err
	}
	// History and baseline comparison (issue 6); may turn the exit code into 4.
	if err := nightly(ctx, p, dir, sum, opts); err != nil {
		return sum, err
	}
	return sum, nil
}

// Summary is summary.json: one row per cell and the run's exit code.
type Summary struct {
	Plan        string         `json:"plan"`
	RunDir      string         `json:"run_dir"`
	Cells       []SummaryRow   `json:"cells"`
	Counts      map[string]int `json:"counts"`
	Interrupted bool           `json:"interrupted"`
	ExitCode    int            `json:"exit_code"`
}

// SummaryRow is one cell of the summary.
type SummaryRow struct {
	ID       string   `json:"id"`
	Key      string   `json:"key"`
	Profiler string   `json:"profiler"`
	Verdict  string   `json:"verdict"` // "not-run" when the cell has no result
	Reasons  []string `json:"reasons,omitempty"`
	// Cause is the one reason the terminal summary shows: the root cause, not its consequences
	// (a missing perf dump after an OOM). Every reason stays in Reasons and result.json.
	Cause string `json:"cause,omitempty"`
	// Warnings are the cell's warnings (an ok cell can have them: an nsys capture that ended
	// the program, a trace attributed by time); summary.md lists them.
	Warnings          []string      `json:"warnings,omitempty"`
	WallNS            int64         `json:"wall_ns"`
	E2ENS             int64         `json:"e2e_ns,omitempty"`
	MeanDenoiseStepNS int64         `json:"mean_denoise_step_ns,omitempty"`
	TopKernels        []KernelShare `json:"top_kernels,omitempty"`
}

// VerdictNotRun marks a cell without result.json in a summary.
const VerdictNotRun = "not-run"

func buildSummary(p *plans.Plan, dir string, recs []cellRecord, interrupted bool) *Summary {
	s := &Summary{Plan: p.Name, RunDir: dir, Counts: map[string]int{}, Interrupted: interrupted}
	for _, rec := range recs {
		row := SummaryRow{ID: rec.Cell.ID, Key: rec.Cell.Key, Profiler: rec.Cell.Profiler, Verdict: VerdictNotRun}
		var r CellResult
		if err := readJSON(filepath.Join(rec.abs, ResultFile), &r); err == nil {
			row.Verdict = r.Verdict
			row.WallNS = r.Timings.WallNS
			row.E2ENS = r.Timings.E2ENS
			row.MeanDenoiseStepNS = r.Timings.MeanDenoiseStepNS
			row.TopKernels = r.TopKernels
			for _, rs := range r.Reasons {
				row.Reasons = append(row.Reasons, reasonLine(rs))
			}
			row.Cause = causeLine(r.Reasons, rec.Dir)
			for _, rs := range r.Warnings {
				row.Warnings = append(row.Warnings, reasonLine(rs))
			}
		}
		s.Counts[row.Verdict]++
		s.Cells = append(s.Cells, row)
	}
	s.ExitCode = exitCodeFor(s)
	return s
}

func reasonLine(r backends.Reason) string {
	if len(r.Lines) > 0 {
		return fmt.Sprintf("%s: %s (log line %d: %q)", r.Code, r.Message, r.Lines[0].Line, r.Lines[0].Text)
	}
	return r.Code + ": " + r.Message
}

// consequenceCodes are reasons that follow from another one (the program died, so it wrote no
// trace and no perf dump); causeLine prefers any other reason as the root cause.
var consequenceCodes = map[string]bool{
	"exit-status": true, "trace-missing": true, "perf-dump-missing": true,
	"nsys-report-missing": true, "nsys-export": true,
}

// maxQuotedLine is the longest log line the terminal summary quotes.
const maxQuotedLine = 120

// causeLine is the one-line root cause of a cell's reasons for the terminal: the first reason
// that is not a consequence, with the log line it was found on (not the line's text, which
// can be hundreds of characters) and where the rest is. Empty when there is no reason.
func causeLine(rs []backends.Reason, cellDir string) string {
	if len(rs) == 0 {
		return ""
	}
	root := rs[0]
	for _, r := range rs {
		if !consequenceCodes[r.Code] {
			root = r
			break
		}
	}
	line := root.Code + ": " + root.Message
	var more []string
	if len(root.Lines) > 0 {
		// A short log line is the evidence itself (a fallback message); a long one (an OOM's
		// 400 characters) would wrap over many lines and is in result.json.
		l := root.Lines[0]
		if t := strings.TrimSpace(l.Text); t != "" && len(t) <= maxQuotedLine {
			more = append(more, fmt.Sprintf("log.txt line %d: %q", l.Line, t))
		} else {
			more = append(more, fmt.Sprintf("log.txt line %d", l.Line))
		}
	}
	if n := len(rs) - 1; n > 0 {
		more = append(more, fmt.Sprintf("%d more in %s", n, filepath.Join(cellDir, ResultFile)))
	}
	if len(more) > 0 {
		line += " (" + strings.Join(more, "; ") + ")"
	}
	return line
}

func exitCodeFor(s *Summary) int {
	if s.Interrupted {
		return ExitInterrupted
	}
	for _, row := range s.Cells {
		if row.Verdict != plans.VerdictOK {
			return ExitCellsFailed
		}
	}
	return ExitOK
}
