package plans

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/BurntSushi/toml"

	"github.com/sglprof/runner/plans/infile"
)

// A plan with thousands of unknown keys lists MaxProblems of them, at their lines, and counts
// the rest (listing every one, each position found from scratch, took 31 s for 8k
// keys and over 14 minutes for 100k).
func TestManyProblemsCapped(t *testing.T) {
	src := planWithUnknownKeys(100 << 10) // about 8k keys
	n := strings.Count(string(src), "junk_")
	_, err := Parse("plan.toml", src)
	var pe *Error
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v, want *Error", err)
	}
	if len(pe.Problems) != MaxProblems+1 {
		t.Fatalf("%d problems listed, want %d and a count of the rest", len(pe.Problems), MaxProblems+1)
	}
	for i, p := range pe.Problems[:MaxProblems] {
		want := Problem{Key: fmt.Sprintf("matrix.junk_%d", i), Line: 7 + i, Col: 1}
		if p.Key != want.Key || p.Line != want.Line || p.Col != want.Col {
			t.Fatalf("problem %d = %+v, want key %s at %d:%d", i, p, want.Key, want.Line, want.Col)
		}
	}
	last := pe.Problems[MaxProblems].Msg
	if want := fmt.Sprintf("and %d more problems", n-MaxProblems); !strings.Contains(last, want) {
		t.Fatalf("last problem %q, want %q", last, want)
	}
}

// Many duplicated axis values: each duplicate's literal occurrence is counted as it goes, not by
// rescanning the axis, and the listing is capped like any other.
func TestManyDuplicatesCapped(t *testing.T) {
	vals := strings.TrimSuffix(strings.Repeat(`"torch", `, 20000), ", ")
	src := minimal + "[profile]\nprofilers = [" + vals + "]\n"
	_, err := Parse("plan.toml", []byte(src))
	var pe *Error
	if !errors.As(err, &pe) || len(pe.Problems) != MaxProblems+1 {
		t.Fatalf("err = %v, want %d problems", err, MaxProblems+1)
	}
	// Each duplicate points at its own literal: element i starts at column 14 + 9i.
	for i, p := range pe.Problems[:3] {
		if want := fmt.Sprintf("profile.profilers[%d]", i+1); p.Key != want || p.Col != 14+9*(i+1) {
			t.Fatalf("problem %d = %+v, want %s at column %d", i, p, want, 14+9*(i+1))
		}
	}
}

// An array nested 100,000 deep is refused at the bracket that crosses MaxNesting, before it is
// decoded (53 s, 545 MB and a 1.7 MB error message).
func TestDeepNestingRefused(t *testing.T) {
	const depth = 100000
	src := minimal + "seed = " + strings.Repeat("[", depth) + "1" + strings.Repeat("]", depth) + "\n"
	_, err := Parse("plan.toml", []byte(src))
	var pe *Error
	if !errors.As(err, &pe) || len(pe.Problems) != 1 {
		t.Fatalf("err = %v, want one problem", err)
	}
	line := strings.Count(minimal, "\n") + 1
	if p := pe.Problems[0]; p.Line != line || p.Col != len("seed = ")+MaxNesting+1 || !strings.Contains(p.Msg, "nested more than") {
		t.Fatalf("problem = %+v, want line %d col %d", p, line, len("seed = ")+MaxNesting+1)
	}
	if len(err.Error()) > 300 {
		t.Fatalf("error is %d bytes long", len(err.Error()))
	}
}

// A dotted key or table header of 20,000 parts is refused before decoding, at the dot that
// crosses MaxKeyDots (BurntSushi's time grows with the square of a key's length).
func TestLongDottedKeyRefused(t *testing.T) {
	long := strings.Repeat("a.", 20000) + "a"
	for _, src := range []string{minimal + long + " = 1\n", minimal + "[" + long + "]\n", minimal + "x = { " + long + " = 1 }\n"} {
		_, err := Parse("plan.toml", []byte(src))
		var pe *Error
		if !errors.As(err, &pe) || len(pe.Problems) != 1 || !strings.Contains(pe.Problems[0].Msg, "more than 16 dots") {
			t.Fatalf("err = %v, want one problem about dots", err)
		}
		if p := pe.Problems[0]; p.Line != strings.Count(minimal, "\n")+1 {
			t.Fatalf("problem at line %d", p.Line)
		}
	}
	// Floats, dates and dots in strings are not keys.
	ok := minimal + "seed = [1, 2]\n[compare.tolerances]\ne2e = \"1.5% or 1.5ms\"\n[load]\nmax_error_rate = 0.5\n"
	ok = strings.Replace(ok, `prompt = ["a fox"]`, `prompt = ["a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s"]`, 1)
	if _, err := Parse("plan.toml", []byte(ok)); err != nil && strings.Contains(err.Error(), "dots") {
		t.Fatal(err)
	}
}

// Brackets inside strings and comments are text, not nesting; within the limit, a nested value
// still gets its type error.
func TestNestingIgnoresStringsAndComments(t *testing.T) {
	deep := strings.Repeat("[", 40)
	for _, src := range []string{
		minimal + "# " + deep + "\n",
		strings.Replace(minimal, `prompt = ["a fox"]`, `prompt = ["`+deep+`", 'x`+deep+`']`, 1),
		strings.Replace(minimal, `prompt = ["a fox"]`, `prompt = ["""`+"\n"+deep+`\"""`+"\n"+`"""]`, 1),
		strings.Replace(minimal, `prompt = ["a fox"]`, `prompt = ['''`+"\n"+deep+"\n"+`''', "\"#`+deep+`"]`, 1),
	} {
		if !strings.Contains(src, deep) {
			t.Fatalf("case does not hold the brackets:\n%s", src)
		}
		if _, err := Parse("plan.toml", []byte(src)); err != nil {
			t.Errorf("plan refused: %v\n%s", err, src)
		}
	}
	src := minimal + "seed = " + strings.Repeat("[", MaxNesting) + "1" + strings.Repeat("]", MaxNesting) + "\n"
	_, err := Parse("plan.toml", []byte(src))
	if err == nil || !strings.Contains(err.Error(), "expected an array of integers") {
		t.Fatalf("err = %v, want a type error", err)
	}
}

// FuzzNesting: the scan never refuses a file whose decoded values (tables and arrays) nest no
// deeper than MaxNesting, so it cannot reject a plan the decoder would read.
func FuzzNesting(f *testing.F) {
	f.Add([]byte(minimal))
	f.Add([]byte(`a = [[1], [[2]], { b = ["]", '['] }] # [[[`))
	f.Add([]byte("a = \"\"\"\n[[[\\\"\"\"\"\nb = '''[[[''''"))
	f.Add([]byte(strings.Repeat("[", MaxNesting+1)))
	f.Add([]byte("[a.b.c]\nd.e.f = 1.5\ng = { h.i = 1979-05-27T07:32:00.999 }\n\"j.k\".l = [0.5, 1.5]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, refused := nestingProblem(string(data))
		if refused && (p.Line < 1 || p.Col < 1) {
			t.Fatalf("refusal without a position: %+v", p)
		}
		var v map[string]any
		md, err := toml.Decode(string(data), &v)
		if err != nil {
			return
		}
		if d := valueDepth(v) - 1; refused && d <= MaxNesting && strings.Contains(p.Msg, "nested") { // the root is no bracket
			t.Fatalf("refused a file nested %d deep: %+v", d, p)
		}
		parts := 0
		for _, k := range md.Keys() {
			parts = max(parts, len(k))
		}
		if refused && parts <= MaxKeyDots+1 && strings.Contains(p.Msg, "dots") {
			t.Fatalf("refused a file whose longest key has %d parts: %+v", parts, p)
		}
	})
}

// valueDepth counts the levels of tables and arrays in a decoded value.
func valueDepth(v any) int {
	d := 0
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			d = max(d, valueDepth(e))
		}
	case []map[string]any:
		for _, e := range v {
			d = max(d, valueDepth(e))
		}
	case []any:
		for _, e := range v {
			d = max(d, valueDepth(e))
		}
	default:
		return 0
	}
	return d + 1
}

// Load reads the plan through plans/infile: a file over MaxPlanBytes (a trace passed by
// mistake) and a FIFO are refused with an error that names the file, without being read.
func TestLoadRefusesLargeAndNonRegular(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.toml")
	if err := os.WriteFile(big, []byte(minimal+strings.Repeat("#", MaxPlanBytes)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); !errors.Is(err, infile.ErrTooLarge) || !strings.Contains(err.Error(), big) {
		t.Errorf("Load(%d-byte file) = %v, want infile.ErrTooLarge naming it", MaxPlanBytes+len(minimal), err)
	}
	fifo := filepath.Join(dir, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip(err)
	}
	if _, err := Load(fifo); !errors.Is(err, infile.ErrNotRegular) || !strings.Contains(err.Error(), "a FIFO") {
		t.Errorf("Load(FIFO) = %v, want infile.ErrNotRegular naming a FIFO", err)
	}
}
