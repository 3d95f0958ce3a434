package triage

import (
	"io"
	"strconv"

	"github.com/sglprof/runner/reports/render/table"
)

// Section is a table that a trace reader adds to a report beside the kernel, overlap and fusion
// tables: the nsys reader's NVTX ranges, memory operations and CUDA API calls. This package
// imports no reader, so the reader's side implements Section and Render writes it in every
// format: as a table after the triage in text and Markdown, as rows of the one long-form CSV,
// and in JSON as the Section's own encoding under its Report field's key.
type Section interface {
	// Table is the section for people (text and Markdown), titled.
	Table() *table.Table
	// CSVRows are the section's rows of the long-form CSV.
	CSVRows() []CSVRow
}

// CSVRow is one row a Section adds to the long-form CSV. Table names the section in the
// "table" column; the columns it has no field for stay empty, and the figures without a column
// of their own go into Evidence as "key=value; ..." pairs.
type CSVRow struct {
	Table    string
	Name     string
	Category string
	TotalUS  float64
	Count    int
	// SharePct is the "share_pct" column; nil leaves it empty.
	SharePct *float64
	Evidence string
}

// sections lists the report's sections in output order, skipping absent ones.
func (r *Report) sections() []Section {
	var out []Section
	for _, s := range []Section{r.NVTX, r.MemoryOps, r.API} {
		if s != nil {
			out = append(out, s)
		}
	}
	return out
}

// renderSections writes the sections after the triage document, each after a blank line.
func renderSections(w io.Writer, r *Report, f table.Format) error {
	for _, s := range r.sections() {
		if _, err := io.WriteString(w, "\n"); err != nil {
			return err
		}
		if err := table.Write(w, f, s.Table()); err != nil {
			return err
		}
	}
	return nil
}

// sectionCSVRows are the sections' rows of the long-form CSV whose header is t's.
func sectionCSVRows(t *table.Table, r *Report) [][]string {
	col := make(map[string]int, len(t.Header))
	for i, h := range t.Header {
		col[h] = i
	}
	var rows [][]string
	for _, s := range r.sections() {
		for _, c := range s.CSVRows() {
			row := make([]string, len(t.Header))
			row[col["table"]], row[col["name"]], row[col["category"]] = c.Table, c.Name, c.Category
			row[col["total_us"]], row[col["count"]], row[col["evidence"]] = f64(c.TotalUS), strconv.Itoa(c.Count), c.Evidence
			if c.SharePct != nil {
				row[col["share_pct"]] = f64(*c.SharePct)
			}
			rows = append(rows, row)
		}
	}
	return rows
}
