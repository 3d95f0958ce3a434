package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/exitcode"
	"github.com/sglprof/runner/runner/proc"
)

// startStray starts `sleep 300` outside the runner with env added to ours, and returns it with
// its identity (pid and start time, as a process record names it) and a channel closed when it
// exits.
func startStray(t *testing.T, env ...string) (proc.ProcessID, <-chan struct{}) {
	t.Helper()
	stray := exec.Command("sleep", "300")
	stray.Env = append(os.Environ(), env...)
	if err := stray.Start(); err != nil {
		t.Skipf("no sleep: %v", err)
	}
	exited := make(chan struct{})
	go func() { stray.Wait(); close(exited) }()
	t.Cleanup(func() { stray.Process.Kill(); <-exited })
	st, ok := proc.ReadStat(stray.Process.Pid)
	if !ok {
		t.Skip("no /proc")
	}
	return proc.ProcessID{PID: stray.Process.Pid, Start: st.Start}, exited
}

// runWithoutResult runs twoCells and removes the second cell's result, as a run killed during
// that cell leaves it; it returns the run directory and that cell's directory.
func runWithoutResult(t *testing.T, opts Options) (string, string) {
	t.Helper()
	sum, err := Run(context.Background(), testPlan(t, twoCells), opts)
	if err != nil || sum.ExitCode != exitcode.OK {
		t.Fatalf("run: %v, %+v", err, sum)
	}
	cell := filepath.Join(sum.RunDir, rundir.CellsDir, sum.Cells[1].ID)
	if err := os.Remove(filepath.Join(cell, rundir.ResultFile)); err != nil {
		t.Fatal(err)
	}
	return sum.RunDir, cell
}

func writeRecord(t *testing.T, path string, rec proc.Record) {
	t.Helper()
	b, _ := json.Marshal(rec)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Issue 14: a run killed together with its cells' supervisors leaves processes.json behind;
// --resume kills the processes it names that carry the record's process token in their
// environment (as every process the runner starts does) before running anything.
func TestResumeKillsRecordedProcesses(t *testing.T) {
	opts := simOptions(t)
	dir, cell := runWithoutResult(t, opts)
	token := strings.Repeat("ab", 16)
	id, exited := startStray(t, proc.TokenEnv+"="+token)
	writeRecord(t, filepath.Join(cell, proc.RecordFile), proc.Record{Token: token, Processes: []proc.ProcessID{id}})
	if _, err := Resume(context.Background(), dir, opts); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the recorded process still runs after --resume")
	}
	// The record is removed once what it names is gone; the rest of the killed attempt is kept.
	kept := filepath.Join(dir, "interrupted", filepath.Base(cell)+"-1")
	if _, err := os.Stat(filepath.Join(kept, proc.RecordFile)); !os.IsNotExist(err) {
		t.Errorf("the record is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(kept, rundir.LogFile)); err != nil {
		t.Errorf("the killed attempt's log is not kept: %v", err)
	}
}

// A process record naming a process the runner did not start (its true pid and start time, as
// anyone can read them in /proc), whether at the path the runner writes or planted deeper in
// the run directory, kills nothing: the process lacks the record's token (or the record has
// none), so --resume leaves it alone and says which pid and why.
func TestResumeSparesForeignProcesses(t *testing.T) {
	var log bytes.Buffer
	opts := simOptions(t)
	opts.Logger = slog.New(slog.NewTextHandler(&log, nil))
	dir, cell := runWithoutResult(t, opts)
	id, exited := startStray(t)
	named := proc.Record{Supervisor: id, Processes: []proc.ProcessID{id}}
	writeRecord(t, filepath.Join(cell, proc.RecordFile), named)
	for _, planted := range []string{
		filepath.Join(cell, "traces", proc.RecordFile),
		filepath.Join(dir, "a", "b", proc.RecordFile),
		filepath.Join(dir, rundir.CellsDir, "x", "y", proc.RecordFile),
	} {
		writeRecord(t, planted, named)
	}
	// A forged token does not help: the process does not carry it.
	forged := named
	forged.Token = strings.Repeat("cd", 16)
	writeRecord(t, filepath.Join(dir, rundir.ServersDir, "1", proc.RecordFile), forged)

	sum, err := Resume(context.Background(), dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if sum.ExitCode != exitcode.OK {
		t.Errorf("resume: exit %d, %+v", sum.ExitCode, sum.Cells)
	}
	select {
	case <-exited:
		t.Fatal("--resume killed a process the runner did not start")
	default:
	}
	if st, ok := proc.ReadStat(id.PID); !ok || st.Start != id.Start {
		t.Fatalf("the foreign process %d is gone", id.PID)
	}
	out := log.String()
	pid := "pid=" + strconv.Itoa(id.PID)
	if !strings.Contains(out, pid) || !strings.Contains(out, "left alone") {
		t.Errorf("the runner does not say which process it left alone and why:\n%s", out)
	}
	for _, want := range []string{"no process token", "does not carry", "record=" + filepath.Join(rundir.ServersDir, "1", proc.RecordFile)} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	// A record that names a live process is the user's to look at: it is kept, with the cell's
	// interrupted attempt.
	if _, err := os.Stat(filepath.Join(dir, "interrupted", filepath.Base(cell)+"-1", proc.RecordFile)); err != nil {
		t.Errorf("the record naming the foreign process is not kept: %v", err)
	}
}
