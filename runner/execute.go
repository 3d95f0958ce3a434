package runner

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/render"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/exitcode"
)

// runInOrder runs the cells recs[todo] one at a time (through the serve session ss when not
// nil) and reports whether the run was interrupted.
func runInOrder(ctx context.Context, recs []cellRecord, todo []int, ss *serveSession, opts *Options) bool {
	for n, i := range todo {
		rec := recs[i]
		if ctx.Err() != nil {
			return true
		}
		var res *cellResult
		if ss != nil {
			opts.Progress.CellStart(n, len(todo), rec.Cell)
			res = ss.runCell(ctx, rec)
		} else {
			res = runCellOn(ctx, n, len(todo), rec, opts)
		}
		finishCell(n, len(todo), rec, res, opts)
		if res.Verdict == plans.VerdictInterrupted {
			return true
		}
	}
	return false
}

// execute runs the cells of recs that have no result yet, then writes the summary and the
// final manifest. Ctrl-C (ctx cancelled) stops the current cell through the stop ladder,
// records it as interrupted, leaves the remaining cells without a result (so --resume runs
// them) and still writes the summary.
func execute(ctx context.Context, p *plans.Plan, dir string, recs []cellRecord, man *rundir.Manifest, opts *Options) (*rundir.Summary, error) {
	todo := withoutResult(recs)
	opts.lost = &lostResults{}
	// The parity check of an engine axis, before anything runs: on the terminal and in
	// parity.json now, in the summary at the end.
	parity := checkParityOf(recs)
	if parity != nil {
		if err := rundir.WriteJSON(filepath.Join(dir, rundir.ParityFile), parity, nil); err != nil {
			// summary.json and summary.md carry the same table at the end.
			opts.Logger.Warn("parity.json not written; the summary has the parity table", "err", err)
		}
		render.WriteParity(opts.Out, parity)
	}
	opts.Progress.Start(len(todo))
	var interrupted bool
	switch {
	case len(opts.unwritten) > 0:
		// The run directory lacks what --resume reads: running cells onto a full disk would
		// measure nothing that can be kept. Each cell is failed in the summary (no result.json,
		// so a resume once the records exist runs it).
		var names []string
		for _, w := range opts.unwritten {
			names = append(names, w.name)
		}
		for _, i := range todo {
			rec := recs[i]
			opts.lost.add(rec.Cell.ID, &rundir.CellResult{ID: rec.Cell.ID, Index: rec.Cell.Index, Key: rec.Cell.Key,
				Profiler: rec.Cell.Profiler, Verdict: plans.VerdictFailed,
				Reasons: []rundir.Reason{{Code: "run-write", Message: fmt.Sprintf("not run: the run directory's %s could not be written; free disk space", strings.Join(names, " and "))}}})
		}
	case opts.onSlurm:
		var detached bool
		var err error
		interrupted, detached, err = runOnSlurm(ctx, p, dir, recs, todo, man, opts)
		if err != nil {
			opts.Progress.Finish()
			return nil, err
		}
		if detached {
			opts.Progress.Finish()
			return &rundir.Summary{Plan: p.Name, RunDir: dir, Detached: true}, nil
		}
	case isServeCells(recs):
		// Serve mode (runner/serve.go): servers outlive single cells, so a session owns them
		// and stops the last one after the cells.
		ss := newServeSession(dir, opts)
		interrupted = runInOrder(ctx, recs, todo, ss, opts)
		ss.close()
		man.Attached = append(man.Attached, ss.attached...)
	case len(opts.gpus) > 0:
		interrupted = runOnSlots(ctx, recs, todo, newGPUPool(opts.gpus), p.Executor.GPUsPerCell, opts)
	default:
		interrupted = runInOrder(ctx, recs, todo, nil, opts)
	}
	opts.Progress.Finish()
	if ctx.Err() != nil {
		interrupted = true
	}
	sum := buildSummary(p, dir, recs, opts.lost, interrupted)
	if sum.Interrupted {
		sum.ExitCode = InterruptedExit(ctx) // 143 when SIGTERM stopped it
	}
	sum.Simulated = opts.Simulate
	sum.Parity = parity
	man.End = opts.Now().UTC()
	man.Verdicts = sum.Counts
	// Write what can be written and always print the summary: on a full disk the table on the
	// terminal may be the only record of the run.
	var early []error
	for _, w := range opts.unwritten {
		early = append(early, w.write())
	}
	werr := errors.Join(append(early, opts.writeRedactedJSON(filepath.Join(dir, rundir.ManifestFile), man), writeSummaryFiles(dir, sum))...)
	if err := render.SummaryTable(opts.Out, sum); err != nil {
		return sum, errors.Join(werr, err)
	}
	if errors.Join(early...) != nil {
		// Without plan.toml or cells.json --resume cannot read the run.
		return sum, fmt.Errorf("%w; the run directory %s lacks what --resume reads: free disk space, then run the plan again", werr, dir)
	}
	if werr != nil {
		return sum, fmt.Errorf("%w; the run directory %s is incomplete: free disk space, then `runner run --resume %s` runs the cells without a result again", werr, dir, dir)
	}
	if len(opts.unwritten) > 0 {
		// The records were written at the second try: the cells can run now.
		return sum, fmt.Errorf("no cell was run: the run directory's records could not be written at the start (a full disk?); they are now: `runner run --resume %s` runs the cells", dir)
	}
	// History and baseline comparison; may turn the exit code into 4.
	if err := nightly(ctx, p, dir, sum, opts); err != nil {
		return sum, err
	}
	return sum, nil
}

// lostResults keeps, by cell id, the results whose result.json could not be written (a full
// disk), so that the summary still shows them. Executors finish cells concurrently.
type lostResults struct {
	mu sync.Mutex
	m  map[string]*rundir.CellResult
}

func (l *lostResults) add(id string, r *rundir.CellResult) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]*rundir.CellResult{}
	}
	l.m[id] = r
}

func (l *lostResults) get(id string) *rundir.CellResult {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m[id]
}

// unwritten turns the result of a cell whose result.json could not be written into a failure:
// nothing on disk says what the cell measured.
func unwritten(res rundir.CellResult, err error) rundir.CellResult {
	if res.Verdict != plans.VerdictInterrupted {
		res.Verdict = plans.VerdictFailed
	}
	res.Reasons = append(append([]rundir.Reason(nil), res.Reasons...), rundir.Reason{Code: "result-write",
		Message: fmt.Sprintf("%v; the cell's record is lost: free disk space and resume the run to measure it again", err)})
	return res
}

// buildSummary makes the summary from the results on disk and those that could not be written
// (lost). A result that cannot be read counts as not run, with the reason.
func buildSummary(p *plans.Plan, dir string, recs []cellRecord, lost *lostResults, interrupted bool) *rundir.Summary {
	s := &rundir.Summary{Plan: p.Name, RunDir: dir, Counts: map[string]int{}, Interrupted: interrupted}
	for _, rec := range recs {
		row := rundir.SummaryRow{ID: rec.Cell.ID, Key: rec.Cell.Key, Profiler: rec.Cell.Profiler, Verdict: rundir.VerdictNotRun}
		r, err := lost.get(rec.Cell.ID), error(nil)
		if r == nil {
			r, err = readResult(rec.abs)
		}
		switch {
		case r != nil:
			row.Verdict = r.Verdict
			row.WallNS = r.Timings.WallNS
			row.E2ENS = r.Timings.E2ENS
			row.MeanDenoiseStepNS = r.Timings.MeanDenoiseStepNS
			row.TopKernels = r.TopKernels
			if r.Serve != nil && r.Serve.LLM != nil {
				row.LLM = rundir.NewLLMRow(r.Serve.LLM)
			}
			for _, rs := range r.Reasons {
				row.Reasons = append(row.Reasons, rs.Line())
			}
			row.Cause = causeLine(r.Reasons, rec.Dir)
			for _, rs := range r.Warnings {
				row.Warnings = append(row.Warnings, rs.Line())
			}
		case !errors.Is(err, fs.ErrNotExist):
			row.Reasons = []string{"result-unreadable: " + err.Error() + "; `runner run --resume` runs the cell again"}
			row.Cause = row.Reasons[0]
		}
		s.Counts[row.Verdict]++
		s.Cells = append(s.Cells, row)
	}
	s.ExitCode = exitCodeFor(s)
	return s
}

// readResult reads cellDir/result.json. A file that is empty, not JSON or holds a verdict this
// runner does not know is an error: such a result must not be mistaken for a measurement.
func readResult(cellDir string) (*rundir.CellResult, error) {
	r, err := rundir.ReadResult(cellDir)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(plans.Verdicts, r.Verdict) {
		return nil, fmt.Errorf("%s holds verdict %q, which is none of %s", filepath.Join(cellDir, rundir.ResultFile), r.Verdict, strings.Join(plans.Verdicts, ", "))
	}
	return r, nil
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
func causeLine(rs []rundir.Reason, cellDir string) string {
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
		more = append(more, fmt.Sprintf("%d more in %s", n, filepath.Join(cellDir, rundir.ResultFile)))
	}
	if len(more) > 0 {
		line += " (" + strings.Join(more, "; ") + ")"
	}
	return line
}

func exitCodeFor(s *rundir.Summary) int {
	if s.Interrupted {
		return exitcode.Interrupted
	}
	for _, row := range s.Cells {
		if row.Verdict != plans.VerdictOK {
			return exitcode.CellsFailed
		}
	}
	return exitcode.OK
}
