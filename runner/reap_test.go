package runner

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/proc"
)

// Issue 14: a run killed together with its cells' supervisors leaves processes.json behind;
// --resume kills the processes it names (same pid, same start time) before running anything.
func TestResumeKillsRecordedProcesses(t *testing.T) {
	p := testPlan(t, twoCells)
	opts := simOptions(t)
	sum, err := Run(context.Background(), p, opts)
	if err != nil || sum.ExitCode != ExitOK {
		t.Fatalf("run: %v, %+v", err, sum)
	}
	cell := filepath.Join(sum.RunDir, rundir.CellsDir, sum.Cells[1].ID)
	if err := os.Remove(filepath.Join(cell, rundir.ResultFile)); err != nil {
		t.Fatal(err)
	}
	// A stray left by the killed run: a process of ours, recorded with its start time.
	stray := exec.Command("sleep", "300")
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
	rec, _ := json.Marshal(proc.Record{Processes: []proc.ProcessID{{PID: stray.Process.Pid, Start: st.Start}}})
	if err := os.WriteFile(filepath.Join(cell, proc.RecordFile), rec, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Resume(context.Background(), sum.RunDir, opts); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the recorded process still runs after --resume")
	}
	if _, err := os.Stat(filepath.Join(cell, proc.RecordFile)); !os.IsNotExist(err) {
		t.Errorf("the record is still there: %v", err)
	}
}
