package kineto

import (
	"bytes"
	"context"
	"io"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/sglprof/runner/reports/trace"
)

// Reading a large plain-JSON file in two halves, one per core. The second half of the
// traceEvents array is decoded speculatively on a second goroutine, from a guessed element
// boundary near the middle of the file (splitAt), into its own decoder; the calling goroutine
// reads the file from its start as it always does. When its walk reaches the array's loop
// top exactly at the guessed offset, the guess is proven: the walker is then in the state the
// second decoder started in, so everything from there to the array's ']' would be decoded
// exactly as the second decoder did. It then appends the second decoder's records (with its
// name ids remapped, in file order) and jumps to the ']'. When the walk passes the guess
// elsewhere (it lay inside a string or a nested value), or the second half met anything that
// does not merge trivially (a warning, a string pid, a syntax error, ...), the second half is
// thrown away and the walk simply goes on over it: the result is the sequential read's, only
// slower. Both halves decode in place (inPlace), so no event is scanned twice.

// splitMin is the least plain-JSON size that is read in two halves: below it the second
// goroutine's start and the merge cost more than they save.
const splitMin = 16 << 20

// splitWindow is how far past the middle splitAt looks for an element boundary.
const splitWindow = 1 << 20

// splitAt returns a guessed element start near the middle of the size bytes of ra: the '{'
// of a `}` `,` `{` sequence (white space allowed between them), or -1 when the window holds
// none. The guess may lie inside a string; the reader proves it before using it.
func splitAt(ra io.ReaderAt, size int64) int64 {
	// A trace's events are a few hundred bytes long, so a small window nearly always holds a
	// boundary; the whole window is read only when it does not (the first boundary in the
	// small window is the first in the whole one too). The read is on the serial path before
	// the two halves start, and a fresh 1 MiB buffer is 256 page faults.
	if at := splitAtWithin(ra, size, splitWindowFirst); at >= 0 {
		return at
	}
	return splitAtWithin(ra, size, splitWindow)
}

// splitWindowFirst is the window splitAt tries first.
const splitWindowFirst = 64 << 10

// splitAtWithin is splitAt looking window bytes past the middle.
func splitAtWithin(ra io.ReaderAt, size int64, window int) int64 {
	mid := size / 2
	buf := make([]byte, min(int64(window), size-mid))
	n, _ := ra.ReadAt(buf, mid)
	buf = buf[:n]
	for i := 0; i < len(buf); {
		j := bytes.IndexByte(buf[i:], ',')
		if j < 0 {
			return -1
		}
		c := i + j
		i = c + 1
		p := c - 1
		for p >= 0 && wsByte[buf[p]] {
			p--
		}
		if p < 0 || buf[p] != '}' {
			continue
		}
		q := c + 1
		for q < len(buf) && wsByte[buf[q]] {
			q++
		}
		if q < len(buf) && buf[q] == '{' {
			return mid + int64(q)
		}
	}
	return -1
}

// inPlace is a decoder that takes whole events straight from the scanner's buffer
// (fastEventAt decodes an event and finds its end in one scan), never past the scanner's
// stop offset, so the proof of a split point sees every element start up to it.
type inPlace struct{ *decoder }

func (d inPlace) bulk(s *scanner) (bool, error) {
	if d.opts.noFast {
		return false, nil
	}
	lim := s.end
	if s.stopAt > 0 && s.stopAt-s.base < int64(lim) {
		lim = int(max(s.stopAt-s.base, int64(s.pos)))
	}
	data := s.buf[s.pos:lim]
	done := 0 // bytes taken: up to and including the last taken element's comma
	for {
		j := done
		for j < len(data) && wsByte[data[j]] {
			j++
		}
		if j >= len(data) || data[j] != '{' {
			break
		}
		n, ok := fastEventAt(data[j:], &d.ev)
		if !ok {
			break
		}
		k := j + n
		for k < len(data) && wsByte[data[k]] {
			k++
		}
		if k >= len(data) || data[k] != ',' {
			break
		}
		if err := d.eventPre(data[j:j+n], s.base+int64(s.pos+j), &d.ev, false); err != nil {
			s.pos += done
			return done > 0, err
		}
		done = k + 1
	}
	s.pos += done
	return done > 0, nil
}

// half is the second half's result.
type half struct {
	d   *decoder
	end int64 // offset of the traceEvents array's ']'
	ok  bool  // decoded to the ']' with nothing that needs the first half's state
}

// decodeHalf decodes the traceEvents elements of ra from start (an element start, unproven)
// to the array's ']'.
func decodeHalf(ctx context.Context, ra io.ReaderAt, start, size int64, name string, opts Options) half {
	d := newDecoder(ctx, name, opts)
	d.total = size
	d.half, d.procSeen = true, map[int32]bool{}
	s := &scanner{r: io.NewSectionReader(ra, start, size-start), buf: make([]byte, splitBuf(size))}
	s.base = start
	err := walkArray(s, inPlace{d})
	h := half{d: d, end: s.offset() - 1}
	h.ok = err == nil && d.ctxErr == nil && s.readErr == nil && !s.badString &&
		len(d.warnCount) == 0 && (d.highID == 0 || d.highID >= syntheticPIDBase+int32(len(d.synthTxt))) &&
		d.nOverflow == 0 && d.nNegative == 0 && d.nBadTime == 0 && d.rank == trace.NoID
	return h
}

// absorb appends the second half's records to d's, its name and shape ids remapped into d's
// tables in their order of first appearance there, which is the file order: the result is
// what d would hold had it decoded those events itself. The copy is the one serial step of
// a split read, so each record is rewritten and copied in one pass, the kinds of record
// divided between two goroutines.
func (d *decoder) absorb(u *decoder) {
	t, v := d.t, u.t
	// u's synthetic ids, in its order of first appearance, become d's (new ones numbered
	// after d's own, as the sequential read numbers them). Only synthetic ids lie in
	// [syntheticPIDBase, syntheticPIDBase+len(ids)) (decodeHalf checked u.highID).
	ids := make([]int32, len(u.synthTxt))
	for i, txt := range u.synthTxt {
		ids[i], _ = d.idOf(jv{t: jvString, b: []byte(txt)})
	}
	fix := func(id int32) int32 {
		if id >= syntheticPIDBase && id < syntheticPIDBase+int32(len(ids)) {
			return ids[id-syntheticPIDBase]
		}
		return id
	}
	for _, m := range u.procLog {
		m.pid = fix(m.pid)
		d.procOp(m)
	}
	names := remap(t.Names, v.Names)
	var shapes []trace.NameID
	if v.Shapes != nil {
		if t.Shapes == nil {
			t.Shapes = trace.NewNames()
			t.CPUOpShapes = make([]trace.NameID, len(t.CPUOps), len(t.CPUOps)+len(v.CPUOps))
		}
		shapes = remap(t.Shapes, v.Shapes)
	}
	ops := int32(len(t.GPUOps))
	done := make(chan struct{})
	go func() {
		defer close(done)
		t.GPUOps = appendRemapped(t.GPUOps, v.GPUOps, func(o *trace.GPUOp) {
			o.Name, o.Device, o.Stream = names[o.Name], fix(o.Device), fix(o.Stream)
		})
		t.Launches = appendRemapped(t.Launches, v.Launches, func(l *trace.Launch) {
			l.Name, l.PID, l.TID = names[l.Name], fix(l.PID), fix(l.TID)
		})
		t.Comms = appendRemapped(t.Comms, v.Comms, func(c *trace.Comm) {
			c.Op += ops
			c.Name, c.DType, c.InSplit, c.OutSplit = names[c.Name], names[c.DType], names[c.InSplit], names[c.OutSplit]
		})
	}()
	if t.Shapes != nil {
		if v.Shapes == nil {
			t.CPUOpShapes = append(t.CPUOpShapes, make([]trace.NameID, len(v.CPUOps))...)
		} else {
			for _, id := range v.CPUOpShapes {
				t.CPUOpShapes = append(t.CPUOpShapes, shapes[id])
			}
		}
	}
	t.CPUOps = appendRemapped(t.CPUOps, v.CPUOps, func(c *trace.CPUOp) {
		c.Name, c.PID, c.TID = names[c.Name], fix(c.PID), fix(c.TID)
	})
	t.Frames = appendRemapped(t.Frames, v.Frames, func(f *trace.Frame) {
		f.Name, f.PID, f.TID = names[f.Name], fix(f.PID), fix(f.TID)
	})
	t.Annotations = appendRemapped(t.Annotations, v.Annotations, func(a *trace.Annotation) {
		a.Name, a.PID, a.TID, a.Device = names[a.Name], fix(a.PID), fix(a.TID), fix(a.Device)
	})
	t.Flows = appendRemapped(t.Flows, v.Flows, func(f *trace.Flow) {
		f.PID, f.TID = fix(f.PID), fix(f.TID)
	})
	<-done
	t.Events += v.Events
	d.sawEvents = d.sawEvents || u.sawEvents
}

// appendRemapped appends src's records to dst in one pass, each rewritten by fix (the second
// half's ids into the first's), keeping nil when both are empty as append would.
func appendRemapped[T any](dst, src []T, fix func(*T)) []T {
	if len(src) == 0 {
		return dst
	}
	n := len(dst)
	if cap(dst)-n < len(src) {
		// Exactly the room needed, advised for huge pages and mapped in before its first
		// write (slices.Grow rounds up and clears the new part on 4 KiB pages, one fault
		// each: docs/performance.md).
		grown := make([]T, 0, n+len(src))
		trace.AdviseHuge(grown)
		trace.Prefault(grown, 0, cap(grown))
		dst = append(grown, dst...)
	}
	dst = dst[:n+len(src)]
	for i := range src {
		r := &dst[n+i]
		*r = src[i]
		fix(r)
	}
	return dst
}

// remap interns every name of from into to, in from's id order, and returns the id map.
func remap(to, from *trace.Names) []trace.NameID {
	m := make([]trace.NameID, from.Len())
	for i := range m {
		m[i] = to.InternString(from.String(trace.NameID(i)))
	}
	return m
}

// splitTaken, when not nil, is told whether a split read merged its second half (tests).
var splitTaken func(merged bool)

// splitBuf is a split read's scanner buffer: 1 MiB (a sixteenth of initialBuf's read calls,
// and fewer events crossing a buffer's end, which the in-place decoder leaves to the
// ordinary path), less for a small input.
func splitBuf(size int64) int {
	return int(min(max(size/2, 4<<10), 1<<20))
}

// readSplit reads the plain JSON of ra (size bytes, read from offset 0) into d in two
// halves, guessing that an element of traceEvents starts at offset at.
func readSplit(ctx context.Context, ra io.ReaderAt, size, at int64, d *decoder) (s *scanner, err error) {
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res := make(chan half, 1)
	var stop atomic.Bool // the first half reached the split point: ahead stops
	aheadDone := make(chan struct{})
	for k := range d.res {
		d.res[k].publish = true
	}
	go func() {
		defer close(aheadDone)
		h := decodeHalf(hctx, ra, at, size, d.t.Path, d.opts)
		ok := h.ok
		res <- h
		if ok {
			ahead(&d.res, stop.Load)
		}
	}()
	defer func() {
		stop.Store(true)
		<-aheadDone
	}()
	got := false
	// The file from its start, read straight into the scanner's buffer (in has read ahead).
	s = &scanner{r: io.NewSectionReader(ra, 0, size), buf: make([]byte, splitBuf(size))}
	s.stopAt = at
	s.atStop = func() {
		s.stopAt = 0
		if s.offset() != at {
			cancel() // the guess was no element start: read on
			return
		}
		stop.Store(true)
		// When the second half is still decoding, this goroutine maps the merge's
		// destination (ahead) until it arrives.
		var h half
		ahead(&d.res, func() bool {
			select {
			case h = <-res:
				got = true
			default:
			}
			return got
		})
		if !got {
			h = <-res
		}
		got = true
		if splitTaken != nil {
			splitTaken(h.ok)
		}
		if !h.ok {
			return
		}
		d.absorb(h.d)
		// Resume at the array's ']' as the walker would have reached it.
		s.r = io.NewSectionReader(ra, h.end, size-h.end)
		s.base, s.pos, s.end, s.eof = h.end, 0, 0, false
		// The second half's records (a third of all records once copied) are garbage now:
		// collect them before the caller allocates again (Link), so it reuses their pages
		// instead of touching fresh ones. The records hold no pointers, so the collection
		// marks little; without it peak RSS at 500 MB rose by 20-40 MB.
		h = half{}
		runtime.GC()
	}
	err = walk(s, inPlace{d}, nil)
	cancel()
	if !got {
		<-res // the guess was not taken: wait for the goroutine to stop
	}
	return s, err
}

// ahead prefaults the first half's record arrays (trace.Prefault), from where that half has
// got to (the front its reserve calls published) upward, a chunk of each in turn, until stop
// says to stop, on whichever goroutine of a split read would otherwise wait for the other:
// the second half's once it is decoded until the first half reaches the split point, or the
// first half's there until the second half is decoded. The pages the first half still fills
// and those the merge copies the second half's records into (first touches of fresh memory
// were most of the merge's time) are then mapped on a core that would sit idle. It maps no
// byte above the arrays' last sixteenth, which mostly holds a reservation's margin and stays
// unused: a page mapped in vain costs memory, not results.
func ahead(res *[resKinds]reservation, stop func() bool) {
	var done [resKinds]uintptr // how far ahead has mapped each array
	var arr [resKinds]unsafe.Pointer
	for {
		progressed := false
		for k := range res {
			if stop() {
				return
			}
			v := res[k].shown.Load()
			if v == nil {
				continue
			}
			if v.p != arr[k] { // a new array (a reservation): start again at its front
				arr[k], done[k] = v.p, 0
			}
			from, limit := max(v.front, done[k]), v.size-v.size/16
			if from >= limit {
				continue
			}
			to := min(from+aheadChunk, limit)
			trace.Prefault(unsafe.Slice((*byte)(v.p), v.size), int(from), int(to))
			done[k], progressed = to, true
		}
		if !progressed {
			return
		}
	}
}

// aheadChunk is how many bytes of one array ahead maps between looks at stop: one huge page.
const aheadChunk = 2 << 20
