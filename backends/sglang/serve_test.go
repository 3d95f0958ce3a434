package sglang

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
)

func serveCell() plans.Cell {
	c := plans.Cell{ID: "000-x", Model: "Qwen/Qwen-Image", Prompt: "a cat", Resolution: plans.Resolution{Width: 512, Height: 512}, Steps: 8}
	c.Backend = plans.Backend{Kind: "sglang", Mode: ModeServe, Command: []string{"sglang"}, ExtraArgs: []string{"--num-gpus", "1"}, Env: map[string]string{"A": "1"}}
	return c
}

func TestServerCommandDiffusion(t *testing.T) {
	l, err := ServerCommand(serveCell(), 31000, "/run/servers/1", "/run/servers/1/traces", "/run#server-1")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"sglang", "serve", "--model-type", "diffusion", "--model-path", "Qwen/Qwen-Image", "--host", "127.0.0.1", "--port", "31000", "--strict-ports", "--num-gpus", "1"}
	if d := cmp.Diff(want, l.Argv); d != "" {
		t.Fatalf("argv (-want +got):\n%s", d)
	}
	if l.Env[EnvDiffusionProfilerDir] != "/run/servers/1/traces" || l.Env[EnvProfilerDir] != "/run/servers/1/traces" || l.Env[EnvServerMarker] != "/run#server-1" || l.Env["A"] != "1" || l.Dir != "/run/servers/1" {
		t.Fatalf("launch %+v", l)
	}
	// Sampling parameters never reach the server's argv: they go into requests.
	if slices.Contains(l.Argv, "--prompt") || slices.Contains(l.Argv, "--width") {
		t.Fatalf("sampling flags in server argv: %v", l.Argv)
	}
}

func TestServerCommandLLM(t *testing.T) {
	c := serveCell()
	c.Model, c.InputLen, c.OutputLen, c.Backend.ExtraArgs = "meta-llama/Llama-3.1-8B-Instruct", 128, 16, nil
	l, err := ServerCommand(c, 31000, "/d", "/d/t", "m")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(l.Argv, " "); got != "sglang serve --model-type llm --model-path meta-llama/Llama-3.1-8B-Instruct --host 127.0.0.1 --port 31000" {
		t.Fatalf("argv %s", got)
	}
	c.Backend.Command = []string{"/venv/bin/python", "-m", "sglang.launch_server"}
	l, _ = ServerCommand(c, 31000, "/d", "/d/t", "m")
	if got := strings.Join(l.Argv, " "); got != "/venv/bin/python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --host 127.0.0.1 --port 31000" {
		t.Fatalf("launch_server argv %s", got)
	}
	d := serveCell()
	d.Backend.Command = c.Backend.Command
	if _, err := ServerCommand(d, 31000, "/d", "/d/t", "m"); err == nil || !strings.Contains(err.Error(), "LLMs only") {
		t.Fatalf("diffusion through launch_server: %v", err)
	}
}

func TestServerCommandErrors(t *testing.T) {
	for name, mut := range map[string]func(*plans.Cell){
		"no command":   func(c *plans.Cell) { c.Backend.Command = nil },
		"no model":     func(c *plans.Cell) { c.Model = "" },
		"bad type":     func(c *plans.Cell) { c.Backend.ModelType = "audio" },
		"port too big": func(c *plans.Cell) { c.Backend.Port = 70000 },
	} {
		c := serveCell()
		mut(&c)
		port := 31000
		if c.Backend.Port != 0 {
			port = c.Backend.Port
		}
		if _, err := ServerCommand(c, port, "/d", "/d/t", "m"); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestServerKey(t *testing.T) {
	a, b := serveCell(), serveCell()
	b.Resolution, b.Steps, b.Seed, b.Prompt, b.Profiler = plans.Resolution{Width: 1024, Height: 1024}, 50, 7, "a dog", plans.ProfilerTorch
	if ServerKey(a) != ServerKey(b) {
		t.Fatal("request-only differences changed the server key")
	}
	for name, mut := range map[string]func(*plans.Cell){
		"model": func(c *plans.Cell) { c.Model = "black-forest-labs/FLUX.1-dev" },
		"args":  func(c *plans.Cell) { c.Backend.ExtraArgs = []string{"--num-gpus", "2"} },
		"env":   func(c *plans.Cell) { c.Backend.Env = map[string]string{"A": "2"} },
		"type":  func(c *plans.Cell) { c.Backend.ModelType = ModelTypeLLM },
	} {
		c := serveCell()
		mut(&c)
		if ServerKey(c) == ServerKey(a) {
			t.Errorf("%s: same server key", name)
		}
	}
}

func TestServeAssessGates(t *testing.T) {
	w := NewWatcher()
	w.Line(1, "stderr", "Model acme/x is not in sglang's native registry. Falling back to diffusers backend.")
	c := serveCell()
	a := ServeBackend{}.Assess(c, "", w, rundir.Exit{})
	if a.Verdict != plans.VerdictInvalid || a.Reasons[0].Code != string(FindingFallback) || a.Reasons[0].Lines[0].Line != 1 {
		t.Fatalf("fallback: %+v", a)
	}
	c.Gate.DiffusersFallback = "warn"
	if a := (ServeBackend{}).Assess(c, "", w, rundir.Exit{}); a.Verdict != plans.VerdictOK || len(a.Warnings) != 1 {
		t.Fatalf("fallback as warning: %+v", a)
	}
	w.Line(2, "stderr", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
	if a := (ServeBackend{}).Assess(c, "", w, rundir.Exit{}); a.Verdict != plans.VerdictFailed || a.Reasons[0].Code != string(FindingOOM) {
		t.Fatalf("oom: %+v", a)
	}
}

func TestServeLaunchDescribesPlaceholders(t *testing.T) {
	dir := t.TempDir()
	l, err := ServeBackend{}.Launch(serveCell(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(l.Argv, PortPlaceholder) || strings.Contains(l.Env[EnvProfilerDir], dir) {
		t.Fatalf("launch %+v", l)
	}
	c := serveCell()
	c.Backend.Port = 30123
	l, _ = ServeBackend{}.Launch(c, dir)
	if !slices.Contains(l.Argv, "30123") {
		t.Fatalf("fixed port not shown: %v", l.Argv)
	}
}
