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
// a run directory.
func ExportBenchServing(w io.Writer, cellDir string) error {
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
