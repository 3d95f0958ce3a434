package sim

import (
	"encoding/json"
	"strconv"
)

// The activity file's lines are JSON (activity.go), written and read by the millions in a
// simulated nsys run: through encoding/json's reflection they were a fifth of the README's
// simulated run's CPU. appendActRec and parseActLine are the fast paths. appendActRec writes
// exactly what json.Marshal writes; parseActLine reads the subset of JSON that appendActRec
// writes for plain ASCII strings and says false for anything else, which then goes to
// json.Unmarshal, so a line means the same whichever path reads it (FuzzActLine checks both).

// appendActRec appends r as json.Marshal writes it, and a newline.
func appendActRec(b []byte, r *actRec) []byte {
	b = append(b, `{"k":`...)
	b = appendJSONString(b, r.K)
	b = appendIntField(b, `,"s":`, r.S)
	b = appendIntField(b, `,"e":`, r.E)
	b = appendIntField(b, `,"pid":`, int64(r.PID))
	b = appendIntField(b, `,"tid":`, int64(r.TID))
	b = appendIntField(b, `,"dev":`, int64(r.Dev))
	b = appendIntField(b, `,"str":`, int64(r.Str))
	b = appendIntField(b, `,"corr":`, r.Corr)
	b = appendIntField(b, `,"n":`, int64(r.N))
	b = appendIntField(b, `,"id":`, int64(r.ID))
	b = appendStringField(b, `,"v":`, r.V)
	b = appendStringField(b, `,"name":`, r.Name)
	b = appendStringField(b, `,"text":`, r.Text)
	b = appendTriple(b, `,"g":`, r.G)
	b = appendTriple(b, `,"b":`, r.B)
	b = appendIntField(b, `,"bytes":`, r.Bytes)
	b = appendIntField(b, `,"ck":`, int64(r.CK))
	return append(b, "}\n"...)
}

func appendIntField(b []byte, key string, v int64) []byte {
	if v == 0 { // omitempty
		return b
	}
	return strconv.AppendInt(append(b, key...), v, 10)
}

func appendStringField(b []byte, key, s string) []byte {
	if s == "" { // omitempty
		return b
	}
	return appendJSONString(append(b, key...), s)
}

func appendTriple(b []byte, key string, v [3]int32) []byte {
	if v == [3]int32{} { // omitzero
		return b
	}
	b = append(append(b, key...), '[')
	for i, x := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(x), 10)
	}
	return append(b, ']')
}

// appendJSONString appends s quoted as json.Marshal quotes it: plain ASCII as it is, anything
// else (escapes, HTML characters, UTF-8, invalid bytes) by json.Marshal itself.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if !plainByte(s[i]) {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// plainByte reports whether c stands for itself in a JSON string as json.Marshal writes it.
func plainByte(c byte) bool {
	return c >= 0x20 && c < 0x7f && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
}

// parseActLine reads line into r (which must be zero) when it is an object of the keys actRec
// has, exactly as spelled, with integer values in range, plain ASCII strings and triples of
// exactly three integers, with no spaces; otherwise it says false and r is to be discarded.
func parseActLine(line []byte, r *actRec) bool {
	p := actParser{b: line}
	if !p.byte('{') {
		return false
	}
	if p.byte('}') {
		return p.i == len(p.b)
	}
	for {
		key, ok := p.raw()
		if !ok || !p.byte(':') {
			return false
		}
		switch string(key) { // no allocation: the compiler compares the bytes
		case "k":
			var k []byte
			k, ok = p.raw()
			r.K = kindString(k)
		case "v":
			r.V, ok = p.str()
		case "name":
			r.Name, ok = p.str()
		case "text":
			r.Text, ok = p.str()
		case "s":
			r.S, ok = p.int(64)
		case "e":
			r.E, ok = p.int(64)
		case "corr":
			r.Corr, ok = p.int(64)
		case "bytes":
			r.Bytes, ok = p.int(64)
		case "pid":
			ok = p.int32(&r.PID)
		case "tid":
			ok = p.int32(&r.TID)
		case "dev":
			ok = p.int32(&r.Dev)
		case "str":
			ok = p.int32(&r.Str)
		case "n":
			ok = p.int32(&r.N)
		case "id":
			ok = p.int32(&r.ID)
		case "ck":
			ok = p.int32(&r.CK)
		case "g":
			ok = p.triple(&r.G)
		case "b":
			ok = p.triple(&r.B)
		default:
			return false
		}
		if !ok {
			return false
		}
		if p.byte('}') {
			return p.i == len(p.b)
		}
		if !p.byte(',') {
			return false
		}
	}
}

// actParser walks one line for parseActLine.
type actParser struct {
	b []byte
	i int
}

func (p *actParser) byte(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// raw reads a string of plain bytes (no escapes, nothing json.Unmarshal would change) and
// returns its bytes within the line.
func (p *actParser) raw() ([]byte, bool) {
	if !p.byte('"') {
		return nil, false
	}
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		if c == '"' {
			p.i++
			return p.b[start : p.i-1], true
		}
		if c < 0x20 || c >= 0x7f || c == '\\' {
			return nil, false
		}
		p.i++
	}
	return nil, false
}

func (p *actParser) str() (string, bool) {
	b, ok := p.raw()
	return string(b), ok
}

// kindString returns a record kind as a constant string, without allocating for the kinds the
// simulator writes.
func kindString(k []byte) string {
	switch string(k) {
	case "kernel":
		return "kernel"
	case "rt":
		return "rt"
	case "mem":
		return "mem"
	case "nvtx":
		return "nvtx"
	case "name":
		return "name"
	case "proc":
		return "proc"
	case "gpu":
		return "gpu"
	case "cap":
		return "cap"
	}
	return string(k)
}

// int reads a JSON integer (no fraction, exponent or leading zero) that fits in bits.
func (p *actParser) int(bits uint) (int64, bool) {
	neg := p.byte('-')
	digits := p.i
	var u uint64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		if u > (1<<63)/10 {
			return 0, false // past any int64
		}
		u = u*10 + uint64(p.b[p.i]-'0')
		p.i++
	}
	if p.i == digits || (p.b[digits] == '0' && p.i-digits > 1) {
		return 0, false
	}
	if p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		return 0, false
	}
	limit := uint64(1) << (bits - 1) // |min|; max is one less
	if neg {
		if u > limit {
			return 0, false
		}
		return -int64(u), true // int64(1<<63) wraps to the minimum, whose negation is itself
	}
	if u >= limit {
		return 0, false
	}
	return int64(u), true
}

func (p *actParser) int32(dst *int32) bool {
	v, ok := p.int(32)
	*dst = int32(v)
	return ok
}

func (p *actParser) triple(dst *[3]int32) bool {
	if !p.byte('[') {
		return false
	}
	for i := range dst {
		if i > 0 && !p.byte(',') {
			return false
		}
		if !p.int32(&dst[i]) {
			return false
		}
	}
	return p.byte(']')
}
