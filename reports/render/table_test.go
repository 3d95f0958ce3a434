package render

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

func sample() *Table {
	return &Table{
		Header: []string{"Name", "Time", "Where"},
		Align:  []Align{Left, Right, Left},
		Rows: [][]string{
			{"a|b", "1.0 ms", "x.py:1 f\ny.py:2 g"},
			{"long-name", "10.25 ms", "z"},
		},
		Empty: "nothing",
	}
}

func TestMarkdown(t *testing.T) {
	var b bytes.Buffer
	if err := WriteMarkdown(&b, sample()); err != nil {
		t.Fatal(err)
	}
	want := "| Name | Time | Where |\n| --- | ---: | --- |\n| a\\|b | 1.0 ms | x.py:1 f<br>y.py:2 g |\n| long-name | 10.25 ms | z |\n"
	if b.String() != want {
		t.Errorf("markdown:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	e := &Table{Header: []string{"A", "B"}, Empty: "none here"}
	_ = WriteMarkdown(&b, e)
	if !strings.Contains(b.String(), "| none here | - |") {
		t.Errorf("empty table: %q", b.String())
	}
}

func TestText(t *testing.T) {
	var b bytes.Buffer
	if err := WriteText(&b, sample()); err != nil {
		t.Fatal(err)
	}
	want := "Name           Time  Where\n" +
		"---------  --------  --------\n" +
		"a|b          1.0 ms  x.py:1 f\n" +
		"                     y.py:2 g\n" +
		"long-name  10.25 ms  z\n"
	if b.String() != want {
		t.Errorf("text:\n%q\nwant:\n%q", b.String(), want)
	}
}

func TestCSV(t *testing.T) {
	var b bytes.Buffer
	if err := WriteCSV(&b, sample()); err != nil {
		t.Fatal(err)
	}
	want := "Name,Time,Where\na|b,1.0 ms,\"x.py:1 f\ny.py:2 g\"\nlong-name,10.25 ms,z\n"
	if b.String() != want {
		t.Errorf("csv:\n%q\nwant:\n%q", b.String(), want)
	}
}

func TestShorten(t *testing.T) {
	cases := []struct {
		in   string
		max  int
		want string
	}{
		{"short", 10, "short"},
		{"void k<a<b>, c>(int, float)", 22, "void k<a<…>, c>(…)"},
		{"void k<a<b>, c>(int, float)", 13, "void k<…>(…)"},
		{"void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >", 100,
			"void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel(…), std::array<…> >"},
		{"abcdefghijklmnopqrstuvwxyz", 10, "abcdef…xyz"},
	}
	for _, c := range cases {
		got := Shorten(c.in, c.max)
		if got != c.want {
			t.Errorf("Shorten(%q, %d) = %q, want %q", c.in, c.max, got, c.want)
		}
		if utf8.RuneCountInString(got) > c.max {
			t.Errorf("Shorten(%q, %d) is %d runes long", c.in, c.max, utf8.RuneCountInString(got))
		}
	}
}

// FuzzShorten: the result never exceeds the bound and never panics on unbalanced brackets.
func FuzzShorten(f *testing.F) {
	for _, s := range []string{"void k<a<b>, c>(int)", ">>>(((", "a<b(c>d)e", "ü<ö>(ä)"} {
		f.Add(s, 5)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		if n < 0 || n > 1000 || !utf8.ValidString(s) {
			return
		}
		got := Shorten(s, n)
		if n > 0 && utf8.RuneCountInString(got) > n {
			t.Fatalf("Shorten(%q, %d) = %q is too long", s, n, got)
		}
	})
}
