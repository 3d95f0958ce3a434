package runner

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/exitcode"
)

// rebundle rewrites the bundle at path with edit applied to each file (name, content).
func rebundle(t *testing.T, path string, edit func(name string, data []byte) []byte) string {
	t.Helper()
	return rebundleAdd(t, path, edit, nil)
}

// rebundleAdd is rebundle that also adds the files of add (archive name, content). It writes
// the archive itself, as whoever edits a bundle would, not with the bundle writer under test.
func rebundleAdd(t *testing.T, path string, edit func(name string, data []byte) []byte, add map[string][]byte) string {
	t.Helper()
	files := map[string][]byte{}
	for name, data := range readArchive(t, path) {
		if strings.HasSuffix(name, " (decompressed)") {
			continue
		}
		files[name] = edit(name, data)
	}
	maps.Copy(files, add)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		data := files[name]
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "edited.tar.gz")
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// realBundle is a simulated run's bundle whose manifest says it was real.
func realBundle(t *testing.T, plan func([]byte) []byte) string {
	return rebundle(t, bundleOf(t, fallbackPlan, nil), func(name string, data []byte) []byte {
		switch name {
		case rundir.ManifestFile:
			return bytes.Replace(data, []byte(`"simulated": true`), []byte(`"simulated": false`), 1)
		case rundir.PlanFile:
			return plan(data)
		}
		// The commands a real run would have recorded: the plan's sglang, not the simulator.
		if strings.HasSuffix(name, "/"+rundir.CommandFile) {
			var l rundir.Launch
			if err := json.Unmarshal(data, &l); err != nil {
				t.Fatal(err)
			}
			if len(l.Argv) > 2 && l.Argv[1] == "sim" {
				l.Argv = append([]string{"sglang"}, l.Argv[3:]...)
			}
			data, _ = json.Marshal(l)
		}
		return data
	})
}

// A real replay without a terminal and without --yes refuses before anything runs (the
// environment probe included), and leaves no directory that blocks the next attempt.
func TestReplayRealNeedsYes(t *testing.T) {
	b := realBundle(t, func(d []byte) []byte { return d })
	var out bytes.Buffer
	opts := replayOpts(t, &out)
	opts.Simulate = false
	_, err := Replay(context.Background(), b, opts)
	var ue *exitcode.UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "pass --yes") {
		t.Fatalf("err = %v, want a usage error asking for --yes", err)
	}
	if !strings.Contains(out.String(), "replay runs the bundled plan's backend") || !strings.Contains(out.String(), "000-unknown-model-default-s0-none-r1: ") {
		t.Errorf("the commands were not shown:\n%s", out.String())
	}
	if _, err := os.Stat(opts.Output); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the failed replay left %s: %v", opts.Output, err)
	}
	// Declined at the prompt: refused the same way.
	opts.Confirm = func(string) (bool, error) { return false, nil }
	if _, err := Replay(context.Background(), b, opts); err == nil || !strings.Contains(err.Error(), "not confirmed") {
		t.Errorf("declined: err = %v", err)
	}
}

// A plan.toml whose command differs from the argv the bundle recorded is refused, --yes or
// not: the tampered command never runs.
func TestReplayRefusesTamperedPlan(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "PWNED")
	b := realBundle(t, func(d []byte) []byte {
		return append(d, []byte("\n[backend]\ncommand = [\"/bin/sh\", \"-c\", \"touch "+marker+"\"]\n")...)
	})
	var out bytes.Buffer
	opts := replayOpts(t, &out)
	opts.Simulate, opts.Yes = false, true
	_, err := Replay(context.Background(), b, opts)
	if err == nil || !strings.Contains(err.Error(), "differ from the argv the bundle recorded") || !strings.Contains(err.Error(), "--trust-plan") {
		t.Fatalf("err = %v, want a refusal naming --trust-plan", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the tampered command ran")
	}
	if _, err := os.Stat(opts.Output); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the failed replay left %s", opts.Output)
	}
}

// A simulated run's bundle replays simulated without --simulate.
func TestReplaySimulatedBundleWithoutFlag(t *testing.T) {
	b := bundleOf(t, fallbackPlan, nil)
	var out bytes.Buffer
	opts := replayOpts(t, &out)
	opts.Simulate = false
	res, err := Replay(context.Background(), b, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "replaying it with the simulators") || res.ExitCode != exitcode.OK {
		t.Errorf("exit %d:\n%s", res.ExitCode, out.String())
	}
}

// A simulated bundle's replay asks nothing, so it runs nothing the bundle's plan names: a
// tampered plan whose backend.command sits beside a "python" must not get that python run as
// the environment probe (check_env, library versions).
func TestReplaySimulatedRunsNothingThePlanNames(t *testing.T) {
	venv := t.TempDir()
	marker := filepath.Join(venv, "ran")
	for _, name := range []string{"python", "python3", "sglang"} {
		if err := os.WriteFile(filepath.Join(venv, name), []byte("#!/bin/sh\necho \"$0 $*\" >> "+marker+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b := rebundle(t, bundleOf(t, fallbackPlan, nil), func(name string, data []byte) []byte {
		if name == rundir.PlanFile {
			return append(data, []byte("\n[backend]\ncommand = [\""+filepath.Join(venv, "sglang")+"\"]\n")...)
		}
		return data
	})
	var out bytes.Buffer
	opts := replayOpts(t, &out)
	opts.Simulate = false
	if _, err := Replay(context.Background(), b, opts); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "replaying it with the simulators") {
		t.Fatalf("not replayed simulated:\n%s", out.String())
	}
	if got, err := os.ReadFile(marker); err == nil {
		t.Errorf("a simulated replay ran what the bundle's plan names:\n%s", got)
	}
}

// A real replay shows every probe it runs, exactly (check_env and the version script of the
// Python beside backend.command included), and runs each once, not once to diff and again
// for the run's manifest.
func TestReplayShowsAndRunsProbesOnce(t *testing.T) {
	b := realBundle(t, func(d []byte) []byte { return d })
	venv := t.TempDir()
	calls := filepath.Join(venv, "calls")
	py := "#!/bin/sh\necho \"$1 $2\" >> " + calls + "\ncase \"$1\" in -c) echo '{\"python\": \"3.12.1\"}' ;; esac\n"
	for name, body := range map[string]string{"python": py, "sglang": "#!/bin/sh\nexit 1\n"} {
		if err := os.WriteFile(filepath.Join(venv, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	opts := replayOpts(t, &out)
	opts.Simulate, opts.Yes = false, true
	for i, kv := range opts.Env {
		if strings.HasPrefix(kv, "PATH=") {
			opts.Env[i] = "PATH=" + venv + ":" + kv[len("PATH="):]
		}
	}
	if _, err := Replay(context.Background(), b, opts); err != nil {
		t.Fatal(err)
	}
	shown := out.String()
	pyPath := filepath.Join(venv, "python")
	for _, want := range []string{pyPath + " -m sglang.check_env", pyPath + " -c 'import json, sys", "sglang version", "000-unknown-model-default-s0-none-r1: "} {
		if !strings.Contains(shown, want) {
			t.Errorf("the confirmation does not show %q:\n%s", want, shown)
		}
	}
	got, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(got), "-m sglang.check_env"); n != 1 {
		t.Errorf("check_env ran %d times, want once:\n%s", n, got)
	}
	if n := strings.Count(string(got), "-c import"); n != 1 {
		t.Errorf("the version script ran %d times, want once:\n%s", n, got)
	}
}
