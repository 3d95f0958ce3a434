package vllmomni

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/plans"
)

func TestWindowAndProtocol(t *testing.T) {
	b := Backend{}
	w := b.Window(cell(plans.ProfilerTorch), "/cell/traces")
	// ProfileRequest takes only stages: a profile_prefix would be dropped, so none is sent.
	if _, prefix := w.Start["profile_prefix"]; w.Kind != backends.WindowStartStop || prefix || w.Start == nil || w.StartHint == "" {
		t.Fatalf("torch window %+v", w)
	}
	if w := b.Window(cell(plans.ProfilerNone), "/cell/traces"); w.Kind != "" {
		t.Fatalf("unprofiled window %+v", w)
	}
	p := b.Protocol(cell(plans.ProfilerNone))
	// vLLM has no model-info route and no profile-done line: a refused /stop_profile fails.
	if p.ReadyLine != ReadyLine || p.ModelInfoPath != "" || p.ProfileDoneLine != "" || p.PerfDumps || p.API != plans.APIImages {
		t.Fatalf("protocol %+v", p)
	}
	if got := b.Executable(cell(plans.ProfilerNone)); len(got) != 1 || got[0] != "vllm" {
		t.Fatalf("executable %v", got)
	}
}

func TestAssessCellChargesOOMToTheCellThatSawIt(t *testing.T) {
	b := Backend{}
	c := cell(plans.ProfilerNone)
	w := b.NewServerWatcher(c)
	w.Line(1, "stderr", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
	mark := w.Mark()
	if a := b.AssessCell(c, w, mark); a.Verdict != plans.VerdictOK || len(a.Reasons) != 0 {
		t.Fatalf("an OOM of an earlier cell failed this one: %+v", a)
	}
	if a := b.AssessCell(c, w, nil); a.Verdict != plans.VerdictFailed || a.Reasons[0].Code != FindingOOM {
		t.Fatalf("OOM during the cell: %+v", a)
	}
	w.Line(2, "stderr", "vllm serve: error: unrecognized arguments: --bogus")
	a := b.AssessCell(c, w, w.Mark())
	if a.Verdict != plans.VerdictFailed || a.Reasons[0].Code != FindingUnrecognized || !strings.Contains(a.Reasons[0].Message, "--bogus") {
		t.Fatalf("rejected arguments: %+v", a)
	}
	if f, _, ok := w.Fatal(); !ok || f != FindingUnrecognized {
		t.Fatalf("Fatal = %q %v", f, ok)
	}
}

func TestCollectTracesMovesNewSessions(t *testing.T) {
	srv, cellDir := t.TempDir(), t.TempDir()
	old := filepath.Join(srv, "20260101-115900_000-y")
	os.MkdirAll(old, 0o755)
	before := map[string]bool{filepath.Base(old): true}
	good := filepath.Join(srv, "20260101-120000_001-x")
	os.MkdirAll(good, 0o755)
	os.WriteFile(filepath.Join(good, "trace_rank0.json.gz"), gz(t, []byte(`{"traceEvents":[{"cat":"kernel"}]}`), true), 0o644)
	os.WriteFile(filepath.Join(good, "trace_rank1.json.gz"), gz(t, []byte(`{"traceEvents":[{"cat":"cpu_op"}]}`), true), 0o644)
	r := Backend{}.CollectTraces(cell(plans.ProfilerTorch), backends.TraceDirs{Server: srv, Cell: cellDir, Before: before})
	if len(r.Traces) != 2 || !strings.HasPrefix(r.Traces[0], filepath.Join(cellDir, "20260101-120000_001-x")) {
		t.Fatalf("traces %v", r.Traces)
	}
	if len(r.Reasons) != 1 || r.Reasons[0].Code != "trace-check" || !strings.Contains(r.Reasons[0].Message, "trace_rank1.json.gz has no kernel events") {
		t.Fatalf("reasons %+v", r.Reasons)
	}
	if _, err := os.Stat(old); err != nil {
		t.Fatal("a session from before the window was moved")
	}
	if _, err := os.Stat(good); !os.IsNotExist(err) {
		t.Fatal("the new session stayed in the server's directory")
	}
}

// Under nsys vLLM-Omni is seen only through its cuda profiler's cudaProfilerApi range, so an
// nsys cell without that capture range is refused; other profilers need none.
func TestValidateCell(t *testing.T) {
	const msg = `profiler "nsys" with backend.kind = "vllm-omni" needs [nsys] capture_range = "cudaProfilerApi": the server's cuda profiler then opens and closes the capture in the runner's /start_profile window`
	c := cell(plans.ProfilerNsys)
	if err := New().ValidateCell(c); err == nil || err.Error() != msg {
		t.Errorf("nsys without a capture range: %v", err)
	}
	c.NSys.CaptureRange = plans.CaptureRangeCudaAPI
	if err := New().ValidateCell(c); err != nil {
		t.Errorf("nsys with cudaProfilerApi: %v", err)
	}
	for _, p := range []string{plans.ProfilerTorch, plans.ProfilerNone} {
		if err := New().ValidateCell(cell(p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// The environment probes ask the Python of vllm (the plan default "sglang" means vllm here)
// and skip check_env, which is sglang's.
func TestEnvProbes(t *testing.T) {
	got := New().EnvProbes(cell(plans.ProfilerNone))
	if strings.Join(got.Command, " ") != "vllm" || got.CheckEnv {
		t.Errorf("default command: EnvProbes = %+v", got)
	}
	c := cell(plans.ProfilerNone)
	c.Backend.Command = []string{"/opt/omni/bin/vllm"}
	if got := New().EnvProbes(c); strings.Join(got.Command, " ") != "/opt/omni/bin/vllm" || got.CheckEnv {
		t.Errorf("own command: EnvProbes = %+v", got)
	}
}
