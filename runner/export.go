package runner

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/load"
)

// Formats of `runner export`.
const (
	ExportBenchServingFormat = "bench_serving" // SGLang bench_serving's --output-file JSONL
	ExportPyTorch            = "pytorch"       // vLLM's PyTorch OSS benchmark database records
	ExportGABSmaller         = "gab-smaller"   // github-action-benchmark customSmallerIsBetter
	ExportGABBigger          = "gab-bigger"    // github-action-benchmark customBiggerIsBetter
)

// ExportFormats are the formats of `runner export`.
var ExportFormats = []string{ExportBenchServingFormat, ExportPyTorch, ExportGABSmaller, ExportGABBigger}

// Export writes the LLM serve cells of a cell or run directory in format: bench_serving (one
// JSONL line a cell), pytorch (one JSON array of vLLM's records, twelve a cell) or
// gab-smaller/gab-bigger (one JSON array of github-action-benchmark entries for the whole run).
// Cells without an LLM result (profiled, failed, not run, not LLM) are skipped; none is an error.
func Export(w io.Writer, format, dir string) error {
	cells, err := exportCells(dir)
	if err != nil {
		return err
	}
	switch format {
	case ExportBenchServingFormat:
		for _, c := range cells {
			if err := load.WriteBenchServing(w, load.ToBenchServing(c.Summary, c.Load)); err != nil {
				return err
			}
		}
		return nil
	case ExportPyTorch:
		recs := []load.PyTorchRecord{}
		for _, c := range cells {
			r, err := load.ToPyTorch(c)
			if err != nil {
				return err
			}
			recs = append(recs, r...)
		}
		return load.WriteJSONArray(w, recs)
	case ExportGABSmaller, ExportGABBigger:
		entries := []load.GABEntry{}
		for _, c := range cells {
			entries = append(entries, load.GAB(c, format == ExportGABSmaller)...)
		}
		return load.WriteJSONArray(w, entries)
	}
	return fmt.Errorf("unknown export format %q; use one of %v", format, ExportFormats)
}

// ExportBenchServing writes an LLM serve cell's result as one line of bench_serving's
// --output-file JSONL (its field names), so dashboards that read bench_serving's results read
// the runner's. Given a run directory, it writes a line per LLM serve cell.
func ExportBenchServing(w io.Writer, cellDir string) error {
	return Export(w, ExportBenchServingFormat, cellDir)
}

// exportCells reads the LLM cells of a run directory (in the run's order) or the one cell of a
// cell directory; the cell's lengths, model and engine come from the run's cells.json.
func exportCells(dir string) ([]load.Cell, error) {
	if cells, err := rundir.ReadCells(dir); err == nil {
		var out []load.Cell
		for _, rec := range cells.Cells {
			cd := filepath.Join(dir, rundir.CellsDir, rec.Cell.ID)
			r, err := rundir.ReadResult(cd)
			if err != nil || r.Serve == nil || r.Serve.LLM == nil {
				continue
			}
			out = append(out, exportCell(r, &rec.Cell))
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("%s: no cell has an LLM benchmark result (serve.llm): only LLM serve cells measured by the streaming client export", dir)
		}
		return out, nil
	}
	r, err := rundir.ReadResult(dir)
	if errors.Is(err, rundir.ErrNotRegular) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("%w; give a cell directory (RUN_DIR/cells/ID) or a run directory of an LLM serve run", err)
	}
	if r.Serve == nil || r.Serve.LLM == nil {
		return nil, fmt.Errorf("%s: result.json has no LLM benchmark (serve.llm): only LLM serve cells measured by the streaming client export", dir)
	}
	var cell *plans.Cell
	if cells, err := rundir.ReadCells(filepath.Dir(filepath.Dir(filepath.Clean(dir)))); err == nil {
		for i := range cells.Cells {
			if cells.Cells[i].Cell.ID == r.ID {
				cell = &cells.Cells[i].Cell
			}
		}
	}
	return []load.Cell{exportCell(r, cell)}, nil
}

// exportCell is a result with what its cell record adds (nil: a cell directory outside its run).
func exportCell(r *rundir.CellResult, c *plans.Cell) load.Cell {
	l := r.Serve.LLM
	out := load.Cell{ID: r.ID, Key: r.Key, Summary: l.LLMSummary, TensorParallel: 1,
		Load: load.Load{API: l.API, Dataset: l.Dataset, Rate: l.RequestRate, MaxConcurrency: l.MaxConcurrency, RampUp: l.RampUp}}
	if c == nil {
		return out
	}
	out.Model, out.Engine = c.Model, c.Backend.Kind
	out.Load.Engine = c.Backend.Kind
	out.Load.InputLen, out.Load.OutputLen, out.Load.RangeRatio = c.InputLen, c.OutputLen, c.Load.RandomRangeRatio
	if settings := engineSettings[c.Backend.Kind]; settings != nil {
		for _, s := range settings(*c) {
			if s.Name == backends.SettingTP {
				fmt.Sscan(s.Same, &out.TensorParallel)
			}
		}
	}
	return out
}
