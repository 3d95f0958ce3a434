package runner

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprof/runner/runner/bundle"
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
	if _, err := bundle.Create(context.Background(), run, bundle.Options{Output: out}); err != nil {
		t.Fatal(err)
	}
	return out
}

func replayOpts(t *testing.T, out *bytes.Buffer, env ...string) ReplayOptions {
	o := bundleSimOptions(t, env)
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
	if res.ExitCode != exitcode.OK {
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
	if res.ExitCode != exitcode.CellsFailed || !strings.Contains(out.String(), "000-qwen-image-default-s0-none-r1: not reproduced: bundle failed (") || !strings.Contains(out.String(), "replay ok") {
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
	if res.ExitCode != exitcode.Regression || !strings.Contains(out.String(), "verdict reproduced (ok), timings did not") || !strings.Contains(out.String(), "(beyond ") {
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
