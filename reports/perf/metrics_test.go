package perf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t testing.TB, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

const okCell = `{"id": "%s", "key": "m/512", "profiler": "%s", "verdict": "%s",
 "timings": {"e2e_ns": 1000, "denoise_steps_ns": [10, 20, 30], "stages": [{"name": "TextEncodingStage", "ns": 5}, {"name": "DenoisingStage", "ns": 60}], "peak_memory_mb": 100},
 "top_kernels": [{"name": "k", "category": "gemm", "share_pct": 50}]}`

func TestLoadRunPoolsRepeatsAndSkips(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "summary.json"), `{}`)
	writeFile(t, filepath.Join(dir, "manifest.json"), `{"plan": "p", "simulated": true}`)
	mk := func(id, prof, verdict string) {
		s := strings.Replace(okCell, "%s", id, 1)
		s = strings.Replace(s, "%s", prof, 1)
		s = strings.Replace(s, "%s", verdict, 1)
		writeFile(t, filepath.Join(dir, "cells", id, "result.json"), s)
	}
	mk("a-none-r1", "none", "ok")
	mk("a-none-r2", "none", "ok")
	mk("a-torch-r1", "torch", "ok")
	mk("a-none-r3", "none", "invalid")
	os.MkdirAll(filepath.Join(dir, "cells", "a-none-r4"), 0o755) // not run
	writeFile(t, filepath.Join(dir, "cells", "a-none-r2", "requests.jsonl"), `{"latency_ms": 12.5}
{"latency_ns": 7000000}
{"latency_ms": 99, "error": "timeout"}
{"index": 0, "warmup": true, "status": 200, "latency_ns": 900000000}
{"index": 1, "status": 500, "latency_ns": 800000000}

`)
	s, err := Load(dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := s.Configs["m/512"]
	if c == nil || len(c.Cells) != 2 || len(c.Metrics[MetricE2E]) != 2 || len(c.Metrics[MetricDenoiseStep]) != 6 || len(c.Steps) != 3 || len(c.Steps[2]) != 2 {
		t.Fatalf("pooled config: %+v", c)
	}
	if got := c.Metrics[MetricRequestLatency]; len(got) != 2 || got[0] != 12.5e6 || got[1] != 7e6 {
		t.Fatalf("request latencies: %v", got)
	}
	// One value per run: the steps of a cell are summarised by their median, the requests of
	// the one cell that has them by theirs; e2e is a run's own value.
	if got := c.Runs[MetricDenoiseStep]; len(got) != 2 || got[0] != 20 || got[1] != 20 {
		t.Fatalf("per-run step medians: %v", got)
	}
	if got := c.Runs[MetricRequestLatency]; len(got) != 1 || got[0] != 9.75e6 {
		t.Fatalf("per-run request latency: %v", got)
	}
	if got := c.RunValues(MetricE2E); len(got) != 2 || got[0] != 1000 {
		t.Fatalf("per-run e2e: %v", got)
	}
	if s.GPU != "simulated" || s.Plan != "p" || len(s.Skipped) != 3 || len(c.TopKernels) != 1 {
		t.Fatalf("set: gpu %q plan %q skipped %v", s.GPU, s.Plan, s.Skipped)
	}
	names := c.MetricNames()
	if names[0] != MetricE2E || names[1] != "stage/TextEncodingStage" || names[2] != "stage/DenoisingStage" {
		t.Fatalf("metric order: %v", names)
	}
	all, _ := Load(dir, LoadOptions{Profilers: []string{"all"}})
	if len(all.Configs["m/512"].Cells) != 3 {
		t.Fatalf("--profilers all: %v", all.Configs["m/512"].Cells)
	}
}

func TestLoadInProgressAndOldDump(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "cells.json"), `{"cells": []}`)
	if _, err := Load(dir, LoadOptions{}); err == nil || !strings.Contains(err.Error(), "in progress") {
		t.Fatalf("in progress: %v", err)
	}
	old := filepath.Join(dir, "old.json")
	writeFile(t, old, `{"total_duration_ms": 10, "steps": [{"name": "DenoisingStage", "duration_ms": 8}]}`)
	s, err := Load(old, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := s.Configs["perf-dump"]
	if _, ok := c.Metrics[MetricDenoiseStep]; ok || len(c.Notes) != 1 || !strings.Contains(c.Notes[0], "no per-step times") {
		t.Fatalf("old dump: %+v", c)
	}
}

func TestReadRequestsBadLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "requests.jsonl")
	writeFile(t, p, "{\"latency_ms\": 1}\nnot json\n")
	if _, err := readRequests(p); err == nil || !strings.Contains(err.Error(), ":2:") {
		t.Fatalf("err = %v", err)
	}
}

// FuzzReadRequests: any requests.jsonl content gives latencies >= 0 or an error, never a panic.
func FuzzReadRequests(f *testing.F) {
	for _, s := range []string{"{\"latency_ms\": 12.5}\n", "{\"latency_ns\": 5}\n{\"ok\": false, \"latency_ms\": 1}", "{\"e2e_latency_ms\": -1}", "[1]", "{\"latency_ns\": 1e3}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		p := filepath.Join(t.TempDir(), "requests.jsonl")
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		v, err := readRequests(p)
		if err != nil {
			return
		}
		for _, x := range v {
			if x < 0 {
				t.Fatalf("negative latency %v from %q", x, data)
			}
		}
	})
}

func TestOldDumpCellNoted(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "result.json"), `{"id": "c", "key": "k", "profiler": "none", "verdict": "ok",
 "timings": {"e2e_ns": 1000, "stages": [{"name": "DenoisingStage", "ns": 900}], "perf_dump_schema": "stages-only"}}`)
	s, err := Load(dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := s.Configs["k"]
	if len(c.Notes) != 1 || !strings.Contains(c.Notes[0], "stages-only") || len(c.Metrics[MetricDenoiseStep]) != 0 {
		t.Fatalf("%+v", c)
	}
}
