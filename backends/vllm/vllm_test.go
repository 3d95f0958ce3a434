package vllm

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
)

func cell(profiler string, extra ...string) plans.Cell {
	return plans.Cell{ID: "000-x", Model: "m/M", Profiler: profiler,
		Backend: plans.Backend{Kind: Kind, Mode: "serve", ModelType: plans.ModelTypeLLM, Command: []string{"sglang"}, ExtraArgs: extra},
		Load:    plans.LoadSpec{API: plans.APICompletions}}
}

func writeGz(t *testing.T, path, body string) {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(body))
	zw.Close()
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestServerCommand: `vllm serve MODEL` (the default command means vllm), the runner's host and
// port, a --profiler-config only for profiled cells, then the plan's flags.
func TestServerCommand(t *testing.T) {
	l, err := Backend{}.ServerLaunch(cell(plans.ProfilerTorch, "--max-model-len", "4096"), backends.ServerSite{Command: Command(cell("none")), Port: 8123, Dir: "/d", TraceDir: "/t"})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(l.Argv, " ")
	if !strings.HasPrefix(got, "vllm serve m/M --host 127.0.0.1 --port 8123 --profiler-config {") || !strings.Contains(got, `"torch_profiler_dir":"/t"`) || !strings.HasSuffix(got, "--max-model-len 4096") {
		t.Errorf("argv %s", got)
	}
	l, _ = Backend{}.ServerLaunch(cell(plans.ProfilerNone), backends.ServerSite{Command: []string{"vllm"}, Port: 1, Dir: "/d", TraceDir: "/t"})
	if slices.Contains(l.Argv, "--profiler-config") {
		t.Errorf("unprofiled argv %q", l.Argv)
	}
	if p := (Backend{}).Protocol(cell("none")); p.API != plans.APICompletions || p.ReadyLine != "Application startup complete." {
		t.Errorf("protocol %+v", p)
	}
	c := cell("none")
	c.Load.API = plans.APIGenerate
	if err := (Backend{}).ValidateCell(c); err == nil || !strings.Contains(err.Error(), "no /generate") {
		t.Errorf("generate: %v", err)
	}
}

// TestCollectTraces: the window's worker traces move into the cell, the frontend's CPU trace
// into traces/frontend/ (no rank, no kernels), traces from before the window stay, and a
// missing tensor-parallel rank fails the cell.
func TestCollectTraces(t *testing.T) {
	srv, cellDir := t.TempDir(), t.TempDir()
	kernel := `{"traceEvents":[{"ph":"X","cat":"kernel"}]}`
	writeGz(t, filepath.Join(srv, "dp0_pp0_tp0_dcp0_ep0_rank0.1.pt.trace.json.gz"), kernel)
	writeGz(t, filepath.Join(srv, "dp0_pp0_tp0_dcp0_ep0_rank0.2.pt.trace.json.gz"), kernel)
	writeGz(t, filepath.Join(srv, "host_7.async_llm.3.pt.trace.json.gz"), `{"traceEvents":[{"ph":"X","cat":"user_annotation"}]}`)
	before := map[string]bool{"dp0_pp0_tp0_dcp0_ep0_rank0.1.pt.trace.json.gz": true}
	r := Backend{}.CollectTraces(cell(plans.ProfilerTorch, "-tp", "2"), backends.TraceDirs{Server: srv, Cell: cellDir, Before: before})
	if len(r.Traces) != 1 || filepath.Base(r.Traces[0]) != "dp0_pp0_tp0_dcp0_ep0_rank0.2.pt.trace.json.gz" {
		t.Errorf("traces %v", r.Traces)
	}
	if _, err := os.Stat(filepath.Join(cellDir, FrontendDir, "host_7.async_llm.3.pt.trace.json.gz")); err != nil {
		t.Errorf("frontend trace: %v", err)
	}
	if _, err := os.Stat(filepath.Join(srv, "dp0_pp0_tp0_dcp0_ep0_rank0.1.pt.trace.json.gz")); err != nil {
		t.Error("a trace from before the window was moved")
	}
	if len(r.Reasons) != 1 || !strings.Contains(r.Reasons[0].Message, "traces of 1 GPU worker(s) found, 2 expected") {
		t.Errorf("reasons %+v", r.Reasons)
	}
}

// TestAssessStartFailures: the API server's engine-core line and argparse's rejection fail the
// cell with what to do; an OOM fails only the cell during which it was logged.
func TestAssessStartFailures(t *testing.T) {
	b := Backend{}
	w := b.NewServerWatcher(cell("none"))
	since := w.Mark()
	w.Line(1, "stderr", "(EngineCore_DP0 pid=2) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
	w.Line(2, "stderr", "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}")
	if f, _, ok := w.Fatal(); !ok || f == "" {
		t.Error("no fatal finding")
	}
	a := b.AssessCell(cell("none"), w, since)
	var codes []string
	for _, r := range a.Reasons {
		codes = append(codes, r.Code)
	}
	if a.Verdict != plans.VerdictFailed || !slices.Equal(codes, []string{FindingEngineInit, FindingOOM}) {
		t.Errorf("verdict %s, codes %v", a.Verdict, codes)
	}
	if a := b.AssessCell(cell("none"), w, w.Mark()); slices.ContainsFunc(a.Reasons, func(r rundir.Reason) bool { return r.Code == FindingOOM }) {
		t.Errorf("an earlier cell's OOM failed this one: %+v", a.Reasons)
	}
}
