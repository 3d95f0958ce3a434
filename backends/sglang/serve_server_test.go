package sglang

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
)

func writeGz(t *testing.T, path, body string, truncate bool) {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(body))
	zw.Close()
	data := b.Bytes()
	if truncate {
		data = data[:len(data)/2]
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCheckServeTraces(t *testing.T) {
	dir := t.TempDir()
	if _, problems := CheckServeTraces(dir, 1); len(problems) != 1 || !strings.Contains(problems[0], "no *.trace.json.gz") {
		t.Fatalf("empty dir problems %v", problems)
	}
	kernel := `{"traceEvents":[{"ph":"X","cat":"kernel","name":"k"}]}`
	writeGz(t, filepath.Join(dir, "p-1.5-TP-0.trace.json.gz"), kernel, false)
	if names, problems := CheckServeTraces(dir, 1); len(names) != 1 || len(problems) != 0 {
		t.Fatalf("good trace: %v %v", names, problems)
	}
	if _, problems := CheckServeTraces(dir, 2); len(problems) != 1 || !strings.Contains(problems[0], "1 rank(s) found, 2 expected") {
		t.Fatalf("missing rank: %v", problems)
	}
	writeGz(t, filepath.Join(dir, "p-1.5-TP-1.trace.json.gz"), `{"traceEvents":[{"ph":"X","cat":"cpu_op"}]}`, false)
	writeGz(t, filepath.Join(dir, "merged-1.5.trace.json.gz"), kernel, true)
	_, problems := CheckServeTraces(dir, 2)
	joined := strings.Join(problems, "\n")
	if len(problems) != 2 || !strings.Contains(joined, "TP-1.trace.json.gz has no kernel events") || !strings.Contains(joined, "merged-1.5.trace.json.gz: truncated") {
		t.Fatalf("problems %v", problems)
	}
}

func TestStartProfileBody(t *testing.T) {
	c := plans.Cell{ID: "007-x"}
	c.Profile.StartStep, c.Profile.NumSteps, c.Profile.ProfileByStage = -1, 5, true
	b := StartProfileBody(c, "/abs/traces")
	if _, ok := b["start_step"]; ok {
		t.Fatal("start_step -1 must not be sent")
	}
	if b["num_steps"] != 5 || b["output_dir"] != "/abs/traces" || b["profile_prefix"] != "007-x" || b["profile_by_stage"] != true {
		t.Fatalf("body %v", b)
	}
	c.Profile.StartStep = 3
	if StartProfileBody(c, "/t")["start_step"] != 3 {
		t.Fatal("start_step 3 not sent")
	}
}

func TestServeAssessCellCountsEventsSinceTheMark(t *testing.T) {
	b := ServeBackend{}
	c := serveCell()
	w := b.NewServerWatcher(c)
	w.Line(1, "stderr", "torch.OutOfMemoryError: CUDA out of memory")
	mark := w.Mark()
	if a := b.AssessCell(c, w, mark); a.Verdict != plans.VerdictOK || len(a.Reasons) != 0 {
		t.Fatalf("an OOM of an earlier cell failed this one: %+v", a)
	}
	// A fallback describes the server: every cell it serves is invalid.
	w.Line(2, "stdout", "Falling back to diffusers backend")
	a := b.AssessCell(c, w, mark)
	if a.Verdict != plans.VerdictInvalid || len(a.Reasons) != 1 || a.Reasons[0].Code != string(FindingFallback) {
		t.Fatalf("fallback: %+v", a)
	}
	w.Line(3, "stderr", "scheduler is dead")
	a = b.AssessCell(c, w, mark)
	if a.Verdict != plans.VerdictFailed || len(a.Reasons) != 2 || a.Reasons[0].Code != string(FindingWorkerDead) {
		t.Fatalf("dead scheduler during the cell: %+v", a)
	}
	if f, ev, ok := w.Fatal(); !ok || f != string(FindingOOM) || ev.Line != 1 {
		t.Fatalf("Fatal = %q %+v %v", f, ev, ok)
	}
	c.Gate.DiffusersFallback = "warn"
	if a := b.AssessCell(c, w, w.Mark()); a.Verdict != plans.VerdictOK || len(a.Warnings) != 1 {
		t.Fatalf("fallback as a warning: %+v", a)
	}
}

func TestServeWindowAndCollect(t *testing.T) {
	b := ServeBackend{}
	c := serveCell()
	c.Profiler = plans.ProfilerTorch
	c.Backend.ExtraArgs = []string{"--num-gpus", "2"}
	// The diffusion server is profiled by a /start_profile window pointed at the cell, not by
	// per-request fields its images API ignores.
	w := b.Window(c, "/cell/traces")
	if w.Kind != backends.WindowStartStop || w.Start["output_dir"] != "/cell/traces" || !slices.Equal(w.Start["activities"].([]string), []string{"CPU", "GPU"}) || len(w.Start) != 2 {
		t.Fatalf("diffusion window %+v", w)
	}
	if b.Protocol(c).ProfileDoneLine != "" {
		t.Fatal("a refused diffusion /stop_profile must fail the cell, not wait for a line")
	}
	srv, cellDir := t.TempDir(), t.TempDir()
	kernel := `{"traceEvents":[{"ph":"X","cat":"kernel","name":"k"}]}`
	writeGz(t, filepath.Join(srv, "old-global-rank0.trace.json.gz"), kernel, false)
	writeGz(t, filepath.Join(cellDir, "1764000000-full_stages-global-rank0.trace.json.gz"), kernel, false)
	r := b.CollectTraces(c, backends.TraceDirs{Server: srv, Cell: cellDir, Before: map[string]bool{}})
	if len(r.Traces) != 1 || len(r.Reasons) != 1 || !strings.Contains(r.Reasons[0].Message, "1 rank(s) found, 2 expected") {
		t.Fatalf("one of two ranks: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(srv, "old-global-rank0.trace.json.gz")); err != nil {
		t.Fatal("a trace in the server's directory was moved")
	}
	writeGz(t, filepath.Join(cellDir, "1764000000-full_stages-global-rank1.trace.json.gz"), kernel, false)
	if r := b.CollectTraces(c, backends.TraceDirs{Server: srv, Cell: cellDir}); len(r.Traces) != 2 || len(r.Reasons) != 0 {
		t.Fatalf("both ranks: %+v", r)
	}
	c.Model, c.InputLen, c.OutputLen = "m", 8, 4
	w = b.Window(c, "/cell/traces")
	if w.Kind != backends.WindowStartStop || w.Start["output_dir"] != "/cell/traces" || b.Protocol(c).ProfileDoneLine != ProfileDoneLine {
		t.Fatalf("LLM window %+v", w)
	}
}

func TestServerLaunchAppendsTheChosenStrictPorts(t *testing.T) {
	b := ServeBackend{}
	c := serveCell()
	flags := b.PortFlags(c)
	if !slices.Equal(flags, []backends.PortFlag{{Flag: FlagSchedulerPort, Span: 1}, {Flag: FlagMasterPort, Span: 1}}) {
		t.Fatalf("port flags %v", flags)
	}
	site := backends.ServerSite{Command: []string{"sglang"}, Port: 30001, Ports: []int{41000, 41001}, Dir: t.TempDir(), TraceDir: t.TempDir(), Marker: "m"}
	l, err := b.ServerLaunch(c, site)
	if err != nil {
		t.Fatal(err)
	}
	tail := l.Argv[len(l.Argv)-4:]
	if !slices.Equal(tail, []string{FlagSchedulerPort, "41000", FlagMasterPort, "41001"}) {
		t.Fatalf("argv %v", l.Argv)
	}
	site.Ports = site.Ports[:1]
	if _, err := b.ServerLaunch(c, site); err == nil {
		t.Fatal("a port missing for a strict-mode flag must be refused, not left to the server")
	}
}

// TestWindowProfilerOptions: [profile] activities, with_stack, record_shapes and
// profile_stages reach the LLM body; the diffusion body takes all but profile_stages; unset
// options are not sent (the server's defaults apply).
func TestWindowProfilerOptions(t *testing.T) {
	b := ServeBackend{}
	no, yes := false, true
	c := serveCell()
	c.Profiler = plans.ProfilerTorch
	c.Profile.Activities, c.Profile.WithStack, c.Profile.RecordShapes, c.Profile.ProfileStages = []string{"GPU", "MEM"}, &no, &yes, []string{"decode"}
	d := b.Window(c, "/t").Start
	if !slices.Equal(d["activities"].([]string), []string{"GPU", "MEM"}) || d["with_stack"] != false || d["record_shapes"] != true || d["profile_stages"] != nil {
		t.Fatalf("diffusion body %v", d)
	}
	c.Model, c.InputLen, c.OutputLen = "m", 8, 4
	l := b.Window(c, "/t").Start
	if !slices.Equal(l["activities"].([]string), []string{"GPU", "MEM"}) || l["with_stack"] != false || l["record_shapes"] != true || !slices.Equal(l["profile_stages"].([]string), []string{"decode"}) {
		t.Fatalf("LLM body %v", l)
	}
	c.Profile = plans.Profile{StartStep: -1}
	l = StartProfileBody(c, "/t")
	if _, set := l["with_stack"]; set || !slices.Equal(l["activities"].([]string), []string{"CPU", "GPU"}) || l["profile_stages"] != nil {
		t.Fatalf("default LLM body %v", l)
	}
}

// ValidateCell holds sglang's nsys rules: an LLM server is captured only in the runner's
// window, so its nsys cells need a cudaProfilerApi capture range; a diffusion server runs in
// an nsys session and a generate cell under nsys whole, so they accept any range.
func TestValidateCell(t *testing.T) {
	const llmMsg = `profiler "nsys" for an LLM server (backend.mode = "serve", model_type = "llm") needs [nsys] capture_range = "cudaProfilerApi": the runner's /start_profile window then opens and closes the capture`
	llm := func(profiler, capture string) plans.Cell {
		c := serveCell()
		c.InputLen, c.OutputLen, c.Profiler, c.NSys.CaptureRange = 128, 16, profiler, capture
		return c
	}
	diffusion := serveCell()
	diffusion.Profiler = plans.ProfilerNsys
	generate := diffusion
	generate.Backend.Mode = Mode
	v2 := llm(plans.ProfilerTorch, "")
	v2.Backend.Env = map[string]string{"SGLANG_PROFILE_V2": "1"}
	v2none := v2
	v2none.Profiler = plans.ProfilerNone
	cases := []struct {
		name string
		be   backends.Backend
		c    plans.Cell
		want string
	}{
		{"llm nsys without range", NewServe(), llm(plans.ProfilerNsys, ""), llmMsg},
		{"llm nsys cudaProfilerApi", NewServe(), llm(plans.ProfilerNsys, plans.CaptureRangeCudaAPI), ""},
		{"llm torch", NewServe(), llm(plans.ProfilerTorch, ""), ""},
		{"diffusion nsys without range", NewServe(), diffusion, ""},
		{"generate nsys without range", New(), generate, ""},
		{"llm torch on the v2 profiler", NewServe(), v2, `backend.env sets SGLANG_PROFILE_V2 = "1": sglang's stage-based profiler then has no /stop_profile, which closes the runner's profiling window; drop the variable (the default profiler writes -EXTEND and -DECODE traces with profile_by_stage = true)`},
		{"llm unprofiled on the v2 profiler", NewServe(), v2none, ""},
	}
	for _, tc := range cases {
		err := tc.be.ValidateCell(tc.c)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("%s: ValidateCell = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// Both sglang backends ask backend.command's Python, check_env included.
func TestEnvProbes(t *testing.T) {
	c := serveCell()
	c.Backend.Command = []string{"/venv/bin/python", "-m", "sglang.launch_server"}
	for _, be := range []backends.Backend{New(), NewServe()} {
		got := be.EnvProbes(c)
		if !slices.Equal(got.Command, c.Backend.Command) || !got.CheckEnv {
			t.Errorf("%T: EnvProbes = %+v", be, got)
		}
	}
}
