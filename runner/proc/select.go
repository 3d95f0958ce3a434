package proc

import "bytes"

// esc starts ANSI escape sequences. A line holding one is always selected:
// colour codes can sit inside a marker ("Saved \x1b[1mprofiler"), so only
// the caller, after stripping them, can tell whether it matters.
const esc = 0x1b

// TailBytes caps the text kept of each tail line (Spec.Tail); a longer line
// is delivered cut to this length in the catch-up.
const TailBytes = 4 << 10

// selects reports whether OnLine must see a line under Spec.Select.
func (n *needles) selects(text []byte) bool {
	return bytes.IndexByte(text, esc) >= 0 || n.index(text) >= 0
}

// take is the dispatcher's entry for one chunk of a stream. Without a
// selection every line goes through consume. With one, the complete lines
// in the middle of the chunk (all of it but the first and the last line,
// typically 256 KiB of a fast log) are handled in bulk: their lines are
// counted with one bytes.Count and searched with one needle scan, and only
// the selected lines are cut out, so a log of millions of lines costs a few
// passes at memory speed instead of a callback per line.
func (s *stream) take(p []byte, ps string) {
	if s.o.sel == nil {
		s.consume(p, ps)
		return
	}
	first := bytes.IndexByte(p, '\n')
	last := bytes.LastIndexByte(p, '\n')
	if first < 0 || first == last {
		s.consume(p, "")
		return
	}
	// After a '\n', nothing is pending and no "\r\n" is half seen, which is
	// the state bulk starts from.
	s.consume(p[:first+1], "")
	mid := p[first+1 : last+1]
	if len(mid) > s.limit || bytes.IndexByte(mid, '\r') >= 0 {
		s.consume(mid, "") // progress bars or MaxLine cuts: line by line
	} else {
		s.bulk(mid)
	}
	s.consume(p[last+1:], "")
}

// bulk handles r, whole lines each ending in '\n', without '\r' and none
// longer than the stream's limit.
func (s *stream) bulk(r []byte) {
	o := s.o
	counted := 0               // r[:counted] has been counted into o.lines
	nextEsc, nextHit := -2, -2 // next position at or after off; -1 none, -2 not searched
	for off := 0; off < len(r); {
		if nextEsc == -2 || nextEsc >= 0 && nextEsc < off {
			nextEsc = indexAfter(r, off, func(b []byte) int { return bytes.IndexByte(b, esc) })
		}
		if nextHit == -2 || nextHit >= 0 && nextHit < off {
			nextHit = indexAfter(r, off, o.sel.index)
		}
		at := nextEsc
		if at < 0 || nextHit >= 0 && nextHit < at {
			at = nextHit
		}
		if at < 0 {
			break
		}
		start := bytes.LastIndexByte(r[:at], '\n') + 1
		end := at + bytes.IndexByte(r[at:], '\n')
		o.lines += bytes.Count(r[counted:start], []byte{'\n'})
		counted = end + 1
		o.lines++
		o.onLine(Line{No: o.lines, Stream: s.name, Text: string(r[start:end])})
		off = end + 1
	}
	o.lines += bytes.Count(r[counted:], []byte{'\n'})
	o.tail.pushLast(r, o.lines, s.name, o.sel)
}

// indexAfter applies find to r[off:] and returns an index into r, or -1.
func indexAfter(r []byte, off int, find func([]byte) int) int {
	if i := find(r[off:]); i >= 0 {
		return off + i
	}
	return -1
}

// tailRing keeps the last lines seen, so that a selective OnLine still gets
// the end of the output (the context of a crash) once the child is done.
type tailRing struct {
	ent  []tailLine
	next int // slot for the next line
	n    int // lines in the ring
}

type tailLine struct {
	no      int
	stream  string
	text    []byte
	partial bool
	sent    bool // OnLine already had it as a selected line
}

func (t *tailRing) init(n int) {
	if n > 0 {
		t.ent = make([]tailLine, n)
	}
}

func (t *tailRing) push(no int, stream string, text []byte, partial, sent bool) {
	if len(t.ent) == 0 {
		return
	}
	e := &t.ent[t.next]
	e.no, e.stream, e.partial, e.sent = no, stream, partial, sent
	e.text = append(e.text[:0], text[:min(len(text), TailBytes)]...)
	t.next = (t.next + 1) % len(t.ent)
	t.n = min(t.n+1, len(t.ent))
}

// pushLast adds the last lines of r (whole lines, each ending in '\n'; the
// last of them is line lastNo) to the ring. Whether bulk delivered a line
// already follows from the selection itself.
func (t *tailRing) pushLast(r []byte, lastNo int, stream string, sel *needles) {
	if len(t.ent) == 0 || len(r) == 0 {
		return
	}
	// Walk back line by line: the line ending at r[end] starts after the
	// previous '\n', or at 0.
	start, k := len(r), 0
	for end := len(r) - 1; k < len(t.ent); k++ {
		prev := bytes.LastIndexByte(r[:end], '\n')
		start = prev + 1
		if prev < 0 {
			k++
			break
		}
		end = prev
	}
	no := lastNo - k
	for start < len(r) {
		end := start + bytes.IndexByte(r[start:], '\n')
		no++
		line := r[start:end]
		t.push(no, stream, line, false, sel.selects(line))
		start = end + 1
	}
}

// catchUp delivers, in order, the ring's lines that OnLine has not had.
func (t *tailRing) catchUp(onLine func(Line)) {
	for i := 0; i < t.n; i++ {
		e := &t.ent[(t.next-t.n+i+len(t.ent))%len(t.ent)]
		if !e.sent {
			onLine(Line{No: e.no, Stream: e.stream, Text: string(e.text), Partial: e.partial})
		}
	}
}
