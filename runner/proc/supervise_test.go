package proc

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// escapee is the "listen" helper's report: the port it holds and its pid.
type escapee struct{ port, pid, ppid int }

// startEscape starts the "supervised-runner" helper (a runner whose cell
// starts a setsid grandchild holding a port) and waits for the grandchild.
func startEscape(t *testing.T) (*exec.Cmd, escapee, string) {
	t.Helper()
	dir := t.TempDir()
	r := exec.Command(helperArgv(t)[0])
	r.Env = helperEnvFor("supervised-runner", "PROC_TEST_DIR="+dir)
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Process.Kill(); r.Wait() })
	var e escapee
	waitFor(t, 10*time.Second, "the grandchild to listen", func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "listen"))
		return err == nil && func() bool { _, err := fmt.Sscan(string(b), &e.port, &e.pid, &e.ppid); return err == nil }()
	})
	t.Cleanup(func() { syscall.Kill(e.pid, syscall.SIGKILL) })
	return r, e, dir
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func gone(pid int) bool {
	st, ok := ReadStat(pid)
	return !ok || st.State == 'Z' || st.State == 'X'
}

// Issue 14: SIGKILL the runner while a cell's backend has a setsid
// grandchild holding a port; the supervisor sees its lifeline close and
// kills everything: within 10 s no process of the cell remains and the port
// is free.
func TestRunnerKilledLeavesNothing(t *testing.T) {
	r, e, _ := startEscape(t)
	if st, ok := ReadStat(e.pid); !ok || st.PGRP == r.Process.Pid {
		t.Fatalf("grandchild %d not running outside the runner's group: %+v", e.pid, st)
	}
	cell := Descendants(r.Process.Pid)
	if !slices.ContainsFunc(cell, func(p ProcessID) bool { return p.PID == e.pid }) {
		t.Fatalf("the runner's descendants %v lack the grandchild %d", cell, e.pid)
	}
	if err := r.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	r.Wait()
	waitFor(t, 10*time.Second, "every process of the cell to end and the port to be free", func() bool {
		for _, p := range cell {
			if !gone(p.PID) {
				return false
			}
		}
		return portFree(e.port)
	})
}

// When the supervisor dies as well (SIGKILL to it and the runner), the
// record left in the cell directory lets ReapRecorded kill the grandchild.
func TestReapRecordedKillsSurvivors(t *testing.T) {
	r, e, dir := startEscape(t)
	rec := filepath.Join(dir, RecordFile)
	var got Record
	waitFor(t, 10*time.Second, "the record to list the grandchild", func() bool {
		b, err := os.ReadFile(rec)
		if err != nil || json.Unmarshal(b, &got) != nil {
			return false
		}
		return slices.ContainsFunc(got.Processes, func(p ProcessID) bool { return p.PID == e.pid })
	})
	syscall.Kill(got.Supervisor.PID, syscall.SIGKILL)
	r.Process.Kill()
	r.Wait()
	waitFor(t, 10*time.Second, "the supervisor to die", func() bool { return gone(got.Supervisor.PID) })
	if gone(e.pid) {
		t.Fatal("the grandchild died with its supervisor; this test needs it to survive")
	}
	n, err := ReapRecorded(filepath.Dir(dir))
	if err != nil || n < 1 {
		t.Fatalf("ReapRecorded = %d, %v; want the grandchild killed", n, err)
	}
	waitFor(t, 10*time.Second, "the grandchild to end and the port to be free", func() bool { return gone(e.pid) && portFree(e.port) })
	if _, err := os.Stat(rec); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record still there: %v", err)
	}
}

// A record naming a pid that now belongs to another process (a different
// start time) kills nothing.
func TestReapRecordedSparesReusedPID(t *testing.T) {
	dir := t.TempDir()
	me, ok := ReadStat(os.Getpid())
	if !ok {
		t.Skip("no /proc")
	}
	rec := Record{Supervisor: ProcessID{PID: os.Getpid(), Start: me.Start + 1}, Processes: []ProcessID{{PID: os.Getpid(), Start: me.Start + 7}}}
	if err := os.WriteFile(filepath.Join(dir, RecordFile), rec.encode(), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := ReapRecorded(dir); n != 0 || err != nil {
		t.Fatalf("ReapRecorded = %d, %v; want 0 (start times differ)", n, err)
	}
	if err := os.WriteFile(filepath.Join(dir, RecordFile), []byte("{garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReapRecorded(dir); err == nil || !strings.Contains(err.Error(), "remove it by hand") {
		t.Errorf("garbage record: err %v", err)
	}
}
