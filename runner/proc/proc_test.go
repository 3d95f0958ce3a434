package proc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Short grace periods keep the suite fast; the ladder's logic does not
// depend on their size.
const (
	testGrace    = 300 * time.Millisecond
	testLeftover = 150 * time.Millisecond
)

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// collector records lines; OnLine calls never overlap, but the test reads
// the slice afterwards from another goroutine, hence the mutex.
type collector struct {
	mu    sync.Mutex
	lines []Line
}

func (c *collector) on(l Line) {
	c.mu.Lock()
	c.lines = append(c.lines, l)
	c.mu.Unlock()
}

func (c *collector) texts(stream string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, l := range c.lines {
		if stream == "" || l.Stream == stream {
			out = append(out, l.Text)
		}
	}
	return out
}

func needSh(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("needs /bin/sh for a child that spawns grandchildren")
	}
}

// assertGroupGone checks, through kill(2) and /proc, that nothing of the
// child's process group is left.
func assertGroupGone(t *testing.T, pgid int) {
	t.Helper()
	if pgid == 0 {
		return
	}
	if GroupAlive(pgid) {
		m, _ := GroupMembers(pgid)
		t.Errorf("process group %d still alive after Run returned: members %v", pgid, m)
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	if m, err := GroupMembers(pgid); err == nil && len(m) > 0 {
		t.Errorf("/proc lists members %v of group %d after Run returned", m, pgid)
	}
}

func TestExitCodeAndStreams(t *testing.T) {
	needSh(t)
	var c collector
	var log bytes.Buffer
	res := Run(context.Background(), Spec{
		Argv:   []string{"/bin/sh", "-c", `echo out1; echo err1 >&2; printf 'crlf\r\n'; printf 'no newline'; exit 3`},
		Log:    &log,
		OnLine: c.on,
	}, testLogger(t))
	assertGroupGone(t, res.PID)
	if res.StartErr != nil {
		t.Fatalf("StartErr: %v", res.StartErr)
	}
	if res.ExitCode != 3 || res.Signal != "" {
		t.Errorf("ExitCode=%d Signal=%q, want 3 and none", res.ExitCode, res.Signal)
	}
	if res.TimedOut || res.Interrupted || res.StoppedWith != "" || res.Leftovers != 0 {
		t.Errorf("unexpected stop info: %+v", res)
	}
	if got, want := strings.Join(c.texts(Stdout), "|"), "out1|crlf|no newline"; got != want {
		t.Errorf("stdout lines %q, want %q", got, want)
	}
	if got := c.texts(Stderr); len(got) != 1 || got[0] != "err1" {
		t.Errorf("stderr lines %q, want [err1]", got)
	}
	if res.Lines != 4 {
		t.Errorf("Lines=%d, want 4", res.Lines)
	}
	for i, l := range c.lines {
		if l.No != i+1 {
			t.Errorf("line %d has No %d", i, l.No)
		}
	}
	for _, want := range []string{"out1\n", "err1\n", "crlf\r\n", "no newline"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log %q lacks raw %q", log.String(), want)
		}
	}
	if res.PID <= 0 || res.Start.IsZero() || res.End.Before(res.Start) {
		t.Errorf("PID/Start/End not set sensibly: %d %v %v", res.PID, res.Start, res.End)
	}
}

func TestMissingBinary(t *testing.T) {
	res := Run(context.Background(), Spec{Argv: []string{"sglang-does-not-exist-xyz", "generate"}}, testLogger(t))
	if res.StartErr == nil {
		t.Fatal("no StartErr for a missing program")
	}
	if !errors.Is(res.StartErr, exec.ErrNotFound) {
		t.Errorf("StartErr %v does not wrap exec.ErrNotFound", res.StartErr)
	}
	for _, want := range []string{"sglang-does-not-exist-xyz", "PATH", "backend.command"} {
		if !strings.Contains(res.StartErr.Error(), want) {
			t.Errorf("StartErr %q lacks %q", res.StartErr, want)
		}
	}
	if res.ExitCode != -1 || res.PID != 0 {
		t.Errorf("ExitCode=%d PID=%d, want -1 and 0", res.ExitCode, res.PID)
	}
}

func TestStartErrors(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "script.sh")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\necho hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		spec Spec
		want string
	}{
		{"empty argv", Spec{}, "empty command line"},
		{"not executable", Spec{Argv: []string{notExec}}, "not executable"},
		{"bad dir", Spec{Argv: helperArgv(t), Dir: filepath.Join(dir, "missing")}, "missing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := Run(context.Background(), tc.spec, testLogger(t))
			if res.StartErr == nil || !strings.Contains(res.StartErr.Error(), tc.want) {
				t.Errorf("StartErr = %v, want it to mention %q", res.StartErr, tc.want)
			}
			if res.ExitCode != -1 {
				t.Errorf("ExitCode=%d, want -1", res.ExitCode)
			}
		})
	}
}

func TestContextAlreadyDone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := Run(ctx, Spec{Argv: helperArgv(t), Env: helperEnvFor("args")}, testLogger(t))
	if !res.Interrupted || !errors.Is(res.StartErr, context.Canceled) || res.PID != 0 {
		t.Errorf("got %+v, want Interrupted, StartErr wrapping context.Canceled, nothing started", res)
	}
}

func TestArgvEnvDirVerbatim(t *testing.T) {
	dir := t.TempDir()
	args := []string{`a "quoted" prompt`, "$(touch pwned)", "two\nlines", "non-ASCII: 猫 café", "", "; rm -rf /"}
	var out bytes.Buffer
	res := Run(context.Background(), Spec{
		Argv: helperArgv(t, args...),
		Env:  helperEnvFor("args", "PROC_TEST_VALUE=v=1 $HOME"),
		Dir:  dir,
		Log:  &out,
	}, testLogger(t))
	if res.StartErr != nil || res.ExitCode != 0 {
		t.Fatalf("run failed: %+v", res)
	}
	var got struct {
		Args []string
		Dir  string
		Env  string
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("decode child output %q: %v", out.String(), err)
	}
	if strings.Join(got.Args, "\x00") != strings.Join(args, "\x00") {
		t.Errorf("child saw args %q, want %q", got.Args, args)
	}
	if real, _ := filepath.EvalSymlinks(dir); got.Dir != dir && got.Dir != real {
		t.Errorf("child ran in %q, want %q", got.Dir, dir)
	}
	if got.Env != "v=1 $HOME" {
		t.Errorf("child env value %q, want it verbatim", got.Env)
	}
	if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
		t.Error("an argument was evaluated by a shell")
	}
}

func TestLongLineDoesNotBreak(t *testing.T) {
	const n = 5<<20 + 12345 // more than MaxLine several times, no newline
	var c collector
	var log countingWriter
	res := Run(context.Background(), Spec{
		Argv:   helperArgv(t),
		Env:    helperEnvFor("longline", "PROC_TEST_BYTES="+strconv.Itoa(n)),
		Log:    &log,
		OnLine: c.on,
	}, testLogger(t))
	assertGroupGone(t, res.PID)
	if res.ExitCode != 0 || res.Signal != "" {
		t.Fatalf("child did not exit 0: exit %d signal %q (SIGPIPE means the pipe was closed)", res.ExitCode, res.Signal)
	}
	if log.n != n+5 {
		t.Errorf("log holds %d bytes, want %d", log.n, n+5)
	}
	total := 0
	for i, l := range c.lines[:len(c.lines)-1] {
		total += len(l.Text)
		if i > 0 {
			total -= Overlap // each piece repeats the previous one's end
		}
		if len(l.Text) > MaxLine {
			t.Errorf("line %d is %d bytes, above MaxLine", i, len(l.Text))
		}
		wantPartial := i < len(c.lines)-2
		if l.Partial != wantPartial {
			t.Errorf("line %d Partial=%v, want %v", i, l.Partial, wantPartial)
		}
	}
	if total != n {
		t.Errorf("long line pieces add up to %d bytes, want %d", total, n)
	}
	if want := (n-Overlap)/(MaxLine-Overlap) + 2; len(c.lines) != want {
		t.Errorf("%d lines, want %d", len(c.lines), want)
	}
	if last := c.lines[len(c.lines)-1]; last.Text != "end" || last.Partial {
		t.Errorf("last line %+v, want end", last)
	}
}

func TestCarriageReturnFlood(t *testing.T) {
	const updates = 200000 // ~10 MB of progress bar without a newline
	var c collector
	var log countingWriter
	res := Run(context.Background(), Spec{
		Argv:   helperArgv(t),
		Env:    helperEnvFor("crflood", "PROC_TEST_UPDATES="+strconv.Itoa(updates)),
		Log:    &log,
		OnLine: c.on,
	}, testLogger(t))
	assertGroupGone(t, res.PID)
	if res.ExitCode != 0 || res.Signal != "" {
		t.Fatalf("child did not exit 0: exit %d signal %q", res.ExitCode, res.Signal)
	}
	lines := c.texts(Stderr)
	if len(lines) != updates {
		t.Fatalf("%d progress lines, want %d (one per '\\r' update)", len(lines), updates)
	}
	if want := " 50%|#####     | 200000/200000 [00:01<00:01, 9.99it/s]"; lines[len(lines)-1] != want {
		t.Errorf("last update %q, want %q", lines[len(lines)-1], want)
	}
	if log.n < updates*40 {
		t.Errorf("log has only %d bytes", log.n)
	}
}

// failAfter accepts n bytes, then fails like a full disk.
type failAfter struct {
	n       int
	written int
}

func (w *failAfter) Write(p []byte) (int, error) {
	if w.written+len(p) > w.n {
		k := w.n - w.written
		w.written = w.n
		return k, syscall.ENOSPC
	}
	w.written += len(p)
	return len(p), nil
}

type countingWriter struct{ n int }

func (w *countingWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }

func TestLogWriterFails(t *testing.T) {
	const total = 8 << 20
	var devFull io.Writer
	if f, err := os.OpenFile("/dev/full", os.O_WRONLY, 0); err == nil {
		defer f.Close()
		devFull = f
	}
	cases := []struct {
		name string
		w    io.Writer
	}{
		{"fails after 100 KB", &failAfter{n: 100 << 10}},
		{"/dev/full", devFull},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.w == nil {
				t.Skip("/dev/full not available")
			}
			var lines, bytesSeen int
			res := Run(context.Background(), Spec{
				Argv:   helperArgv(t),
				Env:    helperEnvFor("log", "PROC_TEST_BYTES="+strconv.Itoa(total)),
				Log:    tc.w,
				OnLine: func(l Line) { lines++; bytesSeen += len(l.Text) + 1 },
			}, testLogger(t))
			assertGroupGone(t, res.PID)
			if res.ExitCode != 0 || res.Signal != "" {
				t.Fatalf("a failing log killed the child: exit %d signal %q", res.ExitCode, res.Signal)
			}
			if !errors.Is(res.LogErr, syscall.ENOSPC) {
				t.Errorf("LogErr = %v, want ENOSPC", res.LogErr)
			}
			if bytesSeen < total || lines != res.Lines {
				t.Errorf("OnLine saw %d bytes in %d lines (Result.Lines %d), want all %d bytes", bytesSeen, lines, res.Lines, total)
			}
		})
	}
}

// blockingWriter never returns until released, like a hung NFS mount.
type blockingWriter struct{ release chan struct{} }

func (w blockingWriter) Write(p []byte) (int, error) { <-w.release; return len(p), nil }

func TestLogWriterStalls(t *testing.T) {
	const total = 16 << 20 // more than the log queue holds
	w := blockingWriter{make(chan struct{})}
	defer close(w.release)
	var lines int
	res := Run(context.Background(), Spec{
		Argv:     helperArgv(t),
		Env:      helperEnvFor("log", "PROC_TEST_BYTES="+strconv.Itoa(total)),
		Log:      w,
		LogStall: 100 * time.Millisecond,
		OnLine:   func(Line) { lines++ },
	}, testLogger(t))
	assertGroupGone(t, res.PID)
	if res.ExitCode != 0 {
		t.Fatalf("a stalled log writer broke the child: %+v", res)
	}
	if res.LogErr == nil || !strings.Contains(res.LogErr.Error(), "blocked") {
		t.Errorf("LogErr = %v, want a stall error", res.LogErr)
	}
	if lines != res.Lines || lines < total/110 {
		t.Errorf("OnLine got %d lines (Result.Lines %d), want all of them", lines, res.Lines)
	}
}

// treeScript leaves two grandchildren in the group: a backgrounded sleep and
// a subshell that ignores SIGTERM and SIGINT (its sleep inherits that), so
// only SIGKILL removes it. The main process exits 0 at once.
const treeScript = `sleep 300 &
sh -c 'trap "" TERM INT; echo stubborn; while :; do sleep 1; done' &
echo started
exit 0`

func TestLeftoversAreKilled(t *testing.T) {
	needSh(t)
	var c collector
	start := time.Now()
	res := Run(context.Background(), Spec{
		Argv:          []string{"/bin/sh", "-c", treeScript},
		OnLine:        c.on,
		LeftoverGrace: testLeftover,
	}, testLogger(t))
	assertGroupGone(t, res.PID)
	if res.ExitCode != 0 {
		t.Errorf("ExitCode=%d, want 0", res.ExitCode)
	}
	if res.Leftovers < 2 {
		t.Errorf("Leftovers=%d, want at least 2 (sleep and the stubborn shell)", res.Leftovers)
	}
	if res.StoppedWith != "" {
		t.Errorf("StoppedWith=%q: the ladder is for the main process, which exited by itself", res.StoppedWith)
	}
	// The grandchildren hold the output pipes; Run must end them itself
	// rather than wait for os/exec's WaitDelay backstop (over 5 s here).
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("Run took %v; it waited for the WaitDelay backstop instead of sweeping the group", d)
	}
	if got := strings.Join(c.texts(""), "|"); !strings.Contains(got, "started") {
		t.Errorf("lines %q lack the main process's output", got)
	}
}

func TestCancelRunsLadder(t *testing.T) {
	needSh(t)
	cases := []struct {
		name      string
		argv      []string
		env       []string
		wantStop  string
		wantExit  int
		wantSig   string
		leftovers bool
	}{
		{
			name:     "graceful on SIGINT",
			argv:     helperArgv(t),
			env:      helperEnvFor("graceful"),
			wantStop: "SIGINT", wantExit: 0,
		},
		{
			name:     "ignores SIGINT, dies on SIGTERM",
			argv:     helperArgv(t),
			env:      helperEnvFor("ignore-int"),
			wantStop: "SIGTERM", wantExit: -1, wantSig: "SIGTERM",
		},
		{
			name:     "ignores everything but SIGKILL, with grandchildren",
			argv:     []string{"/bin/sh", "-c", `trap "" INT TERM; sleep 300 & echo ready; while :; do sleep 1; done`},
			wantStop: "SIGKILL", wantExit: -1, wantSig: "SIGKILL",
		},
		{
			name: "exits on SIGINT, leaves a stubborn grandchild",
			// The grandchild says ready itself, after its traps are set:
			// an outer "echo ready" raced the grandchild's trap, and a
			// SIGINT that came first killed it (no leftover to see).
			argv:     []string{"/bin/sh", "-c", `trap 'exit 0' INT; sh -c 'trap "" TERM INT; echo ready; while :; do sleep 1; done' & while :; do sleep 0.05; done`},
			wantStop: "SIGINT", wantExit: 0, leftovers: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var c collector
			res := Run(ctx, Spec{
				Argv: tc.argv,
				Env:  tc.env,
				OnLine: func(l Line) {
					c.on(l)
					if l.Text == "ready" {
						cancel() // Ctrl-C once the child is set up
					}
				},
				InterruptGrace: testGrace,
				TerminateGrace: testGrace,
				LeftoverGrace:  testLeftover,
			}, testLogger(t))
			assertGroupGone(t, res.PID)
			if !res.Interrupted || res.TimedOut {
				t.Errorf("Interrupted=%v TimedOut=%v, want true/false", res.Interrupted, res.TimedOut)
			}
			if res.StoppedWith != tc.wantStop {
				t.Errorf("StoppedWith=%q, want %q", res.StoppedWith, tc.wantStop)
			}
			if res.ExitCode != tc.wantExit || res.Signal != tc.wantSig {
				t.Errorf("ExitCode=%d Signal=%q, want %d %q", res.ExitCode, res.Signal, tc.wantExit, tc.wantSig)
			}
			if tc.leftovers != (res.Leftovers > 0) {
				t.Errorf("Leftovers=%d, want leftovers=%v", res.Leftovers, tc.leftovers)
			}
			if tc.wantStop == "SIGINT" && tc.env != nil {
				if got := c.texts(Stdout); len(got) == 0 || got[len(got)-1] != "report written" {
					t.Errorf("graceful shutdown output lost: %q", got)
				}
			}
		})
	}
}

func TestLadderOrder(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var c collector
	res := Run(ctx, Spec{
		Argv: helperArgv(t),
		Env:  helperEnvFor("log-signals"),
		OnLine: func(l Line) {
			c.on(l)
			if l.Text == "ready" {
				cancel()
			}
		},
		InterruptGrace: testGrace,
		TerminateGrace: testGrace,
		LeftoverGrace:  testLeftover,
	}, testLogger(t))
	assertGroupGone(t, res.PID)
	if got, want := strings.Join(c.texts(Stdout), "|"), "ready|got interrupt|got terminated"; got != want {
		t.Errorf("child saw %q, want %q (SIGINT, then SIGTERM, then SIGKILL)", got, want)
	}
	if res.StoppedWith != "SIGKILL" || res.Signal != "SIGKILL" || !res.Interrupted {
		t.Errorf("StoppedWith=%q Signal=%q Interrupted=%v, want SIGKILL SIGKILL true", res.StoppedWith, res.Signal, res.Interrupted)
	}
	if d := res.End.Sub(res.Start); d < 2*testGrace {
		t.Errorf("child ended %v after start; the ladder must wait both grace periods (%v each)", d, testGrace)
	}
}

func TestSlowLogWriterKeepsEverything(t *testing.T) {
	const total = 4 << 20
	w := &slowWriter{delay: 2 * time.Millisecond}
	res := Run(context.Background(), Spec{
		Argv: helperArgv(t),
		Env:  helperEnvFor("log", "PROC_TEST_BYTES="+strconv.Itoa(total)),
		Log:  w,
	}, testLogger(t))
	assertGroupGone(t, res.PID)
	if res.ExitCode != 0 || res.LogErr != nil {
		t.Fatalf("exit %d LogErr %v, want 0 and nil: a slow but working disk must not lose the log", res.ExitCode, res.LogErr)
	}
	if w.n != total {
		t.Errorf("log got %d bytes, want %d", w.n, total)
	}
}

type slowWriter struct {
	delay time.Duration
	n     int
}

func (w *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(w.delay)
	w.n += len(p)
	return len(p), nil
}

func TestTimeout(t *testing.T) {
	start := time.Now()
	res := Run(context.Background(), Spec{
		Argv:           helperArgv(t),
		Env:            helperEnvFor("sleep"),
		Timeout:        200 * time.Millisecond,
		InterruptGrace: testGrace,
		TerminateGrace: testGrace,
		LeftoverGrace:  testLeftover,
	}, testLogger(t))
	assertGroupGone(t, res.PID)
	if !res.TimedOut || res.Interrupted {
		t.Errorf("TimedOut=%v Interrupted=%v, want true/false", res.TimedOut, res.Interrupted)
	}
	if res.StoppedWith != "SIGINT" || res.Signal != "SIGINT" || res.ExitCode != -1 {
		t.Errorf("StoppedWith=%q Signal=%q ExitCode=%d, want SIGINT SIGINT -1", res.StoppedWith, res.Signal, res.ExitCode)
	}
	if d := res.End.Sub(res.Start); d < 200*time.Millisecond {
		t.Errorf("ran for %v, less than the timeout", d)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("Run took %v after a 200ms timeout", time.Since(start))
	}
}

func TestGroupAliveOwnGroup(t *testing.T) {
	// Our own process group is alive and lists us.
	pg := syscall.Getpgrp()
	if !GroupAlive(pg) {
		t.Errorf("GroupAlive(own group %d) = false", pg)
	}
	m, err := GroupMembers(pg)
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	found := false
	for _, p := range m {
		found = found || p == os.Getpid()
	}
	if !found {
		t.Errorf("GroupMembers(%d) = %v lacks our pid %d", pg, m, os.Getpid())
	}
	if GroupAlive(0) || GroupAlive(-5) {
		t.Error("GroupAlive accepts non-positive ids")
	}
}
