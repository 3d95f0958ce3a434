package triage

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/trace"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

func analyzeGolden(t *testing.T) *Report {
	t.Helper()
	tr := goldenTrace()
	in := Inputs{Files: []Input{{Path: tr.Path, Format: FormatKineto, Rank: NoRank}}, Model: "Qwen/Qwen3-8B", TPSize: 2}
	r, err := Analyze(context.Background(), in, Options{Open: opener(map[string]*trace.Trace{tr.Path: tr})})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func findStage(t *testing.T, r *Report, name string) *Stage {
	t.Helper()
	for i := range r.Stages {
		if r.Stages[i].Stage == name {
			return &r.Stages[i]
		}
	}
	var names []string
	for _, s := range r.Stages {
		names = append(names, s.Stage)
	}
	t.Fatalf("no stage %q in %v", name, names)
	return nil
}

func findKernel(t *testing.T, s *Stage, prefix string) *KernelRow {
	t.Helper()
	for i := range s.Kernels {
		if strings.HasPrefix(s.Kernels[i].Name, prefix) {
			return &s.Kernels[i]
		}
	}
	t.Fatalf("stage %s has no kernel %q", s.Stage, prefix)
	return nil
}

func TestGolden(t *testing.T) {
	r := analyzeGolden(t)
	for _, f := range []string{FormatText, FormatMarkdown, FormatJSON, FormatCSV} {
		t.Run(f, func(t *testing.T) {
			var buf bytes.Buffer
			if err := Render(&buf, r, f, DefaultCutoff); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join("testdata", "golden."+f+".golden")
			if *update {
				if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(p)
			if err != nil {
				t.Fatalf("%v (run go test ./reports/triage -update to create it)", err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("%s output differs from %s (rerun with -update after checking the diff):\n%s", f, p, buf.String())
			}
		})
	}
}

func TestStagesFromAnnotationsAndDevice(t *testing.T) {
	r := analyzeGolden(t)
	if len(r.Stages) != 2 || r.Stages[0].Stage != StageExtend || r.Stages[1].Stage != StageDecode {
		t.Fatalf("stages = %+v, want extend then decode", r.Stages)
	}
	if r.Inputs[0].Device != 0 || r.Inputs[0].Stage != "extend,decode" {
		t.Errorf("input info = %+v, want device 0, stage extend,decode", r.Inputs[0])
	}
	ext := findStage(t, r, StageExtend)
	if ext.KernelCount != 15 {
		t.Errorf("extend kernel count = %d, want 15", ext.KernelCount)
	}
	dec := findStage(t, r, StageDecode)
	if dec.KernelCount != 6 {
		t.Errorf("decode kernel count = %d, want 6 (the device-1 op must be excluded)", dec.KernelCount)
	}
	if got, want := dec.KernelTimeUS, 33.0; got != want {
		t.Errorf("decode kernel time = %v us, want %v", got, want)
	}
}

func TestSharesSumTo100(t *testing.T) {
	r := analyzeGolden(t)
	for _, s := range r.Stages {
		var sum, tot float64
		n := 0
		for _, k := range s.Kernels {
			sum += k.SharePct
			tot += k.TotalUS
			n += k.Count
		}
		if math.Abs(sum-100) > 1e-9 {
			t.Errorf("stage %s: shares sum to %v, want 100", s.Stage, sum)
		}
		if math.Abs(tot-s.KernelTimeUS) > 1e-9 || n != s.KernelCount {
			t.Errorf("stage %s: rows total %v us / %d ops, stage says %v / %d", s.Stage, tot, n, s.KernelTimeUS, s.KernelCount)
		}
		for _, k := range s.Kernels {
			var ls float64
			for _, l := range k.Locations {
				ls += l.SharePct
			}
			if len(k.Locations) < MaxLocations && math.Abs(ls-100) > 1e-9 {
				t.Errorf("%s: site shares sum to %v", k.Name, ls)
			}
		}
	}
}

func TestAttribution(t *testing.T) {
	r := analyzeGolden(t)
	ext := findStage(t, r, StageExtend)
	g := findKernel(t, ext, kGEMM)
	if len(g.Locations) != 1 || g.Locations[0].Location != "python/sglang/srt/layers/quantization/unquant.py:134 apply" || g.Locations[0].CPUOp != "aten::mm" {
		t.Errorf("GEMM site = %+v; want the SGLang frame, not the torch module wrapper below it", g.Locations)
	}
	dec := findStage(t, r, StageDecode)
	g = findKernel(t, dec, kGEMM)
	if len(g.Locations) != 1 || g.Locations[0].Location != "python/sglang/srt/model_executor/cuda_graph_runner.py:1193 replay" ||
		g.Locations[0].CPUOp != "cudaGraphLaunch replay (graph)" {
		t.Errorf("graph-replayed GEMM site = %+v; want the replay site labelled as a graph replay", g.Locations)
	}
	a := findKernel(t, ext, "void cutlass::device_kernel<flash::")
	if a.Category != CatAttention {
		t.Errorf("FlashAttention-3 category = %s, want attention", a.Category)
	}
	if strings.Contains(a.Name, "::Params)") {
		t.Errorf("canonical name kept the parameter list: %s", a.Name)
	}
}

func TestOverlapSingleTrace(t *testing.T) {
	r := analyzeGolden(t)
	ext := findStage(t, r, StageExtend)
	if ext.Summary.MultiStreamNS != 6_000 || ext.Summary.PeakStreams != 2 || ext.Summary.Streams != 2 {
		t.Errorf("overlap totals = %+v, want 6 us of 2-stream time, peak 2 of 2 streams", ext.Summary)
	}
	var nccl *OverlapRow
	for i := range ext.Overlap {
		if strings.HasPrefix(ext.Overlap[i].Kernel, "ncclDevKernel") {
			nccl = &ext.Overlap[i]
		}
	}
	if nccl == nil {
		t.Fatalf("no NCCL row in the overlap table: %+v", ext.Overlap)
	}
	if nccl.HiddenPct != 18.75 || nccl.ExclusivePct != 81.25 || nccl.Category != CatCommunication {
		t.Errorf("NCCL row = %+v, want 18.75%% hidden / 81.25%% exclusive", *nccl)
	}
	// The all-reduce runs on stream 24, beside the compute on stream 7: it is on a side stream
	// already, so the advice is to start it earlier, not to move it to one.
	if nccl.Verdict != VerdictHeadroom || nccl.Priority != "P1" || nccl.Recommendation != RecSideStream {
		t.Errorf("NCCL row = %+v, want P1 headroom start earlier", *nccl)
	}
	// busy = union of both streams
	if ext.BusyUS >= ext.KernelTimeUS {
		t.Errorf("busy %v us should be below summed kernel time %v us when streams overlap", ext.BusyUS, ext.KernelTimeUS)
	}
}

func TestFusionsOnGolden(t *testing.T) {
	r := analyzeGolden(t)
	ext := findStage(t, r, StageExtend)
	st := map[string]string{}
	for _, f := range ext.Fusions {
		st[f.Pattern] = f.Status
	}
	// The fused add+RMSNorm kernel is the norm part of the TP all-reduce fusion, the more
	// specific pattern, so it is cited there and not again in its own row.
	if st["FlashInfer unified allreduce_fusion (all-reduce + residual + RMSNorm)"] != StatusAvailable || st["Fused residual add + RMSNorm"] != "" {
		t.Errorf("all-reduce fusion should cite the fused add+RMSNorm kernel alone; fusions: %v", st)
	}
	if st["Fused activation-and-mul (SwiGLU/GeGLU)"] != StatusAvailable {
		t.Errorf("act-and-mul status = %q, want available; fusions: %v", st["Fused activation-and-mul (SwiGLU/GeGLU)"], st)
	}
}

func TestCutoff(t *testing.T) {
	r := analyzeGolden(t)
	dec := findStage(t, r, StageDecode)
	var small int
	for _, k := range dec.Kernels {
		if k.SharePct < 10 {
			small++
		}
	}
	if small == 0 {
		t.Fatal("test needs decode rows under 10%")
	}
	for _, c := range []float64{0, 10, 100} {
		var buf bytes.Buffer
		if err := Render(&buf, r, FormatJSON, c); err != nil {
			t.Fatal(err)
		}
		var got Report
		if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		for _, s := range got.Stages {
			for _, k := range s.Kernels {
				if k.SharePct < c {
					t.Errorf("cutoff %v: row %s with %v%% shown", c, k.Name, k.SharePct)
				}
			}
		}
		gd := got.Stages[1]
		want := len(dec.Kernels)
		if c == 10 {
			want -= small
		}
		if c == 100 {
			want = 0
		}
		if len(gd.Kernels) != want {
			t.Errorf("cutoff %v: %d decode rows, want %d", c, len(gd.Kernels), want)
		}
	}
	// Options.Cutoff drops rows from the report itself.
	tr := goldenTrace()
	rep, err := Analyze(context.Background(), Inputs{Files: []Input{{Path: tr.Path, Rank: NoRank}}},
		Options{Open: opener(map[string]*trace.Trace{tr.Path: tr}), Cutoff: 10})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(rep.Stages[1].Kernels); n != len(dec.Kernels)-small {
		t.Errorf("Options.Cutoff 10: %d rows, want %d", n, len(dec.Kernels)-small)
	}
}

// TestJSONContract decodes the JSON into generic maps and checks every contract key, so a
// renamed or missing field fails here before another tool notices.
func TestJSONContract(t *testing.T) {
	r := analyzeGolden(t)
	var buf bytes.Buffer
	if err := Render(&buf, r, FormatJSON, 0); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	keys := func(what string, v any, want ...string) map[string]any {
		t.Helper()
		obj, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%s is %T, want an object", what, v)
		}
		for _, k := range want {
			if _, ok := obj[k]; !ok {
				t.Errorf("%s lacks key %q", what, k)
			}
		}
		if len(obj) != len(want) {
			var got []string
			for k := range obj {
				got = append(got, k)
			}
			t.Errorf("%s has keys %v, want exactly %v", what, got, want)
		}
		return obj
	}
	arr := func(what string, v any) []any {
		t.Helper()
		a, ok := v.([]any)
		if !ok {
			t.Fatalf("%s is %T, want an array", what, v)
		}
		if len(a) == 0 {
			t.Fatalf("%s is empty; the test trace should fill it", what)
		}
		return a
	}
	top := keys("top level", m, "inputs", "mode", "stages", "warnings")
	if top["mode"] != ModeSingle {
		t.Errorf("mode = %v", top["mode"])
	}
	if _, ok := top["warnings"].([]any); !ok {
		t.Errorf("warnings is %T, want an array", top["warnings"])
	}
	for _, in := range arr("inputs", top["inputs"]) {
		o := keys("input", in, "path", "stage", "rank", "device")
		if _, ok := o["rank"].(float64); !ok {
			t.Errorf("rank is %T, want a number", o["rank"])
		}
	}
	for _, s := range arr("stages", top["stages"]) {
		// The idle figures come with every fully analysed stage; launch_delay_us and
		// queue_length only where some op has a known launch.
		if o, ok := s.(map[string]any); ok {
			if _, ok := o["idle"]; !ok {
				t.Errorf("stage %v has no idle breakdown", o["stage"])
			}
			io := keys("idle", o["idle"], "window_us", "busy_us", "host_wait_us", "kernel_wait_us", "other_us")
			if sum, want := io["host_wait_us"].(float64)+io["kernel_wait_us"].(float64)+io["other_us"].(float64), io["window_us"].(float64)-io["busy_us"].(float64); math.Abs(sum-want) > 1e-6 {
				t.Errorf("stage %v: idle parts sum to %v, window − busy is %v", o["stage"], sum, want)
			}
			keys("host_bound", o["host_bound"], "host_bound", "launch_times", "host_wait_pct", "idle_pct", "longest_host_waits")
			if ld, ok := o["launch_delay_us"]; ok {
				keys("launch_delay_us", ld, "p50", "p90", "p99", "max")
				keys("queue_length", o["queue_length"], "p50", "p90", "p99", "max")
				delete(o, "launch_delay_us")
				delete(o, "queue_length")
			}
			delete(o, "idle")
			delete(o, "host_bound")
		}
		want := []string{"stage", "kernel_count", "kernel_time_us", "busy_us", "window_us", "kernels", "overlap", "fusions"}
		if sm, _ := s.(map[string]any); sm != nil && sm["stage"] == StageExtend {
			want = append(want, "collectives") // the extend stage has an all-reduce; omitted where none ran
		}
		so := keys("stage", s, want...)
		if so["stage"] == StageExtend {
			for _, c := range arr("collectives", so["collectives"]) {
				keys("collective", c, "op", "bytes", "count", "total_us", "algo_gbps", "bus_gbps", "skew_us", "skew_max_us", "matched")
			}
		}
		for _, k := range arr("kernels", so["kernels"]) {
			ko := keys("kernel", k, "name", "category", "total_us", "count", "share_pct", "locations")
			for _, l := range arr("locations", ko["locations"]) {
				keys("location", l, "location", "cpu_op", "share_pct")
			}
		}
		if so["stage"] == StageExtend {
			for _, o := range arr("overlap", so["overlap"]) {
				keys("overlap row", o, "priority", "verdict", "kernel", "category", "total_us", "share_pct", "exclusive_pct", "hidden_pct", "dep_risk", "recommendation", "scope")
			}
			for _, f := range arr("fusions", so["fusions"]) {
				fo := keys("fusion row", f, "pattern", "status", "confidence", "related_us", "share_pct", "evidence", "candidate_paths", "rationale")
				arr("evidence", fo["evidence"])
				arr("candidate_paths", fo["candidate_paths"])
			}
		}
	}
	// Unrounded numbers: 1/3-style shares survive with full precision.
	if !strings.Contains(buf.String(), "\"share_pct\": ") {
		t.Error("no share_pct in JSON")
	}
}

func TestRenderErrors(t *testing.T) {
	r := analyzeGolden(t)
	if err := Render(&bytes.Buffer{}, r, "xml", 1); err == nil || !strings.Contains(err.Error(), "text, md, json or csv") {
		t.Errorf("unknown format error = %v", err)
	}
}

func TestAnalyzeErrors(t *testing.T) {
	ctx := context.Background()
	in := Inputs{Files: []Input{{Path: "missing.trace.json", Rank: NoRank}}}
	if _, err := Analyze(ctx, in, Options{}); err == nil || !strings.Contains(err.Error(), "Open is nil") {
		t.Errorf("nil Open: %v", err)
	}
	if _, err := Analyze(ctx, Inputs{}, Options{Open: opener(nil)}); err == nil || !strings.Contains(err.Error(), "no input traces") {
		t.Errorf("no inputs: %v", err)
	}
	_, err := Analyze(ctx, in, Options{Open: opener(nil)})
	if err == nil || !strings.Contains(err.Error(), "read missing.trace.json") {
		t.Errorf("open failure not wrapped with the path: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	tr := goldenTrace()
	if _, err := Analyze(cctx, Inputs{Files: []Input{{Path: tr.Path, Rank: NoRank}}}, Options{Open: opener(map[string]*trace.Trace{tr.Path: tr})}); err == nil {
		t.Error("cancelled context: no error")
	}
	// A trace without GPU ops is a warning, not a crash.
	empty := trace.New("empty.json", "kineto")
	r, err := Analyze(ctx, Inputs{Files: []Input{{Path: "empty.json", Rank: NoRank}}}, Options{Open: opener(map[string]*trace.Trace{"empty.json": empty})})
	if err != nil || len(r.Stages) != 0 || len(r.Warnings) == 0 {
		t.Errorf("empty trace: err=%v stages=%d warnings=%v", err, len(r.Stages), r.Warnings)
	}
}

func TestDeviceChoice(t *testing.T) {
	tr := goldenTrace()
	one := 1
	r, err := Analyze(context.Background(), Inputs{Files: []Input{{Path: tr.Path, Stage: StageAll, Rank: NoRank}}},
		Options{Open: opener(map[string]*trace.Trace{tr.Path: tr}), Device: &one})
	if err != nil {
		t.Fatal(err)
	}
	if r.Inputs[0].Device != 1 || r.Stages[0].KernelCount != 1 {
		t.Errorf("device 1: input %+v, %d ops; want the single device-1 op", r.Inputs[0], r.Stages[0].KernelCount)
	}
}
