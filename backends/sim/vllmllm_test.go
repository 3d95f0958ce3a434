package sim

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startVLLM runs the simulated vLLM LLM server in-process until the test ends.
func startVLLM(t *testing.T, env map[string]string, args ...string) *simServer {
	t.Helper()
	port := freeTestPort(t)
	ctx, cancel := context.WithCancel(context.Background())
	s := &simServer{base: "http://127.0.0.1:" + strconv.Itoa(port), port: port, log: &lockedBuf{}, cancel: cancel, rc: make(chan int, 1)}
	args = append(args, "--port", strconv.Itoa(port))
	go func() { s.rc <- vllmLLMMain(ctx, args, env, io.Discard, s.log) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.rc:
		case <-time.After(10 * time.Second):
			t.Error("server did not stop")
		}
	})
	return s
}

// TestVLLMLLMServer: the simulated `vllm serve` answers the OpenAI APIs, has no SGLang
// /generate, registers the profiler routes only with --profiler-config, and writes one trace
// per tensor-parallel worker (rank-suffixed names) plus the frontend's on /stop_profile.
func TestVLLMLLMServer(t *testing.T) {
	env := baseEnv(t)
	env["CUDA_VISIBLE_DEVICES"] = "0,1"
	plain := startVLLM(t, env, "serve", "m/M")
	plain.waitLog(t, "Application startup complete.")
	if code, _ := postJSON(t, plain.base+"/generate", map[string]any{"input_ids": []int{1}}); code != 404 {
		t.Errorf("/generate: %d, want 404 (vLLM has no SGLang native API)", code)
	}
	if code, _ := postJSON(t, plain.base+"/start_profile", map[string]any{}); code != 404 {
		t.Errorf("/start_profile without --profiler-config: %d, want 404", code)
	}
	code, body := postJSON(t, plain.base+"/v1/completions", map[string]any{"model": "m/M", "prompt": []int{1, 2, 3}, "max_tokens": 3})
	if code != 200 || !strings.Contains(string(body), `"completion_tokens":3`) {
		t.Errorf("/v1/completions: %d %s", code, body)
	}
	if _, body := getBody(t, plain.base+"/v1/models"); !strings.Contains(string(body), `"owned_by":"vllm"`) {
		t.Errorf("/v1/models: %s", body)
	}

	dir := t.TempDir()
	prof := startVLLM(t, env, "serve", "m/M", "--tensor-parallel-size", "2",
		"--profiler-config", `{"profiler":"torch","torch_profiler_dir":"`+dir+`"}`)
	prof.waitLog(t, "Application startup complete.")
	if code, _ := postJSON(t, prof.base+"/start_profile", nil); code != 200 {
		t.Fatalf("/start_profile: %d", code)
	}
	postJSON(t, prof.base+"/v1/completions", map[string]any{"model": "m/M", "prompt": []int{1, 2}, "max_tokens": 4})
	if code, _ := postJSON(t, prof.base+"/stop_profile", nil); code != 200 {
		t.Fatalf("/stop_profile: %d", code)
	}
	names, _ := filepath.Glob(filepath.Join(dir, "*.pt.trace.json.gz"))
	var ranks, frontend int
	for _, n := range names {
		b := filepath.Base(n)
		switch {
		case strings.HasPrefix(b, "dp0_pp0_tp0_dcp0_ep0_rank0."), strings.HasPrefix(b, "dp0_pp0_tp1_dcp0_ep0_rank1."):
			ranks++
		case strings.Contains(b, ".async_llm."):
			frontend++
		}
	}
	if ranks != 2 || frontend != 1 {
		t.Errorf("traces %v: want 2 worker traces and 1 frontend trace", names)
	}
}

// TestVLLMLLMStartFailures: an unknown flag is argparse's usage error (exit 2), and a CUDA OOM
// while the engine starts ends with the API server's engine-core line (exit 1).
func TestVLLMLLMStartFailures(t *testing.T) {
	var stderr bytes.Buffer
	if rc := vllmLLMMain(context.Background(), []string{"serve", "m/M", "--tp-size", "2"}, baseEnv(t), io.Discard, &stderr); rc != 2 ||
		!strings.Contains(stderr.String(), "error: unrecognized arguments: --tp-size 2") {
		t.Errorf("rc %d, stderr %s", rc, stderr.String())
	}
	env := baseEnv(t)
	env["RUNNER_SIM_FAIL"] = "oom"
	stderr.Reset()
	rc := vllmLLMMain(context.Background(), []string{"serve", "m/M", "--port", strconv.Itoa(freeTestPort(t))}, env, io.Discard, &stderr)
	if rc != 1 || !strings.Contains(stderr.String(), "CUDA out of memory") || !strings.Contains(stderr.String(), "Engine core initialization failed") {
		t.Errorf("rc %d, stderr %s", rc, stderr.String())
	}
}

// FuzzParseVLLMLLMArgs: any command line is parsed or refused with argparse's message, never a
// panic; a refusal prints to stderr.
func FuzzParseVLLMLLMArgs(f *testing.F) {
	f.Add("serve", "m/M", "--tensor-parallel-size=2")
	f.Add("serve", "m", "--no-enable-prefix-caching")
	f.Add("serve", "-x", "--profiler-config")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		var stderr bytes.Buffer
		if _, ok := parseVLLMLLMArgs([]string{a, b, c}, &stderr); !ok && stderr.Len() == 0 {
			t.Errorf("refused %q without a message", []string{a, b, c})
		}
	})
}
