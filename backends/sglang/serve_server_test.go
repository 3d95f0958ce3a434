package sglang

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/plans"
)

func TestExpectedRanks(t *testing.T) {
	c := plans.Cell{}
	c.Backend.ExtraArgs = []string{"--tp-size", "4", "--num-gpus=2"}
	if n := ExpectedRanks(c, true); n != 4 {
		t.Fatalf("llm ranks %d", n)
	}
	if n := ExpectedRanks(c, false); n != 2 {
		t.Fatalf("diffusion ranks %d", n)
	}
	if n := ExpectedRanks(plans.Cell{}, true); n != 1 {
		t.Fatalf("default ranks %d", n)
	}
}

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
	if w := b.Window(c, "/t"); w.Kind != backends.WindowPerRequest || w.Start != nil {
		t.Fatalf("diffusion window %+v", w)
	}
	srv, cellDir := t.TempDir(), t.TempDir()
	kernel := `{"traceEvents":[{"ph":"X","cat":"kernel","name":"k"}]}`
	writeGz(t, filepath.Join(srv, "old-global-rank0.trace.json.gz"), kernel, false)
	writeGz(t, filepath.Join(srv, "req-1-global-rank0.trace.json.gz"), kernel, false)
	writeGz(t, filepath.Join(srv, "stray-global-rank0.trace.json.gz"), kernel, false)
	r := b.CollectTraces(c, backends.TraceDirs{Server: srv, Cell: cellDir, Before: map[string]bool{"old-global-rank0.trace.json.gz": true}, ResponseIDs: []string{"req-1"}})
	if len(r.Traces) != 2 || len(r.Reasons) != 0 || len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0].Message, "stray-global-rank0") {
		t.Fatalf("report %+v", r)
	}
	if _, err := os.Stat(filepath.Join(srv, "old-global-rank0.trace.json.gz")); err != nil {
		t.Fatal("a trace from before the window was moved")
	}
	c.Model, c.InputLen, c.OutputLen = "m", 8, 4
	w := b.Window(c, "/cell/traces")
	if w.Kind != backends.WindowStartStop || w.Start["output_dir"] != "/cell/traces" || b.Protocol(c).ProfileDoneLine != ProfileDoneLine {
		t.Fatalf("LLM window %+v", w)
	}
}
