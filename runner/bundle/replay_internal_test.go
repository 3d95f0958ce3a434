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
	"github.com/sglprof/runner/runner/secrets"
)

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
		Env: map[string]string{"CUDA_VISIBLE_DEVICES": "0", "HF_TOKEN": secrets.Redacted, "NCCL_DEBUG": "INFO"},
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

// A file that is no bundle, a hostile archive and a missing file are refused as usage errors
// when the replay opens them, before anything of theirs is read or run.
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
		opts := OpenOptions{Output: filepath.Join(t.TempDir(), "replay"), Out: &out}
		_, err := OpenReplay(context.Background(), tc.file, opts)
		var ue *exitcode.UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want a usage error containing %q", filepath.Base(tc.file), err, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "escape.txt")); err == nil {
		t.Error("the evil bundle wrote outside its target")
	}
}
