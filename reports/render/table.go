// Package render writes simple tables as aligned text, GitHub Markdown or CSV, so every report
// of the runner (triage, perf, compare) formats cells, escaping and alignment the same way.
// It is deliberately small: a Table is a header, an alignment per column and string rows; the
// caller does its own number formatting so that rounding stays a decision of the report.
//
// report.go renders runner report: report.md and a self-contained report.html whose inline SVG
// charts are drawn from the same Report as the Markdown.
package render

import (
	"encoding/csv"
	"fmt"
	"io"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Align is the horizontal alignment of a column.
type Align uint8

// Column alignments. Numbers are right-aligned so that digits line up.
const (
	Left Align = iota
	Right
)

// Table is one rectangular table. Rows shorter than Header are padded with empty cells.
type Table struct {
	Header []string
	Align  []Align // per column; missing entries are Left
	Rows   [][]string
	// Empty is the text shown as the single row when Rows is empty (Markdown and text only),
	// so a reader sees that the table was computed and had nothing to say.
	Empty string
}

func (t *Table) align(i int) Align {
	if i < len(t.Align) {
		return t.Align[i]
	}
	return Left
}

func (t *Table) cell(row []string, i int) string {
	if i < len(row) {
		return row[i]
	}
	return ""
}

// EscapeMarkdown makes s safe inside one Markdown table cell: pipes are escaped and line
// breaks become <br> so that a multi-line cell cannot end the row.
func EscapeMarkdown(s string) string {
	if !strings.ContainsAny(s, "|\n\r") {
		return s
	}
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", "<br>")
}

// WriteMarkdown writes t as a GitHub-flavoured Markdown table. Newlines inside a cell are
// rendered as <br>, which is how multi-value cells (several Python sites) stay on one row.
func WriteMarkdown(w io.Writer, t *Table) error {
	var b strings.Builder
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
	if len(rows) == 0 && t.Empty != "" {
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
			b.WriteString(" " + EscapeMarkdown(t.cell(r, i)) + " |")
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteText writes t as space-padded columns for a terminal. A cell with line breaks occupies
// several physical lines; the other cells of that row are blank on the continuation lines.
func WriteText(w io.Writer, t *Table) error {
	n := len(t.Header)
	width := make([]int, n)
	split := func(r []string) [][]string {
		out := make([][]string, n)
		for i := 0; i < n; i++ {
			out[i] = strings.Split(t.cell(r, i), "\n")
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
		for i, lines := range r {
			for _, l := range lines {
				if c := utf8.RuneCountInString(l); c > width[i] {
					width[i] = c
				}
			}
		}
	}
	var b strings.Builder
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
		for _, lines := range r {
			if len(lines) > h {
				h = len(lines)
			}
		}
		for k := 0; k < h; k++ {
			cells := make([]string, n)
			for i, lines := range r {
				if k < len(lines) {
					cells[i] = lines[k]
				}
			}
			line(cells)
		}
		if ri == 0 {
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

// WriteCSV writes t as RFC 4180 CSV with a header row. The Empty text is not written: a CSV
// consumer wants zero data rows, not a prose row.
func WriteCSV(w io.Writer, t *Table) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(t.Header); err != nil {
		return fmt.Errorf("write csv header: %w", err)
	}
	for _, r := range t.Rows {
		row := make([]string, len(t.Header))
		for i := range row {
			row[i] = t.cell(r, i)
		}
		if err := cw.Write(row); err != nil {
			return fmt.Errorf("write csv row: %w", err)
		}
	}
	cw.Flush()
	return cw.Error()
}

// reLambda matches the lambda and call-operator scaffolding of PyTorch functor names
// ("::{lambda(…)#1}", "::operator(…)(…) const") after parentheses were elided.
var reLambda = regexp.MustCompile(`::\{lambda\(…\)#\d+\}|::operator\(…\)\(…\)( const)?`)

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
		func(x string) string { return reLambda.ReplaceAllString(x, "") },
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
