package runner

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
)

// WriteSummaryTable prints the end-of-run table: cell, verdict (with a warning count), wall,
// e2e ms and mean denoise step ms, then one line per cell that is not ok (its root cause; the
// other reasons are in result.json), a pointer to the warnings, and the run directory.
func WriteSummaryTable(w io.Writer, s *Summary) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "CELL\tVERDICT\tWALL\tE2E MS\tSTEP MS\t\n")
	for _, r := range s.Cells {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", r.ID, verdictLabel(r), fmtWall(r.WallNS, r.Verdict), fmtMS(r.E2ENS), fmtMS(r.MeanDenoiseStepNS))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range s.Cells {
		if r.Cause != "" {
			fmt.Fprintf(w, "%s: %s\n", r.ID, r.Cause)
		}
	}
	if n := warnedCells(s); n > 0 {
		fmt.Fprintf(w, "%d %s with warnings (!N in the verdict column): listed in %s\n", n, plural(n, "cell", "cells"), filepath.Join(s.RunDir, SummaryMD))
	}
	fmt.Fprintf(w, "%s\nrun directory: %s\n", countsLine(s), s.RunDir)
	return nil
}

// verdictLabel is the verdict with a warning marker and count ("ok !2") when the cell has
// warnings, so an ok cell that needs a look does not read like a clean one.
func verdictLabel(r SummaryRow) string {
	if len(r.Warnings) == 0 {
		return r.Verdict
	}
	return fmt.Sprintf("%s !%d", r.Verdict, len(r.Warnings))
}

func warnedCells(s *Summary) int {
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

func countsLine(s *Summary) string {
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
	if verdict == VerdictNotRun {
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

// renderSummaryMD renders summary.md: the table plus each cell's top three kernels.
func renderSummaryMD(s *Summary) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Run summary: %s\n\n%s\n\n", s.Plan, countsLine(s))
	b.WriteString("| Cell | Verdict | Wall | E2E ms | Mean step ms | Top kernels |\n|---|---|---:|---:|---:|---|\n")
	for _, r := range s.Cells {
		var tops []string
		for _, k := range r.TopKernels {
			tops = append(tops, fmt.Sprintf("%s (%s, %.1f%%)", mdEscape(shorten(k.Name, 60)), k.Category, k.SharePct))
		}
		top := strings.Join(tops, "<br>")
		if top == "" {
			top = "-"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", r.ID, verdictLabel(r), fmtWall(r.WallNS, r.Verdict), fmtMS(r.E2ENS), fmtMS(r.MeanDenoiseStepNS), top)
	}
	var bad []string
	for _, r := range s.Cells {
		for _, reason := range r.Reasons {
			bad = append(bad, fmt.Sprintf("- `%s`: %s", r.ID, mdEscape(reason)))
		}
	}
	if len(bad) > 0 {
		b.WriteString("\n## Problems\n\n" + strings.Join(bad, "\n") + "\n")
	}
	var warn []string
	for _, r := range s.Cells {
		for _, wn := range r.Warnings {
			warn = append(warn, fmt.Sprintf("- `%s`: %s", r.ID, mdEscape(wn)))
		}
	}
	if len(warn) > 0 {
		b.WriteString("\n## Warnings\n\n" + strings.Join(warn, "\n") + "\n")
	}
	return b.Bytes()
}

func writeSummaryFiles(dir string, s *Summary) error {
	if err := writeFileAtomic(filepath.Join(dir, SummaryMD), renderSummaryMD(s)); err != nil {
		return err
	}
	return writeJSONAtomic(filepath.Join(dir, SummaryJSON), s)
}

func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ", "\r", " ").Replace(s)
}

// shorten keeps long C++ kernel names readable in a table cell.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
