// Package supervisor is the supervisor side of runner/proc: the running binary, re-executed in
// supervisor mode, starts one child and guarantees that nothing the child started outlives it.
// runner/proc starts it (proc.Run) and reads what it says; see runner/proc's package comment.
//
// The supervisor is a child subreaper (PR_SET_CHILD_SUBREAPER), so every process the child
// starts stays its descendant even after a setsid or a double fork, and it can find them all
// by walking /proc. It kills them all:
//
//   - when the child has exited and they outlive it (the leftover sweep: the grace, SIGTERM,
//     the grace, SIGKILL);
//   - at once with SIGKILL when its lifeline, a pipe whose only write end the runner holds,
//     closes: the runner died (even by SIGKILL, which no handler sees) or asked for an
//     immediate stop (the second Ctrl-C);
//
// and it keeps a record of them (pid and start time, so a reused pid is not killed, and the
// run's process token from its environment, which proc.Run put there) in the record file,
// which proc.Record.Reap acts on when a run is resumed, for the case where the supervisor
// itself was killed.
//
// It talks to proc.Run over a status pipe (fd 3): "pid N" once the child started,
// "start-error KIND ERRNO MESSAGE" when it could not, "exit N" or "signal N" when it ended,
// "leftovers N" after the sweep, "warn MESSAGE" for what proc.Run should log.
//
// Why a package of its own, with so few imports. Supervisor mode is decided in this package's
// init, before main (or TestMain) runs, so that any binary that can call proc.Run can also
// supervise, and nothing else of the program runs in that mode. Go initialises packages in
// import-path order among those whose imports are initialised, and every package's init runs
// before main: in the runner binary, most of a process's start-up is the initialisers of the
// hundred-odd packages it links (SQLite, HTTP, TLS, TOML, the report templates). A supervisor
// starts for every cell, server and probe, so this package imports only what the runtime's
// first packages give (os, os/signal, strconv, sync, syscall, time, bytes, errors, io/fs), not
// fmt, strings, os/exec, encoding/json or x/sys/unix, each of which would put it behind most of
// those initialisers (TestImportsKeepInitEarly). It then decides at the twenty-fourth init
// instead of the ninety-second: a process of the runner binary that stops there costs about
// 9 ms of CPU, one that reaches main about 21 (docs/performance.md, "CI duration").
package supervisor

import (
	"errors"
	"io/fs"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Environment of the supervisor mode; both are removed before the child starts.
const (
	Env       = "SGLPROF_PROC_SUPERVISOR" // the leftover grace in ns
	RecordEnv = "SGLPROF_PROC_RECORD"     // where to keep the record
)

// TokenEnv is the environment variable that carries a run's process token into every process
// of a supervised run (proc.TokenEnv says why); the supervisor copies it into its record.
const TokenEnv = "SGLPROF_PROC_TOKEN"

// The supervisor's inherited descriptors (exec.Cmd.ExtraFiles).
const (
	StatusFD   = 3
	LifelineFD = 4
)

// DefaultGrace is the leftover grace when the environment gives none.
const DefaultGrace = time.Second

// recordEvery is how often the supervisor refreshes the record while the child runs: a
// process younger than this may be missing from the record (the supervisor still kills it;
// the record only matters once the supervisor itself is gone).
const recordEvery = 500 * time.Millisecond

func init() {
	// The pipes must be there too: a variable leaked into a user's shell must not turn
	// `runner run` into a supervisor.
	if g, ok := os.LookupEnv(Env); ok && isPipe(StatusFD) && isPipe(LifelineFD) {
		ns, _ := strconv.ParseInt(g, 10, 64)
		os.Exit(supervise(os.Args[1:], time.Duration(ns), os.Getenv(RecordEnv)))
	}
}

// isPipe reports whether descriptor fd is open and a pipe.
func isPipe(fd int) bool {
	var st syscall.Stat_t
	return syscall.Fstat(fd, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFIFO
}

// WithoutEnv returns env less the supervisor's variables.
func WithoutEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, e := range env {
		if !hasPrefix(e, Env+"=") && !hasPrefix(e, RecordEnv+"=") {
			out = append(out, e)
		}
	}
	return out
}

// supervise is the supervisor's main: it starts argv in a process group of its own, reaps
// everything, and returns once the child and every descendant are gone.
func supervise(argv []string, grace time.Duration, record string) int {
	status := os.NewFile(StatusFD, "status")
	syscall.CloseOnExec(StatusFD)
	syscall.CloseOnExec(LifelineFD)
	say := func(words ...string) {
		line := words[0]
		for _, w := range words[1:] {
			line += " " + w
		}
		status.WriteString(line + "\n")
	}
	if grace <= 0 {
		grace = DefaultGrace
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		say("warn", "cannot become a child subreaper:", e.Error())
	}
	// The stop ladder signals the child's group, not ours; a signal meant for us (SIGTERM from
	// a user) stops everything. Caught, not ignored, so that the child starts with default
	// handlers.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)

	cpid, err := startChild(argv)
	if err != nil {
		kind, errno := "exec", 0
		var en syscall.Errno
		switch {
		case errors.Is(err, errNotFound):
			kind = "not-found"
		case errors.As(err, &en):
			errno = int(en)
		case errors.Is(err, fs.ErrPermission):
			// A path that is not executable: sent as the errno the runner's side turns back
			// into it, so the cause is not lost on the way.
			errno = int(syscall.EACCES)
		}
		say("start-error", kind, strconv.Itoa(errno), err.Error())
		return 127
	}
	say("pid", strconv.Itoa(cpid))
	sv := &supervisor{self: os.Getpid(), child: cpid, record: record}

	kill := make(chan struct{})
	go func() {
		// EOF (or any error) on the lifeline: the runner is gone or wants everything dead now.
		var b [1]byte
		os.NewFile(LifelineFD, "lifeline").Read(b[:])
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
				say("signal", strconv.Itoa(int(ws.Signal())))
			} else {
				say("exit", strconv.Itoa(ws.ExitStatus()))
			}
			n := sv.sweep(grace, kill)
			say("leftovers", strconv.Itoa(n))
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

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER of <linux/prctl.h>.
const prSetChildSubreaper = 36

// startChild starts argv in a new process group with the supervisor's stdio, environment (less
// the supervisor's variables) and directory.
func startChild(argv []string) (int, error) {
	if len(argv) == 0 {
		return 0, errors.New("no command")
	}
	path, err := LookPath(argv[0], os.Getenv("PATH"))
	if err != nil {
		return 0, err
	}
	p, err := os.StartProcess(path, argv, &os.ProcAttr{
		Env:   WithoutEnv(os.Environ()),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		// The child dies with us whatever happens to us (the supervisor never locks OS
		// threads, so the forking thread lives as long as the process).
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

// errNotFound is exec.ErrNotFound's message; the runner's side turns "not-found" back into
// exec.ErrNotFound.
var errNotFound = errors.New("executable file not found in $PATH")

// LookPath is exec.LookPath against the PATH value path (which this package cannot import
// without being initialised late; see the package comment), and the one PATH lookup of the
// runner: the supervisor runs it on its own PATH, proc.LookPath on a cell's or a probe's. A
// name with a slash is taken as it is, any other is looked up on path, where an empty element
// means the current directory. Like exec.LookPath it accepts a file when the effective user
// may execute it (faccessat with AT_EACCESS), and unlike it a relative result is used rather
// than refused with exec.ErrDot, which is what the supervisor did with exec.LookPath's answer.
func LookPath(name, path string) (string, error) {
	switch name {
	case "", ".", "..":
		return "", lookError(name, errNotFound)
	}
	if hasSlash(name) {
		if err := executable(name); err != nil {
			return "", lookError(name, err)
		}
		return name, nil
	}
	// Split as filepath.SplitList does: an empty PATH has no element, an empty element is ".".
	for i := 0; path != "" && i <= len(path); {
		j := i
		for j < len(path) && path[j] != ':' {
			j++
		}
		dir := path[i:j]
		i = j + 1
		if dir == "" {
			dir = "."
		}
		if dir[len(dir)-1] != '/' {
			dir += "/"
		}
		if p := dir + name; executable(p) == nil {
			return p, nil
		}
	}
	return "", lookError(name, errNotFound)
}

// hasPrefix and hasSlash are strings.HasPrefix and strings.Contains(s, "/"): importing strings
// alone moves this package's init from about the twenty-third to the sixty-ninth (see the
// package comment), as the linker schedules strings only when nothing before it in import-path
// order is ready.
func hasPrefix(s, prefix string) bool { return len(s) >= len(prefix) && s[:len(prefix)] == prefix }

func hasSlash(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			return true
		}
	}
	return false
}

// lookError is exec.Error's message for name and err, keeping err for errors.Is and As.
func lookError(name string, err error) error {
	return &wrapped{msg: "exec: " + strconv.Quote(name) + ": " + err.Error(), err: err}
}

type wrapped struct {
	msg string
	err error
}

func (w *wrapped) Error() string { return w.msg }
func (w *wrapped) Unwrap() error { return w.err }

// atEAccess is AT_EACCESS of <fcntl.h>: check with the effective ids, as exec does.
const atEAccess = 0x200

// executable is exec's findExecutable: nil when file is a file the effective user may execute.
func executable(file string) error {
	d, err := os.Stat(file)
	if err != nil {
		return err
	}
	m := d.Mode()
	if m.IsDir() {
		return syscall.EISDIR
	}
	err = syscall.Faccessat(unixATFDCWD, file, 1 /* X_OK */, atEAccess)
	// ENOSYS: no faccessat here; EPERM: a seccomp filter refused it. Then the mode bits say.
	if err == nil || (err != syscall.ENOSYS && err != syscall.EPERM) {
		return err
	}
	if m&0o111 != 0 {
		return nil
	}
	return fs.ErrPermission
}

// unixATFDCWD is AT_FDCWD: a path relative to the working directory.
const unixATFDCWD = -100

// supervisor holds what the supervisor knows about its descendants.
type supervisor struct {
	self, child int
	record      string
	mu          sync.Mutex
	childGone   bool
	noChildren  chan struct{} // closed once wait4 reports no child left
	lastRecord  string
}

// reap collects every exited child (adopted orphans included), sends the main child's status
// on exited, and closes noChildren at ECHILD.
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

// sweep gives the descendants that outlive the child grace to exit, then SIGTERM and, after
// another grace, SIGKILL (at once when kill closes). It returns how many had to be signalled.
func (sv *supervisor) sweep(grace time.Duration, kill <-chan struct{}) int {
	// The supervisor is a subreaper, so every live descendant is a child of ours or below one:
	// once wait4 reports no child left (the reaper closes noChildren), none is left at all.
	// Waiting for that costs nothing, where polling the process table read every
	// /proc/PID/stat of the machine.
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
	n := 0
	for _, d := range Descendants(sv.self) {
		if !Dying(d.PID) {
			n++ // it outlived the child, not merely slow to act on the group's SIGKILL
		}
	}
	sv.signalAll(syscall.SIGTERM)
	if !gone(grace) {
		sv.killAll()
	}
	return n
}

// noChildrenChan returns the channel the reaper closes at ECHILD (a nil channel, which never
// fires, until the reaper has made it).
func (sv *supervisor) noChildrenChan() <-chan struct{} {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.noChildren
}

// killAll sends SIGKILL to the child's group and every descendant, again until none is left
// (a process may fork while we walk).
func (sv *supervisor) killAll() {
	for i := 0; i < 100; i++ {
		if sv.signalAll(syscall.SIGKILL) == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// signalAll signals the child's group and every live descendant and returns how many
// descendants there were.
func (sv *supervisor) signalAll(sig syscall.Signal) int {
	_ = syscall.Kill(-sv.child, sig)
	ds := Descendants(sv.self)
	for _, p := range ds {
		_ = syscall.Kill(p.PID, sig)
	}
	return len(ds)
}

// writeRecord replaces the record with the current descendants, when they changed.
func (sv *supervisor) writeRecord() {
	if sv.record != "" {
		sv.saveRecord(Descendants(sv.self))
	}
}

// writeFirstRecord records the child alone, without the walk of every process in /proc that
// Descendants does. The child started a moment ago: whatever it has started since is its own
// child, which Reap finds below it, and the refresh every recordEvery walks as before. On a
// GPU node, where /proc lists thousands of processes (kernel threads included), the walk cost
// every cell's start milliseconds for nothing, and a cell that ends before the first refresh
// (a probe, a failed start) now never walks.
func (sv *supervisor) writeFirstRecord() {
	if sv.record == "" {
		return
	}
	var ps []Proc
	if st, ok := ReadStat(sv.child); ok && st.State != 'Z' && st.State != 'X' {
		ps = []Proc{{PID: sv.child, Start: st.Start}}
	}
	sv.saveRecord(ps)
}

// saveRecord replaces the record with one naming ps, when that changes it.
func (sv *supervisor) saveRecord(ps []Proc) {
	me, ok := ReadStat(sv.self)
	if !ok {
		return
	}
	b := EncodeRecord(Proc{PID: sv.self, Start: me.Start}, ps, os.Getenv(TokenEnv))
	if string(b) == sv.lastRecord {
		return
	}
	tmp := sv.record + ".tmp"
	// 0600: the token is for the runner, not for other users of the machine (a temporary file
	// a killed supervisor left keeps its mode: replace it).
	os.Remove(tmp)
	if err := os.WriteFile(tmp, b, 0o600); err == nil && os.Rename(tmp, sv.record) == nil {
		sv.lastRecord = string(b)
	}
}

// EncodeRecord writes the record file's JSON (proc.Record is the same document read back):
// the supervisor, the processes and the token, indented as json.MarshalIndent with two spaces
// would. It is written by hand because encoding/json would initialise this package late.
func EncodeRecord(sup Proc, ps []Proc, token string) []byte {
	b := make([]byte, 0, 96+48*len(ps)+len(token))
	proc := func(b []byte, p Proc, indent string) []byte {
		b = append(b, "{\n"+indent+"  \"pid\": "...)
		b = strconv.AppendInt(b, int64(p.PID), 10)
		b = append(b, ",\n"+indent+"  \"start\": "...)
		b = strconv.AppendUint(b, p.Start, 10)
		return append(b, "\n"+indent+"}"...)
	}
	b = append(b, "{\n  \"supervisor\": "...)
	b = proc(b, sup, "  ")
	b = append(b, ",\n  \"processes\": ["...)
	for i, p := range ps {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, "\n    "...)
		b = proc(b, p, "    ")
	}
	if len(ps) > 0 {
		b = append(b, "\n  "...)
	}
	b = append(b, "],\n  \"token\": "...)
	b = appendJSONString(b, token)
	return append(b, "\n}\n"...)
}

// appendJSONString appends s as a JSON string: quotes, backslashes and control characters
// escaped, everything else as it is (the token comes from the environment, which anyone who
// starts the runner can set).
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
