package runner

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sglprof/runner/backends/sim"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/exitcode"
	"github.com/sglprof/runner/runner/proc"
	"github.com/sglprof/runner/runner/secrets"
)

// TestMain lets the test binary stand in for the runner binary under --simulate: the runner
// re-executes Exe as `Exe sim sglang ...`.
func TestMain(m *testing.M) {
	if os.Getenv("RUNNER_TEST_LISTEN") != "" {
		listenForever() // a stand-in for a server left behind (serve_port_test.go)
	}
	if len(os.Args) > 2 && os.Args[1] == "sim" {
		code, _ := sim.Main(context.Background(), os.Args[2:], sim.EnvMap(os.Environ()), os.Stdout, os.Stderr)
		os.Exit(code)
	}
	// Slurm array tasks run `EXE exec-cell [--simulate] [--no-triage] RUN_DIR CELL` (slurm_test.go).
	if len(os.Args) > 3 && os.Args[1] == "exec-cell" {
		os.Exit(testExecCell(os.Args[2:]))
	}
	os.Exit(m.Run())
}

func testPlan(t *testing.T, body string) *plans.Plan {
	t.Helper()
	p, err := plans.Parse("plan.toml", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func simOptions(t *testing.T) Options {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "RUNNER_SIM_TIME_SCALE=0")
	return Options{Simulate: true, Exe: exe, Env: env, OutputDir: t.TempDir(), NoTriage: true}
}

const twoCells = `name = "two"
[backend]
extra_args = ["--backend", "sglang"]
[matrix]
model = ["Qwen/Qwen-Image"]
prompt = ["a cat"]
num_inference_steps = [4]
repeats = 2
`

// A full disk while a cell writes its log fails that cell, and the run goes on with the next.
// log.txt is pointed at /dev/full, which fails every write with ENOSPC like a full disk.
func TestDiskFullFailsCellAndRunContinues(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full on this system")
	}
	p := testPlan(t, twoCells)
	opts := simOptions(t)
	opts.defaults()
	dir, err := rundir.Create(opts.OutputDir, p.Name, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	recs, err := prepareCells(dir, p.Expand(), &opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/full", filepath.Join(recs[0].abs, rundir.LogFile)); err != nil {
		t.Fatal(err)
	}
	sum, err := execute(context.Background(), p, dir, recs, &rundir.Manifest{}, &opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{sum.Cells[0].Verdict, sum.Cells[1].Verdict}; !cmp.Equal(got, []string{plans.VerdictFailed, plans.VerdictOK}) {
		t.Fatalf("verdicts %v, want [failed ok]", got)
	}
	if !strings.Contains(strings.Join(sum.Cells[0].Reasons, " "), "log-write") {
		t.Errorf("reasons %q lack log-write", sum.Cells[0].Reasons)
	}
	if sum.ExitCode != exitcode.CellsFailed {
		t.Errorf("exit code %d, want %d", sum.ExitCode, exitcode.CellsFailed)
	}
}

// Run and Resume: a resumed run executes only the cells without result.json, and refuses a run
// directory whose cells.json no longer matches its plan.
func TestResumeRunsOnlyMissingCells(t *testing.T) {
	p := testPlan(t, twoCells)
	opts := simOptions(t)
	sum, err := Run(context.Background(), p, opts)
	if err != nil {
		t.Fatal(err)
	}
	if sum.ExitCode != exitcode.OK {
		t.Fatalf("exit %d: %+v", sum.ExitCode, sum.Cells)
	}
	second := filepath.Join(sum.RunDir, rundir.CellsDir, sum.Cells[1].ID, rundir.ResultFile)
	first := filepath.Join(sum.RunDir, rundir.CellsDir, sum.Cells[0].ID, rundir.ResultFile)
	before, _ := os.ReadFile(first)
	if err := os.Remove(second); err != nil {
		t.Fatal(err)
	}
	sum2, err := Resume(context.Background(), sum.RunDir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if sum2.ExitCode != exitcode.OK || sum2.Counts[plans.VerdictOK] != 2 {
		t.Fatalf("resume: exit %d counts %v", sum2.ExitCode, sum2.Counts)
	}
	after, _ := os.ReadFile(first)
	if !bytes.Equal(before, after) {
		t.Error("resume rewrote the result of a finished cell")
	}
	if _, err := os.Stat(second); err != nil {
		t.Errorf("resume did not run the missing cell: %v", err)
	}

	// An edited run directory is refused.
	if err := os.WriteFile(filepath.Join(sum.RunDir, rundir.PlanFile), []byte(strings.Replace(twoCells, "repeats = 2", "repeats = 1", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Resume(context.Background(), sum.RunDir, opts); err == nil || !strings.Contains(err.Error(), "edited") {
		t.Errorf("resume of an edited run directory: err = %v, want an 'edited' error", err)
	}
}

func TestMergeEnv(t *testing.T) {
	got := mergeEnv([]string{"PATH=/bin", "A=1", "B=2"}, map[string]string{"B": "3", "C": "4"})
	want := []string{"PATH=/bin", "A=1", "B=3", "C=4"}
	if !cmp.Equal(got, want) {
		t.Errorf("mergeEnv = %v, want %v", got, want)
	}
}

func TestRedaction(t *testing.T) {
	env := CaptureEnv([]string{"HF_TOKEN=hf_abc", "CUDA_VISIBLE_DEVICES=0,1", "HOME=/root", "NCCL_DEBUG=INFO", "SGLANG_API_KEY=k", "AWS_SECRET=x"})
	want := map[string]string{"HF_TOKEN": secrets.Redacted, "CUDA_VISIBLE_DEVICES": "0,1", "NCCL_DEBUG": "INFO", "SGLANG_API_KEY": secrets.Redacted}
	if !cmp.Equal(env, want) {
		t.Errorf("CaptureEnv = %v, want %v", env, want)
	}
	args := redactArgs([]string{"sglang", "--hf-token", "hf_abc", "--api-key=xyz", "--prompt", "a token of love"})
	wantArgs := []string{"sglang", "--hf-token", secrets.Redacted, "--api-key=" + secrets.Redacted, "--prompt", "a token of love"}
	if !cmp.Equal(args, wantArgs) {
		t.Errorf("redactArgs = %v, want %v", args, wantArgs)
	}
	l := redactLaunch(rundir.Launch{Argv: []string{"x", "--password", "p"}, Env: map[string]string{"MY_PASSWORD": "p", "OK": "v"}})
	if l.Argv[2] != secrets.Redacted || l.Env["MY_PASSWORD"] != secrets.Redacted || l.Env["OK"] != "v" {
		t.Errorf("redactLaunch = %+v", l)
	}
}

func TestParseNvidiaSMI(t *testing.T) {
	out := "name, driver_version, memory.total [MiB], clocks.sm [MHz], clocks.max.sm [MHz], power.limit [W]\n" +
		"NVIDIA H100 80GB HBM3, 550.54.15, 81559 MiB, 1980 MHz, 1980 MHz, 700.00 W\n" +
		"NVIDIA H100 80GB HBM3, 550.54.15, 81559 MiB, 345 MHz, 1980 MHz, 700.00 W\n"
	g := parseNvidiaSMI(out)
	if len(g) != 2 || g[0].Name != "NVIDIA H100 80GB HBM3" || g[0].Driver != "550.54.15" || g[1].SMClock != "345 MHz" || g[1].PowerLimit != "700.00 W" {
		t.Errorf("parseNvidiaSMI = %+v", g)
	}
}

func TestLookPathUsesGivenPATH(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "fake-sglang")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := proc.LookPath("fake-sglang", []string{"PATH=" + dir}); err != nil {
		t.Errorf("lookPath with the directory on PATH: %v", err)
	}
	if _, err := proc.LookPath("fake-sglang", []string{"PATH=/nonexistent"}); err == nil {
		t.Error("lookPath found a program that is not on the given PATH")
	}
	if err := os.Chmod(exe, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := proc.LookPath(exe, nil); err == nil {
		t.Error("lookPath accepted a file that is not executable")
	}
}

func TestProbeRecordsMissingAndTimeout(t *testing.T) {
	pr := runProbe(context.Background(), []string{"definitely-not-installed-xyz"}, []string{"PATH=/nonexistent"}, time.Second)
	if pr.Available || !strings.Contains(pr.Error, "unavailable") {
		t.Errorf("missing probe = %+v", pr)
	}
	pr = runProbe(context.Background(), []string{"/bin/sh", "-c", "sleep 5"}, nil, 100*time.Millisecond)
	if pr.Available || !strings.Contains(pr.Error, "timed out") {
		t.Errorf("slow probe = %+v", pr)
	}
	pr = runProbe(context.Background(), []string{"/bin/sh", "-c", "echo sglang version: 1.2.3"}, nil, time.Second)
	if !pr.Available || pr.Output != "sglang version: 1.2.3" {
		t.Errorf("working probe = %+v", pr)
	}
}

func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		verdicts    []string
		interrupted bool
		want        int
	}{
		{[]string{"ok", "ok"}, false, exitcode.OK},
		{[]string{"ok", "invalid"}, false, exitcode.CellsFailed},
		{[]string{"timeout"}, false, exitcode.CellsFailed},
		{[]string{"ok", rundir.VerdictNotRun}, true, exitcode.Interrupted},
	} {
		s := &rundir.Summary{Interrupted: tc.interrupted}
		for _, v := range tc.verdicts {
			s.Cells = append(s.Cells, rundir.SummaryRow{Verdict: v})
		}
		if got := exitCodeFor(s); got != tc.want {
			t.Errorf("%v interrupted=%v: exit %d, want %d", tc.verdicts, tc.interrupted, got, tc.want)
		}
	}
}

// An interrupted run exits with exitcode.Interrupted whatever its cells' verdicts.
func TestExitCodeInterrupted(t *testing.T) {
	s := &rundir.Summary{
		Cells: []rundir.SummaryRow{
			{ID: "000", Verdict: "ok"}, {ID: "001", Verdict: "invalid"}, {ID: "002", Verdict: rundir.VerdictNotRun},
		},
		Counts: map[string]int{"ok": 1, "invalid": 1, rundir.VerdictNotRun: 1}, Interrupted: true,
	}
	if got := exitCodeFor(s); got != exitcode.Interrupted {
		t.Errorf("exit code %d, want %d for an interrupted run", got, exitcode.Interrupted)
	}
}
