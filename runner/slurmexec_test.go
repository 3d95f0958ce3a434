package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/exitcode"
	"github.com/sglprof/runner/runner/slurm"
	"github.com/sglprof/runner/runner/slurm/slurmtest"
)

// testExecCell is the test binary acting as `runner exec-cell` for array tasks.
func testExecCell(args []string) int {
	exe, _ := os.Executable()
	opts := Options{Exe: exe, Env: os.Environ()}
	for len(args) > 2 {
		switch args[0] {
		case "--simulate":
			opts.Simulate = true
		case "--no-triage":
			opts.NoTriage = true
		}
		args = args[1:]
	}
	if _, err := ExecCell(context.Background(), args[0], args[1], opts); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// BenchmarkSlurmOverhead runs 16 simulated cells as a job array on the real test cluster and
// reports the runner's own Slurm work per cell (script, sbatch, polls, collection: the
// manifest's overhead_ns), the goal being at most 1 s, and the whole run's wall time per cell.
func BenchmarkSlurmOverhead(b *testing.B) {
	env := slurmtest.Start(b)
	body := slotPlan(16, `""`, "kind = \"slurm\"\n[executor.slurm]\nmax_parallel = 4\n")
	var overhead, wall time.Duration
	for b.Loop() {
		exe, _ := os.Executable()
		opts := Options{Simulate: true, Exe: exe, NoTriage: true, OutputDir: b.TempDir(), SlurmPoll: 500 * time.Millisecond,
			Env: append(env, "RUNNER_SIM_TIME_SCALE=0"), Nightly: NightlyOptions{History: "off"}}
		p, err := plans.Parse("plan.toml", []byte(body))
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		sum, err := Run(context.Background(), p, opts)
		if err != nil || sum.ExitCode != 0 {
			b.Fatalf("run: %v %+v", err, sum)
		}
		wall += time.Since(t0)
		var m rundir.Manifest
		if err := rundir.ReadJSON(filepath.Join(sum.RunDir, rundir.ManifestFile), &m); err != nil || len(m.Slurm) != 1 {
			b.Fatalf("manifest: %v %+v", err, m.Slurm)
		}
		overhead += time.Duration(m.Slurm[0].OverheadNS)
	}
	cells := float64(16 * b.N)
	b.ReportMetric(overhead.Seconds()*1e3/cells, "overhead-ms/cell")
	b.ReportMetric(wall.Seconds()*1e3/cells, "wall-ms/cell")
}

// A task that ended without a result and without its start marker never reached the run
// directory (it is not on a file system the node sees): the cell fails with the Slurm state's
// reason and the warning names the run directory.
func TestSlurmTaskWithoutMarkerWarnsWithPath(t *testing.T) {
	dir := t.TempDir()
	abs := filepath.Join(dir, rundir.CellsDir, "000-c")
	if err := os.MkdirAll(abs, 0o755); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	opts := Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	opts.defaults()
	rec := cellRecord{CellRecord: rundir.CellRecord{Cell: plans.Cell{ID: "000-c"}}, abs: abs}
	job := rundir.SlurmJob{JobID: "42", Cells: []string{"000-c"}}
	res := collectTask(dir, rec, job, slurm.Task{Index: 0, State: "FAILED", Node: "n1", ExitCode: "97:0"}, &opts)
	if res.Verdict != plans.VerdictFailed || len(res.Reasons) == 0 || res.Reasons[0].Code != "slurm-task-failed" {
		t.Errorf("result %+v", res)
	}
	if !strings.Contains(logs.String(), "no start marker") || !strings.Contains(logs.String(), dir) {
		t.Errorf("no warning naming %s: %s", dir, logs.String())
	}
	if r, err := rundir.ReadResult(abs); err != nil || r.Slurm == nil || r.Slurm.Node != "n1" {
		t.Errorf("result.json %+v %v", r, err)
	}
	// With the marker present there is no such warning.
	logs.Reset()
	os.Remove(filepath.Join(abs, rundir.ResultFile))
	if err := os.MkdirAll(filepath.Join(dir, slurm.MarkerDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, slurm.Marker("42", 0)), []byte("n1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	collectTask(dir, rec, job, slurm.Task{Index: 0, State: "FAILED", Node: "n1"}, &opts)
	if strings.Contains(logs.String(), "no start marker") {
		t.Errorf("warned although the marker exists: %s", logs.String())
	}
}

// exec-cell never overwrites a cell's result: a task that runs twice leaves the first result.
func TestExecCellKeepsAnExistingResult(t *testing.T) {
	opts := simOptions(t)
	sum, err := Run(context.Background(), testPlan(t, twoCells), opts)
	if err != nil || sum.ExitCode != 0 {
		t.Fatalf("run: %v %+v", err, sum)
	}
	id := sum.Cells[0].ID
	path := filepath.Join(rundir.CellDir(sum.RunDir, id), rundir.ResultFile)
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ExecCell(context.Background(), sum.RunDir, id, opts)
	var ue *exitcode.UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "already has a result") {
		t.Fatalf("err = %v; want a refusal", err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Error("result.json changed")
	}
}

// A task Slurm ended (time limit, out of memory, scancel) after exec-cell caught the signal and
// wrote its own "interrupted: stopped by the user": the Slurm outcome wins for the cell, with
// slurm.state recorded, and collecting the task again changes nothing. A task that ended by
// itself (FAILED, COMPLETED) keeps the cell's own result, and an ok cell stays ok.
func TestCollectTaskSlurmOutcomeWins(t *testing.T) {
	byUser := rundir.CellResult{ID: "000-c", Verdict: plans.VerdictInterrupted,
		Reasons: []rundir.Reason{{Code: "interrupted", Message: "stopped by the user (the process group was stopped with SIGINT)"}},
		Slurm:   &rundir.SlurmTask{JobID: "42", Task: 0, Node: "n1"}}
	failed := rundir.CellResult{ID: "000-c", Verdict: plans.VerdictFailed, Reasons: []rundir.Reason{{Code: "exit", Message: "exit status 1"}}}
	ok := rundir.CellResult{ID: "000-c", Verdict: plans.VerdictOK}
	for _, tc := range []struct {
		state       string
		written     rundir.CellResult
		verdict     string
		first, then string // the first two reason codes
		slurmState  string
	}{
		{"TIMEOUT", byUser, plans.VerdictFailed, "slurm-time-limit", "interrupted", "TIMEOUT"},
		{"OUT_OF_MEMORY", byUser, plans.VerdictFailed, "slurm-out-of-memory", "interrupted", "OUT_OF_MEMORY"},
		{"CANCELLED", byUser, plans.VerdictInterrupted, "slurm-cancelled", "interrupted", "CANCELLED"},
		{"TIMEOUT", failed, plans.VerdictFailed, "slurm-time-limit", "exit", "TIMEOUT"},
		{"FAILED", failed, plans.VerdictFailed, "exit", "", ""},
		{"COMPLETED", byUser, plans.VerdictInterrupted, "interrupted", "", ""},
		{"TIMEOUT", ok, plans.VerdictOK, "", "", ""},
	} {
		dir := t.TempDir()
		abs := filepath.Join(dir, rundir.CellsDir, "000-c")
		if err := os.MkdirAll(abs, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := rundir.WriteJSON(filepath.Join(abs, rundir.ResultFile), &tc.written, nil); err != nil {
			t.Fatal(err)
		}
		opts := Options{}
		opts.defaults()
		rec := cellRecord{CellRecord: rundir.CellRecord{Cell: plans.Cell{ID: "000-c"}}, abs: abs}
		job := rundir.SlurmJob{JobID: "42", Cells: []string{"000-c"}}
		task := slurm.Task{Index: 0, State: tc.state, Node: "n1"}
		collectTask(dir, rec, job, task, &opts)
		collectTask(dir, rec, job, task, &opts) // a resumed run collects its last array again
		r, err := rundir.ReadResult(abs)
		if err != nil {
			t.Fatal(err)
		}
		codes := make([]string, 0, len(r.Reasons))
		for _, x := range r.Reasons {
			codes = append(codes, x.Code)
		}
		want := []string{}
		for _, c := range []string{tc.first, tc.then} {
			if c != "" {
				want = append(want, c)
			}
		}
		if r.Verdict != tc.verdict || strings.Join(codes, ",") != strings.Join(want, ",") {
			t.Errorf("%s after %s: verdict %s, reasons %v; want %s, %v", tc.state, tc.written.Verdict, r.Verdict, codes, tc.verdict, want)
		}
		if got := ""; r.Slurm != nil {
			got = r.Slurm.State
			if got != tc.slurmState {
				t.Errorf("%s after %s: slurm.state = %q, want %q", tc.state, tc.written.Verdict, got, tc.slurmState)
			}
		} else if tc.slurmState != "" {
			t.Errorf("%s after %s: no slurm record", tc.state, tc.written.Verdict)
		}
	}
}

// A task that has been RUNNING for markerGrace without its start marker gets one warning naming
// the run directory, long before it ends; a task whose marker is there, or one seen running for
// less than the grace, gets none.
func TestSlurmMarkerWarnsEarly(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	opts := Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Now: func() time.Time { return now }}
	opts.defaults()
	job := &rundir.SlurmJob{JobID: "42", Cells: []string{"a", "b"}}
	if err := os.MkdirAll(filepath.Join(dir, slurm.MarkerDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, slurm.Marker("42", 1)), []byte("n1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var m markerWatch
	poll := func() {
		m.check(dir, job, slurm.Task{Index: 0, State: "RUNNING", Node: "n1"}, &opts)
		m.check(dir, job, slurm.Task{Index: 1, State: "RUNNING", Node: "n1"}, &opts)
	}
	poll()
	now = now.Add(markerGrace / 2)
	poll()
	if logs.Len() != 0 {
		t.Fatalf("warned within the grace: %s", logs.String())
	}
	now = now.Add(markerGrace)
	poll()
	poll()
	if n := strings.Count(logs.String(), "start marker"); n != 1 || !strings.Contains(logs.String(), "task 0 of job 42") || !strings.Contains(logs.String(), dir) {
		t.Errorf("want one warning for task 0 naming %s; got %d: %s", dir, n, logs.String())
	}
}

// TestLeaveSlurmRefusesWhenSlurmCannotSay: resuming a Slurm run with --executor local while
// Slurm cannot be asked about its last array would run any cell Slurm still runs a second
// time, in the same directory: it is refused, and nothing is reaped.
func TestLeaveSlurmRefusesWhenSlurmCannotSay(t *testing.T) {
	bin := t.TempDir()
	for _, name := range []string{"squeue", "sacct", "scontrol"} {
		script := "#!/bin/sh\necho 'slurm_load_jobs error: Unable to contact slurm controller (connect failure)' >&2\nexit 1\n"
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	opts := Options{Env: []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")}}
	opts.defaults()
	tag, err := slurmTag(dir)
	if err != nil {
		t.Fatal(err)
	}
	name := slurm.JobName(tag, 1)
	err = leaveSlurm(context.Background(), dir, []rundir.SlurmJob{{JobID: "42", Name: name, Cells: []string{"a", "b"}}}, &opts)
	if err == nil || !strings.Contains(err.Error(), "Slurm cannot say whether this run's array "+name+" (job 42)") || !strings.Contains(err.Error(), "squeue -n "+name) {
		t.Fatalf("err = %v; want a refusal naming the job and how to check it", err)
	}
}

// TestNoteNodeFitsTheArray: the manifest's per-task nodes always end one per cell, whatever an
// earlier (or edited) manifest held: more entries than cells made the old resize panic.
func TestNoteNodeFitsTheArray(t *testing.T) {
	for _, before := range [][]string{nil, {"a"}, {"a", "b", "c", "d", "e"}} {
		job := &rundir.SlurmJob{JobID: "7", Cells: []string{"c0", "c1", "c2"}, Nodes: before}
		noteNode(job, 1, nil, slurm.Task{Index: 1, State: "COMPLETED", Node: "n1"})
		if len(job.Nodes) != 3 || job.Nodes[1] != "n1" {
			t.Errorf("nodes %v after noting task 1 on n1 (before %v)", job.Nodes, before)
		}
	}
}

// TestFindOwnArrayActsOnlyOnTheRunsJobs: a recorded array is found by its name among this user's
// jobs, whatever job id the manifest records; a name without this run's id, a job of another
// user with the run's name, and a job id that Slurm lists under another name are never taken
// for the run's; two jobs of the user with the run's name are refused rather than guessed.
func TestFindOwnArrayActsOnlyOnTheRunsJobs(t *testing.T) {
	dir := t.TempDir()
	tag, err := slurmTag(dir)
	if err != nil {
		t.Fatal(err)
	}
	name := slurm.JobName(tag, 1)
	uid := strconv.Itoa(os.Getuid())
	for _, tc := range []struct {
		what, squeue string
		job          rundir.SlurmJob
		found        bool
		id, err      string
	}{
		{"the recorded id is not the named job", "50|" + name + "|" + uid + "|RUNNING\n", rundir.SlurmJob{JobID: "7", Name: name}, true, "50", ""},
		{"no id was recorded", "50|" + name + "|" + uid + "|PENDING\n", rundir.SlurmJob{Name: name}, true, "50", ""},
		{"another user's job with the run's name", "50|" + name + "|" + uid + "1|RUNNING\n", rundir.SlurmJob{JobID: "50", Name: name}, false, "50", ""},
		{"a name without the run's id", "7|sleep|" + uid + "|RUNNING\n", rundir.SlurmJob{JobID: "7", Name: "sleep"}, false, "7", ""},
		{"two jobs with the run's name", "50|" + name + "|" + uid + "|RUNNING\n51|" + name + "|" + uid + "|RUNNING\n", rundir.SlurmJob{JobID: "50", Name: name}, false, "50", "2 Slurm jobs of this user are named " + name + " (50, 51)"},
	} {
		bin := t.TempDir()
		script := "#!/bin/sh\ncat <<'EOF'\n" + tc.squeue + "EOF\n"
		if err := os.WriteFile(filepath.Join(bin, "squeue"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bin, "sacct"), []byte("#!/bin/sh\necho 'Slurm accounting storage is disabled'\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		// exec.Command looks commands up in the test's own PATH, not in Options.Env.
		t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		var log bytes.Buffer
		opts := Options{Env: []string{"PATH=" + os.Getenv("PATH")}, Logger: slog.New(slog.NewTextHandler(&log, nil))}
		opts.defaults()
		job := tc.job
		found, err := findOwnArray(context.Background(), dir, &job, &opts)
		if found != tc.found || job.JobID != tc.id || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: found %v, job %q, err %v; want %v, %q, %q\n%s", tc.what, found, job.JobID, err, tc.found, tc.id, tc.err, log.String())
		}
	}
}
