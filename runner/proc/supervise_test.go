package proc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"
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
// record left in the cell directory lets Record.Reap kill the grandchild,
// which carries the record's token like every process of the run.
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
	if !validToken(got.Token) {
		t.Fatalf("the record holds no valid token: %q", got.Token)
	}
	if st, err := os.Stat(rec); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("record mode %v, %v; want 0600 (it holds the token)", st.Mode(), err)
	}
	syscall.Kill(got.Supervisor.PID, syscall.SIGKILL)
	r.Process.Kill()
	r.Wait()
	waitFor(t, 10*time.Second, "the supervisor to die", func() bool { return gone(got.Supervisor.PID) })
	if gone(e.pid) {
		t.Fatal("the grandchild died with its supervisor; this test needs it to survive")
	}
	n, spared := got.Reap()
	if n < 1 || len(spared) > 0 {
		t.Fatalf("Reap = %d, %+v; want the grandchild killed and nothing spared", n, spared)
	}
	waitFor(t, 10*time.Second, "the grandchild to end and the port to be free", func() bool { return gone(e.pid) && portFree(e.port) })
}

// startSleep starts `sh -c 'sleep 300 & wait'` (a process and its child)
// outside Run, with env added to ours, and returns both identities.
func startSleep(t *testing.T, env ...string) (parent, child ProcessID) {
	t.Helper()
	c := exec.Command("sh", "-c", "sleep 300 & echo started; wait")
	c.Env = append(os.Environ(), env...)
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Skipf("no sh: %v", err)
	}
	t.Cleanup(func() {
		for _, d := range Descendants(c.Process.Pid) {
			syscall.Kill(d.PID, syscall.SIGKILL)
		}
		c.Process.Kill()
		c.Wait()
	})
	b := make([]byte, 8)
	if _, err := io.ReadFull(out, b); err != nil {
		t.Fatal(err)
	}
	st, ok := ReadStat(c.Process.Pid)
	ds := Descendants(c.Process.Pid)
	if !ok || len(ds) != 1 {
		t.Fatalf("stat %v, children %v", ok, ds)
	}
	return ProcessID{PID: c.Process.Pid, Start: st.Start}, ds[0]
}

// Issue 22: a record is data anyone can write, naming any process by its
// pid and true start time. Reap signals none that lacks the record's token,
// neither a named one nor its descendants, and says why it left each alone.
func TestReapSparesForeignProcesses(t *testing.T) {
	parent, child := startSleep(t)
	token, err := newToken()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		rec  Record
		why  string
	}{
		{"no token", Record{Supervisor: parent, Processes: []ProcessID{parent, child}}, "no process token"},
		{"malformed token", Record{Supervisor: parent, Token: "x", Processes: []ProcessID{child}}, "no process token"},
		{"another token", Record{Supervisor: parent, Token: token, Processes: []ProcessID{child}}, "does not carry"},
		{"reused pid", Record{Processes: []ProcessID{{PID: parent.PID, Start: parent.Start + 1}}, Token: token}, "another process"},
	} {
		n, spared := tc.rec.Reap()
		if n != 0 {
			t.Fatalf("%s: Reap killed %d", tc.name, n)
		}
		if len(spared) == 0 || spared[0].PID != parent.PID || spared[0].Name != "sh" || !strings.Contains(spared[0].Why, tc.why) {
			t.Errorf("%s: spared %+v; want pid %d (sh) first, because %q", tc.name, spared, parent.PID, tc.why)
		}
		if gone(parent.PID) || gone(child.PID) {
			t.Fatalf("%s: a foreign process was killed", tc.name)
		}
	}
}

// A process of the run (it carries the token) is killed, but a descendant
// that dropped the token from its environment cannot prove it is the run's:
// it is left alone, with the reason.
func TestReapChecksEveryDescendant(t *testing.T) {
	token, err := newToken()
	if err != nil {
		t.Fatal(err)
	}
	// env -u: the child sleep starts without the token.
	c := exec.Command("sh", "-c", "env -u "+TokenEnv+" sleep 300 & echo started; wait")
	c.Env = withToken(os.Environ(), token)
	out, _ := c.StdoutPipe()
	if err := c.Start(); err != nil {
		t.Skipf("no sh: %v", err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	io.ReadFull(out, make([]byte, 8))
	ds := Descendants(c.Process.Pid)
	st, _ := ReadStat(c.Process.Pid)
	if len(ds) != 1 {
		t.Fatalf("children %v", ds)
	}
	t.Cleanup(func() { syscall.Kill(ds[0].PID, syscall.SIGKILL) })
	// The child is a fork of the shell, with the token, until env has exec'd sleep.
	waitFor(t, 10*time.Second, "the child to run sleep", func() bool { return comm(ds[0].PID) == "sleep" })
	n, spared := Record{Token: token, Processes: []ProcessID{{PID: c.Process.Pid, Start: st.Start}}}.Reap()
	if n != 1 || len(spared) != 1 || spared[0].PID != ds[0].PID || !strings.Contains(spared[0].Why, "descends from a process of the run, but its environment does not carry") {
		t.Fatalf("Reap = %d, %+v; want the shell killed and its token-less child %d spared", n, spared, ds[0].PID)
	}
	c.Wait()
	if gone(ds[0].PID) {
		t.Error("the child without the token was killed")
	}
}

// holdsEntry is scanEnv asked for one whole element.
func holdsEntry(r io.Reader, entry string, limit int64) (bool, error) {
	return scanEnv(r, limit, func(kv []byte) bool { return string(kv) == entry })
}

func TestScanEnv(t *testing.T) {
	const e = TokenEnv + "=0123"
	for _, tc := range []struct {
		env  string
		want bool
	}{
		{e + "\x00", true},
		{e, true}, // a last element without its NUL
		{"A=1\x00" + e + "\x00B=2\x00", true},
		{"A=1\x00" + e + "4\x00", false},
		{"X" + e + "\x00", false},
		{"A=1\x00B=2\x00", false},
		{"", false},
	} {
		for _, r := range []func(string) io.Reader{
			func(s string) io.Reader { return strings.NewReader(s) },
			func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) },
		} {
			if got, err := holdsEntry(r(tc.env), e, 1<<20); got != tc.want || err != nil {
				t.Errorf("holdsEntry(%q) = %v, %v; want %v", tc.env, got, err, tc.want)
			}
		}
	}
	big := strings.Repeat("A=1\x00", 1<<16) + e + "\x00"
	if got, err := holdsEntry(strings.NewReader(big), e, 1<<20); !got || err != nil {
		t.Errorf("entry after 256 KiB: %v, %v", got, err)
	}
	if _, err := holdsEntry(strings.NewReader(big), e, 1<<10); err == nil {
		t.Error("no error past the limit")
	}
	if _, err := holdsEntry(strings.NewReader(strings.Repeat("A", 2*maxEnvEntry)), e, 4*maxEnvEntry); err == nil {
		t.Error("no error for an element longer than the kernel allows")
	}
	// EnvOf reads a live process's environment through it.
	if got := EnvOf(os.Getpid(), "PATH"); got != os.Getenv("PATH") {
		t.Errorf("EnvOf(self, PATH) = %q", got)
	}
}

// FuzzScanEnv: the chunked scan finds exactly the whole elements of the list.
func FuzzScanEnv(f *testing.F) {
	f.Add([]byte("A=1\x00K=v\x00"), "K=v", uint8(3))
	f.Add([]byte("K=v"), "K=v", uint8(1))
	f.Fuzz(func(t *testing.T, env []byte, entry string, chunk uint8) {
		if strings.IndexByte(entry, 0) >= 0 {
			return
		}
		elems := strings.Split(string(env), "\x00")
		if elems[len(elems)-1] == "" {
			elems = elems[:len(elems)-1] // the terminator of the last element
		}
		want := slices.Contains(elems, entry)
		r := io.Reader(bytes.NewReader(env))
		if chunk%2 == 1 {
			r = iotest.OneByteReader(r)
		}
		got, err := holdsEntry(r, entry, 1<<20)
		if err != nil || got != want {
			t.Fatalf("holdsEntry(%q, %q) = %v, %v; want %v", env, entry, got, err, want)
		}
	})
}

// The supervisor's first record, written as the child starts and before any
// walk of /proc, names the child with its true start time, so that a
// supervisor killed in its first moments still leaves Reap what to act on.
func TestFirstRecordNamesTheChild(t *testing.T) {
	rec := filepath.Join(t.TempDir(), RecordFile)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Result, 1)
	go func() { done <- Run(ctx, Spec{Argv: []string{"sleep", "30"}, Record: rec}, nil) }()
	defer func() { cancel(); <-done }()
	var got Record
	waitFor(t, 10*time.Second, "the first record", func() bool {
		b, err := os.ReadFile(rec)
		return err == nil && json.Unmarshal(b, &got) == nil
	})
	if len(got.Processes) != 1 {
		t.Fatalf("first record names %+v; want the child alone", got.Processes)
	}
	st, ok := ReadStat(got.Processes[0].PID)
	if !ok || st.PPID != got.Supervisor.PID || st.Start != got.Processes[0].Start {
		t.Fatalf("recorded %+v; its stat %+v (found %v), supervisor %d", got.Processes[0], st, ok, got.Supervisor.PID)
	}
}
