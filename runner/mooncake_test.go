package runner

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/sglprof/runner/runner/load"
)

// A Mooncake trace replayed against the simulator: every request of the trace at its time with
// its exact lengths, and the server's /metrics shows the prefix cache hit by the trace's shared
// blocks.
func TestRunLLMMooncakeTrace(t *testing.T) {
	sample, err := filepath.Abs("../testdata/mooncake-sample.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	base := startLLMSim(t, "0.002", "--enable-metrics")
	c := testPlan(t, `name = "trace"
[backend]
mode = "serve"
[matrix]
model = ["Qwen/Qwen2.5-0.5B-Instruct"]
[load]
dataset = "mooncake"
dataset_path = "`+sample+`"
trace_slowdown = 0.5
requests = 100
`).Expand()[0]
	_, res, err := runLLM(context.Background(), base, c, t.TempDir(), &bytes.Buffer{}, nil, load.SimClock{Scale: 0.002}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The sample's six requests (requests = 100 replays the whole trace), exact lengths.
	if res.Completed != 6 || res.TotalInput != 1100+700+1536+300+1024+520 || res.TotalOutput != 12+8+16+6+10+4 || res.ApproxInput {
		t.Errorf("completed %d, tokens %d/%d, approx %v", res.Completed, res.TotalInput, res.TotalOutput, res.ApproxInput)
	}
	m := res.ServerMetrics
	if m == nil || m.CacheHitRate == nil || !(*m.CacheHitRate > 0.2) || m.HitRateFrom != "counters" {
		t.Errorf("server metrics %+v: want the shared blocks' hits", m)
	}
}

// Multi-turn conversations against the simulator: the later turns find the earlier ones in the
// server's prefix cache.
func TestRunLLMMultiTurn(t *testing.T) {
	sample, err := filepath.Abs("../testdata/sharegpt-sample.json")
	if err != nil {
		t.Fatal(err)
	}
	base := startLLMSim(t, "0.002", "--enable-metrics")
	c := testPlan(t, `name = "turns"
[backend]
mode = "serve"
[matrix]
model = ["Qwen/Qwen2.5-0.5B-Instruct"]
output_len = [4]
[load]
api = "completions"
dataset = "multiturn"
dataset_path = "`+sample+`"
requests = 25
`).Expand()[0]
	_, res, err := runLLM(context.Background(), base, c, t.TempDir(), &bytes.Buffer{}, nil, load.SimClock{Scale: 0.002}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed != 25 || !res.ApproxInput || res.Dataset != "multiturn" {
		t.Errorf("completed %d, approx %v, dataset %q", res.Completed, res.ApproxInput, res.Dataset)
	}
	if m := res.ServerMetrics; m == nil || m.CacheHitRate == nil || !(*m.CacheHitRate > 0) {
		t.Errorf("server metrics %+v: want the earlier turns' hits", m)
	}
}

// cells.json records every dataset file a plan reads (a trace, a multi-turn file), so
// exec-cell, --resume and bundles read the file the run read.
func TestDatasetRecordEveryDatasetFile(t *testing.T) {
	sample, err := filepath.Abs("../testdata/mooncake-sample.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	p := testPlan(t, "name = \"trace\"\n[backend]\nmode = \"serve\"\nmodel_type = \"llm\"\n[matrix]\nmodel = [\"m\"]\n[load]\ndataset = \"mooncake\"\ndataset_path = \""+sample+"\"\n")
	opts := Options{Logger: slog.New(slog.DiscardHandler)}
	rec := datasetRecord(context.Background(), p, &opts)
	if rec == nil || rec.Path != sample || rec.SHA256 == "" {
		t.Errorf("mooncake dataset record %+v", rec)
	}
}
