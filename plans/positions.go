package plans

import (
	"errors"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// positions finds where a key is written. BurntSushi records a position for every key it parses
// but exports it only inside a ParseError, which it builds for an error returned by an
// Unmarshaler. So a second, independent decode keeps every value as a toml.Primitive, and
// decoding one into a probe that always fails yields that key's line. Implicitly created tables
// (`[nsys.x]` creates nsys, `a.b = 1` creates a) have no position of their own; they take the
// first line of anything under them.
type positions struct {
	md   toml.MetaData
	root map[string]toml.Primitive
	ok   bool
}

type probe struct{}

var errProbe = errors.New("position probe")

// UnmarshalTOML fails on purpose: the failure carries the key's position.
func (*probe) UnmarshalTOML(any) error { return errProbe }

func newPositions(src string) *positions {
	p := &positions{}
	md, err := toml.Decode(src, &p.root)
	p.md, p.ok = md, err == nil
	return p
}

func (p *positions) probeLine(prim toml.Primitive) int {
	var pr probe
	err := p.md.PrimitiveDecode(prim, &pr)
	var pe toml.ParseError
	if errors.As(err, &pe) {
		return pe.Position.Line
	}
	return 0
}

// children decodes a table (or the first tables of an array of tables) into its keys.
func (p *positions) children(prim toml.Primitive) []map[string]toml.Primitive {
	var m map[string]toml.Primitive
	if err := p.md.PrimitiveDecode(prim, &m); err == nil {
		return []map[string]toml.Primitive{m}
	}
	var a []map[string]toml.Primitive
	if err := p.md.PrimitiveDecode(prim, &a); err == nil {
		return a
	}
	return nil
}

// line returns the 1-based line of key k, or 0 when it cannot be found.
func (p *positions) line(k []string) int {
	if !p.ok || len(k) == 0 {
		return 0
	}
	prim, found := p.root[k[0]]
	for _, seg := range k[1:] {
		if !found {
			break
		}
		found = false
		for _, m := range p.children(prim) {
			if v, ok := m[seg]; ok {
				prim, found = v, true
				break
			}
		}
	}
	if found {
		if l := p.firstLine(prim, 0); l > 0 {
			return l
		}
	}
	// Not found, or BurntSushi recorded no position (it has none for the empty key ""): the
	// enclosing table's line is the best we can say.
	if len(k) > 1 {
		return p.line(k[:len(k)-1])
	}
	return 0
}

func (p *positions) firstLine(prim toml.Primitive, depth int) int {
	if l := p.probeLine(prim); l > 0 || depth > 32 {
		return l
	}
	best := 0
	for _, m := range p.children(prim) {
		for _, v := range m {
			if l := p.firstLine(v, depth+1); l > 0 && (best == 0 || l < best) {
				best = l
			}
		}
	}
	return best
}

func (d *decoder) positions() *positions {
	if d.pos == nil {
		d.pos = newPositions(d.src)
		d.lines = strings.Split(d.src, "\n")
	}
	return d.pos
}

// keyCol finds the column of the key name seg on line (1-based), written bare or quoted, or 0.
func (d *decoder) keyCol(line int, seg string) int {
	d.positions()
	if line < 1 || line > len(d.lines) {
		return 0
	}
	text := d.lines[line-1]
	toks := []string{seg, `"` + seg + `"`, `'` + seg + `'`}
	if seg == "" {
		toks = toks[1:]
	}
	for _, tok := range toks {
		for from := 0; from < len(text); {
			i := strings.Index(text[from:], tok)
			if i < 0 {
				break
			}
			i += from
			end := i + len(tok)
			if (i == 0 || strings.ContainsRune(" \t[.{,", rune(text[i-1]))) &&
				(end == len(text) || strings.ContainsRune(" \t=.]", rune(text[end]))) {
				return i + 1
			}
			from = i + 1
		}
	}
	return 0
}

// addKey records a problem at the position of key k.
func (d *decoder) addKey(k []string, msg string) {
	d.addAt(k, d.positions().line(k), msg)
}

// addAt records a problem for key k at a line already known (0: look it up).
func (d *decoder) addAt(k []string, line int, msg string) {
	if line == 0 {
		line = d.positions().line(k)
	}
	col := 0
	if line > 0 && len(k) > 0 {
		col = d.keyCol(line, k[len(k)-1])
	}
	d.problems = append(d.problems, Problem{Key: toml.Key(k).String(), Line: line, Col: col, Msg: msg})
}

// addElem records a problem with element i of the array at key k. When the element is a string
// written literally, the problem points at it (arrays often span lines); otherwise at the key.
func (d *decoder) addElem(k []string, i int, lit string, msg string) {
	d.addElemN(k, i, lit, 0, msg)
}

// addElemN is addElem for the nth (0-based) literal occurrence of lit, for duplicates.
func (d *decoder) addElemN(k []string, i int, lit string, nth int, msg string) {
	line := d.positions().line(k)
	key := toml.Key(k).String() + "[" + strconv.Itoa(i) + "]"
	if line > 0 && lit != "" {
		if l, c := d.findLiteral(line, lit, nth); l > 0 {
			d.problems = append(d.problems, Problem{Key: key, Line: l, Col: c, Msg: msg})
			return
		}
	}
	col := 0
	if line > 0 {
		col = d.keyCol(line, k[len(k)-1])
	}
	d.problems = append(d.problems, Problem{Key: key, Line: line, Col: col, Msg: msg})
}

// findLiteral looks for the nth "lit" or 'lit' from line on, stopping at the next key or table
// header.
func (d *decoder) findLiteral(line int, lit string, nth int) (int, int) {
	for l := line; l <= len(d.lines); l++ {
		text := d.lines[l-1]
		if l > line {
			t := strings.TrimSpace(text)
			if strings.HasPrefix(t, "[") && !strings.HasPrefix(t, "[\"") && !strings.HasPrefix(t, "['") && !strings.HasPrefix(t, "[[") {
				break
			}
			if eq := strings.IndexByte(t, '='); eq > 0 && !strings.ContainsAny(t[:eq], `"'`) {
				break
			}
		}
		// On the key's own line, skip the key itself ("model = [\"model\"]").
		from := 0
		if l == line {
			if eq := strings.IndexByte(text, '='); eq >= 0 {
				from = eq
			}
		}
		for from < len(text) {
			i := strings.Index(text[from:], `"`+lit+`"`)
			if j := strings.Index(text[from:], `'`+lit+`'`); j >= 0 && (i < 0 || j < i) {
				i = j
			}
			if i < 0 {
				break
			}
			if nth == 0 {
				return l, from + i + 1
			}
			nth--
			from += i + len(lit) + 2
		}
	}
	return 0, 0
}
