package proc

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Polling bounds of the file follower. While the child writes, the follower
// reads as fast as the file grows (a short read means it caught up, and it
// waits followBatch so that the next read is a large one); once nothing
// comes, it backs off to followIdle, which bounds how late an idle server's
// first line reaches OnLine.
const (
	followBatch = time.Millisecond
	followIdle  = 20 * time.Millisecond
)

// idleFollower puts file mode's reader and dispatcher on SCHED_IDLE threads
// (yieldToChild). It is a variable only so that BenchmarkLog200MB can show
// the effect.
var idleFollower = true

// Combined is Line.Stream in file mode, where stdout and stderr are one file
// and cannot be told apart.
const Combined = "output"

// logFile reports whether Spec.Log can be handed to the child as its stdout
// and stderr (file mode): a regular file, which we can read back through a
// descriptor of our own. It returns that reader and the offset where the
// child's output will start.
func logFile(w io.Writer) (f, r *os.File, start int64, ok bool) {
	f, isFile := w.(*os.File)
	if !isFile || f == nil {
		return nil, nil, 0, false
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return nil, nil, 0, false
	}
	// A descriptor of our own: f may be write-only, and reads must not move
	// the offset the child writes at.
	r, err = os.Open(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil {
		return nil, nil, 0, false
	}
	start, err = f.Seek(0, io.SeekCurrent)
	if flags, ferr := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0); ferr == nil && flags&unix.O_APPEND != 0 {
		start = st.Size()
	}
	if err != nil {
		r.Close()
		return nil, nil, 0, false
	}
	return f, r, start, true
}

// newFollower starts the file-mode pipeline: the child writes to the log
// file itself, exactly as `cmd > log.txt 2>&1` would, so the runner adds no
// copy, no pipe and no back-pressure to the child's output, and a goroutine
// reads the file back behind it for the lines.
func newFollower(s Spec, r *os.File, start int64, log *slog.Logger) *output {
	o := newLines(s, idleFollower)
	o.combined = &stream{o: o, name: Combined, limit: MaxLine}
	o.followStop = make(chan struct{})
	o.followDone = make(chan struct{})
	go o.follow(r, start, log)
	return o
}

// follow reads r from off as it grows until followStop is closed, then up
// to the size r has at that moment (a process outside the group that keeps
// writing cannot hold Run up), and closes followDone.
func (o *output) follow(r *os.File, off int64, log *slog.Logger) {
	defer close(o.followDone)
	defer r.Close()
	if o.idle {
		yieldToChild()
	}
	s := o.combined
	defer func() { o.lineQ <- piece{s: s, eof: true} }()
	wait := followBatch
	t := time.NewTimer(wait)
	defer t.Stop()
	stopAt := int64(-1)
	for {
		b := chunkPool.Get().(*[]byte)
		n, err := r.ReadAt(*b, off)
		if n > 0 {
			off += int64(n)
			o.lineQ <- piece{s: s, b: b, n: n, str: o.asString((*b)[:n])}
		} else {
			chunkPool.Put(b)
		}
		if err != nil && err != io.EOF {
			o.failLog(fmt.Errorf("read back the log: %w; lines after byte %d were not checked", err, off))
			log.Warn("reading the log back failed; its remaining lines are not checked", "err", err)
			return
		}
		if stopAt >= 0 && (off >= stopAt || n == 0) {
			return
		}
		if n == len(*b) {
			continue // more is waiting
		}
		if n > 0 {
			wait = followBatch
		} else {
			wait = min(2*wait, followIdle)
		}
		t.Reset(wait)
		select {
		case <-o.followStop:
			stopAt = off
			if st, err := r.Stat(); err == nil {
				stopAt = st.Size()
			}
			if off >= stopAt {
				return
			}
		case <-t.C:
		}
	}
}

// fileSystemFull is the file-mode stand-in for a failed log write: the
// child's writes to a full file system fail in the child, unseen by us, so
// after the run we look whether the log's file system has room left.
func fileSystemFull(f *os.File) error {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return nil
	}
	if full(st, os.Geteuid() == 0) {
		return fmt.Errorf("the file system holding the log is full; the program's writes to the log may have failed, so the log may be incomplete")
	}
	return nil
}

// full reports whether a file system has no block left for the writer:
// root may use the reserved blocks, others only the available ones.
func full(st unix.Statfs_t, root bool) bool {
	if st.Blocks == 0 { // pseudo file systems report no blocks at all
		return false
	}
	if root {
		return st.Bfree == 0
	}
	return st.Bavail == 0
}
