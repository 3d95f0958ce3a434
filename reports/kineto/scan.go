package kineto

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// The splitter: a hand-written scanner that walks the top level of a Kineto document and hands
// out the raw bytes of each traceEvents element, so that no generic parse tree of the whole file
// ever exists. Only one element (plus the read-ahead) is in memory at a time.

const (
	initialBuf = 64 << 10
	// maxElement bounds a single JSON value (one event, or one top-level metadata value) so that
	// a corrupt file cannot make the reader grow its buffer without limit.
	maxElement = 256 << 20
)

// errTruncated is returned (wrapped in a *syntaxError) when the input ends inside the document.
var errTruncated = errors.New("unexpected end of input")

// errBadString is returned by value when a string held a raw newline (see scanner.badString).
var errBadString = errors.New("raw newline inside a string")

// syntaxError is a problem in the document structure at a byte offset of the uncompressed JSON.
type syntaxError struct {
	Offset int64
	Err    error
	Msg    string
}

func (e *syntaxError) Error() string {
	if e.Msg != "" {
		return fmt.Sprintf("byte %d: %s", e.Offset, e.Msg)
	}
	return fmt.Sprintf("byte %d: %v", e.Offset, e.Err)
}

func (e *syntaxError) Unwrap() error { return e.Err }

// scanner is a sliding window over the input.
type scanner struct {
	r       io.Reader
	buf     []byte
	pos     int   // next unread byte
	end     int   // end of valid data
	base    int64 // input offset of buf[0]
	eof     bool
	readErr error // a read error other than io.EOF (e.g. a gzip stream cut short)
	// badString is set by value() when a string contained a raw newline, which means the string
	// structure was lost (an unescaped quote from old Kineto versions).
	badString    bool
	badStringOff int64
	// stopAt, when positive, makes walkArray call atStop once an element start lies at or
	// past that offset (the split read's proof of its guessed split point, readSplit); atStop
	// may move the scanner.
	stopAt int64
	atStop func()
}

func newScanner(r io.Reader) *scanner {
	return &scanner{r: r, buf: make([]byte, initialBuf)}
}

func (s *scanner) offset() int64 { return s.base + int64(s.pos) }

// fill reads more input, keeping buf[keep:end] (keep <= pos). It returns false at end of input.
func (s *scanner) fill(keep int) bool {
	if s.eof {
		return false
	}
	if keep > 0 {
		n := copy(s.buf, s.buf[keep:s.end])
		s.base += int64(keep)
		s.pos -= keep
		s.end = n
	}
	if len(s.buf)-s.end < len(s.buf)/4 {
		// Less than a quarter free after compaction: the current element is large; grow.
		if len(s.buf) >= maxElement {
			return false
		}
		nb := make([]byte, 2*len(s.buf))
		copy(nb, s.buf[:s.end])
		s.buf = nb
	}
	for {
		n, err := s.r.Read(s.buf[s.end:])
		s.end += n
		if err != nil {
			s.eof = true
			if !errors.Is(err, io.EOF) {
				s.readErr = err
			}
			return n > 0
		}
		if n > 0 {
			return true
		}
	}
}

// skipWS skips whitespace, passing the skipped bytes to emit when it is not nil.
func (s *scanner) skipWS(emit func([]byte)) bool {
	for {
		st := s.pos
		for s.pos < s.end {
			c := s.buf[s.pos]
			if c != ' ' && c != '\n' && c != '\r' && c != '\t' {
				break
			}
			s.pos++
		}
		if emit != nil && s.pos > st {
			emit(s.buf[st:s.pos])
		}
		if s.pos < s.end {
			return true
		}
		if !s.fill(s.pos) {
			return false
		}
	}
}

// peek returns the next byte without consuming it.
func (s *scanner) peek() (byte, bool) {
	if s.pos >= s.end && !s.fill(s.pos) {
		return 0, false
	}
	return s.buf[s.pos], true
}

func (s *scanner) truncated() error {
	return &syntaxError{Offset: s.offset(), Err: errTruncated}
}

// Byte classes for the scanner's tight loops.
var (
	// structClass: 1 quote, 2 opening bracket, 3 closing bracket, 0 anything else.
	structClass [256]uint8
	// strStop: bytes that end a run of plain string content.
	strStop [256]bool
)

func init() {
	structClass['"'] = 1
	structClass['{'], structClass['['] = 2, 2
	structClass['}'], structClass[']'] = 3, 3
	strStop['"'], strStop['\\'], strStop['\n'] = true, true, true
}

// value scans one complete JSON value starting at pos and returns its raw bytes (valid until
// the next scanner call) and its input offset. It checks structure only (brackets and strings);
// the caller parses the bytes. A raw newline inside a string (impossible in valid JSON, and the
// sign of an unescaped quote from an old Kineto version in its one-event-per-block layout)
// stops the scan with errBadString so the caller can resynchronise.
func (s *scanner) value() ([]byte, int64, error) {
	start := s.pos
	off := s.offset()
	if s.pos >= s.end && !s.fill(s.pos) {
		return nil, off, s.truncated()
	}
	if c := s.buf[s.pos]; structClass[c] != 2 && c != '"' {
		return s.scalar()
	}
	i := s.pos
	depth := 0
	inStr := false
	for {
		b := s.buf[:s.end]
		if i >= len(b) {
			rel := i - start
			if !s.fill(start) {
				if !s.eof {
					return nil, off, &syntaxError{Offset: off, Msg: fmt.Sprintf("a single JSON value is larger than %d MiB", maxElement>>20)}
				}
				s.pos = s.end
				return nil, off, s.truncated()
			}
			start = 0
			i = rel
			continue
		}
		if inStr {
			// Short strings (keys, small values) by table; long ones (kernel names) by the
			// vectorised IndexByte, checking the run for escapes and raw newlines afterwards.
			n := 0
			for i < len(b) && !strStop[b[i]] && n < 24 {
				i++
				n++
			}
			if n == 24 {
				if q := bytes.IndexByte(b[i:], '"'); q > 0 {
					run := b[i : i+q]
					if bytes.IndexByte(run, '\\') < 0 && bytes.IndexByte(run, '\n') < 0 {
						i += q
					}
				}
				for i < len(b) && !strStop[b[i]] {
					i++
				}
			}
			if i >= len(b) {
				continue
			}
			switch b[i] {
			case '"':
				inStr = false
				i++
				if depth == 0 {
					s.pos = i
					return b[start:i], off, nil
				}
			case '\\':
				i += 2
			default: // raw newline
				s.badString = true
				s.badStringOff = s.base + int64(i)
				s.pos = i
				return nil, off, &syntaxError{Offset: s.badStringOff, Err: errBadString}
			}
			continue
		}
		for i < len(b) && structClass[b[i]] == 0 {
			i++
		}
		if i >= len(b) {
			continue
		}
		switch structClass[b[i]] {
		case 1:
			inStr = true
		case 2:
			depth++
		case 3:
			depth--
			if depth <= 0 {
				if depth < 0 {
					return nil, off, &syntaxError{Offset: s.base + int64(i), Msg: fmt.Sprintf("unexpected %q", b[i])}
				}
				i++
				s.pos = i
				return b[start:i], off, nil
			}
		}
		i++
	}
}

// scalar scans a number or literal (true, false, null) at pos; it ends at a delimiter.
func (s *scanner) scalar() ([]byte, int64, error) {
	start := s.pos
	off := s.offset()
	j := s.pos
	for {
		if j >= s.end {
			rel := j - start
			if !s.fill(start) {
				// A scalar runs to the end of input only at top level, where the caller never
				// asks for one; treat it as truncation.
				s.pos = s.end
				return nil, off, s.truncated()
			}
			start, j = 0, rel
			continue
		}
		d := s.buf[j]
		if d == ',' || d == '}' || d == ']' || d == ' ' || d == '\n' || d == '\r' || d == '\t' || d == ':' {
			break
		}
		j++
	}
	if j == start {
		return nil, off, &syntaxError{Offset: off, Msg: fmt.Sprintf("unexpected %q", s.buf[start])}
	}
	s.pos = j
	return s.buf[start:j], off, nil
}

// resync skips forward to the next line whose first non-blank byte is '{' — the start of the
// next event in Kineto's one-event-per-block layout — after a string lost its structure.
// It reports false when no such line exists before the end of input.
func (s *scanner) resync(from int64) bool {
	// Position at from (which lies inside the current window or before it).
	if from > s.base && from-s.base <= int64(s.end) {
		s.pos = int(from - s.base)
	}
	for {
		k := bytes.IndexByte(s.buf[s.pos:s.end], '\n')
		if k < 0 {
			s.pos = s.end
			if !s.fill(s.pos) {
				return false
			}
			continue
		}
		s.pos += k + 1
		// Skip indentation.
		for {
			for s.pos < s.end && (s.buf[s.pos] == ' ' || s.buf[s.pos] == '\t') {
				s.pos++
			}
			if s.pos < s.end {
				break
			}
			if !s.fill(s.pos) {
				return false
			}
		}
		if s.buf[s.pos] == '{' {
			return true
		}
	}
}

// handler receives what the walker finds.
type handler interface {
	// top is called for each top-level key other than traceEvents, with the raw value.
	top(key, raw []byte, off int64)
	// event is called for each element of traceEvents (or of a bare top-level array).
	event(raw []byte, off int64) error
	// malformed is called when an element lost its string structure and was skipped.
	malformed(off int64)
	// startEvents and endEvents bracket the event array (before its '[' and ']' are emitted),
	// so a rewriter can insert its own elements at the end.
	startEvents()
	endEvents() error
}

// bulkHandler is a handler that can take whole events straight from the scanner's buffer
// (the pipeline's collector). walkArray offers it the buffer at each element start, after the
// array's '[' or an element's comma; it advances s.pos past what it took, which ends after a
// comma, so the ordinary path resumes in the state it would have reached itself.
type bulkHandler interface {
	bulk(s *scanner) (bool, error)
}

// walk drives the scanner over a whole document. emit, when not nil, receives every byte that
// is not part of a traceEvents element or the separators between elements (the document's
// skeleton), so Fix and Slim can copy it verbatim. The returned error is a *syntaxError for
// malformed or truncated input, ctx-style errors from the handler otherwise.
func walk(s *scanner, h handler, emit func([]byte)) error {
	c, err := walkStart(s, emit)
	if err != nil {
		return err
	}
	switch c {
	case '[':
		if err := walkEvents(s, h, emit); err != nil {
			return err
		}
		s.skipWS(emit)
		return nil
	case '{':
	default:
		return &syntaxError{Offset: s.offset(), Msg: fmt.Sprintf("a trace starts with '{' or '[', found %q", c)}
	}
	if emit != nil {
		emit(s.buf[s.pos : s.pos+1])
	}
	s.pos++
	for {
		if !s.skipWS(emit) {
			return s.truncated()
		}
		c, _ := s.peek()
		if c == '}' {
			if emit != nil {
				emit(s.buf[s.pos : s.pos+1])
			}
			s.pos++
			s.skipWS(emit)
			return nil
		}
		if c != '"' {
			return &syntaxError{Offset: s.offset(), Msg: fmt.Sprintf("expected a key, found %q", c)}
		}
		if err := walkMember(s, h, emit); err != nil {
			return err
		}
		if !s.skipWS(emit) {
			return s.truncated()
		}
		c, _ = s.peek()
		switch c {
		case ',':
			if emit != nil {
				emit(s.buf[s.pos : s.pos+1])
			}
			s.pos++
		case '}':
		default:
			return &syntaxError{Offset: s.offset(), Msg: fmt.Sprintf("expected ',' or '}' after a top-level value, found %q", c)}
		}
	}
}

// walkStart skips the leading white space and a UTF-8 byte order mark (tolerated) and returns
// the document's first byte without consuming it.
func walkStart(s *scanner, emit func([]byte)) (byte, error) {
	if !s.skipWS(emit) {
		return 0, &syntaxError{Offset: s.offset(), Msg: "empty input"}
	}
	c, _ := s.peek()
	if c == 0xEF {
		if s.end-s.pos < 3 {
			s.fill(s.pos)
		}
		if s.end-s.pos >= 3 && s.buf[s.pos+1] == 0xBB && s.buf[s.pos+2] == 0xBF {
			s.pos += 3
			if !s.skipWS(emit) {
				return 0, &syntaxError{Offset: s.offset(), Msg: "empty input"}
			}
			c, _ = s.peek()
		}
	}
	return c, nil
}

// walkEvents walks the event array whose '[' is at pos, bracketed by h.startEvents and
// h.endEvents, emitting its '[' and ']' (not its elements).
func walkEvents(s *scanner, h handler, emit func([]byte)) error {
	if emit != nil {
		emit(s.buf[s.pos : s.pos+1])
	}
	s.pos++
	h.startEvents()
	if err := walkArray(s, h); err != nil {
		return err
	}
	if err := h.endEvents(); err != nil {
		return err
	}
	if emit != nil {
		emit([]byte("]"))
	}
	return nil
}

// walkMember walks one key:value member of the top-level object, its key's '"' at pos: the
// traceEvents array goes to walkEvents, any other value to h.top.
func walkMember(s *scanner, h handler, emit func([]byte)) error {
	kraw, _, err := s.value()
	if err != nil {
		return err
	}
	isEvents := string(kraw) == `"traceEvents"`
	var key []byte
	if !isEvents {
		key = append([]byte(nil), kraw[1:len(kraw)-1]...)
	}
	if emit != nil {
		emit(kraw)
	}
	if !s.skipWS(emit) {
		return s.truncated()
	}
	if c, _ := s.peek(); c != ':' {
		return &syntaxError{Offset: s.offset(), Msg: fmt.Sprintf("expected ':', found %q", c)}
	}
	if emit != nil {
		emit(s.buf[s.pos : s.pos+1])
	}
	s.pos++
	if !s.skipWS(emit) {
		return s.truncated()
	}
	if c, _ := s.peek(); isEvents && c == '[' {
		return walkEvents(s, h, emit)
	}
	v, off, err := s.value()
	if err != nil {
		return err
	}
	if !isEvents {
		h.top(key, v, off)
	}
	if emit != nil {
		emit(v)
	}
	return nil
}

// walkArray hands each element of an array to h.event; pos is just after '['. It consumes the
// closing ']'.
func walkArray(s *scanner, h handler) error {
	bh, _ := h.(bulkHandler)
	for {
		if bh != nil {
			if _, err := bh.bulk(s); err != nil {
				return err
			}
		}
		if !s.skipWS(nil) {
			return s.truncated()
		}
		if s.stopAt > 0 && s.offset() >= s.stopAt {
			s.atStop()
			if !s.skipWS(nil) {
				return s.truncated()
			}
		}
		c, _ := s.peek()
		if c == ']' {
			s.pos++
			return nil
		}
		if c == ',' { // tolerate a stray comma (e.g. "[,", trailing ",]" from hand edits)
			s.pos++
			continue
		}
		v, off, err := s.value()
		if errors.Is(err, errBadString) {
			// The element's strings went out of step: skip to the next event block.
			h.malformed(s.badStringOff)
			if !s.resync(s.badStringOff) {
				return s.truncated()
			}
			continue
		}
		if err != nil {
			return err
		}
		if err := h.event(v, off); err != nil {
			return err
		}
		if !s.skipWS(nil) {
			return s.truncated()
		}
		c, _ = s.peek()
		switch c {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return nil
		default:
			// Tolerate a missing comma when the next element starts; report others.
			if c == '{' {
				continue
			}
			return &syntaxError{Offset: s.offset(), Msg: fmt.Sprintf("expected ',' or ']' between events, found %q", c)}
		}
	}
}
