package render

import (
	"fmt"
	"html/template"
	"strconv"
	"strings"

	"github.com/sglprof/runner/reports/render/table"
	"github.com/sglprof/runner/reports/rundir"
)

// SearchTable is the "SLA frontier" table of summary.md, report.md and report.html: one row per
// SLA search cell, with the largest value that met the SLOs and every probe in the order run
// (✓ passed, ✗ failed). nil when no cell searched.
func SearchTable(cells []CellLine) *table.Table {
	t := &table.Table{Header: []string{"Cell", "Axis", "Best", "SLO TTFT p99 ms", "SLO TPOT p99 ms", "Probes (value: TTFT p99 / TPOT p99 ms)"},
		Align: []table.Align{table.Left, table.Left, table.Right, table.Right, table.Right, table.Left}}
	g := func(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }
	slo := func(v float64) string {
		if v <= 0 {
			return "-"
		}
		return g(v)
	}
	for _, c := range cells {
		if c.LLM == nil || c.LLM.Search == nil {
			continue
		}
		s := c.LLM.Search
		best := "none"
		if s.Best > 0 {
			best = g(s.Best)
		}
		var probes []string
		for _, p := range s.Probes {
			mark := "✗"
			if p.Pass {
				mark = "✓"
			}
			probes = append(probes, fmt.Sprintf("%s %s %.0f/%.1f", g(p.Value), mark, p.TTFTP99, p.TPOTP99))
		}
		t.Rows = append(t.Rows, []string{c.ID, s.Axis, best, slo(s.SLOTTFTP99), slo(s.SLOTPOTP99), strings.Join(probes, ", ")})
	}
	if len(t.Rows) == 0 {
		return nil
	}
	return t
}

// searchHTML is SearchTable as report.html's HTML ("" without search cells).
func searchHTML(cells []CellLine) (template.HTML, error) {
	t := SearchTable(cells)
	if t == nil {
		return "", nil
	}
	var b strings.Builder
	if err := table.WriteHTML(&b, t); err != nil {
		return "", err
	}
	return template.HTML(b.String()), nil // table.WriteHTML escapes every cell
}

// llmSearchOf is a summary row's search record (nil without one).
func llmSearchOf(l *rundir.LLMRow) *rundir.LLMSearch {
	if l == nil {
		return nil
	}
	return l.Search
}
