package proc

import (
	"errors"
	"io"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// setParentDeathSignal asks the kernel to send SIGTERM to the child if the
// runner dies without cleaning up (SIGKILL, OOM killer). It is a safety net
// only: the kernel ties it to the OS thread that forked, which Go may retire.
// SIGTERM rather than SIGKILL so that a well-behaved program (sglang, nsys)
// can still take its own workers down with it.
func setParentDeathSignal(a *syscall.SysProcAttr) {
	a.Pdeathsig = syscall.SIGTERM
}

// watchExit returns a channel closed when process pid (our child) has
// exited. waitid with WNOWAIT observes the exit without reaping, so os/exec
// (through go-cmd) still collects the status; if os/exec reaped first,
// waitid fails with ECHILD, which also means the process is gone. This tells
// us of the exit at once, whereas go-cmd only reports after the output pipes
// close, which a surviving grandchild can delay indefinitely.
func watchExit(pid int) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		var info unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if !errors.Is(err, syscall.EINTR) {
				return
			}
		}
	}()
	return ch
}

// GroupAlive reports whether process group pgid still has a live member.
// It asks kill(-pgid, 0) first; because kill also succeeds for zombies
// (exited processes nobody has reaped yet, which can linger when PID 1 does
// not reap orphans, as in some containers), a positive answer is confirmed by
// listing the group in /proc, ignoring zombies.
func GroupAlive(pgid int) bool {
	if pgid <= 0 {
		return false
	}
	err := syscall.Kill(-pgid, 0)
	if errors.Is(err, syscall.ESRCH) {
		return false
	}
	members, lerr := GroupMembers(pgid)
	if lerr != nil {
		return true // cannot tell zombies apart; trust kill(2)
	}
	return len(members) > 0
}

// GroupMembers lists the live (non-zombie) processes whose process group is
// pgid, by reading /proc/<pid>/stat for every process. Linux only.
func GroupMembers(pgid int) ([]int, error) {
	names, err := readProcDir()
	if err != nil {
		return nil, err
	}
	var out []int
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		st, ok := ReadStat(pid)
		if !ok || st.PGRP != pgid || st.State == 'Z' || st.State == 'X' {
			continue // exited meanwhile, or not ours
		}
		out = append(out, pid)
	}
	return out, nil
}

// pipeSize is the capacity we ask for on the child's output pipes (the
// unprivileged maximum, /proc/sys/fs/pipe-max-size, is 1 MiB by default).
// The 64 KiB default makes a fast writer block and wake us up every 64 KiB;
// a larger pipe lets the child run ahead while we write the log, which is
// most of the difference between `cmd > log.txt` and going through us.
const pipeSize = 1 << 20

// growPipe enlarges the pipe behind r, best effort, and reports whether it
// now holds at least pipeSize bytes. os/exec hands io.Copy the read end as a
// wrapper around *os.File, which still offers SyscallConn (Fd would switch
// the pipe to blocking mode).
func growPipe(r io.Reader) bool {
	sc, ok := r.(interface {
		SyscallConn() (syscall.RawConn, error)
	})
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	size := 0
	_ = rc.Control(func(fd uintptr) {
		size, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeSize)
	})
	return size >= pipeSize
}

// yieldToChild moves the calling goroutine onto an OS thread of its own that
// runs under SCHED_IDLE, and reports whether that worked. File mode's reader
// and line dispatcher call it: they can fall behind the child without
// harm (nothing blocks the child, and they catch up once it exits), so they
// should only ever use CPU time the measured program leaves idle. The thread
// is not unlocked: Go ends a locked thread with its goroutine, so the policy
// cannot leak to other goroutines.
func yieldToChild() bool {
	runtime.LockOSThread()
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}
	return unix.SchedSetAttr(0, &attr, 0) == nil
}

// normalPriority puts the calling thread (locked by yieldToChild) back under
// the default policy and reports whether that worked.
func normalPriority() bool {
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL}
	return unix.SchedSetAttr(0, &attr, 0) == nil
}
