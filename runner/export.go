package runner

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/load"
)

// ExportFormats are the formats of `runner export`.
var ExportFormats = []string{"bench_serving"}

// ExportBenchServing writes an LLM serve cell's result as one line of bench_serving's
// --output-file JSONL (its field names), so dashboards that read bench_serving's results read
// the runner's. The cell's token lengths come from the run's cells.json when the cell is inside
// a run directory. Given a run directory, it writes a line per LLM serve cell.
func ExportBenchServing(w io.Writer, cellDir string) error {
	if cells, err := rundir.ReadCells(cellDir); err == nil {
		return exportRunBenchServing(w, cellDir, cells)
	}
	r, err := rundir.ReadResult(cellDir)
	if errors.Is(err, rundir.ErrNotRegular) {
		return err
	}
	if err != nil {
		return fmt.Errorf("%w; give a cell directory (RUN_DIR/cells/ID) of an LLM serve run", err)
	}
	if r.Serve == nil || r.Serve.LLM == nil {
		return fmt.Errorf("%s: result.json has no LLM benchmark (serve.llm): only LLM serve cells measured by the streaming client export as bench_serving", cellDir)
	}
	l := r.Serve.LLM
	under := load.Load{API: l.API, Dataset: l.Dataset, Rate: l.RequestRate, MaxConcurrency: l.MaxConcurrency}
	if cells, err := rundir.ReadCells(filepath.Dir(filepath.Dir(filepath.Clean(cellDir)))); err == nil {
		for _, rec := range cells.Cells {
			if rec.Cell.ID == r.ID {
				under.InputLen, under.OutputLen, under.RangeRatio = rec.Cell.InputLen, rec.Cell.OutputLen, rec.Cell.Load.RandomRangeRatio
			}
		}
	}
	return load.WriteBenchServing(w, load.ToBenchServing(l.LLMSummary, under))
}

// exportRunBenchServing writes one bench_serving line per LLM serve cell of the run directory
// dir, in the run's cell order; cells without an LLM result (profiled, failed, not run, not LLM)
// are skipped, and a run with none is an error.
func exportRunBenchServing(w io.Writer, dir string, cells *rundir.Cells) error {
	n := 0
	for _, rec := range cells.Cells {
		cd := filepath.Join(dir, rundir.CellsDir, rec.Cell.ID)
		r, err := rundir.ReadResult(cd)
		if err != nil || r.Serve == nil || r.Serve.LLM == nil {
			continue
		}
		if err := ExportBenchServing(w, cd); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("%s: no cell has an LLM benchmark result (serve.llm): only LLM serve cells measured by the streaming client export as bench_serving", dir)
	}
	return nil
}
