package proc

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The supervisor. Run does not start the child itself: it re-executes the
// running binary (whatever binary links this package: the runner, or a test
// binary) in supervisor mode, and the supervisor starts the child. The
// supervisor is a child subreaper (PR_SET_CHILD_SUBREAPER), so every
// process the child starts stays its descendant even after a setsid or a
// double fork, and it can find them all by walking /proc. It kills them all:
//
//   - when the child has exited and they outlive it (the leftover sweep:
//     LeftoverGrace, SIGTERM, LeftoverGrace, SIGKILL);
//   - at once with SIGKILL when its lifeline, a pipe whose only write end the
//     runner holds, closes: the runner died (even by SIGKILL, which no
//     handler sees) or asked for an immediate stop (the second Ctrl-C);
//
// and it keeps a record of them (pid and start time, so a reused pid is not
// killed, and the run's process token from its environment, which Run put
// there) in Spec.Record, which Record.Reap acts on when a run is resumed,
// for the case where the supervisor itself was killed.
//
// The supervisor talks to Run over a status pipe (fd 3): "pid N" once the
// child started, "start-error KIND ERRNO MESSAGE" when it could not,
// "exit N" or "signal N" when it ended, "leftovers N" after the sweep.

// Environment of the supervisor mode; both are removed before the child starts.
const (
	supervisorEnv = "SGLPROF_PROC_SUPERVISOR" // the leftover grace in ns
	recordEnv     = "SGLPROF_PROC_RECORD"     // where to keep the record
)

// The supervisor's inherited descriptors (exec.Cmd.ExtraFiles).
const (
	statusFD   = 3
	lifelineFD = 4
)

// recordEvery is how often the supervisor refreshes the record while the
// child runs: a process younger than this may be missing from the record
// (the supervisor still kills it; the record only matters once the
// supervisor itself is gone).
const recordEvery = 500 * time.Millisecond

func init() {
	// Supervisor mode is decided before main (or TestMain) runs, so that any
	// binary that can call Run can also supervise. Nothing else of the
	// program runs in that mode.
	// The pipes must be there too: a variable leaked into a user's shell
	// must not turn `runner run` into a supervisor.
	if g, ok := os.LookupEnv(supervisorEnv); ok && isPipe(statusFD) && isPipe(lifelineFD) {
		ns, _ := strconv.ParseInt(g, 10, 64)
		os.Exit(supervise(os.Args[1:], time.Duration(ns), os.Getenv(recordEnv)))
	}
}

// isPipe reports whether descriptor fd is open and a pipe.
func isPipe(fd int) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO
}

// supervisorArgv returns the command line that runs argv under a
// supervisor, and the environment to give it, or ok=false when this binary
// cannot be found again (then Run starts the child directly, as before).
func supervisorArgv(s Spec) (argv, env []string, ok bool) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, false
	}
	env = s.Env
	if env == nil {
		env = os.Environ()
	}
	env = append(withoutSupervisorEnv(env),
		supervisorEnv+"="+strconv.FormatInt(int64(s.LeftoverGrace), 10),
		recordEnv+"="+s.Record)
	return append([]string{exe}, s.Argv...), env, true
}

func withoutSupervisorEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, e := range env {
		if !strings.HasPrefix(e, supervisorEnv+"=") && !strings.HasPrefix(e, recordEnv+"=") {
			out = append(out, e)
		}
	}
	return out
}

// supervise is the supervisor's main: it starts argv in a process group of
// its own, reaps everything, and returns once the child and every
// descendant are gone.
func supervise(argv []string, grace time.Duration, record string) int {
	status := os.NewFile(statusFD, "status")
	syscall.CloseOnExec(statusFD)
	syscall.CloseOnExec(lifelineFD)
	say := func(format string, a ...any) { fmt.Fprintf(status, format+"\n", a...) }
	if grace <= 0 {
		grace = DefaultLeftoverGrace
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		say("warn cannot become a child subreaper: %v", err)
	}
	// The stop ladder signals the child's group, not ours; a signal meant
	// for us (SIGTERM from a user) stops everything. Caught, not ignored,
	// so that the child starts with default handlers.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)

	cpid, err := startChild(argv)
	if err != nil {
		kind, errno := "exec", 0
		var en syscall.Errno
		switch {
		case errors.Is(err, exec.ErrNotFound):
			kind = "not-found"
		case errors.As(err, &en):
			errno = int(en)
		case errors.Is(err, fs.ErrPermission):
			// exec.LookPath's answer for a path that is not executable: sent as the errno
			// the runner's side turns back into it, so the cause is not lost on the way.
			errno = int(syscall.EACCES)
		}
		say("start-error %s %d %s", kind, errno, err)
		return 127
	}
	say("pid %d", cpid)
	sv := &supervisor{self: os.Getpid(), child: cpid, record: record}

	kill := make(chan struct{})
	go func() {
		// EOF (or any error) on the lifeline: the runner is gone or wants
		// everything dead now.
		var b [1]byte
		os.NewFile(lifelineFD, "lifeline").Read(b[:])
		close(kill)
	}()
	go func() {
		for range sigs {
			sv.killAll()
		}
	}()

	exited := make(chan syscall.WaitStatus, 1)
	go sv.reap(exited)
	tick := time.NewTicker(recordEvery)
	defer tick.Stop()
	sv.writeFirstRecord()
	for {
		select {
		case <-kill:
			kill = nil
			sv.killAll()
		case ws := <-exited:
			if ws.Signaled() {
				say("signal %d", int(ws.Signal()))
			} else {
				say("exit %d", ws.ExitStatus())
			}
			n := sv.sweep(grace, kill)
			say("leftovers %d", n)
			sv.waitAll()
			if record != "" {
				os.Remove(record)
			}
			return 0
		case <-tick.C:
			sv.writeRecord()
		}
	}
}

// startChild starts argv in a new process group with the supervisor's
// stdio, environment (less the supervisor's variables) and directory.
func startChild(argv []string) (int, error) {
	if len(argv) == 0 {
		return 0, errors.New("no command")
	}
	path, err := exec.LookPath(argv[0])
	if err != nil && !errors.Is(err, exec.ErrDot) {
		return 0, err
	}
	p, err := os.StartProcess(path, argv, &os.ProcAttr{
		Env:   withoutSupervisorEnv(os.Environ()),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		// The child dies with us whatever happens to us (the supervisor
		// never locks OS threads, so the forking thread lives as long as
		// the process).
		Sys: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return 0, pe.Err
		}
		return 0, err
	}
	pid := p.Pid
	p.Release() // reaped by supervisor.reap with wait4(-1)
	return pid, nil
}

// supervisor holds what the supervisor knows about its descendants.
type supervisor struct {
	self, child int
	record      string
	mu          sync.Mutex
	childGone   bool
	noChildren  chan struct{} // closed once wait4 reports no child left
	lastRecord  string
}

// reap collects every exited child (adopted orphans included), sends the
// main child's status on exited, and closes noChildren at ECHILD.
func (sv *supervisor) reap(exited chan<- syscall.WaitStatus) {
	sv.mu.Lock()
	sv.noChildren = make(chan struct{})
	sv.mu.Unlock()
	defer close(sv.noChildren)
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return // ECHILD: nothing left
		}
		if pid == sv.child {
			sv.mu.Lock()
			sv.childGone = true
			sv.mu.Unlock()
			exited <- ws
		}
	}
}

// waitAll returns once the supervisor has no child left.
func (sv *supervisor) waitAll() {
	for {
		sv.mu.Lock()
		c := sv.noChildren
		sv.mu.Unlock()
		if c != nil {
			<-c
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// sweep gives the descendants that outlive the child grace to exit, then
// SIGTERM and, after another grace, SIGKILL (at once when kill closes). It
// returns how many had to be signalled.
func (sv *supervisor) sweep(grace time.Duration, kill <-chan struct{}) int {
	// The supervisor is a subreaper, so every live descendant is a child of
	// ours or below one: once wait4 reports no child left (the reaper closes
	// noChildren), none is left at all. Waiting for that costs nothing, where
	// polling the process table read every /proc/PID/stat of the machine.
	gone := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-sv.noChildrenChan():
			return true
		case <-t.C:
			return false
		case <-kill:
			return false
		}
	}
	if gone(grace) {
		return 0
	}
	n := len(Descendants(sv.self))
	sv.signalAll(syscall.SIGTERM)
	if !gone(grace) {
		sv.killAll()
	}
	return n
}

// noChildrenChan returns the channel the reaper closes at ECHILD (a nil
// channel, which never fires, until the reaper has made it).
func (sv *supervisor) noChildrenChan() <-chan struct{} {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.noChildren
}

// killAll sends SIGKILL to the child's group and every descendant, again
// until none is left (a process may fork while we walk).
func (sv *supervisor) killAll() {
	for i := 0; i < 100; i++ {
		if sv.signalAll(syscall.SIGKILL) == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// signalAll signals the child's group and every live descendant and
// returns how many descendants there were.
func (sv *supervisor) signalAll(sig syscall.Signal) int {
	_ = syscall.Kill(-sv.child, sig)
	ds := Descendants(sv.self)
	for _, p := range ds {
		_ = syscall.Kill(p.PID, sig)
	}
	return len(ds)
}

// writeRecord replaces the record with the current descendants, when they
// changed.
func (sv *supervisor) writeRecord() {
	if sv.record != "" {
		sv.saveRecord(Descendants(sv.self))
	}
}

// writeFirstRecord records the child alone, without the walk of every
// process in /proc that Descendants does. The child started a moment ago:
// whatever it has started since is its own child, which Reap finds below it,
// and the refresh every recordEvery walks as before. On a GPU node, where
// /proc lists thousands of processes (kernel threads included), the walk
// cost every cell's start milliseconds for nothing, and a cell that ends
// before the first refresh (a probe, a failed start) now never walks.
func (sv *supervisor) writeFirstRecord() {
	if sv.record == "" {
		return
	}
	var ps []ProcessID
	if st, ok := ReadStat(sv.child); ok && st.State != 'Z' && st.State != 'X' {
		ps = []ProcessID{{PID: sv.child, Start: st.Start}}
	}
	sv.saveRecord(ps)
}

// saveRecord replaces the record with one naming ps, when that changes it.
func (sv *supervisor) saveRecord(ps []ProcessID) {
	me, ok := ReadStat(sv.self)
	if !ok {
		return
	}
	rec := Record{Supervisor: ProcessID{PID: sv.self, Start: me.Start}, Processes: ps, Token: os.Getenv(TokenEnv)}
	b := rec.encode()
	if string(b) == sv.lastRecord {
		return
	}
	tmp := sv.record + ".tmp"
	// 0600: the token is for the runner, not for other users of the machine
	// (a temporary file a killed supervisor left keeps its mode: replace it).
	os.Remove(tmp)
	if err := os.WriteFile(tmp, b, 0o600); err == nil && os.Rename(tmp, sv.record) == nil {
		sv.lastRecord = string(b)
	}
}

// supStatus is the runner's side of a supervisor: what the status pipe said.
type supStatus struct {
	pid      chan int // the child's pid, or 0 when it did not start
	exited   chan struct{}
	done     chan struct{} // the status pipe closed: the supervisor is gone
	mu       sync.Mutex
	startErr error
	exitCode int
	signal   syscall.Signal
	ended    bool
	left     int
}

// readStatus follows the supervisor's status pipe until it closes.
func readStatus(r *os.File) *supStatus {
	st := &supStatus{pid: make(chan int, 1), exited: make(chan struct{}), done: make(chan struct{}), exitCode: -1}
	go func() {
		defer close(st.done)
		defer r.Close()
		gotPID, gotExit := false, false
		defer func() {
			if !gotPID {
				st.pid <- 0
			}
			if !gotExit {
				close(st.exited)
			}
		}()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			f := strings.SplitN(sc.Text(), " ", 4)
			n := 0
			if len(f) > 1 {
				n, _ = strconv.Atoi(f[1])
			}
			st.mu.Lock()
			switch f[0] {
			case "pid":
				gotPID = true
				st.pid <- n
			case "start-error":
				st.startErr = childStartError(f)
			case "exit", "signal":
				if f[0] == "exit" {
					st.exitCode = n
				} else {
					st.signal = syscall.Signal(n)
				}
				st.ended = true
				gotExit = true
				close(st.exited)
			case "leftovers":
				st.left = n
			}
			st.mu.Unlock()
		}
	}()
	return st
}

// childStartError rebuilds the error the supervisor could not start the
// child with, so that startError can say what to do.
func childStartError(f []string) error {
	msg := ""
	if len(f) > 3 {
		msg = f[3]
	}
	if f[1] == "not-found" {
		return fmt.Errorf("%s: %w", msg, exec.ErrNotFound)
	}
	if len(f) > 2 {
		if e, _ := strconv.Atoi(f[2]); e != 0 {
			return syscall.Errno(e)
		}
	}
	return errors.New(msg)
}
