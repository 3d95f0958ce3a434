package kineto

import (
	"bytes"
	"context"
	"io"

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
	mid := size / 2
	buf := make([]byte, min(int64(splitWindow), size-mid))
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
	s := newScanner(io.NewSectionReader(ra, start, size-start))
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
// what d would hold had it decoded those events itself.
func (d *decoder) absorb(u *decoder) {
	t, v := d.t, u.t
	if len(u.synthTxt) > 0 {
		// u's synthetic ids, in its order of first appearance, become d's (new ones are
		// numbered after d's own, as the sequential read numbers them). Only synthetic ids
		// lie in that range (decodeHalf checked u.highID).
		ids := make([]int32, len(u.synthTxt))
		for i, txt := range u.synthTxt {
			ids[i], _ = d.idOf(jv{t: jvString, b: []byte(txt)})
		}
		fix := func(id *int32) {
			if *id >= syntheticPIDBase && *id < syntheticPIDBase+int32(len(ids)) {
				*id = ids[*id-syntheticPIDBase]
			}
		}
		for i := range v.GPUOps {
			fix(&v.GPUOps[i].Device)
			fix(&v.GPUOps[i].Stream)
		}
		for i := range v.Launches {
			fix(&v.Launches[i].PID)
			fix(&v.Launches[i].TID)
		}
		for i := range v.CPUOps {
			fix(&v.CPUOps[i].PID)
			fix(&v.CPUOps[i].TID)
		}
		for i := range v.Frames {
			fix(&v.Frames[i].PID)
			fix(&v.Frames[i].TID)
		}
		for i := range v.Annotations {
			fix(&v.Annotations[i].PID)
			fix(&v.Annotations[i].TID)
			fix(&v.Annotations[i].Device)
		}
		for i := range v.Flows {
			fix(&v.Flows[i].PID)
			fix(&v.Flows[i].TID)
		}
		for i := range u.procLog {
			fix(&u.procLog[i].pid)
		}
	}
	for _, m := range u.procLog {
		d.procOp(m)
	}
	names := remap(t.Names, v.Names)
	for i := range v.GPUOps {
		v.GPUOps[i].Name = names[v.GPUOps[i].Name]
	}
	for i := range v.Launches {
		v.Launches[i].Name = names[v.Launches[i].Name]
	}
	for i := range v.CPUOps {
		v.CPUOps[i].Name = names[v.CPUOps[i].Name]
	}
	for i := range v.Frames {
		v.Frames[i].Name = names[v.Frames[i].Name]
	}
	for i := range v.Annotations {
		v.Annotations[i].Name = names[v.Annotations[i].Name]
	}
	ops := int32(len(t.GPUOps))
	for i := range v.Comms {
		c := &v.Comms[i]
		c.Op += ops
		c.Name, c.DType, c.InSplit, c.OutSplit = names[c.Name], names[c.DType], names[c.InSplit], names[c.OutSplit]
	}
	if v.Shapes != nil || t.Shapes != nil {
		if t.Shapes == nil {
			t.Shapes = trace.NewNames()
			t.CPUOpShapes = make([]trace.NameID, len(t.CPUOps), len(t.CPUOps)+len(v.CPUOps))
		}
		if v.Shapes == nil {
			t.CPUOpShapes = append(t.CPUOpShapes, make([]trace.NameID, len(v.CPUOps))...)
		} else {
			shapes := remap(t.Shapes, v.Shapes)
			for _, id := range v.CPUOpShapes {
				t.CPUOpShapes = append(t.CPUOpShapes, shapes[id])
			}
		}
	}
	t.GPUOps = append(t.GPUOps, v.GPUOps...)
	t.Launches = append(t.Launches, v.Launches...)
	t.CPUOps = append(t.CPUOps, v.CPUOps...)
	t.Frames = append(t.Frames, v.Frames...)
	t.Annotations = append(t.Annotations, v.Annotations...)
	t.Flows = append(t.Flows, v.Flows...)
	t.Comms = append(t.Comms, v.Comms...)
	t.Events += v.Events
	d.sawEvents = d.sawEvents || u.sawEvents
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

// readSplit reads the plain JSON of ra (size bytes, also readable from in from its start)
// into d in two halves, guessing that an element of traceEvents starts at offset at.
func readSplit(ctx context.Context, in io.Reader, ra io.ReaderAt, size, at int64, d *decoder) (s *scanner, err error) {
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res := make(chan half, 1)
	go func() { res <- decodeHalf(hctx, ra, at, size, d.t.Path, d.opts) }()
	got := false
	s = newScanner(in)
	s.stopAt = at
	s.atStop = func() {
		s.stopAt = 0
		if s.offset() != at {
			cancel() // the guess was no element start: read on
			return
		}
		h := <-res
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
	}
	err = walk(s, inPlace{d}, nil)
	cancel()
	if !got {
		<-res // the guess was not taken: wait for the goroutine to stop
	}
	return s, err
}
