package vllmomni

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sglprof/runner/plans"
)

func cell(profiler string) plans.Cell {
	c := plans.Cell{ID: "001-x", Model: "Qwen/Qwen-Image", Profiler: profiler}
	c.Backend = plans.Backend{Kind: Kind, Mode: "serve", Command: []string{"sglang"}, ExtraArgs: []string{"--enforce-eager"}}
	return c
}

func TestServerCommand(t *testing.T) {
	c := cell(plans.ProfilerTorch)
	l, err := ServerCommand(c, Command(c), 8091, "/run/servers/1", "/run/servers/1/traces", "mark")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(l.Argv[:8], " ")
	if got != "vllm serve Qwen/Qwen-Image --omni --host 127.0.0.1 --port 8091" || l.Argv[8] != "--profiler-config" || l.Argv[10] != "--enforce-eager" {
		t.Fatalf("argv %q", l.Argv)
	}
	var pc map[string]any
	if err := json.Unmarshal([]byte(l.Argv[9]), &pc); err != nil {
		t.Fatal(err)
	}
	if pc["profiler"] != "torch" || pc["torch_profiler_dir"] != "/run/servers/1/traces" || pc["torch_profiler_use_gzip"] != true {
		t.Fatalf("profiler config %v", pc)
	}
	n := cell(plans.ProfilerNone)
	l, _ = ServerCommand(n, []string{"/venv/bin/vllm"}, 8091, "/d", "/d/t", "m")
	if strings.Contains(strings.Join(l.Argv, " "), "--profiler-config") || l.Argv[0] != "/venv/bin/vllm" {
		t.Fatalf("unprofiled argv %q", l.Argv)
	}
	if _, err := ProfilerConfig(c, "relative/dir"); err == nil {
		t.Fatal("relative torch_profiler_dir accepted")
	}
	if ServerKey(c) == ServerKey(n) {
		t.Fatal("torch and unprofiled cells share a server, but the profiler is a server argument")
	}
}

func gz(t *testing.T, body []byte, complete bool) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write(body)
	if complete {
		zw.Close()
	} else {
		zw.Flush()
	}
	return b.Bytes()
}

func TestCompleteWaitsForBackgroundGzip(t *testing.T) {
	root := t.TempDir()
	sess := filepath.Join(root, "20260101-120000_001-x")
	os.MkdirAll(sess, 0o755)
	body := []byte(`{"traceEvents":[{"cat":"kernel"}]}`)
	os.WriteFile(filepath.Join(sess, "trace_rank0.json"), body, 0o644)
	ss := Sessions(root, nil)
	if ok, _ := Complete(ss[0], true); ok {
		t.Fatal("a .json before gzip counts as complete")
	}
	// gzip is running: the .gz exists (partial) and the .json is still there.
	os.WriteFile(filepath.Join(sess, "trace_rank0.json.gz"), gz(t, body, false), 0o644)
	if ok, _ := Complete(Sessions(root, nil)[0], true); ok {
		t.Fatal("a .gz beside its .json counts as complete")
	}
	// gzip finished writing but the .gz is truncated: an error.
	os.Remove(filepath.Join(sess, "trace_rank0.json"))
	if ok, err := Complete(Sessions(root, nil)[0], true); ok || err == nil {
		t.Fatalf("truncated .gz: ok %v err %v", ok, err)
	}
	os.WriteFile(filepath.Join(sess, "trace_rank0.json.gz"), gz(t, body, true), 0o644)
	if ok, err := Complete(Sessions(root, nil)[0], true); !ok || err != nil {
		t.Fatalf("finished gzip: ok %v err %v", ok, err)
	}
	// Sessions already there before the window are skipped.
	if ss := Sessions(root, SessionNames(root)); len(ss) != 0 {
		t.Fatalf("skip ignored: %v", ss)
	}
}

func TestWaitSessions(t *testing.T) {
	root := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := WaitSessions(ctx, root, nil, 5*time.Millisecond); err == nil || !strings.Contains(err.Error(), "no profiling session") {
		t.Fatalf("empty dir: %v", err)
	}
	sess := filepath.Join(root, "20260101-120000_p")
	os.MkdirAll(sess, 0o755)
	body := []byte(`{"traceEvents":[]}`)
	os.WriteFile(filepath.Join(sess, "trace_rank0.json"), body, 0o644)
	go func() {
		time.Sleep(30 * time.Millisecond)
		os.WriteFile(filepath.Join(sess, "trace_rank0.json.gz"), gz(t, body, true), 0o644)
		os.Remove(filepath.Join(sess, "trace_rank0.json"))
	}()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	ss, err := WaitSessions(ctx2, root, nil, 5*time.Millisecond)
	if err != nil || len(ss) != 1 || len(ss[0].Traces) != 1 || !strings.HasSuffix(ss[0].Traces[0], "trace_rank0.json.gz") {
		t.Fatalf("sessions %v err %v", ss, err)
	}
}

// TestProfilerConfigOptions: with_stack and record_shapes map to vLLM's torch_profiler_*
// names, and [profile.vllm_profiler_config] keys are merged in.
func TestProfilerConfigOptions(t *testing.T) {
	c := cell(plans.ProfilerTorch)
	no, yes, two := false, true, 2
	c.Profile.WithStack, c.Profile.RecordShapes = &no, &yes
	c.Profile.VLLM.UseGzip, c.Profile.VLLM.DelayIterations = &no, &two
	s, err := ProfilerConfig(c, "/abs")
	if err != nil {
		t.Fatal(err)
	}
	var pc map[string]any
	if err := json.Unmarshal([]byte(s), &pc); err != nil {
		t.Fatal(err)
	}
	if pc["torch_profiler_with_stack"] != false || pc["torch_profiler_record_shapes"] != true || pc["torch_profiler_use_gzip"] != false || pc["delay_iterations"] != 2.0 || len(pc) != 6 {
		t.Fatalf("profiler config %v", pc)
	}
}
