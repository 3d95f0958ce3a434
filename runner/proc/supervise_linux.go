package proc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/sglprof/runner/runner/proc/internal/supervisor"
)

// The supervisor's runner side. Run does not start the child itself: it
// re-executes the running binary (whatever binary links this package: the
// runner, or a test binary) in supervisor mode, and the supervisor starts the
// child (runner/proc/internal/supervisor, which says what it does and why it
// is a package of its own). Here: the supervisor's command line and
// environment, and the reading of its status pipe.

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
	env = append(supervisor.WithoutEnv(env),
		supervisor.Env+"="+strconv.FormatInt(int64(s.LeftoverGrace), 10),
		supervisor.RecordEnv+"="+s.Record)
	return append([]string{exe}, s.Argv...), env, true
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
