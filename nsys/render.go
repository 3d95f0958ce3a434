package nsys

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Table is a rendered-ready table: a title, headers, string cells, and which columns are
// numeric (right-aligned in text and Markdown).
type Table struct {
	Title   string
	Headers []string
	Rows    [][]string
	Numeric []bool
}

// TableFormat selects a renderer.
type TableFormat string

// Output formats.
const (
	TableText     TableFormat = "text"
	TableMarkdown TableFormat = "md"
	TableCSV      TableFormat = "csv"
)

// Write renders the table in the given format.
func (tb Table) Write(w io.Writer, f TableFormat) error {
	switch f {
	case TableMarkdown:
		return tb.WriteMarkdown(w)
	case TableCSV:
		return tb.WriteCSV(w)
	case TableText, "":
		return tb.WriteText(w)
	}
	return fmt.Errorf("nsys: unknown table format %q (want text, md or csv)", f)
}

// WriteCSV writes headers and rows as RFC 4180 CSV, without the title, so the output can be
// diffed against `nsys stats --format csv`.
func (tb Table) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(tb.Headers); err != nil {
		return err
	}
	if err := cw.WriteAll(tb.Rows); err != nil {
		return err
	}
	return cw.Error()
}

// WriteMarkdown writes a GitHub-flavoured Markdown table under a "### title" heading.
func (tb Table) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	if tb.Title != "" {
		fmt.Fprintf(&b, "### %s\n\n", tb.Title)
	}
	b.WriteString("|")
	for _, h := range tb.Headers {
		b.WriteString(" " + mdEscape(h) + " |")
	}
	b.WriteString("\n|")
	for i := range tb.Headers {
		if tb.numeric(i) {
			b.WriteString("---:|")
		} else {
			b.WriteString("---|")
		}
	}
	b.WriteString("\n")
	for _, row := range tb.Rows {
		b.WriteString("|")
		for _, c := range row {
			b.WriteString(" " + mdEscape(c) + " |")
		}
		b.WriteString("\n")
	}
	if len(tb.Rows) == 0 {
		b.WriteString("\n(none)\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteText writes an aligned plain-text table with the title on its own line.
func (tb Table) WriteText(w io.Writer) error {
	width := make([]int, len(tb.Headers))
	for i, h := range tb.Headers {
		width[i] = utf8.RuneCountInString(h)
	}
	for _, row := range tb.Rows {
		for i, c := range row {
			if i < len(width) {
				width[i] = max(width[i], utf8.RuneCountInString(c))
			}
		}
	}
	var b bytes.Buffer
	if tb.Title != "" {
		b.WriteString(tb.Title + "\n")
	}
	line := func(cells []string) {
		mark := b.Len()
		for i, c := range cells {
			if i >= len(width) {
				break
			}
			if i > 0 {
				b.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			switch {
			case tb.numeric(i):
				b.WriteString(pad + c)
			case i == len(cells)-1:
				b.WriteString(c) // no trailing spaces
			default:
				b.WriteString(c + pad)
			}
		}
		// Empty trailing cells would leave spaces at the end of the line.
		trimmed := strings.TrimRight(b.String()[mark:], " ")
		b.Truncate(mark)
		b.WriteString(trimmed + "\n")
	}
	line(tb.Headers)
	seps := make([]string, len(width))
	for i, n := range width {
		seps[i] = strings.Repeat("-", n)
	}
	line(seps)
	for _, row := range tb.Rows {
		line(row)
	}
	if len(tb.Rows) == 0 {
		b.WriteString("(none)\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (tb Table) numeric(i int) bool { return i < len(tb.Numeric) && tb.Numeric[i] }

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// fmtDur formats nanoseconds for people: integer ns below 1 µs, else three decimals in µs, ms or
// s. Exact integers stay in the JSON and CSV outputs.
func fmtDur(ns int64) string {
	a := ns
	if a < 0 {
		a = -a
	}
	switch {
	case a < 1_000:
		return strconv.FormatInt(ns, 10) + " ns"
	case a < 1_000_000:
		return strconv.FormatFloat(float64(ns)/1e3, 'f', 3, 64) + " µs"
	case a < 1_000_000_000:
		return strconv.FormatFloat(float64(ns)/1e6, 'f', 3, 64) + " ms"
	}
	return strconv.FormatFloat(float64(ns)/1e9, 'f', 3, 64) + " s"
}

// fmtBytes formats a byte count in binary units.
func fmtBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return strconv.FormatFloat(float64(n)/float64(div), 'f', 1, 64) + " " + string("KMGTP"[exp]) + "iB"
}

func i64(n int64) string { return strconv.FormatInt(n, 10) }

// NVTXTable renders the NVTX range summary (`Range | Count | Total | Mean | Min | Max | GPU time inside`).
func NVTXTable(rows []NVTXRange) Table {
	tb := Table{Title: "NVTX ranges", Headers: []string{"Range", "Count", "Total", "Mean", "Min", "Max", "GPU time inside"},
		Numeric: []bool{false, true, true, true, true, true, true}}
	for _, r := range rows {
		name := r.Range
		if r.Domain != "" {
			name = r.Domain + ":" + r.Range
		}
		tb.Rows = append(tb.Rows, []string{name, strconv.Itoa(r.Count), fmtDur(r.TotalNS), fmtDur(r.MeanNS), fmtDur(r.MinNS), fmtDur(r.MaxNS), fmtDur(r.GPUTimeNS)})
	}
	return tb
}

// MemoryTable renders the memory-operation summary.
func MemoryTable(rows []MemoryOp) Table {
	tb := Table{Title: "Memory operations", Headers: []string{"Operation", "Count", "Bytes", "Total", "Mean", "GB/s"},
		Numeric: []bool{false, true, true, true, true, true}}
	for _, r := range rows {
		tb.Rows = append(tb.Rows, []string{r.Operation, strconv.Itoa(r.Count), fmtBytes(r.Bytes), fmtDur(r.TotalNS), fmtDur(r.MeanNS), strconv.FormatFloat(r.GBps, 'f', 2, 64)})
	}
	return tb
}

// APITable renders the CUDA API summary.
func APITable(rows []APICall) Table {
	tb := Table{Title: "CUDA API calls", Headers: []string{"API call", "Calls", "Total", "%", "Mean", "Min", "Max", "Sync"},
		Numeric: []bool{false, true, true, true, true, true, true, false}}
	for _, r := range rows {
		sync := ""
		if r.Sync {
			sync = "yes"
		}
		tb.Rows = append(tb.Rows, []string{r.Name, strconv.Itoa(r.Calls), fmtDur(r.TotalNS), strconv.FormatFloat(r.Percent, 'f', 1, 64),
			fmtDur(r.MeanNS), fmtDur(r.MinNS), fmtDur(r.MaxNS), sync})
	}
	return tb
}

// Table renders an `nsys stats` report with nsys's headers and number formats (integers for
// ns totals, one decimal for averages and percentages), so its CSV diffs cleanly against
// `nsys stats --format csv --report <id>`.
func (s StatsReport) Table() Table {
	tb := Table{Title: s.Title + " (" + s.Report + ")", Headers: s.Headers}
	tb.Numeric = make([]bool, len(s.Headers))
	for i := range tb.Numeric {
		tb.Numeric[i] = i < 8
	}
	f1 := func(x float64) string { return strconv.FormatFloat(x, 'f', 1, 64) }
	for _, r := range s.Rows {
		row := []string{f1(r.TimePct), i64(r.TotalNS), i64(r.Instances), f1(r.AvgNS), f1(r.MedNS), i64(r.MinNS), i64(r.MaxNS), f1(r.StdDevNS)}
		if len(s.Headers) == 10 {
			row = append(row, r.Style)
		}
		tb.Rows = append(tb.Rows, append(row, r.Name))
	}
	return tb
}
