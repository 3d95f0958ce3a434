package kineto

import (
	"bytes"
	"unicode/utf8"
)

// The fast event path: a hand-written scanner that validates one traceEvents element as strict
// JSON (RFC 8259) and takes the fields the decoder uses in the same pass, without building a
// parse tree and without unescaping keys or the args values nobody reads. fastjson's full parse
// of every event was about 40% of a triage's CPU time; this scan costs a fraction of it.
//
// It declines (returns false) whatever it does not handle exactly as the fastjson path would:
// a key or a used string value with an escape, metadata events (their args strings are read
// by the fastjson path), nesting deeper than fastMaxDepth, and anything that is not strictly
// valid JSON (so the fastjson path reports it as before). On a strictly valid event without
// those, both paths fill the same rawEvent; TestFastEventMatchesFastjson and FuzzRead check it.

// fastMaxDepth bounds the nesting the fast path follows (Kineto's events nest three deep).
const fastMaxDepth = 32

// strPlain marks the bytes that may appear unescaped inside a JSON string and need no special
// handling: everything from 0x20 to 0x7F except '"' and '\\'. Bytes >= 0x80 stop the run so the
// scanner can note that the event needs a UTF-8 check.
var strPlain [256]bool

func init() {
	for c := 0x20; c < 0x80; c++ {
		strPlain[c] = c != '"' && c != '\\'
	}
}

// fastScan is the state of one fast scan.
type fastScan struct {
	b    []byte
	i    int
	high bool // a byte >= 0x80 was seen inside a string
	esc  bool // the last string scanned had an escape
}

// wsByte marks JSON whitespace.
var wsByte = [256]bool{' ': true, '\n': true, '\r': true, '\t': true}

func (s *fastScan) ws() {
	i, b := s.i, s.b
	for i < len(b) && wsByte[b[i]] {
		i++
	}
	s.i = i
}

// str scans a string starting at its opening quote and returns its raw content (escapes
// untouched; s.esc says whether there were any).
func (s *fastScan) str() ([]byte, bool) {
	b := s.b
	i := s.i + 1
	st := i
	s.esc = false
	for {
		// Eight plain bytes at a time while they last.
		for i+8 <= len(b) && strPlain[b[i]] && strPlain[b[i+1]] && strPlain[b[i+2]] && strPlain[b[i+3]] &&
			strPlain[b[i+4]] && strPlain[b[i+5]] && strPlain[b[i+6]] && strPlain[b[i+7]] {
			i += 8
		}
		for i < len(b) && strPlain[b[i]] {
			i++
		}
		if i >= len(b) {
			return nil, false
		}
		switch c := b[i]; {
		case c == '"':
			s.i = i + 1
			return b[st:i], true
		case c == '\\':
			s.esc = true
			if i+1 >= len(b) {
				return nil, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return nil, false
				}
				i += 6
			default:
				return nil, false
			}
		case c >= 0x80:
			s.high = true
			i++
		default: // a control byte
			return nil, false
		}
	}
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// num scans a number (strict JSON grammar) and returns its text.
func (s *fastScan) num() ([]byte, bool) {
	b := s.b
	i := s.i
	st := i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return nil, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return nil, false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return nil, false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	s.i = i
	return b[st:i], true
}

// lit scans true, false or null.
func (s *fastScan) lit() bool {
	b := s.b[s.i:]
	switch {
	case len(b) >= 4 && (string(b[:4]) == "true" || string(b[:4]) == "null"):
		s.i += 4
	case len(b) >= 5 && string(b[:5]) == "false":
		s.i += 5
	default:
		return false
	}
	return true
}

// value scans any value and returns it as a jv (objects and arrays are validated and skipped).
func (s *fastScan) value(depth int) (jv, bool) {
	if s.i >= len(s.b) {
		return jv{}, false
	}
	switch c := s.b[s.i]; {
	case c == '"':
		v, ok := s.str()
		if !ok {
			return jv{}, false
		}
		if s.esc {
			return jv{t: jvEscaped}, true
		}
		return jv{t: jvString, b: v}, true
	case c == '-' || isDigit(c):
		v, ok := s.num()
		return jv{t: jvNumber, b: v}, ok
	case c == '{' || c == '[':
		return jv{t: jvOther}, s.compound(depth + 1)
	default:
		return jv{t: jvOther}, s.lit()
	}
}

// compound validates and skips an object or array starting at its opening bracket.
// member scans an object member's `"key" :` at s.i (and the white space after the colon),
// returning the key's raw bytes; s.esc says whether the key held an escape.
func (s *fastScan) member() ([]byte, bool) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false
	}
	key, ok := s.str()
	if !ok {
		return nil, false
	}
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		return nil, false
	}
	s.i++
	s.ws()
	return key, true
}

func (s *fastScan) compound(depth int) bool {
	if depth > fastMaxDepth {
		return false
	}
	obj := s.b[s.i] == '{'
	s.i++
	s.ws()
	closer := byte(']')
	if obj {
		closer = '}'
	}
	if s.i < len(s.b) && s.b[s.i] == closer {
		s.i++
		return true
	}
	for {
		if obj {
			if _, ok := s.member(); !ok {
				return false
			}
		}
		if _, ok := s.value(depth); !ok {
			return false
		}
		s.ws()
		if s.i >= len(s.b) {
			return false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.ws()
		case closer:
			s.i++
			return true
		default:
			return false
		}
	}
}

// jv types. jvEscaped is a string with escapes: the fast path declines an event when it needs
// such a value.
const (
	jvAbsent = iota
	jvString
	jvNumber
	jvOther
	jvEscaped
)

// fastEvent fills ev from raw with the fast scanner; false means the caller must use the
// fastjson path (ev is then garbage).
// It keeps no state, so the pipeline's splitting goroutine may run it too.
func fastEvent(raw []byte, ev *rawEvent) bool {
	n, ok := fastEventAt(raw, ev)
	if !ok {
		return false
	}
	s := fastScan{b: raw, i: n}
	s.ws()
	return s.i == len(raw)
}

// fastEventAt is fastEvent for an element that starts raw (after white space) and may be
// followed by more bytes: n is the end of the element's closing brace. It succeeds exactly
// when fastEvent would on raw[:n], so the pipeline's splitter can decode the elements of its
// read buffer in place instead of scanning each for its end first (scanner.value).
func fastEventAt(raw []byte, ev *rawEvent) (n int, ok bool) {
	s := fastScan{b: raw}
	*ev = rawEvent{a: noArgs} // one write of ~0.5 KB per event, not a clear and a reset
	s.ws()
	if s.i >= len(raw) || raw[s.i] != '{' {
		return 0, false
	}
	s.i++
	s.ws()
	if s.i < len(raw) && raw[s.i] == '}' {
		s.i++
		goto end
	}
	for {
		key, ok := s.member()
		if !ok || s.esc {
			return 0, false
		}
		if string(key) == "args" && s.i < len(raw) && raw[s.i] == '{' {
			ev.a.reset()
			if !fastArgs(&s, &ev.a) {
				return 0, false
			}
		} else {
			v, ok := s.value(1)
			if !ok {
				return 0, false
			}
			switch string(key) {
			case "ph":
				if ev.ph, ok = v.str(); !ok {
					return 0, false
				}
			case "cat":
				if ev.cat, ok = v.str(); !ok {
					return 0, false
				}
			case "name":
				if ev.name, ok = v.str(); !ok {
					return 0, false
				}
			case "pid", "tid", "ts", "dur", "id":
				if v.t == jvEscaped {
					return 0, false
				}
				switch string(key) {
				case "pid":
					ev.pid = v
				case "tid":
					ev.tid = v
				case "ts":
					ev.ts = v
				case "dur":
					ev.dur = v
				case "id":
					ev.id = v
				}
			case "args":
				ev.a.reset() // not an object: no args, as readArgs does
			}
		}
		s.ws()
		if s.i >= len(raw) {
			return 0, false
		}
		if raw[s.i] == '}' {
			s.i++
			break
		}
		if raw[s.i] != ',' {
			return 0, false
		}
		s.i++
		s.ws()
	}
end:
	if len(ev.ph) == 1 && ev.ph[0] == 'M' {
		return 0, false // metadata reads args strings: the fastjson path does it
	}
	if s.high && !utf8.Valid(raw[:s.i]) {
		return 0, false
	}
	return s.i, true
}

// str returns a string value's bytes, nil for other types (as fastjson's StringBytes error
// does); ok is false for an escaped string, which the fast path does not unescape.
func (v jv) str() ([]byte, bool) {
	switch v.t {
	case jvString:
		return v.b, true
	case jvEscaped:
		return nil, false
	}
	return nil, true
}

// fastArgs scans an args object at s.i, taking the keys argsFields holds.
func fastArgs(s *fastScan, a *argsFields) bool {
	raw := s.b
	s.i++ // '{'
	s.ws()
	if s.i < len(raw) && raw[s.i] == '}' {
		s.i++
		return true
	}
	for {
		key, ok := s.member()
		if !ok || s.esc {
			return false
		}
		st := s.i
		v, ok := s.value(2)
		if !ok {
			return false
		}
		if k := argKey(key); k != argNone {
			if v.t == jvEscaped {
				return false
			}
			a.setVal(k, v)
		} else if si := shapeArg(key); si >= 0 {
			js := raw[st:s.i]
			if bytes.IndexByte(js, '\\') >= 0 {
				return false // an escape: fastjson's text of it is the reference
			}
			a.shape[si] = js
		}
		s.ws()
		if s.i >= len(raw) {
			return false
		}
		if raw[s.i] == '}' {
			s.i++
			return true
		}
		if raw[s.i] != ',' {
			return false
		}
		s.i++
		s.ws()
	}
}
