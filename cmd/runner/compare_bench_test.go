package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// writeSyntheticRun writes a finished run directory of cells cells (configs × repeats) with
// steps denoising steps each, as `runner run` would leave it.
func writeSyntheticRun(tb testing.TB, dir string, configs, repeats, steps int, factor float64) {
	tb.Helper()
	type rec struct {
		Dir string `json:"dir"`
	}
	var cells []rec
	for c := range configs {
		for r := range repeats {
			id := fmt.Sprintf("%04d-cfg%03d-none-r%d", c*repeats+r, c, r+1)
			cd := filepath.Join(dir, "cells", id)
			if err := os.MkdirAll(cd, 0o755); err != nil {
				tb.Fatal(err)
			}
			cells = append(cells, rec{Dir: filepath.Join("cells", id)})
			jit := 1 + float64((c*7+r*13)%10)/1000
			st := make([]int64, steps)
			var sum int64
			for s := range st {
				st[s] = int64(float64(80_000_000+s*100_000) * factor * jit)
				sum += st[s]
			}
			res := map[string]any{"id": id, "key": fmt.Sprintf("model/1024x1024/%dst/s%d", steps, c), "profiler": "none", "verdict": "ok",
				"timings": map[string]any{"e2e_ns": sum + 300_000_000, "mean_denoise_step_ns": sum / int64(steps), "denoise_steps_ns": st,
					"stages":         []map[string]any{{"name": "TextEncodingStage", "ns": int64(180e6 * jit)}, {"name": "DenoisingStage", "ns": sum}, {"name": "DecodingStage", "ns": int64(60e6 * jit)}},
					"peak_memory_mb": 50000.0}}
			writeJSONFile(tb, filepath.Join(cd, "result.json"), res)
		}
	}
	writeJSONFile(tb, filepath.Join(dir, "cells.json"), map[string]any{"cells": cells})
	writeJSONFile(tb, filepath.Join(dir, "summary.json"), map[string]any{"plan": "bench", "exit_code": 0})
	writeJSONFile(tb, filepath.Join(dir, "manifest.json"), map[string]any{"plan": "bench", "simulated": true})
}

func writeJSONFile(tb testing.TB, path string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
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
