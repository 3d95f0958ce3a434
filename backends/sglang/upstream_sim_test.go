package sglang_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/backends/sglang"
	"github.com/sglprof/runner/backends/sim"
	"github.com/sglprof/runner/backends/simclock"
	"github.com/sglprof/runner/plans"
)

// syncBuf is a log buffer the simulated server writes while the test reads it.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// simServer starts the simulated server of cell c in-process with the launch the serve
// backend builds (argv, environment) and returns its base URL and log.
func simServer(t *testing.T, c plans.Cell) (string, *syncBuf) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir := t.TempDir()
	var ports []int
	for range sglang.StrictPorts(c) {
		l2, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, l2.Addr().(*net.TCPAddr).Port)
		l2.Close()
	}
	l, err := sglang.ServeBackend{}.ServerLaunch(c, backends.ServerSite{Command: c.Backend.Command, Port: port, Ports: ports, Dir: dir, TraceDir: filepath.Join(dir, "traces")})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{simclock.EnvTimeScale: "0"}
	for k, v := range l.Env {
		env[k] = v
	}
	t.Chdir(dir)
	ctx, cancel := context.WithCancel(context.Background())
	log := &syncBuf{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sim.SGLang(ctx, l.Argv[1:], env, log, log)
	}()
	t.Cleanup(func() { cancel(); <-done })
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	for deadline := time.Now().Add(20 * time.Second); ; {
		if r, err := http.Get(base + "/health"); err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				return base, log
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("simulated server not ready; log:\n%s", log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// post sends body as JSON and returns the status and answer.
func post(t *testing.T, url string, body any) (int, string) {
	t.Helper()
	b, _ := json.Marshal(body)
	r, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	out, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(out)
}

func gunzip(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(zr)
	return string(b)
}

// TestDiffusionWithStackFalseReachesTheServer: upstream's diffusion /start_profile takes
// with_stack = obj.with_stack or SGLANG_PROFILE_WITH_STACK (default true), so [profile]
// with_stack = false must reach the server's environment; the trace of the window then has
// no Python stack events.
func TestDiffusionWithStackFalseReachesTheServer(t *testing.T) {
	no := false
	c := plans.Cell{ID: "000-x", Model: "Qwen/Qwen-Image", Prompt: "a cat", Resolution: plans.Resolution{Width: 256, Height: 256}, Steps: 2, Profiler: plans.ProfilerTorch,
		Backend: plans.Backend{Kind: "sglang", Mode: sglang.ModeServe, Command: []string{"sglang"}}, Profile: plans.Profile{WithStack: &no, RecordShapes: &no}}
	base, log := simServer(t, c)
	traces := t.TempDir()
	w := sglang.ServeBackend{}.Window(c, traces)
	if code, b := post(t, base+"/start_profile", w.Start); code != 200 {
		t.Fatalf("start %d %s", code, b)
	}
	if code, b := post(t, base+"/v1/images/generations", map[string]any{"prompt": "a cat", "size": "256x256", "num_inference_steps": 2}); code != 200 {
		t.Fatalf("image %d %s", code, b)
	}
	if code, b := post(t, base+"/stop_profile", nil); code != 200 {
		t.Fatalf("stop %d %s", code, b)
	}
	m, _ := filepath.Glob(filepath.Join(traces, "*-global-rank0.trace.json.gz"))
	if len(m) != 1 {
		t.Fatalf("traces %v; log:\n%s", m, log.String())
	}
	if strings.Contains(gunzip(t, m[0]), "python_function") || !strings.Contains(log.String(), "with_stack=false record_shapes=false") {
		t.Fatalf("with_stack = false did not turn stacks off; log:\n%s", log.String())
	}
}

// TestMergingWindowGetsAMergedTrace: upstream's ProfileMerger globs
// "<profile_id>*.trace.json.gz", so a window that merges must not name its traces with a
// profile_prefix; against the simulator (which globs as upstream does) the merged trace is
// then written next to the per-rank one.
func TestMergingWindowGetsAMergedTrace(t *testing.T) {
	c := plans.Cell{ID: "000-m", Model: "m", Prompt: "hi", InputLen: 8, OutputLen: 4, Profiler: plans.ProfilerTorch,
		Backend: plans.Backend{Kind: "sglang", Mode: sglang.ModeServe, Command: []string{"sglang"}, ModelType: sglang.ModelTypeLLM},
		Profile: plans.Profile{StartStep: -1, MergeProfiles: true}}
	base, log := simServer(t, c)
	traces := t.TempDir()
	if code, b := post(t, base+"/start_profile", sglang.ServeBackend{}.Window(c, traces).Start); code != 200 {
		t.Fatalf("start %d %s", code, b)
	}
	post(t, base+"/generate", map[string]any{"text": "hi", "sampling_params": map[string]any{"max_new_tokens": 4}})
	if code, b := post(t, base+"/stop_profile", nil); code != 200 {
		t.Fatalf("stop %d %s", code, b)
	}
	if m, _ := filepath.Glob(filepath.Join(traces, "merged-*.trace.json.gz")); len(m) != 1 {
		t.Fatalf("no merged trace; log:\n%s", log.String())
	}
	// Without merging, the prefix still names the traces after the cell.
	c.Profile.MergeProfiles = false
	if b := sglang.StartProfileBody(c, traces); b["profile_prefix"] != c.ID {
		t.Fatalf("body %v", b)
	}
}

// TestLLMLauncherFromServeHelp: the LLM launcher follows what the installed `sglang serve
// --help` says. The simulator's help (newer SGLang, cli/serve.py with the backend registry)
// names --model-type, so `sglang serve --model-type llm` is kept; the older cli/serve.py's help
// (no override) or a failed probe select `python -m sglang.launch_server`, whose argv the
// simulated launch_server accepts.
func TestLLMLauncherFromServeHelp(t *testing.T) {
	c := plans.Cell{ID: "000-m", Model: "meta-llama/Llama-3.1-8B-Instruct", InputLen: 8, OutputLen: 4,
		Backend: plans.Backend{Kind: "sglang", Mode: sglang.ModeServe, Command: []string{"sglang"}, ModelType: sglang.ModelTypeLLM}}
	if !sglang.NeedsLauncherProbe(c, c.Backend.Command) {
		t.Fatal("an LLM cell on the sglang script needs the probe")
	}
	var help bytes.Buffer
	sim.SGLang(context.Background(), sglang.ServeHelpArgs, map[string]string{}, &help, &help)
	if argv, note := sglang.LLMLauncher(c.Backend.Command, help.String(), nil, "/venv/bin/python"); !slices.Equal(argv, []string{"sglang"}) || !strings.Contains(note, "--model-type llm") {
		t.Fatalf("newer sglang: %v %q", argv, note)
	}
	// cli/serve.py before the backend registry: general usage, then the two servers' help.
	old := "Usage: sglang serve --model-path <model-name-or-path> [additional-arguments]\n\nThis command can launch either a standard language model server or a diffusion model server.\nThe server type is determined by the model path.\n"
	argv, note := sglang.LLMLauncher(c.Backend.Command, old, nil, "/venv/bin/python")
	if !slices.Equal(argv, []string{"/venv/bin/python", "-m", "sglang.launch_server"}) || !strings.Contains(note, "does not mention --model-type") {
		t.Fatalf("older sglang: %v %q", argv, note)
	}
	if argv, note := sglang.LLMLauncher(c.Backend.Command, "", errors.New("exit status 1"), ""); argv[0] != "python3" || !strings.Contains(note, "failed (exit status 1)") {
		t.Fatalf("failed probe: %v %q", argv, note)
	}
	// The launch_server command makes an argv without serve/--model-type that the simulated
	// `python -m sglang.launch_server` serves.
	c.Backend.Command = argv
	if sglang.NeedsLauncherProbe(c, argv) {
		t.Fatal("launch_server needs no probe")
	}
	base, log := simServer(t, c)
	if code, b := post(t, base+"/generate", map[string]any{"text": "hi", "sampling_params": map[string]any{"max_new_tokens": 2}}); code != 200 {
		t.Fatalf("generate %d %s\n%s", code, b, log.String())
	}
}
