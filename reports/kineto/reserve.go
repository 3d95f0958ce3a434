package kineto

import (
	"encoding/binary"
	"io"
	"os"
	"sync/atomic"
	"unsafe"

	"github.com/sglprof/runner/reports/trace"
)

// Reserving the record slices. A 500 MB trace holds about two million records; grown one
// append at a time, each slice is copied and its new part cleared at every 1.25× step, which
// took a third of triage's CPU time, and the old and the new array are both live during each
// copy. When the input's uncompressed size is known (a plain file's size, a gzip member's
// ISIZE trailer), the decoder instead reserves, once a kind of record has filled its slice, the
// room the rest of the input should need at the rate seen since that kind's first record. The
// hint changes only capacities, never the records: a wrong hint costs time or memory, not
// results.

// minEventBytes bounds a reservation: no traceEvents element the decoder stores is shorter
// than this many bytes of JSON ({"ph":"X","cat":"kernel","ts":0,"dur":0} is 40), so the rest
// of the input cannot hold more records than (rest / minEventBytes), whatever the hint says.
const minEventBytes = 40

// maxStep bounds one reservation to this many times the records already read: the hint
// comes from the input (an ISIZE trailer can claim anything up to 4 GiB), so what it makes
// the decoder hold stays proportional to what the input really holds. From a first sample of
// a few MB, a 500 MB trace needs two reservations (two copies, about 7% of the final size).
const maxStep = 16

// minSampleBytes is how much input must lie behind a kind's first record before its rate is
// trusted; until then the slice grows by append (it is small then anyway).
const minSampleBytes = 2 << 20

// sizeHint returns the uncompressed size of the input r, or 0 when it is not known: the size
// of a regular file or a bytes.Reader for plain JSON, the gzip trailer's ISIZE (the size
// modulo 2^32 of the last member) for gzip, believed only when it lies between the compressed
// size and deflate's largest ratio (1032:1) times it.
func sizeHint(r io.Reader) int64 {
	f, ok := r.(io.ReaderAt)
	if !ok {
		return 0
	}
	var size int64
	switch x := r.(type) {
	case interface{ Stat() (os.FileInfo, error) }:
		st, err := x.Stat()
		if err != nil || !st.Mode().IsRegular() {
			return 0
		}
		size = st.Size()
	case interface{ Size() int64 }:
		size = x.Size()
	default:
		return 0
	}
	var head [2]byte
	if n, _ := f.ReadAt(head[:], 0); n < 2 || head[0] != 0x1f || head[1] != 0x8b {
		return size
	}
	var tail [4]byte
	if size < 18 {
		return 0
	}
	if n, _ := f.ReadAt(tail[:], size-4); n < 4 {
		return 0
	}
	isize := int64(binary.LittleEndian.Uint32(tail[:]))
	if isize < size || isize > 1032*size {
		return 0
	}
	return isize
}

// reservation remembers where a kind of record first appeared, and how far its slice's array
// has been prefaulted.
type reservation struct {
	first int64 // input offset of the first record, -1 before it
	// faulted is the element index up to which the array of capacity faultedCap has been
	// prefaulted (trace.Prefault): a chunk at a time, just ahead of the appends, so that the
	// capacity a reservation leaves unused costs no memory.
	faulted, faultedCap int
	// publish makes reserve show the array and its prefaulted front in shown, for another
	// goroutine to prefault further (the first half of a split read: split.go's ahead).
	publish bool
	shown   atomic.Pointer[arrayView]
}

// arrayView is a record slice's array as bytes: size bytes from p, of which the first front
// are prefaulted or written.
type arrayView struct {
	p           unsafe.Pointer
	size, front uintptr
}

// prefaultChunk is how many bytes of records are prefaulted at a time.
const prefaultChunk = 256 << 10

// reserve returns s with room for the records of its kind that the rest of the input should
// still hold, when s is full and the rate since the kind's first record (at r.first) can be
// trusted; otherwise s unchanged. off is the current input offset, total the size hint.
func reserve[T any](s []T, r *reservation, off, total int64) []T {
	if len(s) == 0 {
		r.first = off
	}
	if len(s) < cap(s) {
		if cap(s) != r.faultedCap || len(s) >= r.faulted {
			// A new array (append's or ours), or the appends reached the prefaulted end.
			var z T
			from := len(s)
			r.faulted, r.faultedCap = from+max(1, prefaultChunk/int(unsafe.Sizeof(z))), cap(s)
			trace.Prefault(s, from, r.faulted)
			if r.publish {
				r.shown.Store(&arrayView{p: unsafe.Pointer(unsafe.SliceData(s)), size: uintptr(cap(s)) * unsafe.Sizeof(z),
					front: uintptr(min(r.faulted, cap(s))) * unsafe.Sizeof(z)})
			}
		}
		return s
	}
	if total <= 0 || off >= total {
		return s
	}
	span := off - r.first
	if span < minSampleBytes {
		return s
	}
	rest := total - off
	more := int64(len(s)) * rest / span
	more += more/16 + 64 // a margin against the rate varying a little
	if limit := rest / minEventBytes; more > limit {
		more = limit
	}
	if limit := int64(len(s)) * (maxStep - 1); more > limit {
		more = limit
	}
	if more <= int64(cap(s))/4 { // append's own step would do
		return s
	}
	out := make([]T, len(s), int64(len(s))+more)
	trace.AdviseHuge(out) // before the copy: the copy and the appends are the array's first writes
	copy(out, s)
	return out
}
