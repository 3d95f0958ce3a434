package main

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

// Testscript commands for stopping a runner in the middle of a command and for FIFOs that a
// runner must refuse (signal_cmds_test.go; registered in TestScripts).

// fifoOpens counts, per FIFO path watched by fifowatch, how often a reader was found on it.
var fifoOpens sync.Map // absolute path -> *atomic.Int64

// fifowatch FIFO...: until the script ends, answer every process that opens FIFO for reading
// with end of file at once (open the write end, close it), and count it for fifoopened. A
// runner that opens the FIFO instead of refusing it then reads nothing and goes on, so the
// script's assertions fail instead of the script hanging.
func cmdFIFOWatch(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: fifowatch FIFO...")
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, a := range args {
		p := ts.MkAbs(a)
		n := &atomic.Int64{}
		fifoOpens.Store(p, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
				// Succeeds only while a reader has the FIFO open (or is blocked opening it).
				fd, err := syscall.Open(p, syscall.O_WRONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
				if err == nil {
					n.Add(1)
					syscall.Close(fd)
				}
			}
		}()
	}
	ts.Defer(func() { close(stop); wg.Wait() })
}

// fifoopened FIFO: a reader opened FIFO since fifowatch began to watch it (! fifoopened: none
// did, the runner refused it without opening it).
func cmdFIFOOpened(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: fifoopened FIFO")
	}
	v, ok := fifoOpens.Load(ts.MkAbs(args[0]))
	if !ok {
		ts.Fatalf("fifoopened: %s is not watched; run fifowatch first", args[0])
	}
	n := v.(*atomic.Int64).Load()
	if (n > 0) == neg {
		ts.Fatalf("fifoopened: %s was opened for reading %d times", args[0], n)
	}
}

// killwhen SIG GLOB [REGEXP]: in the background, wait until a runner started by this script
// holds a file matching GLOB open (it is then well past its signal setup, inside the
// command's work) and, with REGEXP, that file's content matches REGEXP (a cell's log.txt
// showing that the cell runs), and send the runner SIG (INT or TERM). It stops a command run in the foreground (exitcode 143
// runner ...), which testscript's kill cannot, with SIGTERM, which kill cannot send. If no
// runner does so within 60 s, every runner of the script gets SIGKILL instead, so a
// regression fails the script (exit status -1) rather than hangs it.
func cmdKillWhen(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 || len(args) > 3 {
		ts.Fatalf("usage: killwhen INT|TERM GLOB [REGEXP]")
	}
	var re *regexp.Regexp
	if len(args) == 3 {
		re = regexp.MustCompile(args[2])
	}
	sig, ok := map[string]syscall.Signal{"INT": syscall.SIGINT, "TERM": syscall.SIGTERM}[args[0]]
	if !ok {
		ts.Fatalf("killwhen: unknown signal %q", args[0])
	}
	glob := ts.MkAbs(args[1])
	tag := []byte("RUNNER_TEST_TAG=" + ts.Getenv("RUNNER_TEST_TAG") + "\x00")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			for _, pid := range scriptRunners(tag) {
				if holds(pid, glob, re) {
					syscall.Kill(pid, sig)
					return
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		for _, pid := range scriptRunners(tag) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}()
	ts.Defer(func() { close(stop); <-done })
}

// scriptRunners lists the runner processes this script started: children of the test process
// named runner that carry the script's RUNNER_TEST_TAG.
func scriptRunners(tag []byte) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after its ')'.
		f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		argv0, _, _ := bytes.Cut(cmdline, []byte{0})
		env, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if filepath.Base(string(argv0)) == "runner" && bytes.Contains(env, tag) {
			out = append(out, pid)
		}
	}
	return out
}

// holds reports whether process pid has a file matching glob open, whose content matches re
// when re is not nil.
func holds(pid int, glob string, re *regexp.Regexp) bool {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	fds, _ := os.ReadDir(dir)
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil {
			if ok, _ := filepath.Match(glob, target); ok {
				if re == nil {
					return true
				}
				if b, err := os.ReadFile(target); err == nil && re.Match(b) {
					return true
				}
			}
		}
	}
	return false
}

// lockdb DB: hold a write transaction on the SQLite database DB (a history database) until
// the script ends, so that a runner that opens it to write waits for the lock: a command
// blocked where no signal can be missed.
func cmdLockDB(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: lockdb DB")
	}
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+ts.MkAbs(args[0]))
	if err == nil {
		var conn *sql.Conn
		if conn, err = db.Conn(ctx); err == nil {
			if _, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err == nil {
				ts.Defer(func() {
					conn.ExecContext(ctx, "ROLLBACK")
					conn.Close()
					db.Close()
				})
				return
			}
			conn.Close()
		}
		db.Close()
	}
	ts.Fatalf("lockdb: %v", err)
}
