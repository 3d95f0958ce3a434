// Package infile is the one reader of the files the runner is given or finds: plan files,
// datasets, traces, perf dumps, nsys exports, the run directory's records, bundles. Every such
// file comes from outside and may be anything a name can point at. A FIFO blocks its reader
// forever, in the open (no writer) or the read (a writer that writes nothing), and a blocked
// read of a file is beyond the reach of a context, so Ctrl-C and SIGTERM could not end the
// runner; a device can have effects when opened and never ends. So every file is opened here,
// and anything that is not a regular file is refused, with an error that names the path and
// what it is, before a byte is read.
//
// It is a leaf (it imports nothing of this module) so that every layer can use it, plans, the
// lowest, included.
package infile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrNotRegular is wrapped by the error for a path that is not a regular file.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is wrapped by ReadFile's error for a file larger than its limit.
var ErrTooLarge = errors.New("too large")

// Check refuses path, without opening it, when it is not a regular file (a symlink is
// followed): the error names it and wraps ErrNotRegular. An error of stat (a missing file:
// errors.Is fs.ErrNotExist) is returned as it is. It is for files that are opened by something
// other than this package (SQLite opens its database itself); Open and ReadFile check on
// their own.
func Check(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return notRegular(path, st.Mode())
	}
	return nil
}

// Open opens path for reading, refusing anything that is not a regular file (ErrNotRegular).
// The path is checked before it is opened, so a device is never opened, and the descriptor
// again after, since the name may have been replaced in between; the open is non-blocking
// (O_NONBLOCK), so that not even a FIFO swapped in between can block it, and cannot make a
// terminal the runner's controlling one (O_NOCTTY). Non-blocking is cleared once the file is
// known to be regular. Symlinks are followed: a dataset or a plan linked into place is usual,
// and what is checked is what the link leads to. A missing file is os.Open's error (errors.Is
// fs.ErrNotExist holds).
func Open(path string) (*os.File, error) {
	// A path stat cannot read is left to the open, whose error is the one callers and users
	// know ("open X: no such file or directory").
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return nil, notRegular(path, st.Mode())
	}
	return openRegular(path)
}

// openRegular opens path non-blocking and refuses the descriptor unless it is a regular file.
func openRegular(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = notRegular(path, st.Mode())
	}
	if err == nil {
		err = blocking(f)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// blocking clears O_NONBLOCK on f's descriptor. Reads of a regular file never wait for it, but
// the descriptor should say what the file is.
func blocking(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.SetNonblock(int(fd), false) }); err != nil {
		return err
	}
	return serr
}

// ReadFile reads the whole file at path through Open. max bounds what is read: a file larger
// than max bytes is refused with an error that names it, its size and the limit, and wraps
// ErrTooLarge, rather than read into memory (max <= 0 reads any size; for a file read whole
// whose size nobody bounds, give a limit). A file that grows past max while it is read is
// refused the same way.
func ReadFile(path string, max int64) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	if max > 0 && size > max {
		return nil, tooLarge(path, size, max)
	}
	// One allocation of the right size, as os.ReadFile makes; a file that is still being
	// written may hold more by the time it is read.
	buf := make([]byte, 0, size+512)
	var r io.Reader = f
	if max > 0 {
		r = io.LimitReader(f, max+1)
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if max > 0 && int64(len(buf)) > max {
		return nil, tooLarge(path, int64(len(buf)), max)
	}
	return buf, nil
}

func notRegular(path string, mode fs.FileMode) error {
	return fmt.Errorf("%s is %w (%s); refusing to read it", path, ErrNotRegular, Describe(mode))
}

// tooLarge is ReadFile's refusal of a file over max bytes; size is what stat said, or max+1
// when the file grew past the limit while it was read.
func tooLarge(path string, size, max int64) error {
	what := fmt.Sprintf("%d bytes", size)
	if size == max+1 {
		what = fmt.Sprintf("more than %d bytes", max)
	}
	return fmt.Errorf("%s is %w (%s; at most %d bytes are read); check that it is the file meant", path, ErrTooLarge, what, max)
}

// Describe names a file type for a person: "a FIFO", "a socket", "a character device", "a
// device", "a directory", else the mode's type letters.
func Describe(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	}
	return m.Type().String()
}
