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

// supervisor stop|kill RECORD: signal the supervisor a cell's process record names. stop waits
// (up to 60s) until the record lists at least two processes besides the supervisor (the cell's
// program and the grandchild it started), then sends SIGSTOP, so that the supervisor cannot
// react when the runner is killed next; kill sends SIGKILL. Together they make the case where
// the runner and the supervisor both die and only the record is left.
func cmdSupervisor(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 || (args[0] != "stop" && args[0] != "kill") {
		ts.Fatalf("usage: supervisor stop|kill RECORD")
	}
	var rec proc.Record
	deadline := time.Now().Add(60 * time.Second)
	for {
		b, err := os.ReadFile(ts.MkAbs(args[1]))
		if err == nil && json.Unmarshal(b, &rec) == nil && (args[0] == "kill" || len(rec.Processes) >= 2) {
			break
		}
		if time.Now().After(deadline) {
			ts.Fatalf("supervisor: %s does not list the cell's processes after 60s (%v)", args[1], err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st, ok := proc.ReadStat(rec.Supervisor.PID); !ok || st.Start != rec.Supervisor.Start {
		ts.Fatalf("supervisor: %d is not running", rec.Supervisor.PID)
	}
	sig := syscall.SIGSTOP
	if args[0] == "kill" {
		sig = syscall.SIGKILL
	}
	ts.Check(syscall.Kill(rec.Supervisor.PID, sig))
}
