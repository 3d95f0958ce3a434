package perf

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sglprof/runner/reports/rundir"
)

// An LLM cell's per-request records are read as runner/load writes them (latency_ns) and as
// run directories written before it have them (e2e_ns).
func TestLoadLLMCellMetrics(t *testing.T) {
	for name, recs := range map[string]string{
		"e2e_ns": `{"index":0,"start_ns":0,"ttft_ns":1000000,"e2e_ns":3000000,"itl_ns":[1000000,1000000],"input_tokens":8,"output_tokens":3}
{"index":1,"start_ns":0,"ttft_ns":0,"e2e_ns":100,"input_tokens":8,"output_tokens":0,"error":"HTTP 500"}
{"index":2,"start_ns":0,"ttft_ns":2000000,"e2e_ns":2000000,"input_tokens":8,"output_tokens":1}
`,
		"latency_ns": `{"index":0,"status":200,"start_ns":0,"latency_ns":3000000,"ttft_ns":1000000,"itl_ns":[1000000,1000000],"bytes":90,"input_tokens":8,"output_tokens":3}
{"index":1,"status":500,"start_ns":0,"latency_ns":100,"bytes":0,"input_tokens":8,"error":"HTTP 500"}
{"index":2,"status":200,"start_ns":0,"latency_ns":2000000,"ttft_ns":2000000,"bytes":30,"input_tokens":8,"output_tokens":1}
`,
	} {
		t.Run(name, func(t *testing.T) { testLoadLLMCellMetrics(t, recs) })
	}
}

func testLoadLLMCellMetrics(t *testing.T, recs string) {
	dir := t.TempDir()
	r := rundir.CellResult{ID: "000-m-i8-o3-s0-none-r1", Key: "m/i8/o3", Profiler: "none", Verdict: "ok",
		Timings: rundir.Timings{E2ENS: 5e6},
		Serve: &rundir.ServeResult{API: "generate", LLM: &rundir.LLMResult{LLMSummary: rundir.LLMSummary{
			OutputThroughput: 1234.5, SLO: &rundir.LLMSLO{TTFT: 1}, Goodput: 7}}}}
	if err := rundir.WriteJSON(filepath.Join(dir, rundir.ResultFile), r, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, rundir.LLMRecordsFile), []byte(recs), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Load(dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := s.Configs["m/i8/o3"]
	if c == nil {
		t.Fatalf("configs %v", s.Configs)
	}
	want := map[string][]float64{
		MetricTTFT:             {1e6, 2e6}, // the failed request is left out
		MetricTPOT:             {1e6},      // (3 ms − 1 ms)/(3 − 1); one-token requests have none
		MetricITL:              {1e6, 1e6},
		MetricOutputThroughput: {1234.5},
		MetricGoodput:          {7},
	}
	for m, w := range want {
		got := c.Metrics[m]
		if len(got) != len(w) {
			t.Errorf("%s = %v, want %v", m, got, w)
			continue
		}
		for i := range w {
			if got[i] != w[i] {
				t.Errorf("%s = %v, want %v", m, got, w)
			}
		}
	}
	if !HigherIsBetter(MetricOutputThroughput) || !HigherIsBetter(MetricGoodput) || HigherIsBetter(MetricTTFT) || HigherIsBetter(MetricTPOT) {
		t.Error("directions")
	}
	if Class(MetricOutputThroughput) != "throughput" || Class(MetricTTFT) != "ttft" || Unit(MetricOutputThroughput) != UnitTokensPS {
		t.Error("classes or units")
	}
}
