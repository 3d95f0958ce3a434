package trace

import (
	"os"
	"syscall"
	"unsafe"
)

// AdviseHuge asks the kernel to back the array of s (its whole capacity) with transparent huge
// pages, where the machine's THP mode is "madvise" (the common default) or "always"; the Go
// runtime does not ask for them on its heap. It is for a fresh pointer-free array of tens of MB
// that is about to be written front to back (the readers' record slices, Link's sweep): with
// 4 KiB pages each page costs one fault at its first write, which on a VM made a large trace's
// read spend a quarter of its CPU time in the kernel (docs/performance.md); with huge pages it
// is one fault per 2 MiB, and fewer TLB misses for whoever reads the array later. Only the
// 2 MiB-aligned interior is advised; pages already touched keep their size. It changes no byte
// of the array and is only advice: an error (an old kernel, THP "never") changes nothing, so it
// is ignored.
func AdviseHuge[T any](s []T) {
	var z T
	n := uintptr(cap(s)) * unsafe.Sizeof(z)
	if n < hugeMin {
		return
	}
	p := unsafe.Pointer(unsafe.SliceData(s[:cap(s)]))
	start := uintptr(p)
	beg := (start + hugeSize - 1) &^ (hugeSize - 1)
	end := (start + n) &^ (hugeSize - 1)
	if beg >= end {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Add(p, beg-start)), end-beg)
	_ = syscall.Madvise(b, syscall.MADV_HUGEPAGE)
}

// hugeSize is the x86-64 and arm64 (4 KiB base page) transparent huge page size. Advising a
// range aligned to it is valid on every Linux page size; where the huge page size differs the
// kernel uses what fits.
const hugeSize = 2 << 20

// hugeMin is the least array size worth a madvise call: a smaller one holds no aligned huge
// page.
const hugeMin = hugeSize

// Prefault maps in, writable, the pages of s's array from the one holding element from to the
// last one that elements [from, to) cover whole (to is clamped to the capacity), in one
// madvise(MADV_POPULATE_WRITE) call instead of one page fault per page at the first write to
// each, which costs far less system time on a VM (docs/performance.md); where huge pages were
// advised, it maps those. It changes no byte of the array. Kernels before 5.14 refuse the call,
// and the writes then fault as before.
func Prefault[T any](s []T, from, to int) {
	var z T
	size := unsafe.Sizeof(z)
	to = min(to, cap(s))
	if from >= to || size == 0 {
		return
	}
	p := unsafe.Pointer(unsafe.SliceData(s[:cap(s)]))
	start := uintptr(p)
	beg := (start + uintptr(from)*size) &^ (pageSize - 1)
	end := (start + uintptr(to)*size) &^ (pageSize - 1) // a last partial page faults on its own
	if beg < start {
		beg += pageSize // the array's first page may hold another object's bytes: leave it
	}
	if beg >= end {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Add(p, beg-start)), end-beg)
	_ = syscall.Madvise(b, madvPopulateWrite)
}

// madvPopulateWrite is Linux's MADV_POPULATE_WRITE (5.14), which the syscall package does not
// name.
const madvPopulateWrite = 23

// pageSize is the base page size Prefault rounds to.
var pageSize = uintptr(os.Getpagesize())

// MakeHuge returns a zeroed slice of n elements (length and capacity n) whose array starts on
// a 2 MiB boundary, advised for transparent huge pages (AdviseHuge), when it is at least
// 2 MiB; a smaller one is make([]T, n). It allocates up to 2 MiB more than it returns and
// leaves that margin untouched, so it is never mapped in (the resident size is the slice's).
// It is for arrays read or written at random places all the time (a streamed pass's join
// rings): with 4 KiB pages each such access also misses the TLB, whose refill walks two page
// tables under a hypervisor.
func MakeHuge[T any](n int) []T {
	var z T
	size := unsafe.Sizeof(z)
	if size == 0 || uintptr(n)*size < hugeMin {
		return make([]T, n)
	}
	extra := int((hugeSize + size - 1) / size)
	s := make([]T, n+extra)
	start := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	skip := 0
	if off := start & (hugeSize - 1); off != 0 {
		skip = int((hugeSize - off + size - 1) / size)
	}
	// skip elements may overshoot the boundary when size does not divide 2 MiB; the array
	// then starts a little after it, and AdviseHuge advises what is aligned.
	out := s[skip : skip+n : skip+n]
	AdviseHuge(out)
	return out
}
