package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/sglprof/runner/reports/rundir"
)

// writeSyntheticRun writes a finished run directory of cells cells (configs × repeats) with
// steps denoising steps each, as `runner run` would leave it.
func writeSyntheticRun(tb testing.TB, dir string, configs, repeats, steps int, factor float64) {
	tb.Helper()
	var cells rundir.Cells
	for c := range configs {
		for r := range repeats {
			id := fmt.Sprintf("%04d-cfg%03d-none-r%d", c*repeats+r, c, r+1)
			cd := rundir.CellDir(dir, id)
			if err := os.MkdirAll(cd, 0o755); err != nil {
				tb.Fatal(err)
			}
			cells.Cells = append(cells.Cells, rundir.CellRecord{Dir: filepath.Join(rundir.CellsDir, id)})
			jit := 1 + float64((c*7+r*13)%10)/1000
			st := make([]int64, steps)
			var sum int64
			for s := range st {
				st[s] = int64(float64(80_000_000+s*100_000) * factor * jit)
				sum += st[s]
			}
			res := &rundir.CellResult{ID: id, Key: fmt.Sprintf("model/1024x1024/%dst/s%d", steps, c), Profiler: "none", Verdict: "ok",
				Timings: rundir.Timings{E2ENS: sum + 300_000_000, MeanDenoiseStepNS: sum / int64(steps), DenoiseStepsNS: st,
					Stages:       []rundir.StageTime{{Name: "TextEncodingStage", NS: int64(180e6 * jit)}, {Name: "DenoisingStage", NS: sum}, {Name: "DecodingStage", NS: int64(60e6 * jit)}},
					PeakMemoryMB: 50000.0}}
			writeJSONFile(tb, filepath.Join(cd, rundir.ResultFile), res)
		}
	}
	writeJSONFile(tb, filepath.Join(dir, rundir.CellsFile), &cells)
	writeJSONFile(tb, filepath.Join(dir, rundir.SummaryJSON), &rundir.Summary{Plan: "bench"})
	writeJSONFile(tb, filepath.Join(dir, rundir.ManifestFile), &rundir.Manifest{Plan: "bench", Simulated: true})
}

func writeJSONFile(tb testing.TB, path string, v any) {
	if err := rundir.WriteJSON(path, v, nil); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkCompare500Cells is `runner compare BASE NEW` in-process on two runs of 500 cells
// (50 configurations × 10 repeats) with 50 denoising steps each: reading 1,000 result.json
// files, pooling, 300 Mann-Whitney tests and the text table.
func BenchmarkCompare500Cells(b *testing.B) {
	dir := b.TempDir()
	base, cur := filepath.Join(dir, "base"), filepath.Join(dir, "new")
	writeSyntheticRun(b, base, 50, 10, 50, 1)
	writeSyntheticRun(b, cur, 50, 10, 50, 1.3)
	b.ResetTimer()
	for range b.N {
		if code := run([]string{"runner", "compare", base, cur}, stdio{out: io.Discard, err: io.Discard}); code != 4 {
			b.Fatalf("exit %d, want 4", code)
		}
	}
}
