package table

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"regexp"
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

func TestTitleAndNoRule(t *testing.T) {
	tb := &Table{Title: "NVTX ranges", Header: []string{"Range", "Count"}, Align: []Align{Left, Right},
		Rows: [][]string{{"prefetch", "1"}}}
	var b bytes.Buffer
	_ = WriteText(&b, tb)
	if want := "NVTX ranges\nRange     Count\n--------  -----\nprefetch      1\n"; b.String() != want {
		t.Errorf("text:\n%q\nwant:\n%q", b.String(), want)
	}
	b.Reset()
	_ = WriteMarkdown(&b, tb)
	if !strings.HasPrefix(b.String(), "### NVTX ranges\n\n| Range | Count |\n") {
		t.Errorf("markdown title: %q", b.String())
	}
	b.Reset()
	tb.NoRule, tb.Title = true, ""
	_ = WriteText(&b, tb)
	if want := "Range     Count\nprefetch      1\n"; b.String() != want {
		t.Errorf("no rule:\n%q\nwant:\n%q", b.String(), want)
	}
}

func TestEscapeMarkdown(t *testing.T) {
	for in, want := range map[string]string{
		"plain":         "plain",
		"a|b":           `a\|b`,
		"x\ny":          "x<br>y",
		"x\r\ny\rz":     "x<br>y<br>z",
		"~Foo() ~Bar()": `\~Foo() \~Bar()`,
		// "<" would open an HTML tag GitHub drops with the name in it; ">" alone is harmless.
		"void k<float>": "void k&lt;float>",
		"a<b\nc":        "a&lt;b<br>c",
		"`tick`":        "`tick`",
	} {
		if got := EscapeMarkdown(in); got != want {
			t.Errorf("EscapeMarkdown(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestCodeSpan: the fence outgrows the backticks inside, a leading or trailing backtick gets
// the spaces CommonMark strips, and nothing else is escaped (an escape would show literally).
func TestCodeSpan(t *testing.T) {
	for in, want := range map[string]string{
		"":              "",
		"void k<float>": "`void k<float>`",
		"~Foo() a|b":    "`~Foo() a|b`",
		"a`b":           "``a`b``",
		"a``b`c":        "```a``b`c```",
		"`x`":           "`` `x` ``",
		" x ":           "`  x  `",
		"x\ny":          "`x y`",
	} {
		if got := CodeSpan(in); got != want {
			t.Errorf("CodeSpan(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestCodeColumnMarkdown: a Code column's cells are wrapped by the writer, each line its own
// code span, with "|" the only escape; the text column beside it escapes "<", "|" and "~". Before
// the Code flag, callers put backticks around escaped text, so "~" showed as "\~" inside the span
// and "<" outside one vanished as a tag.
func TestCodeColumnMarkdown(t *testing.T) {
	tb := &Table{Header: []string{"Kernel", "Note"}, Code: []bool{true},
		Rows: [][]string{
			{"void k<float>|x\n~Foo()", "void k<float>|x\n~Foo()"},
			{"a`b", "a`b"},
			{"", "empty code cell"},
		}}
	var b bytes.Buffer
	if err := WriteMarkdown(&b, tb); err != nil {
		t.Fatal(err)
	}
	want := "| Kernel | Note |\n| --- | --- |\n" +
		"| `void k<float>\\|x`<br>`~Foo()` | void k&lt;float>\\|x<br>\\~Foo() |\n" +
		"| ``a`b`` | a`b |\n" +
		"|  | empty code cell |\n"
	if b.String() != want {
		t.Errorf("markdown:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	tb.Rows, tb.Empty = nil, "(none)"
	_ = WriteMarkdown(&b, tb)
	if !strings.HasSuffix(b.String(), "| (none) | - |\n") {
		t.Errorf("the empty row is not code: %q", b.String())
	}
	b.Reset()
	tb.Rows = [][]string{{"k<T>", "n"}}
	_ = WriteHTML(&b, tb)
	if !strings.Contains(b.String(), "<tr><td><code>k&lt;T&gt;</code></td><td>n</td></tr>") {
		t.Errorf("html code cell: %s", b.String())
	}
	b.Reset()
	_ = WriteText(&b, tb)
	if !strings.Contains(b.String(), "k<T>") || strings.Contains(b.String(), "`") {
		t.Errorf("text shows code cells as they are: %q", b.String())
	}
}

// nasty is a kernel name that tries to break every format: a pipe ends a Markdown cell, a
// newline a row, a tilde pair strikes through, angle brackets open an HTML tag, a comma and a
// quote end a CSV field.
const nasty = "void k<float>|x\nfoo,\"bar\" ~a~"

func nastyTable() *Table {
	return &Table{Title: "kernels", Header: []string{"Kernel", "GPU time"}, Align: []Align{Left, Right},
		Rows: [][]string{{nasty, "1.0 ms"}, {"plain", "2.0 ms"}}}
}

// TestNastyNameEveryFormat: a kernel name with "|" and a newline stays inside its cell in every
// format: Markdown keeps one line per row and two cells, text keeps the next column aligned,
// CSV and JSON round-trip the exact name, HTML shows it escaped.
func TestNastyNameEveryFormat(t *testing.T) {
	var b bytes.Buffer
	if err := Write(&b, Markdown, nastyTable()); err != nil {
		t.Fatal(err)
	}
	md := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	rows := md[2:] // "### kernels", ""
	if len(rows) != 4 {
		t.Fatalf("markdown has %d table lines, want 4 (header, rule, two rows):\n%s", len(rows), b.String())
	}
	unescaped := regexp.MustCompile(`(^|[^\\])\|`)
	for _, l := range rows {
		if n := len(unescaped.FindAllString(l, -1)); n != 3 {
			t.Errorf("markdown line %q has %d cell separators, want 3", l, n)
		}
	}
	if !strings.Contains(rows[2], `\~a\~`) {
		t.Errorf("tildes not escaped: %q", rows[2])
	}
	if strings.Contains(rows[2], "<float") || !strings.Contains(rows[2], "void k&lt;float>") {
		t.Errorf("template argument would be an HTML tag on GitHub: %q", rows[2])
	}

	b.Reset()
	if err := Write(&b, Text, nastyTable()); err != nil {
		t.Fatal(err)
	}
	text := strings.Split(b.String(), "\n")
	// title, header, rule, the name's two lines, plain, "".
	if len(text) != 7 || !strings.HasSuffix(text[3], "1.0 ms") || !strings.HasSuffix(text[5], "2.0 ms") {
		t.Errorf("text table broken:\n%s", b.String())
	}
	if w := utf8.RuneCountInString(text[3]); w != utf8.RuneCountInString(text[5]) {
		t.Errorf("text rows not aligned:\n%s", b.String())
	}

	b.Reset()
	if err := Write(&b, CSV, nastyTable()); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&b).ReadAll()
	if err != nil || len(recs) != 3 || recs[1][0] != nasty {
		t.Errorf("csv round trip: %q, %v", recs, err)
	}

	b.Reset()
	if err := Write(&b, JSON, nastyTable()); err != nil {
		t.Fatal(err)
	}
	var jt struct {
		Title   string     `json:"title"`
		Columns []string   `json:"columns"`
		Rows    [][]string `json:"rows"`
	}
	if err := json.Unmarshal(b.Bytes(), &jt); err != nil || jt.Title != "kernels" || len(jt.Columns) != 2 || len(jt.Rows) != 2 || jt.Rows[0][0] != nasty {
		t.Errorf("json round trip: %+v, %v", jt, err)
	}

	b.Reset()
	if err := Write(&b, HTML, nastyTable()); err != nil {
		t.Fatal(err)
	}
	h := b.String()
	if strings.Contains(h, "<float>") || !strings.Contains(h, "<td>void k&lt;float&gt;|x<br>foo,&#34;bar&#34; ~a~</td>") ||
		!strings.Contains(h, `<td style="text-align:right">1.0 ms</td>`) || !strings.Contains(h, "<caption>kernels</caption>") {
		t.Errorf("html:\n%s", h)
	}
}

func TestEmptyInEveryFormat(t *testing.T) {
	e := &Table{Header: []string{"A", "B"}, Empty: "(none)"}
	for f, want := range map[Format]string{
		Text:     "A       B\n------  -\n(none)\n",
		Markdown: "| A | B |\n| --- | --- |\n| (none) | - |\n",
		CSV:      "A,B\n",
		JSON:     "{\n  \"columns\": [\n    \"A\",\n    \"B\"\n  ],\n  \"rows\": []\n}\n",
		HTML:     "<table>\n<thead><tr><th>A</th><th>B</th></tr></thead>\n<tbody>\n<tr><td colspan=\"2\">(none)</td></tr>\n</tbody>\n</table>\n",
	} {
		var b bytes.Buffer
		if err := Write(&b, f, e); err != nil {
			t.Fatal(err)
		}
		if b.String() != want {
			t.Errorf("%s:\n%q\nwant:\n%q", f, b.String(), want)
		}
	}
}

func TestParseFormat(t *testing.T) {
	for in, want := range map[string]Format{"": Text, "text": Text, "md": Markdown, "markdown": Markdown, "csv": CSV, "json": JSON, "html": HTML} {
		if got, err := ParseFormat(in); err != nil || got != want {
			t.Errorf("ParseFormat(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseFormat("xml"); err == nil || !strings.Contains(err.Error(), "use text, md, csv, json or html") {
		t.Errorf("ParseFormat(xml) error: %v", err)
	}
	if err := Write(&bytes.Buffer{}, "xml", &Table{}); err == nil {
		t.Error("Write accepted format xml")
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

func TestTimeUnit(t *testing.T) {
	us := []float64{0.5, 812, 999.9}
	u := TimeUnitFor(len(us), func(i int) float64 { return us[i] })
	if u.Label != "µs" || u.Format(812) != "812.0" || u.Header("Total") != "Total (µs)" {
		t.Errorf("below a millisecond: %+v %q %q", u, u.Format(812), u.Header("Total"))
	}
	us = append(us, 1200)
	u = TimeUnitFor(len(us), func(i int) float64 { return us[i] })
	if u.Label != "ms" || u.Format(812) != "0.81" || u.Format(1200) != "1.20" || u.Header("Mean") != "Mean (ms)" {
		t.Errorf("from a millisecond: %+v %q %q", u, u.Format(812), u.Format(1200))
	}
	if (TimeUnit{}).Format(3) != "3.0" || (TimeUnit{}).Header("x") != "x (µs)" {
		t.Error("the zero TimeUnit is µs")
	}
}
