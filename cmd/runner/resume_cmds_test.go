package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

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
