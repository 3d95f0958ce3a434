package sglang_test

import (
	"bufio"
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/sglprof/runner/backends/sglang"
	"github.com/sglprof/runner/backends/sim"
	"github.com/sglprof/runner/backends/simclock"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
)

// TestAgainstSimulator runs the argv and env the backend builds through the sglang simulator
// (in-process) and judges the result, so that the watcher is checked against the log lines,
// file names and exit codes the simulator reproduces from the interface reference.
func TestAgainstSimulator(t *testing.T) {
	tests := []struct {
		name     string
		model    string
		profiler string
		extra    []string
		fail     string
		verdict  string
		reasons  string // comma-joined reason codes, in Assess's order
	}{
		{"torch ok", "Qwen/Qwen-Image", plans.ProfilerTorch, []string{"--backend", "sglang"}, "", plans.VerdictOK, ""},
		{"no profiler ok", "Qwen/Qwen-Image", plans.ProfilerNone, nil, "", plans.VerdictOK, ""},
		{"fallback", "someorg/not-a-known-model", plans.ProfilerNone, nil, "", plans.VerdictInvalid, sglang.CodeFallback},
		{"oom", "Qwen/Qwen-Image", plans.ProfilerTorch, nil, "oom", plans.VerdictFailed, "cuda-oom,exit-status,trace-missing,perf-dump-missing"},
		{"unknown flag", "Qwen/Qwen-Image", plans.ProfilerNone, []string{"--no-such-flag"}, "", plans.VerdictFailed, "exit-status,perf-dump-missing"},
		{"truncated trace", "Qwen/Qwen-Image", plans.ProfilerTorch, nil, "trace-truncated", plans.VerdictFailed, "trace-truncated"},
		{"trace save failed", "Qwen/Qwen-Image", plans.ProfilerTorch, nil, "trace-fail", plans.VerdictFailed, "trace-missing"},
		{"no perf dump", "Qwen/Qwen-Image", plans.ProfilerNone, nil, "no-perf-dump", plans.VerdictFailed, sglang.CodePerfDumpMissing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := plans.Cell{
				ID: "000-test", Model: tt.model, Prompt: "A Logo With Bold Large Text: SGL Diffusion",
				Resolution: plans.Resolution{Width: 512, Height: 512}, Steps: 8, Profiler: tt.profiler,
				Backend: plans.Backend{Kind: "sglang", Mode: "generate", Command: []string{"sglang"}, ExtraArgs: tt.extra},
				Profile: plans.Profile{NumProfiledTimesteps: 2},
			}
			b := sglang.New()
			dir := t.TempDir()
			l, err := b.Launch(c, dir)
			if err != nil {
				t.Fatal(err)
			}
			env := map[string]string{simclock.EnvTimeScale: "0", sim.EnvFail: tt.fail}
			for k, v := range l.Env {
				env[k] = v
			}
			var out bytes.Buffer
			code := sim.SGLang(context.Background(), l.Argv[1:], env, &out, &out)

			w := b.NewWatcher(c)
			sc := bufio.NewScanner(&out)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			n := 0
			for sc.Scan() {
				for _, frame := range strings.Split(sc.Text(), "\r") {
					n++
					w.Line(n, "stderr", frame)
				}
			}
			a := b.Assess(c, dir, w, rundir.Exit{Code: code})
			var got []string
			for _, r := range a.Reasons {
				got = append(got, r.Code)
			}
			if a.Verdict != tt.verdict || strings.Join(got, ",") != tt.reasons {
				t.Fatalf("verdict %q reasons %q (exit %d); want %q %q\nlog:\n%s", a.Verdict, got, code, tt.verdict, tt.reasons, out.String())
			}
			if tt.verdict == plans.VerdictOK {
				if a.Artifacts.PerfDump == "" || len(a.Artifacts.Outputs) == 0 {
					t.Errorf("artifacts %+v", a.Artifacts)
				}
				if tt.profiler == plans.ProfilerTorch && len(a.Artifacts.Traces) == 0 {
					t.Errorf("no trace found: %+v", a.Artifacts)
				}
			}
			if tt.name == "unknown flag" && !strings.Contains(a.Reasons[0].Message, "unrecognized arguments: --no-such-flag") {
				t.Errorf("exit-status message does not quote argparse: %q", a.Reasons[0].Message)
			}
		})
	}
}

// TestPromptReachesSimulatorIntact runs generate argv with prompts that argparse would read as
// options when passed as a separate token ("-x", "-hello world" as -h) through the simulator's
// argparse and checks that the pipeline got each prompt exactly.
func TestPromptReachesSimulatorIntact(t *testing.T) {
	for _, prompt := range []string{"-x leading dash", "-x", "-hello world", "--width 1", "a=b --seed 3"} {
		c := plans.Cell{
			ID: "000-test", Model: "Qwen/Qwen-Image", Prompt: prompt,
			Resolution: plans.Resolution{Width: 256, Height: 256}, Steps: 2, Profiler: plans.ProfilerNone,
			Backend: plans.Backend{Kind: "sglang", Mode: "generate", Command: []string{"sglang"}},
		}
		l, err := sglang.New().Launch(c, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		env := map[string]string{simclock.EnvTimeScale: "0"}
		for k, v := range l.Env {
			env[k] = v
		}
		var out bytes.Buffer
		if code := sim.SGLang(context.Background(), l.Argv[1:], env, &out, &out); code != 0 {
			t.Errorf("prompt %q: exit %d\n%s", prompt, code, out.String())
			continue
		}
		if !strings.Contains(out.String(), "Processing prompt 1/1: "+prompt+"\n") {
			t.Errorf("prompt %q did not arrive intact:\n%s", prompt, out.String())
		}
	}
}
