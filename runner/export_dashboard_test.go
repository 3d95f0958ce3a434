package runner

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// exportRun writes a run directory of one vLLM LLM cell (tensor parallel 2) and one cell
// without an LLM result, as a run leaves them.
func exportRun(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"cells.json": `{"cells": [{"cell": {"index": 0, "id": "000-m-i128-o32-vllm-s0-none-r1", "key": "m/i128/o32/engine=vllm", "model": "m/M", "input_len": 128, "output_len": 32,
 "backend": {"kind": "vllm", "extra_args": ["--tensor-parallel-size", "2"]}, "load": {"random_range_ratio": 1}}, "dir": "cells/000-m-i128-o32-vllm-s0-none-r1"},
 {"cell": {"index": 1, "id": "001-diffusion"}, "dir": "cells/001-diffusion"}]}`,
		"cells/000-m-i128-o32-vllm-s0-none-r1/result.json": `{"id": "000-m-i128-o32-vllm-s0-none-r1", "index": 0, "key": "m/i128/o32/engine=vllm", "profiler": "none", "verdict": "ok",
 "exit": {"code": 0}, "start": "2026-11-25T00:00:00Z", "end": "2026-11-25T00:00:10Z", "timings": {"wall_ns": 1}, "artifacts": [],
 "serve": {"server": "servers/1", "port": 30000, "api": "completions",
  "llm": {"requests": 20, "completed": 20, "failed": 0, "duration_ns": 1000000000, "total_input_tokens": 2560, "total_output_tokens": 640,
   "request_throughput": 20, "input_throughput": 2560, "output_throughput": 640, "total_throughput": 3200, "concurrency": 6.5,
   "ttft": {"mean_ms": 12.5, "median_ms": 12, "std_ms": 1, "p90_ms": 14, "p95_ms": 15, "p99_ms": 16, "max_ms": 17, "n": 20},
   "tpot": {"mean_ms": 3, "median_ms": 3.1, "std_ms": 0.1, "p90_ms": 3.1, "p95_ms": 3.2, "p99_ms": 3.3, "max_ms": 3.4, "n": 20},
   "itl": {"mean_ms": 3, "median_ms": 3, "std_ms": 0.1, "p90_ms": 3.1, "p95_ms": 3.2, "p99_ms": 3.25, "max_ms": 4, "n": 620},
   "e2e": {"mean_ms": 105, "median_ms": 104, "std_ms": 2, "p90_ms": 107, "p95_ms": 108, "p99_ms": 109, "max_ms": 110, "n": 20},
   "slo": {"ttft_ns": 200000000}, "good_requests": 15, "request_goodput": 1.5,
   "api": "completions", "dataset": "random", "request_rate": 4, "burstiness": 1, "max_concurrency": 8, "records": "llm_requests.jsonl"}}}`,
		"cells/001-diffusion/result.json": `{"id": "001-diffusion", "index": 1, "key": "k", "profiler": "none", "verdict": "ok", "exit": {"code": 0},
 "start": "2026-11-25T00:00:00Z", "end": "2026-11-25T00:00:10Z", "timings": {"wall_ns": 1}, "artifacts": []}`,
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func keysOf(m map[string]any) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, ",")
}

// TestExportPyTorchMatchesVLLM: --format pytorch writes the records vLLM's serve benchmark
// writes (vllm/benchmarks/serve.py save_to_pytorch_benchmark_format through
// lib/utils.py convert_to_pytorch_benchmark_format): one per metric, in its order, each with
// exactly vLLM's fields, its one value in benchmark_values, the rest of the result in
// metric.extra_info (without the twelve metrics and the raw lists vLLM leaves out), and
// tensor_parallel_size in the args.
func TestExportPyTorchMatchesVLLM(t *testing.T) {
	var out bytes.Buffer
	if err := Export(&out, ExportPyTorch, exportRun(t)); err != nil {
		t.Fatal(err)
	}
	var recs []map[string]any
	if err := json.Unmarshal(out.Bytes(), &recs); err != nil {
		t.Fatalf("not one JSON array: %v\n%s", err, out.String())
	}
	metrics := []string{"median_ttft_ms", "mean_ttft_ms", "std_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
		"std_tpot_ms", "p99_tpot_ms", "median_itl_ms", "mean_itl_ms", "std_itl_ms", "p99_itl_ms"}
	want := map[string]float64{"median_ttft_ms": 12, "mean_ttft_ms": 12.5, "std_ttft_ms": 1, "p99_ttft_ms": 16, "mean_tpot_ms": 3,
		"median_tpot_ms": 3.1, "std_tpot_ms": 0.1, "p99_tpot_ms": 3.3, "median_itl_ms": 3, "mean_itl_ms": 3, "std_itl_ms": 0.1, "p99_itl_ms": 3.25}
	if len(recs) != len(metrics) {
		t.Fatalf("%d records, want %d (one per metric of the one LLM cell)", len(recs), len(metrics))
	}
	for i, r := range recs {
		if k := keysOf(r); k != "benchmark,metric,model" {
			t.Fatalf("record %d fields %s, want benchmark,metric,model", i, k)
		}
		bench, model, metric := r["benchmark"].(map[string]any), r["model"].(map[string]any), r["metric"].(map[string]any)
		if keysOf(bench) != "extra_info,name" || bench["name"] != "vLLM benchmark" || keysOf(bench["extra_info"].(map[string]any)) != "args" {
			t.Errorf("record %d benchmark %v", i, bench)
		}
		if keysOf(model) != "name" || model["name"] != "m/M" {
			t.Errorf("record %d model %v", i, model)
		}
		if keysOf(metric) != "benchmark_values,extra_info,name" || metric["name"] != metrics[i] {
			t.Errorf("record %d metric fields %s, name %v, want %s", i, keysOf(metric), metric["name"], metrics[i])
		}
		vals, _ := metric["benchmark_values"].([]any)
		if len(vals) != 1 || vals[0] != want[metrics[i]] {
			t.Errorf("record %d (%s) benchmark_values %v, want [%v]", i, metrics[i], vals, want[metrics[i]])
		}
		extra := metric["extra_info"].(map[string]any)
		for _, left := range append(slices.Clone(metrics), "ttfts", "itls", "generated_texts", "errors") {
			if _, ok := extra[left]; ok {
				t.Errorf("record %d extra_info holds %s, which vLLM leaves out", i, left)
			}
		}
		if extra["completed"] != 20.0 || extra["request_goodput"] != 1.5 || extra["backend"] != "vllm" {
			t.Errorf("record %d extra_info %v", i, extra)
		}
		args := bench["extra_info"].(map[string]any)["args"].(map[string]any)
		if args["tensor_parallel_size"] != 2.0 || args["model"] != "m/M" || args["request_rate"] != 4.0 {
			t.Errorf("record %d args %v", i, args)
		}
	}
}

// TestExportGAB: github-action-benchmark's custom tools read an array of {name, unit, value,
// range?, extra?}; latencies go to customSmallerIsBetter, throughputs to customBiggerIsBetter,
// named by the cell key so that a series follows its configuration across runs.
func TestExportGAB(t *testing.T) {
	dir := exportRun(t)
	for _, tc := range []struct {
		format string
		want   map[string]float64
	}{
		{ExportGABSmaller, map[string]float64{"ttft_median": 12, "ttft_p99": 16, "tpot_median": 3.1, "itl_p99": 3.25, "e2e_median": 104}},
		{ExportGABBigger, map[string]float64{"output_throughput": 640, "request_throughput": 20, "request_goodput": 1.5}},
	} {
		var out bytes.Buffer
		if err := Export(&out, tc.format, dir); err != nil {
			t.Fatal(err)
		}
		var entries []map[string]any
		if err := json.Unmarshal(out.Bytes(), &entries); err != nil {
			t.Fatalf("%s: %v", tc.format, err)
		}
		if len(entries) != len(tc.want) {
			t.Errorf("%s: %d entries, want %d", tc.format, len(entries), len(tc.want))
		}
		for _, e := range entries {
			for k := range e {
				if !slices.Contains([]string{"name", "unit", "value", "range", "extra"}, k) {
					t.Errorf("%s: field %s is not in github-action-benchmark's BenchmarkResult", tc.format, k)
				}
			}
			name, _ := e["name"].(string)
			metric := strings.TrimPrefix(name, "m/i128/o32/engine=vllm ")
			if v, ok := tc.want[metric]; !ok || e["value"] != v || e["unit"] == "" {
				t.Errorf("%s: entry %v, want %s = %v", tc.format, e, metric, v)
			}
		}
	}
}
