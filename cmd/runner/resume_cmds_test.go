package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/sglprof/runner/runner/proc"
)

// Script commands of the resume scripts (cmd/runner/testdata/script/resume*.txtar).

// foreign start VAR [-token] RECORD...: start `sleep 300` outside the runner (a process the
// runner did not start, as a user's editor or database would be), set VAR to its pid, and write
// a process record naming it by its true pid and start time at each RECORD path (directories
// are made); with -token the record also holds a well-formed token the process does not carry.
// The process is killed when the script ends.
// foreign alive VAR: the process is still running (with its start time); `! foreign alive VAR`
// says it is gone.
func cmdForeign(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 || (args[0] == "start" && (neg || len(args) < 3)) {
		ts.Fatalf("usage: foreign start VAR [-token] RECORD... | foreign alive VAR")
	}
	switch args[0] {
	case "start":
		c := exec.Command("sleep", "300")
		c.Env = []string{"PATH=" + os.Getenv("PATH")} // not the script's: noprocs must not see it
		ts.Check(c.Start())
		done := make(chan struct{})
		go func() { c.Wait(); close(done) }()
		ts.Defer(func() { c.Process.Kill(); <-done })
		st, ok := proc.ReadStat(c.Process.Pid)
		if !ok {
			ts.Fatalf("foreign: no /proc/%d/stat", c.Process.Pid)
		}
		id := proc.ProcessID{PID: c.Process.Pid, Start: st.Start}
		ts.Setenv(args[1], strconv.Itoa(id.PID))
		ts.Setenv(args[1]+"_START", strconv.FormatUint(id.Start, 10))
		rec := map[string]any{"supervisor": id, "processes": []proc.ProcessID{id}}
		paths := args[2:]
		if len(paths) > 1 && paths[0] == "-token" {
			// A token of the right form that the process does not carry: forging one is easy.
			rec["token"], paths = "0123456789abcdef0123456789abcdef", paths[1:]
		}
		b, _ := json.Marshal(rec)
		for _, p := range paths {
			p = ts.MkAbs(p)
			ts.Check(os.MkdirAll(filepath.Dir(p), 0o755))
			ts.Check(os.WriteFile(p, b, 0o600))
		}
	case "alive":
		pid, err := strconv.Atoi(ts.Getenv(args[1]))
		ts.Check(err)
		start, _ := strconv.ParseUint(ts.Getenv(args[1]+"_START"), 10, 64)
		st, ok := proc.ReadStat(pid)
		alive := ok && st.Start == start && st.State != 'Z' && st.State != 'X' && syscall.Kill(pid, 0) == nil
		if alive == neg {
			ts.Fatalf("foreign process %d alive: %v", pid, alive)
		}
	default:
		ts.Fatalf("usage: foreign start VAR [-token] RECORD... | foreign alive VAR")
	}
}

// supervisor kill RECORD: kill the supervisor a cell's process record names so that neither it
// nor the runner can clean up, leaving only the record. It waits (up to 60s) until the record
// lists at least two processes besides the supervisor (the cell's program and the grandchild it
// started), stops the runner (the supervisor's parent) with SIGSTOP so that it cannot react to
// its supervisor's death, and kills the supervisor with SIGKILL; the script kills the stopped
// runner next. The supervisor itself is never stopped: when its parent dies, the kernel sends a
// stopped process whose process group is thereby orphaned SIGHUP and SIGCONT, which wakes it to
// clean up (the supervisor's own, intended answer to losing the runner), so stopping it and then
// killing the runner raced the script's next command. The runner is started under setsid, so
// that the group it is stopped in is its own, not the test binary's.
func cmdSupervisor(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 || args[0] != "kill" {
		ts.Fatalf("usage: supervisor kill RECORD")
	}
	var rec proc.Record
	deadline := time.Now().Add(60 * time.Second)
	for {
		b, err := os.ReadFile(ts.MkAbs(args[1]))
		if err == nil && json.Unmarshal(b, &rec) == nil && len(rec.Processes) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			ts.Fatalf("supervisor: %s does not list the cell's processes after 60s (%v)", args[1], err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	st, ok := proc.ReadStat(rec.Supervisor.PID)
	if !ok || st.Start != rec.Supervisor.Start {
		ts.Fatalf("supervisor: %d is not running", rec.Supervisor.PID)
	}
	runner, ok := proc.ReadStat(st.PPID)
	if !ok || runner.PGRP != st.PPID {
		ts.Fatalf("supervisor: its parent %d is not a runner in a process group of its own (start it with setsid)", st.PPID)
	}
	ts.Check(syscall.Kill(st.PPID, syscall.SIGSTOP))
	ts.Check(syscall.Kill(rec.Supervisor.PID, syscall.SIGKILL))
	// Dead means a zombie here: the stopped runner cannot reap it.
	for {
		s, ok := proc.ReadStat(rec.Supervisor.PID)
		if !ok || s.Start != rec.Supervisor.Start || s.State == 'Z' || s.State == 'X' {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("supervisor: %d still running after SIGKILL", rec.Supervisor.PID)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
