package render

// The run's summary (summary.md and the end-of-run table) is rendered here beside report.md and
// report.html, so every renderer of a run's results lives in one package; the runner only
// writes the files.

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sglprof/runner/reports/render/table"
	"github.com/sglprof/runner/reports/rundir"
)

// SummaryTable prints the end-of-run table: cell, verdict (with a warning count), wall,
// e2e ms and mean denoise step ms, then one line per cell that is not ok (its root cause; the
// other reasons are in result.json), a pointer to the warnings, and the run directory.
func SummaryTable(w io.Writer, s *rundir.Summary) error {
	t := &table.Table{Header: []string{"CELL", "VERDICT", "WALL", "E2E MS", "STEP MS"}, NoRule: true}
	for _, r := range s.Cells {
		t.Rows = append(t.Rows, []string{r.ID, verdictLabel(r), fmtWall(r.WallNS, r.Verdict), fmtMS(r.E2ENS), fmtMS(r.MeanDenoiseStepNS)})
	}
	if err := table.WriteText(w, t); err != nil {
		return err
	}
	for _, r := range s.Cells {
		if r.Cause != "" {
			fmt.Fprintf(w, "%s: %s\n", r.ID, r.Cause)
		}
	}
	if s.Parity != nil && len(s.Parity.Rows) > 0 {
		fmt.Fprintf(w, "%d engine parity %s (settings that change results differ): listed in %s\n", len(s.Parity.Rows), plural(len(s.Parity.Rows), "warning", "warnings"), filepath.Join(s.RunDir, rundir.SummaryMD))
	}
	if n := warnedCells(s); n > 0 {
		fmt.Fprintf(w, "%d %s with warnings (!N in the verdict column): listed in %s\n", n, plural(n, "cell", "cells"), filepath.Join(s.RunDir, rundir.SummaryMD))
	}
	fmt.Fprintf(w, "%s\nrun directory: %s\n", countsLine(s), s.RunDir)
	return nil
}

// verdictLabel is the verdict with a warning marker and count ("ok !2") when the cell has
// warnings, so an ok cell that needs a look does not read like a clean one.
func verdictLabel(r rundir.SummaryRow) string {
	if len(r.Warnings) == 0 {
		return r.Verdict
	}
	return fmt.Sprintf("%s !%d", r.Verdict, len(r.Warnings))
}

func warnedCells(s *rundir.Summary) int {
	n := 0
	for _, r := range s.Cells {
		if len(r.Warnings) > 0 {
			n++
		}
	}
	return n
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func countsLine(s *rundir.Summary) string {
	keys := make([]string, 0, len(s.Counts))
	for k := range s.Counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", s.Counts[k], k))
	}
	line := fmt.Sprintf("%d cells: %s", len(s.Cells), strings.Join(parts, ", "))
	if s.Interrupted {
		line += " (interrupted; `runner run --resume " + s.RunDir + "` finishes the rest)"
	}
	return line
}

func fmtWall(ns int64, verdict string) string {
	if verdict == rundir.VerdictNotRun {
		return "-"
	}
	return fmt.Sprintf("%.1fs", float64(ns)/1e9)
}

func fmtMS(ns int64) string {
	if ns == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(ns)/1e6)
}

// SummaryMarkdown renders summary.md: the table plus each cell's top three kernels.
func SummaryMarkdown(s *rundir.Summary) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Run summary: %s\n\n", s.Plan)
	if s.Simulated {
		fmt.Fprintf(&b, "> **%s**\n\n", SimulatedNote)
	}
	fmt.Fprintf(&b, "%s\n\n", countsLine(s))
	t := &table.Table{Header: []string{"Cell", "Verdict", "Wall", "E2E ms", "Mean step ms", "Top kernels"},
		Align: []table.Align{table.Left, table.Left, table.Right, table.Right, table.Right, table.Left}}
	for _, r := range s.Cells {
		var tops []string
		for _, k := range r.TopKernels {
			tops = append(tops, fmt.Sprintf("%s (%s, %.1f%%)", shorten(k.Name, 60), k.Category, k.SharePct))
		}
		top := strings.Join(tops, "\n") // one line each: <br> in the cell
		if top == "" {
			top = "-"
		}
		t.Rows = append(t.Rows, []string{r.ID, verdictLabel(r), fmtWall(r.WallNS, r.Verdict), fmtMS(r.E2ENS), fmtMS(r.MeanDenoiseStepNS), top})
	}
	_ = table.WriteMarkdown(&b, t) // a bytes.Buffer does not fail
	writeLLMSummary(&b, s)
	writeParitySummary(&b, s)
	var bad []string
	for _, r := range s.Cells {
		for _, reason := range r.Reasons {
			bad = append(bad, fmt.Sprintf("- %s: %s", table.CodeSpan(r.ID), table.EscapeMarkdown(reason)))
		}
	}
	if len(bad) > 0 {
		b.WriteString("\n## Problems\n\n" + strings.Join(bad, "\n") + "\n")
	}
	var warn []string
	for _, r := range s.Cells {
		for _, wn := range r.Warnings {
			warn = append(warn, fmt.Sprintf("- %s: %s", table.CodeSpan(r.ID), table.EscapeMarkdown(wn)))
		}
	}
	if len(warn) > 0 {
		b.WriteString("\n## Warnings\n\n" + strings.Join(warn, "\n") + "\n")
	}
	return b.Bytes()
}

// shorten keeps long C++ kernel names readable in a table cell.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// writeLLMSummary adds summary.md's "LLM serving" table (LLMTable, the one report.md and
// report.html show) when the run has LLM serve cells; other runs' summaries are unchanged.
func writeLLMSummary(b *bytes.Buffer, s *rundir.Summary) {
	var cells []CellLine
	for _, r := range s.Cells {
		cells = append(cells, CellLine{ID: r.ID, LLM: LLMPointOf(r.LLM)})
	}
	t := LLMTable(cells)
	if t == nil {
		return
	}
	b.WriteString("\n## LLM serving\n\n")
	_ = table.WriteMarkdown(b, t)
	if t := SearchTable(cells); t != nil {
		b.WriteString("\n## SLA frontier\n\n")
		_ = table.WriteMarkdown(b, t)
	}
}

// LLMPointOf converts a summary row's LLM figures to the report's; nil for a cell without
// them. summary.md and `runner report` both go through it, so their tables agree.
func LLMPointOf(l *rundir.LLMRow) *LLMPoint {
	if l == nil {
		return nil
	}
	return &LLMPoint{OutputTPS: l.OutputThroughput, TPOTMS: l.TPOTMedianMS, TTFTMS: l.TTFTMedianMS,
		TTFTP99MS: l.TTFTP99MS, ITLP99MS: l.ITLP99MS, Concurrency: l.Concurrency, Goodput: l.Goodput,
		CacheHitRate: l.CacheHitRate, PeakQueued: l.PeakQueued, Queue: l.QueueDepth, Search: llmSearchOf(l)}
}
