package render

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/sglprof/runner/reports/render/table"
	"github.com/sglprof/runner/reports/rundir"
)

// ParityTable is the parity check as a warning table: one row per configuration and setting on
// which the engines' servers differ, one column per engine. Nil when p is nil.
func ParityTable(p *rundir.Parity) *table.Table {
	if p == nil {
		return nil
	}
	t := &table.Table{Title: "WARNING: settings that change results differ between the engines",
		Header: append([]string{"CONFIG", "SETTING"}, upper(p.Engines)...), Code: []bool{true}, NoRule: true,
		Empty: "none: the engines agree on " + joinList(p.Checked)}
	for _, r := range p.Rows {
		t.Rows = append(t.Rows, append([]string{r.Config, r.Setting}, r.Values...))
	}
	return t
}

// WriteParity prints the parity table (text) for the terminal; nothing without a check.
func WriteParity(w io.Writer, p *rundir.Parity) error {
	t := ParityTable(p)
	if t == nil {
		return nil
	}
	if len(p.Rows) == 0 {
		t.Title = "parity check"
	}
	return table.WriteText(w, t)
}

// writeParitySummary adds summary.md's "Engine parity" section.
func writeParitySummary(b *bytes.Buffer, s *rundir.Summary) {
	t := ParityTable(s.Parity)
	if t == nil {
		return
	}
	b.WriteString("\n## Engine parity\n\n")
	if len(s.Parity.Rows) > 0 {
		fmt.Fprintf(b, "> **Warning:** these settings change results and differ between the engines as configured; align them with [backend.engine_args] (flags for one engine) for a like-for-like comparison.\n\n")
	}
	t.Title = ""
	t.Header[0], t.Header[1] = "Config", "Setting"
	_ = table.WriteMarkdown(b, t)
}

func upper(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strings.ToUpper(s)
	}
	return out
}

func joinList(ss []string) string { return strings.Join(ss, ", ") }
