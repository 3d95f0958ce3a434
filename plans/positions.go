package plans

import (
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// positions finds where a key is written. BurntSushi records a position for every key it parses
// but exports it only inside a ParseError, which it builds for an error returned by an
// Unmarshaler. So a second, independent decode keeps every value as a toml.Primitive, and
// decoding one into a probe that always fails yields that key's line. Implicitly created tables
// (`[nsys.x]` creates nsys, `a.b = 1` creates a) have no position of their own; they take the
// line of the first key written under them.
//
// A probe costs time in proportion to the file (BurntSushi copies the source and splits it into
// lines to build each ParseError), so lookups are memoised, decoded tables are cached, and Parse
// reports at most MaxProblems problems: judging a plan stays linear in its size however many
// keys are wrong (docs/performance.md).
type positions struct {
	md   toml.MetaData
	root map[string]toml.Primitive
	ok   bool
	// keys is md.Keys(): every key written, in file order, for the first key under a table.
	keys  []toml.Key
	lines map[string]int                         // dotted key -> line, memoised
	kids  map[string][]map[string]toml.Primitive // dotted key -> its decoded table(s)
}

type probe struct{}

var errProbe = errors.New("position probe")

// UnmarshalTOML fails on purpose: the failure carries the key's position.
func (*probe) UnmarshalTOML(any) error { return errProbe }

func newPositions(src string) *positions {
	p := &positions{lines: map[string]int{}, kids: map[string][]map[string]toml.Primitive{}}
	md, err := toml.Decode(src, &p.root)
	p.md, p.ok = md, err == nil
	if p.ok {
		p.keys = md.Keys()
	}
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

// children decodes the table at the dotted key ks (or the tables of an array of tables) into
// its keys, once.
func (p *positions) children(ks string, prim toml.Primitive) []map[string]toml.Primitive {
	if c, ok := p.kids[ks]; ok {
		return c
	}
	var c []map[string]toml.Primitive
	var m map[string]toml.Primitive
	if err := p.md.PrimitiveDecode(prim, &m); err == nil {
		c = []map[string]toml.Primitive{m}
	} else {
		var a []map[string]toml.Primitive
		if err := p.md.PrimitiveDecode(prim, &a); err == nil {
			c = a
		}
	}
	p.kids[ks] = c
	return c
}

// lookup finds the value at key k; in an array of tables, the first table that has the key.
func (p *positions) lookup(k []string) (toml.Primitive, bool) {
	prim, found := p.root[k[0]]
	for i, seg := range k[1:] {
		if !found {
			break
		}
		found = false
		for _, m := range p.children(toml.Key(k[:i+1]).String(), prim) {
			if v, ok := m[seg]; ok {
				prim, found = v, true
				break
			}
		}
	}
	return prim, found
}

// line returns the 1-based line of key k, or 0 when it cannot be found.
func (p *positions) line(k []string) int {
	if !p.ok || len(k) == 0 {
		return 0
	}
	ks := toml.Key(k).String()
	if l, ok := p.lines[ks]; ok {
		return l
	}
	l := 0
	if prim, found := p.lookup(k); found {
		if l = p.probeLine(prim); l == 0 {
			l = p.firstUnder(k)
		}
	}
	// Not found, or BurntSushi recorded no position (it has none for the empty key ""): the
	// enclosing table's line is the best we can say.
	if l == 0 && len(k) > 1 {
		l = p.line(k[:len(k)-1])
	}
	p.lines[ks] = l
	return l
}

// firstUnder is the line of the first key written under the implicit table k: md.Keys() is in
// file order, so that is the first key with k as a proper prefix that has a position.
func (p *positions) firstUnder(k []string) int {
	for _, key := range p.keys {
		if len(key) <= len(k) || !slices.Equal(key[:len(k)], k) {
			continue
		}
		if prim, ok := p.lookup(key); ok {
			if l := p.probeLine(prim); l > 0 {
				return l
			}
		}
	}
	return 0
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

// MaxProblems is the most problems Parse lists; the rest are counted in a last line. Nobody
// reads ten thousand, and each one costs a position lookup.
const MaxProblems = 20

// room reports whether another problem may be listed, counting it as dropped when not.
func (d *decoder) room() bool {
	if len(d.problems) < MaxProblems {
		return true
	}
	d.dropped++
	return false
}

// addKey records a problem at the position of key k.
func (d *decoder) addKey(k []string, msg string) {
	d.addAt(k, 0, msg)
}

// addAt records a problem for key k at a line already known (0: look it up).
func (d *decoder) addAt(k []string, line int, msg string) {
	if !d.room() {
		return
	}
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
	if !d.room() {
		return
	}
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
