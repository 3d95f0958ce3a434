//go:build unix

package nsysdb

import (
	"os"
	"syscall"
)

// mapFile maps size bytes of f read-only, or returns nil when it cannot (the scans then read
// with ReadAt).
func mapFile(f *os.File, size int64) []byte {
	if size <= 0 || int64(int(size)) != size {
		return nil
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil
	}
	return b
}

func unmapFile(b []byte) error { return syscall.Munmap(b) }

// releaseMapped hands the pages of a read-only file mapping back: they leave the process's
// resident set, the page cache keeps them, and the next access maps them again.
func releaseMapped(b []byte) { _ = syscall.Madvise(b, syscall.MADV_DONTNEED) }
