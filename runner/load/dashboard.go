package load

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/sglprof/runner/reports/rundir"
)

// Dashboard exports of a run: the PyTorch OSS benchmark database records vLLM's `vllm bench
// serve` writes (vllm/benchmarks/serve.py save_to_pytorch_benchmark_format through
// vllm/benchmarks/lib/utils.py convert_to_pytorch_benchmark_format), and
// github-action-benchmark's customSmallerIsBetter / customBiggerIsBetter entries.

// PyTorchMetrics are the metrics vLLM's serve benchmark writes one record each for, in its
// order; every other field of the result goes into each record's metric.extra_info.
var PyTorchMetrics = []string{
	"median_ttft_ms", "mean_ttft_ms", "std_ttft_ms", "p99_ttft_ms",
	"mean_tpot_ms", "median_tpot_ms", "std_tpot_ms", "p99_tpot_ms",
	"median_itl_ms", "mean_itl_ms", "std_itl_ms", "p99_itl_ms",
}

// PyTorchRecord is one record of the PyTorch OSS benchmark database as vLLM writes it: exactly
// these fields (benchmark.name, benchmark.extra_info.args, model.name, metric.name,
// metric.benchmark_values, metric.extra_info).
type PyTorchRecord struct {
	Benchmark struct {
		Name      string `json:"name"`
		ExtraInfo struct {
			Args map[string]any `json:"args"`
		} `json:"extra_info"`
	} `json:"benchmark"`
	Model struct {
		Name string `json:"name"`
	} `json:"model"`
	Metric struct {
		Name            string         `json:"name"`
		BenchmarkValues []float64      `json:"benchmark_values"`
		ExtraInfo       map[string]any `json:"extra_info"`
	} `json:"metric"`
}

// PyTorchBenchmarkName is benchmark.name as vLLM writes it.
const PyTorchBenchmarkName = "vLLM benchmark"

// Cell is one LLM cell of a run as the dashboard exports see it.
type Cell struct {
	ID, Key, Model, Engine string
	TensorParallel         int
	Summary                rundir.LLMSummary
	Load                   Load
}

// ToPyTorch turns a cell into vLLM's records: one per PyTorchMetrics entry, whose
// benchmark_values is the one value; args are the cell's load in `vllm bench serve`'s argument
// names (with tensor_parallel_size, which vLLM adds when it knows it) and the runner's cell id
// and key; extra_info is the bench_serving record of the cell without the twelve metrics.
func ToPyTorch(c Cell) ([]PyTorchRecord, error) {
	b, err := json.Marshal(ToBenchServing(c.Summary, c.Load))
	if err != nil {
		return nil, err
	}
	var all map[string]any
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, err
	}
	args := map[string]any{
		"model": c.Model, "backend": all["backend"], "dataset_name": c.Load.Dataset,
		"num_prompts": c.Summary.Completed + c.Summary.Failed, "request_rate": rateField(c.Load.Rate),
		"max_concurrency": all["max_concurrency"], "random_input_len": c.Load.InputLen,
		"random_output_len": c.Load.OutputLen, "random_range_ratio": c.Load.RangeRatio,
		"tensor_parallel_size": max(c.TensorParallel, 1), "engine": c.Engine, "cell_id": c.ID, "cell_key": c.Key,
	}
	extra := map[string]any{}
	for k, v := range all {
		extra[k] = v
	}
	for _, m := range PyTorchMetrics {
		delete(extra, m)
	}
	out := make([]PyTorchRecord, 0, len(PyTorchMetrics))
	for _, m := range PyTorchMetrics {
		v, ok := all[m].(float64)
		if !ok {
			return nil, fmt.Errorf("cell %s: no %s in its result", c.ID, m)
		}
		var r PyTorchRecord
		r.Benchmark.Name = PyTorchBenchmarkName
		r.Benchmark.ExtraInfo.Args = args
		r.Model.Name = c.Model
		r.Metric.Name = m
		r.Metric.BenchmarkValues = []float64{v}
		r.Metric.ExtraInfo = extra
		out = append(out, r)
	}
	return out, nil
}

// GABEntry is one entry of github-action-benchmark's custom tools: name, unit and value, with
// the optional range (a string such as "± 1.2") and extra (a free text shown in the tooltip).
type GABEntry struct {
	Name  string  `json:"name"`
	Unit  string  `json:"unit"`
	Value float64 `json:"value"`
	Range string  `json:"range,omitempty"`
	Extra string  `json:"extra,omitempty"`
}

// GAB returns a cell's entries for github-action-benchmark: the latencies (customSmallerIsBetter)
// when smaller, else the throughputs (customBiggerIsBetter). Names are "<cell key> <metric>", so
// a dashboard's series follow a configuration across runs (cell ids carry an index that changes
// when the plan does).
func GAB(c Cell, smaller bool) []GABEntry {
	s := c.Summary
	extra := fmt.Sprintf("cell %s; %d requests", c.ID, s.Completed)
	ms := func(metric string, st rundir.LLMStats, v float64) GABEntry {
		return GABEntry{Name: c.Key + " " + metric, Unit: "ms", Value: v, Range: fmt.Sprintf("± %.3g", st.Std), Extra: extra}
	}
	if smaller {
		return []GABEntry{
			ms("ttft_median", s.TTFT, s.TTFT.Median), ms("ttft_p99", s.TTFT, s.TTFT.P99),
			ms("tpot_median", s.TPOT, s.TPOT.Median), ms("itl_p99", s.ITL, s.ITL.P99),
			ms("e2e_median", s.E2E, s.E2E.Median),
		}
	}
	out := []GABEntry{
		{Name: c.Key + " output_throughput", Unit: "tok/s", Value: s.OutputThroughput, Extra: extra},
		{Name: c.Key + " request_throughput", Unit: "req/s", Value: s.RequestThroughput, Extra: extra},
	}
	if s.SLO != nil {
		out = append(out, GABEntry{Name: c.Key + " request_goodput", Unit: "req/s", Value: s.Goodput, Extra: extra})
	}
	return out
}

// WriteJSONArray writes v as one indented JSON document (the custom tools and the PyTorch
// database each read one array).
func WriteJSONArray(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
