// Package table is the one table model of the runner's reports and its renderers: aligned
// text for a terminal, GitHub Markdown, CSV, JSON and HTML. Triage, perf, compare, history, the
// run summary and the nsys tables build a Table and call Write, so cells are escaped, aligned
// and emptied the same way everywhere. A Table is deliberately plain data: a header, an
// alignment per column and string rows; the caller does its own number formatting so that
// rounding stays a decision of the report. The package imports nothing of the runner's, so
// every package (nsys included) may use it.
package table

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"
)

// Align is the horizontal alignment of a column.
type Align uint8

// Column alignments. Numbers are right-aligned so that digits line up.
const (
	Left Align = iota
	Right
)

// Table is one rectangular table. Rows shorter than Header are padded with empty cells; a cell
// may hold line breaks (several Python sites, several evidence kernels), which every format
// keeps inside the cell.
type Table struct {
	// Title names the table: a line above it in text, a "### " heading in Markdown, a caption
	// in HTML and "title" in JSON. CSV has no place for it.
	Title  string
	Header []string
	Align  []Align // per column; missing entries are Left
	// Code marks the columns whose cells are code (kernel names, configuration keys, cell ids,
	// paths): Markdown wraps each line of such a cell in a code span and HTML in <code>, so the
	// writer, not the caller, owns the backticks and the escaping a code span needs. Missing
	// entries are false; text, CSV and JSON write code cells as they are.
	Code []bool
	Rows [][]string
	// Empty is the text shown as the single row when Rows is empty (text, Markdown and HTML),
	// so a reader sees that the table was computed and had nothing to say. CSV and JSON, read
	// by programs, get zero rows instead.
	Empty string
	// NoRule drops the dashed rule under the header in text, for the benchstat-like listings
	// (compare, history, the run summary) whose header is already set apart by capitals.
	NoRule bool
}

func (t *Table) align(i int) Align {
	if i < len(t.Align) {
		return t.Align[i]
	}
	return Left
}

func (t *Table) code(i int) bool {
	return i < len(t.Code) && t.Code[i]
}

func (t *Table) cell(row []string, i int) string {
	if i < len(row) {
		return row[i]
	}
	return ""
}

// row returns r cut or padded to the width of the header.
func (t *Table) row(r []string) []string {
	out := make([]string, len(t.Header))
	for i := range out {
		out[i] = t.cell(r, i)
	}
	return out
}

// Format names a renderer.
type Format string

// The formats of Write. "markdown" is accepted as another name of Markdown by ParseFormat.
const (
	Text     Format = "text"
	Markdown Format = "md"
	CSV      Format = "csv"
	JSON     Format = "json"
	HTML     Format = "html"
)

// Formats lists every Format in the order help texts show them.
var Formats = []Format{Text, Markdown, CSV, JSON, HTML}

// ParseFormat reads a --format value; "" is Text and "markdown" is Markdown.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case "":
		return Text, nil
	case "markdown":
		return Markdown, nil
	case Text, Markdown, CSV, JSON, HTML:
		return f, nil
	}
	return "", fmt.Errorf("unknown table format %q; use text, md, csv, json or html", s)
}

// Write renders t in format f.
func Write(w io.Writer, f Format, t *Table) error {
	switch f {
	case Text, "":
		return WriteText(w, t)
	case Markdown, "markdown":
		return WriteMarkdown(w, t)
	case CSV:
		return WriteCSV(w, t)
	case JSON:
		return WriteJSON(w, t)
	case HTML:
		return WriteHTML(w, t)
	}
	return fmt.Errorf("unknown table format %q; use text, md, csv, json or html", f)
}

// mdEscaper is the one Markdown rule of the runner for text outside code spans. "|" would end
// the cell and "~" pairs strike text through (GitHub takes a single "~" as strikethrough too), so
// both are backslash-escaped; "<" would open an HTML tag that GitHub drops with its contents
// ("void k<float>" shows as "void k"), so it becomes "&lt;" (">" alone is harmless); a line break
// would end the row, so it becomes <br> (CR LF and a lone CR count as one). The replacer makes
// one pass, so the "<" of the <br> it writes is not escaped again.
var mdEscaper = strings.NewReplacer("\r\n", "<br>", "\r", "<br>", "\n", "<br>", "|", `\|`, "~", `\~`, "<", "&lt;")

// EscapeMarkdown makes s safe as text (outside a code span) inside one Markdown table cell, a
// heading or a list item: pipes and tildes are escaped, "<" becomes "&lt;" and line breaks
// become <br>, so a kernel or reason with a "|", a template argument or a newline cannot end the
// row or the item, nor vanish as a tag. It is the runner's only Markdown escaper of text; code
// goes through CodeSpan or a Table's Code columns, where an escape would show literally.
func EscapeMarkdown(s string) string {
	if !strings.ContainsAny(s, "|~<\r\n") {
		return s
	}
	return mdEscaper.Replace(s)
}

// CodeSpan writes s as one Markdown code span for prose (a heading, a list item, a sentence):
// inside a code span nothing is escaped and everything shows literally, so the only care is the
// fence, one backtick longer than the longest run of backticks in s, with a space on each side
// when s starts or ends with a backtick (or with a space: CommonMark strips one from each end).
// Line breaks become spaces, which is how a code span shows them anyway, so a blank line cannot
// end the paragraph. An empty s gives "", since "“" is not an empty code span. Table cells use
// a Table's Code columns instead: there a "|" must still be escaped.
func CodeSpan(s string) string {
	s = strings.Join(lines(s), " ")
	if s == "" {
		return ""
	}
	longest, run := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	fence := strings.Repeat("`", longest+1)
	if s[0] == '`' || s[len(s)-1] == '`' || (s[0] == ' ' && s[len(s)-1] == ' ' && strings.Trim(s, " ") != "") {
		s = " " + s + " "
	}
	return fence + s + fence
}

// mdCodeCell renders a code cell of a Markdown table: each line its own code span, joined by
// <br> (a code span cannot hold a line break, and a <br> inside one would show literally), and
// "|" escaped as "\|", the one escape GitHub's table parser removes before it reads the code
// span. "~" and "<" stay as they are: inside a code span they are literal.
func mdCodeCell(s string) string {
	ls := lines(s)
	for i, l := range ls {
		ls[i] = strings.ReplaceAll(CodeSpan(l), "|", `\|`)
	}
	return strings.Join(ls, "<br>")
}

// WriteMarkdown writes t as a GitHub-flavoured Markdown table, under a "### Title" heading when
// t has a title.
func WriteMarkdown(w io.Writer, t *Table) error {
	var b strings.Builder
	if t.Title != "" {
		b.WriteString("### " + EscapeMarkdown(t.Title) + "\n\n")
	}
	b.WriteString("|")
	for _, h := range t.Header {
		b.WriteString(" " + EscapeMarkdown(h) + " |")
	}
	b.WriteString("\n|")
	for i := range t.Header {
		if t.align(i) == Right {
			b.WriteString(" ---: |")
		} else {
			b.WriteString(" --- |")
		}
	}
	b.WriteString("\n")
	rows := t.Rows
	if len(rows) == 0 && t.Empty != "" && len(t.Header) > 0 {
		r := make([]string, len(t.Header))
		for i := range r {
			r[i] = "-"
		}
		r[0] = t.Empty
		rows = [][]string{r}
	}
	for _, r := range rows {
		b.WriteString("|")
		for i := range t.Header {
			if c := t.cell(r, i); t.code(i) && len(t.Rows) > 0 {
				b.WriteString(" " + mdCodeCell(c) + " |")
			} else {
				b.WriteString(" " + EscapeMarkdown(c) + " |")
			}
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// lines splits a cell at its line breaks (CR LF, CR or LF).
func lines(s string) []string {
	if !strings.ContainsAny(s, "\r\n") {
		return []string{s}
	}
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.Split(strings.ReplaceAll(s, "\r", "\n"), "\n")
}

// WriteText writes t as space-padded columns for a terminal, the title on a line of its own
// above. A cell with line breaks occupies several physical lines; the other cells of that row
// are blank on the continuation lines. Lines carry no trailing spaces.
func WriteText(w io.Writer, t *Table) error {
	n := len(t.Header)
	width := make([]int, n)
	split := func(r []string) [][]string {
		out := make([][]string, n)
		for i := 0; i < n; i++ {
			out[i] = lines(t.cell(r, i))
		}
		return out
	}
	rows := make([][][]string, 0, len(t.Rows)+1)
	rows = append(rows, split(t.Header))
	for _, r := range t.Rows {
		rows = append(rows, split(r))
	}
	if len(t.Rows) == 0 && t.Empty != "" {
		rows = append(rows, split([]string{t.Empty}))
	}
	for _, r := range rows {
		for i, ls := range r {
			for _, l := range ls {
				width[i] = max(width[i], utf8.RuneCountInString(l))
			}
		}
	}
	var b strings.Builder
	if t.Title != "" {
		b.WriteString(strings.Join(lines(t.Title), " ") + "\n")
	}
	line := func(cells []string) {
		var lb strings.Builder
		for i, c := range cells {
			pad := width[i] - utf8.RuneCountInString(c)
			if i > 0 {
				lb.WriteString("  ")
			}
			if t.align(i) == Right {
				lb.WriteString(strings.Repeat(" ", pad) + c)
			} else if i < n-1 {
				lb.WriteString(c + strings.Repeat(" ", pad))
			} else {
				lb.WriteString(c)
			}
		}
		b.WriteString(strings.TrimRight(lb.String(), " ") + "\n")
	}
	for ri, r := range rows {
		h := 1
		for _, ls := range r {
			h = max(h, len(ls))
		}
		for k := 0; k < h; k++ {
			cells := make([]string, n)
			for i, ls := range r {
				if k < len(ls) {
					cells[i] = ls[k]
				}
			}
			line(cells)
		}
		if ri == 0 && !t.NoRule {
			cells := make([]string, n)
			for i := range cells {
				cells[i] = strings.Repeat("-", width[i])
			}
			line(cells)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteCSV writes t as RFC 4180 CSV with a header row (a cell with a line break is quoted).
// Neither the title nor the Empty text is written: a CSV consumer wants the columns and zero
// data rows, and `nsys stats --format csv` prints no title either.
func WriteCSV(w io.Writer, t *Table) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(t.Header); err != nil {
		return fmt.Errorf("write csv header: %w", err)
	}
	for _, r := range t.Rows {
		if err := cw.Write(t.row(r)); err != nil {
			return fmt.Errorf("write csv row: %w", err)
		}
	}
	cw.Flush()
	return cw.Error()
}

// jsonTable is the JSON shape of a Table: the columns in order and each row as an array of
// strings, so that column order and duplicate header names survive.
type jsonTable struct {
	Title   string     `json:"title,omitempty"`
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"`
}

// WriteJSON writes t as one indented JSON object {"title", "columns", "rows"}; rows are arrays
// of the rendered cells (the Empty text is not a row). Reports with a typed JSON contract
// (triage, compare) encode their own structs instead.
func WriteJSON(w io.Writer, t *Table) error {
	jt := jsonTable{Title: t.Title, Columns: t.Header, Rows: make([][]string, 0, len(t.Rows))}
	if jt.Columns == nil {
		jt.Columns = []string{}
	}
	for _, r := range t.Rows {
		jt.Rows = append(jt.Rows, t.row(r))
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(jt)
}

// htmlCell escapes s for HTML text and keeps its line breaks as <br>.
func htmlCell(s string) string {
	return strings.Join(strings.Split(html.EscapeString(strings.Join(lines(s), "\n")), "\n"), "<br>")
}

// WriteHTML writes t as an HTML <table> (the title as its caption, right-aligned columns with
// an inline text-align, code columns' cells in <code>), every cell HTML-escaped, so a kernel
// name like "k<float>" shows as written.
func WriteHTML(w io.Writer, t *Table) error {
	var b strings.Builder
	b.WriteString("<table>\n")
	if t.Title != "" {
		b.WriteString("<caption>" + htmlCell(t.Title) + "</caption>\n")
	}
	tag := func(name string, i int, s string, code bool) {
		if t.align(i) == Right {
			b.WriteString("<" + name + ` style="text-align:right">`)
		} else {
			b.WriteString("<" + name + ">")
		}
		if code && s != "" {
			b.WriteString("<code>" + htmlCell(s) + "</code></" + name + ">")
			return
		}
		b.WriteString(htmlCell(s) + "</" + name + ">")
	}
	b.WriteString("<thead><tr>")
	for i, h := range t.Header {
		tag("th", i, h, false)
	}
	b.WriteString("</tr></thead>\n<tbody>\n")
	for _, r := range t.Rows {
		b.WriteString("<tr>")
		for i := range t.Header {
			tag("td", i, t.cell(r, i), t.code(i))
		}
		b.WriteString("</tr>\n")
	}
	if len(t.Rows) == 0 && t.Empty != "" {
		fmt.Fprintf(&b, "<tr><td colspan=\"%d\">%s</td></tr>\n", max(len(t.Header), 1), htmlCell(t.Empty))
	}
	b.WriteString("</tbody>\n</table>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// reLambda matches the lambda and call-operator scaffolding of PyTorch functor names
// ("::{lambda(…)#1}", "::operator(…)(…) const") after parentheses were elided.
var reLambda = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`::\{lambda\(…\)#\d+\}|::operator\(…\)\(…\)( const)?`)
})

// Shorten bounds s to at most max runes, pprof-style for C++ names. It elides in steps and
// stops as soon as the name fits: template arguments nested two deep become "<…>", then every
// parenthesised group becomes "(…)", then every template argument list; only then is the
// middle cut with "…", keeping the head and the tail. Short names are returned unchanged.
func Shorten(s string, max int) string {
	if max <= 0 || utf8.RuneCountInString(s) <= max {
		return s
	}
	for _, step := range []func(string) string{
		func(x string) string { return elide(x, '<', '>', "<…>", 2) },
		func(x string) string { return elide(x, '(', ')', "(…)", 1) },
		func(x string) string { return reLambda().ReplaceAllString(x, "") },
		func(x string) string { return elide(x, '<', '>', "<…>", 1) },
	} {
		s = step(s)
		if utf8.RuneCountInString(s) <= max {
			return s
		}
	}
	r := []rune(s)
	if max < 3 {
		return string(r[:max])
	}
	head := (max - 1) * 2 / 3
	tail := max - 1 - head
	return string(r[:head]) + "…" + string(r[len(r)-tail:])
}

// elide replaces every bracketed group (open..close, nesting respected) that starts at nesting
// depth minDepth (1 = top level) by repl. Unbalanced groups are left as they are.
func elide(s string, open, close byte, repl string, minDepth int) string {
	var b strings.Builder
	depth, start := 0, -1
	last := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case open:
			depth++
			if depth == minDepth && start < 0 {
				start = i
			}
		case close:
			if depth > 0 {
				if depth == minDepth && start >= 0 {
					b.WriteString(s[last:start])
					b.WriteString(repl)
					last = i + 1
					start = -1
				}
				depth--
			}
		}
	}
	b.WriteString(s[last:])
	return b.String()
}
