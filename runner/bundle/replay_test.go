package bundle

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/exitcode"
)

const fallbackPlan = `name = "fallback"
[matrix]
model = ["acme/unknown-model", "Qwen/Qwen-Image"]
prompt = ["a cat"]
num_inference_steps = [3]
`

// bundleOf runs body under the simulators with env and bundles the run.
func bundleOf(t *testing.T, body string, env []string) string {
	t.Helper()
	run := simRun(t, body, env)
	out := filepath.Join(t.TempDir(), "b.tar.gz")
	if _, err := Create(context.Background(), run, Options{Output: out}); err != nil {
		t.Fatal(err)
	}
	return out
}

func replayOpts(t *testing.T, out *bytes.Buffer, env ...string) ReplayOptions {
	o := simOptions(t, env)
	return ReplayOptions{Output: filepath.Join(t.TempDir(), "replay"), Simulate: true, Exe: o.Exe, Env: o.Env, Out: out}
}

func TestReplayReproducesFallback(t *testing.T) {
	b := bundleOf(t, fallbackPlan, nil)
	var out bytes.Buffer
	opts := replayOpts(t, &out)
	res, err := Replay(context.Background(), b, opts)
	if err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{
		"000-unknown-model-default-s0-none-r1: reproduced: invalid (diffusers-fallback)",
		"001-qwen-image-default-s0-none-r1: reproduced: ok",
		"environment: this machine matches the bundle's",
		"runner compare, bundle (base) vs replay (new):",
		"no regression",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if res.ExitCode != ExitReproduced {
		t.Errorf("exit %d, want 0", res.ExitCode)
	}
	if !strings.HasPrefix(res.RunDir, filepath.Join(opts.Output, "runs")) {
		t.Errorf("run directory %s is not under the replay directory", res.RunDir)
	}
	for _, c := range res.Cells {
		if len(c.ArgvDiff) > 0 {
			t.Errorf("%s: argv differs: %v", c.ID, c.ArgvDiff)
		}
	}
	// --cells restricts the replay; an unknown cell is a usage error naming the bundled ones.
	out.Reset()
	opts = replayOpts(t, &out)
	opts.Cells = []string{"000-unknown-model-default-s0-none-r1"}
	res, err = Replay(context.Background(), b, opts)
	if err != nil || len(res.Cells) != 1 {
		t.Fatalf("--cells: %v %+v", err, res)
	}
	if globs, _ := filepath.Glob(filepath.Join(res.RunDir, "cells", "*")); len(globs) != 1 {
		t.Errorf("--cells ran %d cells", len(globs))
	}
	opts = replayOpts(t, &out)
	opts.Cells = []string{"009-nope"}
	_, err = Replay(context.Background(), b, opts)
	var ue *exitcode.UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "the bundle has no cell 009-nope; it has: 000-unknown-model-default-s0-none-r1, 001-qwen-image-default-s0-none-r1") {
		t.Errorf("err = %v", err)
	}
}

func TestReplayNotReproduced(t *testing.T) {
	// The original run crashed through a simulator knob the bundle does not carry: the replay
	// runs fine, so the verdict does not reproduce.
	b := bundleOf(t, `name = "crash"
[matrix]
model = ["Qwen/Qwen-Image"]
prompt = ["a cat"]
num_inference_steps = [3]
`, []string{"RUNNER_SIM_FAIL=crash"})
	var out bytes.Buffer
	res, err := Replay(context.Background(), b, replayOpts(t, &out))
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != ExitVerdictDiffers || !strings.Contains(out.String(), "000-qwen-image-default-s0-none-r1: not reproduced: bundle failed (") || !strings.Contains(out.String(), "replay ok") {
		t.Errorf("exit %d:\n%s", res.ExitCode, out.String())
	}
	// A slower original: same verdict, timings beyond tolerance.
	b = bundleOf(t, `name = "slow"
[matrix]
model = ["Qwen/Qwen-Image"]
prompt = ["a cat"]
num_inference_steps = [3]
`, []string{"RUNNER_SIM_SLOWDOWN=DenoisingStage=2"})
	out.Reset()
	res, err = Replay(context.Background(), b, replayOpts(t, &out))
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != ExitMetricsDiffer || !strings.Contains(out.String(), "verdict reproduced (ok), timings did not") || !strings.Contains(out.String(), "(beyond ") {
		t.Errorf("exit %d:\n%s", res.ExitCode, out.String())
	}
}

func TestReplaySecretsAndEnvironment(t *testing.T) {
	b := bundleOf(t, secretPlan, secretEnv())
	var out bytes.Buffer
	opts := replayOpts(t, &out, "HF_TOKEN=hf_fromthismachine", "SGLANG_EXTRA_FLAG=here")
	// The plan's [backend.env] is kept only by a replay that lists it and is told to run it
	// (--simulate drops it).
	opts.Simulate, opts.Yes = false, true
	res, err := Replay(context.Background(), b, opts)
	if err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{
		"secrets: HF_TOKEN redacted in the bundle, taken from this environment",
		"DB_PASSWORD",
		"not set in this environment",
		"$SGLANG_EXTRA_FLAG",
		"reproduced: invalid (diffusers-fallback)",
		"its argv holds a redacted value",
		"  HF_TOKEN=<redacted>\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	for _, sec := range allSecrets() {
		if strings.Contains(s, sec) {
			t.Errorf("replay printed the secret %q", sec)
		}
	}
	_ = res
}

func TestWriteSecrets(t *testing.T) {
	p, err := plans.Parse("plan.toml", []byte(`name = "s"
[backend]
env = { HF_TOKEN = "<redacted>", DB_PASSWORD = "<redacted>", KEEP = "1" }
[matrix]
model = ["m"]
prompt = ["p"]
`))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	writeSecrets(&out, p, &rundir.Manifest{}, Metadata{}, []string{"HF_TOKEN=real"})
	if p.Backend.Env["HF_TOKEN"] != "real" {
		t.Errorf("HF_TOKEN = %q, want the value of this environment", p.Backend.Env["HF_TOKEN"])
	}
	if _, ok := p.Backend.Env["DB_PASSWORD"]; ok {
		t.Error("a secret missing here is passed on as the redaction marker")
	}
	if p.Backend.Env["KEEP"] != "1" {
		t.Error("a plain variable was touched")
	}
	if !strings.Contains(out.String(), "DB_PASSWORD redacted in the bundle and not set in this environment") {
		t.Errorf("output: %s", out.String())
	}
}

func TestDiffManifests(t *testing.T) {
	a := &rundir.Manifest{
		Runner: rundir.RunnerInfo{Version: "v1.0.0"},
		GPUs:   []rundir.GPUInfo{{Name: "NVIDIA H100 80GB HBM3", Driver: "550.54.15", MemoryMiB: "81559 MiB"}},
		Probes: map[string]rundir.Probe{
			"nvcc":   {Available: true, Output: "Cuda compilation tools, release 12.4, V12.4.131"},
			"sglang": {Available: true, Output: "sglang version: 0.5.9\ngit revision: abc"},
		},
		Env: map[string]string{"CUDA_VISIBLE_DEVICES": "0", "HF_TOKEN": Redacted, "NCCL_DEBUG": "INFO"},
	}
	b := &rundir.Manifest{
		Runner: rundir.RunnerInfo{Version: "v1.0.0"},
		GPUs:   []rundir.GPUInfo{{Name: "NVIDIA H200", Driver: "550.54.15", MemoryMiB: "143771 MiB"}},
		Probes: map[string]rundir.Probe{
			"nvcc":   {Available: true, Output: "Cuda compilation tools, release 12.8, V12.8.61"},
			"sglang": {Available: true, Output: "sglang version: 0.5.9\ngit revision: abc"},
		},
		Env: map[string]string{"CUDA_VISIBLE_DEVICES": "0", "HF_TOKEN": "hf_real", "SGLANG_X": "1"},
	}
	got := map[string][2]string{}
	for _, d := range DiffManifests(a, b) {
		got[d.Name] = [2]string{d.Bundle, d.Here}
	}
	want := map[string][2]string{
		"GPU":         {"1× NVIDIA H100 80GB HBM3", "1× NVIDIA H200"},
		"GPU memory":  {"81559 MiB", "143771 MiB"},
		"CUDA":        {"nvcc 12.4 (V12.4.131)", "nvcc 12.8 (V12.8.61)"},
		"$NCCL_DEBUG": {"INFO", "(unset)"},
		"$SGLANG_X":   {"(unset)", "1"},
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %v, want %v", k, got[k], v)
		}
	}
	for _, k := range []string{"Driver", "sglang", "runner", "$CUDA_VISIBLE_DEVICES", "$HF_TOKEN"} {
		if _, ok := got[k]; ok {
			t.Errorf("%s reported as different: %v", k, got[k])
		}
	}
	var out bytes.Buffer
	WriteDiff(&out, DiffManifests(a, b))
	if !strings.Contains(out.String(), "environment: 5 differences") || strings.Contains(out.String(), "hf_real") {
		t.Errorf("diff output:\n%s", out.String())
	}
}

func TestReplayRefusesBadBundles(t *testing.T) {
	dir := t.TempDir()
	notBundle := filepath.Join(dir, "x.tar.gz")
	os.WriteFile(notBundle, makeTarGz(t, []tarEntry{reg("hello.txt", "hi")}), 0o644)
	evil := filepath.Join(dir, "evil.tar.gz")
	os.WriteFile(evil, makeTarGz(t, []tarEntry{reg("../escape.txt", "x")}), 0o644)
	for _, tc := range []struct{ file, want string }{
		{notBundle, "is this a bundle written by `runner bundle`?"},
		{evil, `refusing the bundle: entry "../escape.txt" has a ".." component`},
		{filepath.Join(dir, "missing.tar.gz"), "no such file"},
	} {
		var out bytes.Buffer
		opts := replayOpts(t, &out)
		_, err := Replay(context.Background(), tc.file, opts)
		var ue *exitcode.UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want a usage error containing %q", filepath.Base(tc.file), err, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "escape.txt")); err == nil {
		t.Error("the evil bundle wrote outside its target")
	}
}

// The replay's comparison selects cells as runner compare does: only the unprofiled ones by
// default, so its rows count the two none repeats, not the torch cells pooled in as well.
func TestReplayComparesLikeCompare(t *testing.T) {
	b := bundleOf(t, `name = "pooled"
[matrix]
model = ["Qwen/Qwen-Image"]
prompt = ["a cat"]
num_inference_steps = [3]
repeats = 2
[profile]
profilers = ["none", "torch"]
`, nil)
	var out bytes.Buffer
	if _, err := Replay(context.Background(), b, replayOpts(t, &out)); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if !strings.Contains(s, "runner compare, bundle (base) vs replay (new):") || !strings.Contains(s, "e2e ") {
		t.Fatalf("no comparison:\n%s", s)
	}
	if !strings.Contains(s, " n=2)") || strings.Contains(s, " n=4)") {
		t.Errorf("the comparison pooled profiled cells (want n=2 per side, none only):\n%s", s)
	}
	if !strings.Contains(s, "skipped cells: 4") {
		t.Errorf("the torch cells of both sides are not reported as skipped:\n%s", s)
	}
}
