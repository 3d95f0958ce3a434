package proc

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	"golang.org/x/sys/unix"
)

// Polling bounds of the file follower. While the child writes, the follower
// reads as fast as the file grows (once it has caught up, it waits
// followBatch so that the next read is a large one); once nothing comes, it
// backs off to followIdle, which bounds how late an idle server's first
// line reaches OnLine.
const (
	followBatch = time.Millisecond
	followIdle  = 20 * time.Millisecond
)

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
// copy, no pipe and no back-pressure to the child's output, and one
// goroutine reads the file back behind it and cuts the lines.
func newFollower(s Spec, r *os.File, start int64, log *slog.Logger) *output {
	o := newLines(s)
	o.combined = &stream{o: o, name: Combined, limit: MaxLine}
	o.noMap, o.busyFollower = s.noMap, s.busyFollower
	o.followStop = make(chan struct{})
	o.followDone = make(chan struct{})
	go o.follow(r, start, log)
	return o
}

// followWindow is how much of the file is mapped at once.
const followWindow = 4 << 20

// follow processes r from off as it grows until followStop is closed, then
// up to the size r has at that moment (a process outside the group that
// keeps writing cannot hold Run up), and closes followDone. While the child
// runs it is on a SCHED_IDLE thread of its own (unless Spec.busyFollower), and it reads the file
// through read-only shared mappings of the page cache, so the bytes the
// child wrote are scanned where they lie instead of being copied first.
func (o *output) follow(r *os.File, off int64, log *slog.Logger) {
	defer close(o.followDone)
	defer r.Close()
	idle := !o.busyFollower && yieldToChild()
	s := o.combined
	defer s.flush()
	wait := followBatch
	t := time.NewTimer(wait)
	defer t.Stop()
	stopAt := int64(-1)
	page := int64(os.Getpagesize())
	seen := off        // the size at the previous poll
	buf := []byte(nil) // for reads when mapping fails
	for {
		if idle && closed(o.followStop) {
			// The child is gone: nothing left to protect, so catch up at
			// normal priority.
			idle = !normalPriority()
		}
		st, err := r.Stat()
		if err != nil {
			o.followFailed(log, off, err)
			return
		}
		size := st.Size()
		if size < off {
			o.followFailed(log, off, fmt.Errorf("the log shrank to %d bytes while the program ran (truncated by another process?)", size))
			return
		}
		grew := size != seen
		seen = size
		switch {
		case stopAt >= 0:
			size = min(size, stopAt)
		case grew:
			// While the child is writing, leave the page it appends to
			// alone: mapping it takes the page's lock, which the child's
			// next write to that page would wait for. Once the file stops
			// growing for a poll, the partial page is read too, so a
			// quiet program's last line is not held back.
			size = max(off, size&^(page-1))
		}
		if size > off {
			end := min(size, off+followWindow)
			if err := o.window(r, off, end, &buf); err != nil {
				o.followFailed(log, off, err)
				return
			}
			off = end
			if end < size {
				continue // more is waiting
			}
			wait = followBatch
		} else {
			wait = min(2*wait, followIdle)
		}
		if stopAt >= 0 {
			return
		}
		t.Reset(wait)
		select {
		case <-o.followStop:
			stopAt = size
			if st, err := r.Stat(); err == nil {
				stopAt = st.Size()
			}
		case <-t.C:
		}
	}
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (o *output) followFailed(log *slog.Logger, off int64, err error) {
	o.failLog(fmt.Errorf("reading the log back: %w; its lines after byte %d were not checked", err, off))
	log.Warn("reading the log back failed; its remaining lines are not checked", "err", err)
}

// window cuts the lines of r's bytes [off, end). It maps them read-only
// (falling back to a read when the file system cannot map) and hands them
// to the stream in chunkSize pieces, the unit take is built for; no
// reference into the mapping outlives the call, because every line kept
// (OnLine text, the pending line, the tail) is a copy. A mapped page whose
// file was truncated under us faults; that is turned into an error here
// rather than a crash.
func (o *output) window(r *os.File, off, end int64, buf *[]byte) (err error) {
	page := int64(os.Getpagesize())
	base := off &^ (page - 1)
	b, merr := []byte(nil), error(unix.ENODEV)
	if !o.noMap {
		b, merr = unix.Mmap(int(r.Fd()), base, int(end-base), unix.PROT_READ, unix.MAP_SHARED|unix.MAP_POPULATE)
	}
	if merr == nil {
		defer unix.Munmap(b)
		b = b[off-base:]
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() {
			if p := recover(); p != nil {
				if re, ok := p.(interface{ Addr() uintptr }); ok {
					err = fmt.Errorf("the log's pages became unreadable (fault at %#x): it was truncated while the program ran", re.Addr())
					return
				}
				panic(p)
			}
		}()
	} else {
		if cap(*buf) < int(end-off) {
			*buf = make([]byte, end-off)
		}
		b = (*buf)[:end-off]
		if _, err := r.ReadAt(b, off); err != nil {
			return err
		}
	}
	for len(b) > 0 {
		n := min(len(b), chunkSize)
		o.combined.take(b[:n], "")
		b = b[n:]
	}
	return nil
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
