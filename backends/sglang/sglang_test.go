package sglang

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/plans"
)

// baseCell is a cell as plans would expand it for the design's example plan.
func baseCell() plans.Cell {
	return plans.Cell{
		ID:         "000-qwen-image-1024x1024-s0-none-r1",
		Model:      "Qwen/Qwen-Image",
		Prompt:     "A Logo With Bold Large Text: SGL Diffusion",
		Resolution: plans.Resolution{Width: 1024, Height: 1024},
		Steps:      50,
		Seed:       0,
		Repeat:     1,
		Profiler:   plans.ProfilerNone,
		Backend: plans.Backend{
			Kind:      "sglang",
			Mode:      "generate",
			Command:   []string{"sglang"},
			ExtraArgs: []string{"--backend", "sglang"},
			Env:       map[string]string{"SGLANG_DIFFUSION_SYNC_STAGE_PROFILING": "1"},
		},
		Profile: plans.Profile{NumProfiledTimesteps: 5},
		Gate:    plans.Gate{DiffusersFallback: "fail"},
	}
}

func TestCommandArgv(t *testing.T) {
	const dir = "/runs/x/cells/000"
	common := func(extra ...string) []string {
		return append([]string{"--seed", "0", "--perf-dump-path", dir + "/perf.json", "--output-path", dir + "/outputs"}, extra...)
	}
	head := []string{"sglang", "generate", "--model-path", "Qwen/Qwen-Image", "--prompt=A Logo With Bold Large Text: SGL Diffusion"}
	cat := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	size := []string{"--width", "1024", "--height", "1024"}
	steps := []string{"--num-inference-steps", "50"}
	extra := []string{"--backend", "sglang"}

	tests := []struct {
		name   string
		modify func(*plans.Cell)
		want   []string
	}{
		{"none", func(*plans.Cell) {}, cat(head, size, steps, common(), extra)},
		{"torch", func(c *plans.Cell) { c.Profiler = plans.ProfilerTorch },
			cat(head, size, steps, common("--profile", "--num-profiled-timesteps", "5"), extra)},
		{"torch all stages", func(c *plans.Cell) { c.Profiler = plans.ProfilerTorch; c.Profile.ProfileAllStages = true },
			cat(head, size, steps, common("--profile", "--num-profiled-timesteps", "5", "--profile-all-stages"), extra)},
		{"torch all steps", func(c *plans.Cell) { c.Profiler = plans.ProfilerTorch; c.Profile.NumProfiledTimesteps = -1 },
			cat(head, size, steps, common("--profile", "--num-profiled-timesteps", "-1"), extra)},
		{"torch default timesteps", func(c *plans.Cell) { c.Profiler = plans.ProfilerTorch; c.Profile.NumProfiledTimesteps = 0 },
			cat(head, size, steps, common("--profile"), extra)},
		{"all stages ignored without torch", func(c *plans.Cell) { c.Profile.ProfileAllStages = true },
			cat(head, size, steps, common(), extra)},
		{"nsys has no torch flags", func(c *plans.Cell) { c.Profiler = plans.ProfilerNsys },
			cat(head, size, steps, common(), extra)},
		{"model default resolution", func(c *plans.Cell) { c.Resolution = plans.Resolution{} },
			cat(head, steps, common(), extra)},
		{"preset as width and height", func(c *plans.Cell) { c.Resolution = plans.Resolution{Width: 1920, Height: 1080, Preset: "1080p"} },
			cat(head, []string{"--width", "1920", "--height", "1080"}, steps, common(), extra)},
		{"preset without sizes", func(c *plans.Cell) { c.Resolution = plans.Resolution{Preset: "4k"} },
			cat(head, []string{"--width", "3840", "--height", "2160"}, steps, common(), extra)},
		{"default steps", func(c *plans.Cell) { c.Steps = 0 },
			cat(head, size, common(), extra)},
		{"seed", func(c *plans.Cell) { c.Seed = -42 },
			cat(head, size, steps, []string{"--seed", "-42", "--perf-dump-path", dir + "/perf.json", "--output-path", dir + "/outputs"}, extra)},
		{"venv command prefix and extra args last", func(c *plans.Cell) {
			c.Backend.Command = []string{"/venv/bin/python", "-m", "sglang.cli.main"}
			c.Backend.ExtraArgs = []string{"--dit-cpu-offload", "true", "--seed", "7"}
		}, cat([]string{"/venv/bin/python", "-m", "sglang.cli.main", "generate", "--model-path", "Qwen/Qwen-Image", "--prompt=A Logo With Bold Large Text: SGL Diffusion"},
			size, steps, common(), []string{"--dit-cpu-offload", "true", "--seed", "7"})},
		{"no extra args", func(c *plans.Cell) { c.Backend.ExtraArgs = nil },
			cat(head, size, steps, common())},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := baseCell()
			tt.modify(&c)
			l, err := Backend{}.Command(c, dir)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, l.Argv); diff != "" {
				t.Errorf("argv mismatch (-want +got):\n%s", diff)
			}
			if l.Dir != dir {
				t.Errorf("Dir = %q, want %q", l.Dir, dir)
			}
		})
	}
}

func TestCommandPromptIsOneExactElement(t *testing.T) {
	prompts := []string{
		`a "quoted" prompt with 'single' quotes`,
		`$(rm -rf /) and ` + "`id`" + ` and $HOME; echo pwned | cat &`,
		"line one\nline two\r\nline three",
		"日本語のプロンプト, café, emoji 🎨, RTL עברית",
		"--width 1 (looks like a flag)",
		"-x",
		"-hello world",
		"",
		"  leading and trailing spaces  ",
	}
	for _, p := range prompts {
		c := baseCell()
		c.Prompt = p
		l, err := Backend{}.Command(c, "/cell")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for i, a := range l.Argv {
			if strings.HasPrefix(a, "--prompt") {
				n++
				if a != "--prompt="+p {
					t.Errorf("prompt %q: argv element %d is %q, want --prompt=<prompt>", p, i, a)
				}
			}
		}
		if n != 1 {
			t.Errorf("prompt %q: %d --prompt flags", p, n)
		}
		if len(l.Argv) != 19 {
			t.Errorf("prompt %q split or merged: argv has %d elements: %q", p, len(l.Argv), l.Argv)
		}
	}
}

func TestCommandEnv(t *testing.T) {
	c := baseCell()
	c.Backend.Env["SGLANG_TORCH_PROFILER_DIR"] = "/tmp/elsewhere"
	l, err := Backend{}.Command(c, "/runs/x/cells/000")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"SGLANG_DIFFUSION_SYNC_STAGE_PROFILING": "1",
		"SGLANG_TORCH_PROFILER_DIR":             "/runs/x/cells/000/traces",
		"SGLANG_DIFFUSION_TORCH_PROFILER_DIR":   "/runs/x/cells/000/traces",
	}
	if diff := cmp.Diff(want, l.Env); diff != "" {
		t.Errorf("env mismatch (-want +got):\n%s", diff)
	}
	if c.Backend.Env["SGLANG_TORCH_PROFILER_DIR"] != "/tmp/elsewhere" {
		t.Error("Command modified the cell's env map")
	}
}

func TestCommandRelativeDirBecomesAbsolute(t *testing.T) {
	l, err := Backend{}.Command(baseCell(), "runs/cell")
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(l.Dir) || !filepath.IsAbs(l.Env[EnvProfilerDir]) {
		t.Errorf("Dir %q / profiler dir %q not absolute", l.Dir, l.Env[EnvProfilerDir])
	}
	for i, a := range l.Argv {
		if a == "--perf-dump-path" && !filepath.IsAbs(l.Argv[i+1]) {
			t.Errorf("perf dump path %q not absolute", l.Argv[i+1])
		}
	}
}

func TestCommandErrors(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*plans.Cell)
		dir    string
	}{
		{"other kind", func(c *plans.Cell) { c.Backend.Kind = "vllm-omni" }, "/c"},
		{"serve mode", func(c *plans.Cell) { c.Backend.Mode = "serve" }, "/c"},
		{"empty command", func(c *plans.Cell) { c.Backend.Command = nil }, "/c"},
		{"blank command", func(c *plans.Cell) { c.Backend.Command = []string{""} }, "/c"},
		{"no model", func(c *plans.Cell) { c.Model = "" }, "/c"},
		{"no dir", func(*plans.Cell) {}, ""},
		{"bad preset", func(c *plans.Cell) { c.Resolution = plans.Resolution{Preset: "8k"} }, "/c"},
		{"half resolution", func(c *plans.Cell) { c.Resolution = plans.Resolution{Width: 1024} }, "/c"},
		{"negative steps", func(c *plans.Cell) { c.Steps = -1 }, "/c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := baseCell()
			tt.modify(&c)
			if l, err := (Backend{}).Command(c, tt.dir); err == nil {
				t.Errorf("Command succeeded: %q", l.Argv)
			}
		})
	}
}

func TestLaunchCreatesDirs(t *testing.T) {
	dir := t.TempDir()
	var b backends.Backend = New()
	if b.Name() != "sglang" {
		t.Errorf("Name = %q", b.Name())
	}
	l, err := b.Launch(baseCell(), dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"traces", "outputs"} {
		st, err := os.Stat(filepath.Join(dir, sub))
		if err != nil || !st.IsDir() {
			t.Errorf("%s not created: %v", sub, err)
		}
	}
	if l.Env[EnvDiffusionProfilerDir] != filepath.Join(dir, "traces") {
		t.Errorf("profiler dir %q", l.Env[EnvDiffusionProfilerDir])
	}
}

func TestLaunchUnwritableDir(t *testing.T) {
	dir := t.TempDir()
	// A file where the traces directory should go makes MkdirAll fail the same way a
	// read-only run directory would, also when the tests run as root.
	if err := os.WriteFile(filepath.Join(dir, "traces"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New().Launch(baseCell(), dir); err == nil {
		t.Fatal("Launch succeeded although traces/ cannot be created")
	}
}
