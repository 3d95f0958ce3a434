// Package proc runs one child program per call, in its own process group, and
// guarantees that nothing it started outlives the call.
//
// It is the only package of the runner that starts processes, and the only
// user of github.com/go-cmd/cmd. go-cmd owns the process life cycle (process
// group, start, wait, exit status); this package adds what go-cmd lacks for a
// profiler runner:
//
//   - a stop ladder for the whole group: SIGINT (so nsys can still write its
//     report), then SIGTERM, then SIGKILL, each after a grace period, on
//     context cancellation (Ctrl-C) or on a timeout;
//   - a sweep after the main process exits: any member of the group still
//     alive (a worker or a background job that ignores SIGTERM) is killed and
//     counted, so no process we started survives Run;
//   - output handling that never breaks or needlessly blocks the child, and
//     costs it as little as possible (see below).
//
// Output. When the log is a regular file (the runner's log.txt), the child
// writes to it directly, as `cmd > log.txt 2>&1` would, and a follower reads
// the file back behind it (follow.go): the child's output path is exactly
// the one it has without the runner, with no pipe, no copy through our
// process and no back-pressure. Lines are cut at '\n' and '\r' (tqdm
// progress bars) and at MaxLine, and handed to a callback. With Spec.Select,
// a gate that looks for a few markers gets only the lines that hold one (and
// the last lines, at the end): whole chunks are searched at once with a
// multi-substring scan (needles.go), so a log of millions of lines costs a
// few passes at memory speed rather than a callback per line. The follower
// scans the page cache in place (read-only mappings of the log) on a
// SCHED_IDLE thread: it may fall behind the child, never slow it down, and
// catches up once the child exits.
//
// Other writers get the pipe path: our own io.ReaderFrom installed in
// go-cmd's BeforeExec hook rather than go-cmd's streaming channels
// (Options.Streaming is off). go-cmd allocates a string and does a channel
// send per line, and kills the child with SIGPIPE when a line outgrows its
// buffer; reading the pipes ourselves in large chunks through a three-stage
// pipeline (readers, line dispatcher, log writer, where a failing or stalled
// writer is dropped and the child carries on) costs a fraction of that
// (BenchmarkLog200MB measures the designs side by side).
//
// Every child runs under a supervisor, the running binary re-executed, which
// is a child subreaper: it kills all the child's descendants, also those
// that left the process group, when the child is done, on a second stop, or
// when the runner dies, and records them for Record.Reap (runner/proc/internal/supervisor;
// supervise_linux.go and record.go here).
//
// Linux is the target. Process-group membership is read from /proc, and the
// main process's exit is observed with waitid(WNOWAIT) or reported by the
// supervisor; see proc_linux.go.
package proc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/go-cmd/cmd"
	"golang.org/x/sys/unix"

	"github.com/sglprof/runner/runner/proc/internal/supervisor"
)

// MaxLine is the longest line handed to Spec.OnLine. Longer runs of bytes
// without a line end (a JSON dump, a progress bar that never prints '\n')
// arrive as several Lines of at most MaxLine bytes with Partial set on all but
// the last, so memory stays bounded whatever the child prints. Each piece
// after the first starts with the last Overlap bytes of the piece before it.
const MaxLine = 1 << 20

// Overlap is how many bytes of a cut line the next piece repeats. A gate
// marker (a few dozen bytes, even with ANSI colour codes inside) that
// straddles a MaxLine cut is therefore whole in one of the two pieces, in
// Spec.Select and in OnLine alike: without it, a marker placed across the
// cut went unseen and the cell passed the gate.
const Overlap = 4 << 10

// Defaults applied when the corresponding Spec field is zero. The interrupt
// grace is long because nsys writes its report after SIGINT, which takes
// tens of seconds for large traces.
const (
	DefaultInterruptGrace = 30 * time.Second
	DefaultTerminateGrace = 10 * time.Second
	DefaultLeftoverGrace  = supervisor.DefaultGrace
	DefaultLogStall       = 10 * time.Second
)

// Stream names used in Line.Stream.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// Line is one line of the child's output.
type Line struct {
	// No numbers lines from 1 across both streams, in delivery order.
	No int
	// Stream is Stdout or Stderr, or Combined in file mode (see Spec.Log).
	Stream string
	// Text is the line without its terminator ("\n", "\r\n" or "\r").
	Text string
	// Partial is set when the line was cut at MaxLine and continues in the
	// next Line of the same stream, which starts with the last Overlap bytes
	// of this one.
	Partial bool
}

// Spec says what to run and how to treat it. Only Argv is required.
type Spec struct {
	// Argv is the program and its arguments, executed directly, never through
	// a shell, so prompts with quotes, $(...) or newlines stay one argument.
	// Argv[0] is looked up on PATH when it contains no slash.
	Argv []string
	// Env is the child's full environment; nil inherits ours.
	Env []string
	// Dir is the working directory; "" means ours.
	Dir string

	// Log receives the raw bytes of stdout and stderr as produced (the cell's
	// log.txt). Run does not close it.
	//
	// When Log is a regular *os.File (file mode), the child writes to it
	// directly, as `cmd > log.txt 2>&1` would: both streams share the file
	// in the order the child wrote them, the runner adds no copy and no
	// back-pressure to the child's output, and a goroutine reads the file
	// back for OnLine (Line.Stream is then Combined). A write error (a full
	// disk) then happens in the child; Result.LogErr reports a full file
	// system after the run.
	//
	// Any other writer gets the two pipes' bytes from one goroutine of ours.
	// If it returns an error, or blocks for longer than LogStall,
	// Result.LogErr is set and the rest of the output is left out of the
	// log; the child is never stopped for it. If a Write is still blocked
	// when Run gives up on it, that call returns whenever it returns, after
	// Run; nothing is written after.
	Log io.Writer
	// LogStall bounds how long the child may be held up by a log writer that
	// does not keep pace (0 = DefaultLogStall), in pipe mode; in file mode
	// the child's writes go to the file directly. Short stalls apply
	// back-pressure, exactly as `cmd > log.txt` would on a slow disk.
	LogStall time.Duration

	// OnLine, if set, receives every line, always from the same goroutine
	// (never concurrently), in order within each stream and in arrival order
	// across them. It runs in parallel with the pipe readers and the log
	// writer, but it must keep pace with the child: once about 4 MiB of
	// output waits for it, the child is slowed down. Text shares memory
	// with the rest of the chunk it was read in (up to 256 KiB):
	// strings.Clone it before keeping many lines for long. It must return:
	// Run waits for every line to be delivered.
	OnLine func(Line)

	// Select, if not nil, narrows OnLine to the lines that can matter to a
	// log gate: those holding one of these substrings, or an escape byte
	// (ANSI colour codes can split a substring; strip them and look again).
	// Other lines are still counted in Line.No and Result.Lines and written
	// to the log, and the last Tail lines reach OnLine in any case, once the
	// child has exited and after every other line, so the caller still sees
	// how the output ended. A selective gate costs the runner a couple of
	// passes over the output at memory speed instead of a call per line,
	// which is what keeps a fast-logging child unperturbed
	// (BenchmarkLog200MB).
	Select []string
	// Tail is how many of the last lines OnLine receives under Select,
	// whatever they hold, each cut to TailBytes.
	Tail int

	// Timeout stops the child with the stop ladder once it has run this long
	// and sets Result.TimedOut; 0 means no timeout.
	Timeout time.Duration
	// InterruptGrace is how long the ladder waits after SIGINT before SIGTERM
	// (0 = DefaultInterruptGrace); TerminateGrace is how long it then waits
	// before SIGKILL (0 = DefaultTerminateGrace).
	InterruptGrace, TerminateGrace time.Duration
	// LeftoverGrace is how long other group members may outlive the main
	// process before they get SIGTERM, and how long they then have before
	// SIGKILL (0 = DefaultLeftoverGrace). Workers of a program that exits
	// normally are usually gone well within it.
	LeftoverGrace time.Duration

	// Record is where the child's supervisor keeps the list of the child's
	// processes while it runs (RecordFile in the cell's directory), for
	// Record.Reap after a runner that was killed; "" keeps none. With a
	// record, Run gives the child's environment a fresh random token
	// (TokenEnv), which the record holds too, so that only processes of this
	// run are ever reaped.
	Record string

	// Test switches of file mode's follower, options rather than package
	// variables so that tests setting them can run in parallel. noMap reads
	// the log instead of mapping it (the path file systems without mmap
	// take); busyFollower keeps the follower off its SCHED_IDLE thread
	// (BenchmarkLog200MB's "+busy" paths show what that thread is worth).
	noMap, busyFollower bool
}

// Result describes how a run ended. ExitCode is -1 when the process was
// killed by a signal or never started.
type Result struct {
	PID      int
	ExitCode int
	// Signal is the name of the signal that ended the process ("SIGKILL"),
	// or "".
	Signal string
	// StartErr is set when the program could not be started (not found,
	// not executable, bad Dir) or ctx was already done; nothing ran then.
	StartErr error
	// TimedOut is set when Spec.Timeout expired and the ladder ran;
	// Interrupted when ctx was cancelled and the ladder ran.
	TimedOut, Interrupted bool
	// StoppedWith is the last signal the stop ladder had to send to the
	// group: "", "SIGINT", "SIGTERM" or "SIGKILL".
	StoppedWith string
	// Start and End bracket the main process: End is when it exited, not
	// when the cleanup of the rest of the group finished.
	Start, End time.Time
	// Lines counts the lines of output (what OnLine received, or would have).
	Lines int
	// LogErr is the first error writing Spec.Log; output after it is missing
	// from the log but was still passed to OnLine.
	LogErr error
	// Leftovers counts the group members that were still alive after the
	// main process exited and the LeftoverGrace had passed, and were killed.
	Leftovers int
}

// Run starts s.Argv in a new process group, streams its output to s.Log and
// s.OnLine, and returns when the main process has exited, every other member
// of its group is gone and all output has been handled.
//
// Cancelling ctx (the runner's Ctrl-C) runs the stop ladder on the group and
// sets Interrupted; so does the expiry of s.Timeout, setting TimedOut. The
// ladder is SIGINT, InterruptGrace, SIGTERM, TerminateGrace, SIGKILL, and
// stops as soon as the main process exits. log may be nil.
//
// The child's stdin is /dev/null. It runs under a supervisor
// (runner/proc/internal/supervisor), so a process that leaves the group on its own
// (setsid, a daemon) is still found and killed with the rest, and so is
// everything once the runner dies. Should the supervisor be unavailable (the
// binary cannot be found again), such a process is beyond the group signals;
// if it keeps the output pipes open, Run stops reading them a few seconds
// after the main process exited (os/exec's WaitDelay) and logs a warning.
func Run(ctx context.Context, s Spec, log *slog.Logger) Result {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s = s.withDefaults()
	res := Result{ExitCode: -1}
	if !startable(ctx, s, &res) {
		return res
	}
	if s.Record != "" {
		// Every process of the run inherits the token; the supervisor
		// writes it into the record (runner/proc/internal/supervisor).
		if tok, err := newToken(); err == nil {
			s.Env = withToken(s.Env, tok)
		} else {
			log.Warn("no process token: a later --resume cannot prove these processes are the runner's and will leave them alone", "err", err)
		}
	}

	var out *output
	logF, logR, start, fileMode := logFile(s.Log)
	if fileMode {
		out = newFollower(s, logR, start, log)
	} else {
		out = newOutput(s, log)
	}
	argv, env, pipes := supervision(s, log)
	supervised := pipes != nil
	var ecmd *exec.Cmd
	var extra []*os.File
	if supervised {
		extra = []*os.File{pipes.statusW, pipes.lifeR}
	}
	c := command(s, argv, env, extra, logF, out, &ecmd)

	log.Debug("starting", "argv", s.Argv, "dir", s.Dir, "supervised", supervised)
	c.Start()
	spid := waitStarted(c)
	st0 := c.Status()
	res.Start = time.Unix(0, st0.StartTs)
	var sup *supStatus
	pid := spid
	if supervised {
		pipes.statusW.Close()
		pipes.lifeR.Close()
		defer pipes.lifeW.Close()
		sup = readStatus(pipes.statusR)
		if spid != 0 {
			pid = <-sup.pid
		}
	}
	if pid == 0 {
		startFailed(&res, s, c, sup, out, log)
		return res
	}
	res.PID = pid
	awaitExit(ctx, s, pid, sup, pipes, &res, log)

	if sup != nil {
		// The supervisor sweeps the child's descendants, those outside
		// its group included; the group sweep below then finds it empty.
		<-sup.done
		res.Leftovers = sup.left
	}
	res.Leftovers += sweep(pid, s.LeftoverGrace, c.Done(), log)

	<-c.Done()
	st := c.Status()
	if errors.Is(st.Error, exec.ErrWaitDelay) {
		log.Warn("output pipes were held open by a process outside the group; stopped reading", "pid", pid)
	}
	out.finish()
	res.Lines = out.lines
	res.LogErr = out.logErr()
	if fileMode && res.LogErr == nil {
		res.LogErr = fileSystemFull(logF)
	}

	exitStatus(&res, sup, ecmd)
	log.Debug("finished", "pid", pid, "exit", res.ExitCode, "signal", res.Signal,
		"stopped_with", res.StoppedWith, "leftovers", res.Leftovers, "lines", res.Lines)
	return res
}

// startable reports whether s may be started: a command line to run and a context not yet
// cancelled; otherwise it records why not in res.
func startable(ctx context.Context, s Spec, res *Result) bool {
	if len(s.Argv) == 0 || s.Argv[0] == "" {
		res.StartErr = errors.New("proc: empty command line; the backend produced no argv")
		return false
	}
	if err := ctx.Err(); err != nil {
		res.Interrupted = true
		res.StartErr = fmt.Errorf("%s not started: %w", s.Argv[0], err)
		return false
	}
	return true
}

// awaitExit waits for the process pid to exit, or stops its group with the signal ladder when
// ctx is cancelled or s.Timeout (counted from res.Start) passes, and records how in res.
func awaitExit(ctx context.Context, s Spec, pid int, sup *supStatus, pipes *supPipes, res *Result, log *slog.Logger) {
	var exited <-chan struct{}
	var kill func()
	if sup != nil {
		exited, kill = sup.exited, func() { pipes.lifeW.Close() }
	} else {
		exited, kill = watchExit(pid), func() {}
	}

	var timeoutC <-chan time.Time
	if s.Timeout > 0 {
		t := time.NewTimer(s.Timeout - time.Since(res.Start))
		defer t.Stop()
		timeoutC = t.C
	}
	hurry := killNow(ctx)
	select {
	case <-exited:
	case <-ctx.Done():
		res.Interrupted = true
		log.Info("interrupted; stopping the process group", "pid", pid)
		res.StoppedWith = ladder(pid, s, exited, hurry, kill, log)
	case <-timeoutC:
		res.TimedOut = true
		log.Info("timeout; stopping the process group", "pid", pid, "timeout", s.Timeout)
		res.StoppedWith = ladder(pid, s, exited, hurry, kill, log)
	}
	res.End = time.Now()
}

// startFailed fills res for a child that did not start (the supervisor's
// report says why when it was the supervisor that tried).
func startFailed(res *Result, s Spec, c *cmd.Cmd, sup *supStatus, out *output, log *slog.Logger) {
	<-c.Done()
	st := c.Status()
	out.finish()
	serr := st.Error
	if sup != nil {
		<-sup.done
		if sup.startErr != nil {
			serr = sup.startErr
		}
	}
	res.StartErr = startError(s, serr)
	res.End = time.Unix(0, st.StopTs)
	log.Debug("start failed", "err", res.StartErr)
}

// command builds the go-cmd command that starts argv (the supervisor, or the
// child itself) in a new process group with the output wired as the mode
// wants: logF in file mode (nil otherwise), the pipeline's streams in pipe
// mode. extra are the supervisor's pipes; *ecmd is set to the exec.Cmd.
func command(s Spec, argv, env []string, extra []*os.File, logF *os.File, out *output, ecmd **exec.Cmd) *cmd.Cmd {
	c := cmd.NewCmdOptions(cmd.Options{
		BeforeExec: []func(*exec.Cmd){func(x *exec.Cmd) {
			*ecmd = x
			// go-cmd has set Setpgid already; replacing SysProcAttr would
			// drop it and with it every group signal below.
			if x.SysProcAttr == nil {
				x.SysProcAttr = &syscall.SysProcAttr{}
			}
			x.SysProcAttr.Setpgid = true
			if extra != nil {
				x.ExtraFiles = extra
			} else {
				setParentDeathSignal(x.SysProcAttr)
			}
			if logF != nil {
				x.Stdout, x.Stderr = logF, logF
			} else {
				x.Stdout, x.Stderr = out.stdout, out.stderr
			}
			// Backstop only: the sweep normally empties the group (and so
			// closes the pipes) well before this.
			x.WaitDelay = 3*s.LeftoverGrace + 5*time.Second
		}},
	}, argv[0], argv[1:]...)
	c.Env = env
	c.Dir = s.Dir
	return c
}

// exitStatus fills the child's exit code or signal: from the supervisor's
// report when there is one, else from the process os/exec waited for.
func exitStatus(res *Result, sup *supStatus, ecmd *exec.Cmd) {
	if sup != nil && sup.ended {
		if sup.signal != 0 {
			res.Signal = unix.SignalName(sup.signal)
		} else {
			res.ExitCode = sup.exitCode
		}
		return
	}
	if ecmd != nil && ecmd.ProcessState != nil {
		if ws, ok := ecmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.Signal = unix.SignalName(ws.Signal())
		} else {
			res.ExitCode = ecmd.ProcessState.ExitCode()
		}
	}
}

func (s Spec) withDefaults() Spec {
	if s.InterruptGrace <= 0 {
		s.InterruptGrace = DefaultInterruptGrace
	}
	if s.TerminateGrace <= 0 {
		s.TerminateGrace = DefaultTerminateGrace
	}
	if s.LeftoverGrace <= 0 {
		s.LeftoverGrace = DefaultLeftoverGrace
	}
	if s.LogStall <= 0 {
		s.LogStall = DefaultLogStall
	}
	return s
}

// startError turns an exec error into one that says what to do next.
func startError(s Spec, err error) error {
	if err == nil {
		err = errors.New("unknown error")
	}
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, syscall.ENOENT) && s.Dir == "":
		return fmt.Errorf("cannot start %q: %w; install it or put it on PATH, or fix the command (backend.command in the plan)", s.Argv[0], err)
	case errors.Is(err, syscall.EACCES):
		return fmt.Errorf("cannot start %q: %w; the file is not executable (chmod +x) or is not a program", s.Argv[0], err)
	case s.Dir != "":
		return fmt.Errorf("cannot start %q in %s: %w; check that the program exists and the directory is accessible", s.Argv[0], s.Dir, err)
	}
	return fmt.Errorf("cannot start %q: %w", s.Argv[0], err)
}

// waitStarted returns the child's pid once go-cmd has started it, or 0 when
// the start failed. go-cmd has no start notification, and the pid (which is
// also the group id) is needed before any signal can be sent; starting takes
// about a millisecond, so a short poll is enough.
func waitStarted(c *cmd.Cmd) int {
	tick := 50 * time.Microsecond
	for {
		if pid := c.Status().PID; pid != 0 {
			return pid
		}
		select {
		case <-c.Done():
			return c.Status().PID
		case <-time.After(tick):
		}
		if tick < 5*time.Millisecond {
			tick *= 2
		}
	}
}

// ladder stops the group: SIGINT, SIGTERM, SIGKILL with the configured grace
// between them, returning the last signal it had to send.
//
// hurry (the second Ctrl-C, see WithKill) skips the rest of the grace and
// goes to SIGKILL; kill is called at SIGKILL too, to make the supervisor
// kill the descendants that left the group.
func ladder(pgid int, s Spec, exited, hurry <-chan struct{}, kill func(), log *slog.Logger) string {
	steps := []struct {
		sig   syscall.Signal
		grace time.Duration
	}{{syscall.SIGINT, s.InterruptGrace}, {syscall.SIGTERM, s.TerminateGrace}, {syscall.SIGKILL, 0}}
	last := ""
	for _, st := range steps {
		select {
		case <-exited:
			return last
		default:
		}
		name := unix.SignalName(st.sig)
		if err := syscall.Kill(-pgid, st.sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			log.Warn("signalling the process group failed", "pgid", pgid, "signal", name, "err", err)
		}
		last = name
		log.Info("sent signal to the process group", "pgid", pgid, "signal", name)
		if st.sig == syscall.SIGKILL {
			kill()
			<-exited
			return last
		}
		t := time.NewTimer(st.grace)
		select {
		case <-exited:
			t.Stop()
			return last
		case <-t.C:
		case <-hurry:
			t.Stop()
			hurry = nil
			if st.sig == syscall.SIGINT {
				steps[1].grace = 0 // straight on to SIGKILL
			}
			log.Info("asked again to stop; killing the process group now", "pgid", pgid)
		}
	}
	return last
}

type killKey struct{}

// WithKill returns a context that carries a second, harder stop: calling
// kill (the user's second Ctrl-C) makes every Run under ctx that is already
// stopping its child skip the remaining grace and send SIGKILL.
func WithKill(ctx context.Context) (context.Context, func()) {
	ch := make(chan struct{})
	var once sync.Once
	return context.WithValue(ctx, killKey{}, ch), func() { once.Do(func() { close(ch) }) }
}

// killNow is the channel WithKill closes, or nil.
func killNow(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(killKey{}).(chan struct{})
	return ch
}

// supPipes are the status pipe and the lifeline of a supervised run (every
// end closes on exec; ExtraFiles passes the supervisor its two ends).
type supPipes struct{ statusR, statusW, lifeR, lifeW *os.File }

// supervision returns the command line and environment that start s.Argv
// under a supervisor, with its pipes, or s's own with nil pipes when no
// supervisor can be had (the child then gets only the group and the parent
// death signal).
func supervision(s Spec, log *slog.Logger) (argv, env []string, p *supPipes) {
	argv, env, ok := supervisorArgv(s)
	if !ok {
		return s.Argv, s.Env, nil
	}
	p = &supPipes{}
	var err error
	if p.statusR, p.statusW, err = os.Pipe(); err == nil {
		if p.lifeR, p.lifeW, err = os.Pipe(); err != nil {
			p.statusR.Close()
			p.statusW.Close()
		}
	}
	if err != nil {
		log.Warn("cannot set up the supervisor's pipes; running the child directly", "err", err)
		return s.Argv, s.Env, nil
	}
	return argv, env, p
}

// sweep waits up to grace for the rest of the group to go away by itself
// (or for done, which means every pipe holder is gone), then kills what is
// left with SIGTERM and, after another grace, SIGKILL. It returns how many
// members had to be killed, and only returns once the group is empty (or a
// SIGKILLed member has not died within several seconds, which is logged).
func sweep(pgid int, grace time.Duration, done <-chan struct{}, log *slog.Logger) int {
	waitEmpty := func(d time.Duration, done <-chan struct{}) bool {
		deadline := time.Now().Add(d)
		tick := 200 * time.Microsecond
		for {
			if !GroupAlive(pgid) {
				return true
			}
			if time.Now().After(deadline) {
				return false
			}
			select {
			case <-done:
				done = nil // pipes closed; keep polling the group itself
			case <-time.After(tick):
			}
			if tick < 20*time.Millisecond {
				tick *= 2
			}
		}
	}
	if waitEmpty(grace, done) {
		return 0
	}
	members, err := GroupMembers(pgid)
	n := len(members)
	if err != nil || n == 0 {
		n = 1 // /proc unreadable, but kill(2) says someone is there
	}
	log.Warn("processes outlived the main process; killing them", "pgid", pgid, "pids", members)
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	if waitEmpty(grace, nil) {
		return n
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	if !waitEmpty(5*time.Second, nil) {
		log.Error("process group still alive after SIGKILL (uninterruptible sleep?)", "pgid", pgid)
	}
	return n
}
