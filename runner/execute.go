package runner

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
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
	results := map[string]*CellResult{} // this execution's verdicts, kept even when unwritten
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
			// A full disk: the cell's record is lost, so it cannot count as measured. The
			// summary still shows it (from memory), and --resume runs it again.
			opts.Logger.Error("cannot write result", "cell", rec.Cell.ID, "err", err)
			res = unwritten(res, err)
		}
		results[rec.Cell.ID] = res
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
	sum := buildSummary(p, dir, recs, results, interrupted)
	man.End = opts.Now().UTC()
	man.Verdicts = sum.Counts
	// Write what can be written and always print the summary: on a full disk the table on the
	// terminal may be the only record of the run.
	werr := errors.Join(writeRedactedJSON(filepath.Join(dir, ManifestFile), man), writeSummaryFiles(dir, sum))
	if err := WriteSummaryTable(opts.Out, sum); err != nil {
		return sum, errors.Join(werr, err)
	}
	if werr != nil {
		return sum, fmt.Errorf("%w; the run directory %s is incomplete: free disk space, then `runner run --resume %s` runs the cells without a result again", werr, dir, dir)
	}
	// History and baseline comparison (issue 6); may turn the exit code into 4.
	if err := nightly(ctx, p, dir, sum, opts); err != nil {
		return sum, err
	}
	return sum, nil
}

// unwritten turns the result of a cell whose result.json could not be written into a failure:
// nothing on disk says what the cell measured.
func unwritten(res *CellResult, err error) *CellResult {
	r := *res
	if r.Verdict != plans.VerdictInterrupted {
		r.Verdict = plans.VerdictFailed
	}
	r.Reasons = append(append([]backends.Reason(nil), r.Reasons...), backends.Reason{Code: "result-write",
		Message: fmt.Sprintf("%v; the cell's record is lost: free disk space and resume the run to measure it again", err)})
	return &r
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
	ID                string        `json:"id"`
	Key               string        `json:"key"`
	Profiler          string        `json:"profiler"`
	Verdict           string        `json:"verdict"` // "not-run" when the cell has no result
	Reasons           []string      `json:"reasons,omitempty"`
	WallNS            int64         `json:"wall_ns"`
	E2ENS             int64         `json:"e2e_ns,omitempty"`
	MeanDenoiseStepNS int64         `json:"mean_denoise_step_ns,omitempty"`
	TopKernels        []KernelShare `json:"top_kernels,omitempty"`
}

// VerdictNotRun marks a cell without result.json in a summary.
const VerdictNotRun = "not-run"

// buildSummary makes the summary from this execution's results and, for the other cells, their
// result.json. A result that cannot be read counts as not run, with the reason.
func buildSummary(p *plans.Plan, dir string, recs []cellRecord, results map[string]*CellResult, interrupted bool) *Summary {
	s := &Summary{Plan: p.Name, RunDir: dir, Counts: map[string]int{}, Interrupted: interrupted}
	for _, rec := range recs {
		row := SummaryRow{ID: rec.Cell.ID, Key: rec.Cell.Key, Profiler: rec.Cell.Profiler, Verdict: VerdictNotRun}
		r, err := results[rec.Cell.ID], error(nil)
		if r == nil {
			r, err = readResult(filepath.Join(rec.abs, ResultFile))
		}
		switch {
		case r != nil:
			row.Verdict = r.Verdict
			row.WallNS = r.Timings.WallNS
			row.E2ENS = r.Timings.E2ENS
			row.MeanDenoiseStepNS = r.Timings.MeanDenoiseStepNS
			row.TopKernels = r.TopKernels
			for _, rs := range r.Reasons {
				row.Reasons = append(row.Reasons, reasonLine(rs))
			}
		case !errors.Is(err, fs.ErrNotExist):
			row.Reasons = []string{"result-unreadable: " + err.Error() + "; `runner run --resume` runs the cell again"}
		}
		s.Counts[row.Verdict]++
		s.Cells = append(s.Cells, row)
	}
	s.ExitCode = exitCodeFor(s)
	return s
}

// readResult reads a cell's result.json. A file that is empty, not JSON or holds a verdict this
// runner does not know is an error: such a result must not be mistaken for a measurement.
func readResult(path string) (*CellResult, error) {
	var r CellResult
	if err := readJSON(path, &r); err != nil {
		return nil, err
	}
	if !slices.Contains(plans.Verdicts, r.Verdict) {
		return nil, fmt.Errorf("%s holds verdict %q, which is none of %s", path, r.Verdict, strings.Join(plans.Verdicts, ", "))
	}
	return &r, nil
}

func reasonLine(r backends.Reason) string {
	if len(r.Lines) > 0 {
		return fmt.Sprintf("%s: %s (log line %d: %q)", r.Code, r.Message, r.Lines[0].Line, r.Lines[0].Text)
	}
	return r.Code + ": " + r.Message
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
