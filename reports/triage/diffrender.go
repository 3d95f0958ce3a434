package triage

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/sglprof/runner/reports/render/table"
)

// RenderDiff writes a kernel diff in format (text, md, json, csv). Text and Markdown show per
// stage its kernel time on both sides, the kernels whose change reaches cutoff percent of the
// stage's kernel time (larger side; 0 shows every kernel, "same" ones included), how much of
// the stage's change they explain, and the fusion rows whose status changed. JSON and CSV are
// never cut: every kernel of either side is there once.
func RenderDiff(w io.Writer, d *DiffReport, format string, cutoff float64) error {
	switch format {
	case FormatJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(struct {
			Diff *DiffReport `json:"diff"`
		}{d}); err != nil {
			return fmt.Errorf("write kernel diff json: %w", err)
		}
		return nil
	case FormatCSV:
		return renderDiffCSV(w, d)
	case FormatMarkdown, "markdown":
		return renderDiffDoc(w, d, cutoff, true)
	case FormatText, "":
		return renderDiffDoc(w, d, cutoff, false)
	}
	return fmt.Errorf("unknown triage format %q; use text, md, json or csv", format)
}

// Shown returns the kernels of the stage whose change reaches cutoff percent of the stage's
// kernel time (the larger side's), in rank order; cutoff 0 returns them all.
func (s *StageDiff) Shown(cutoff float64) []KernelDiff {
	if cutoff <= 0 {
		return s.Kernels
	}
	bar := max(s.BaseKernelTimeUS, s.NewKernelTimeUS) * cutoff / 100
	var out []KernelDiff
	for _, k := range s.Kernels {
		if k.DeltaUS != 0 && abs(k.DeltaUS) >= bar {
			out = append(out, k)
		}
	}
	return out
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}

// signedPct writes a percentage with its sign: "+30.0%", "-2.1%".
func signedPct(p float64) string { return strconv.FormatFloat(p, 'f', 1, 64) + "%" }

func plusPct(p float64) string {
	if p >= 0 {
		return "+" + signedPct(p)
	}
	return signedPct(p)
}

// DiffTable is the kernel rows of one stage diff as a table: name (with the base name under it
// for a normalised match), category, status, base and new total, the change in the stage's
// time unit and in percent, launches and mean launch duration. nameW bounds the name cell
// (table.Shorten). The kernel column is a Code column (Markdown and HTML mark it as code).
func DiffTable(s *StageDiff, rows []KernelDiff, nameW int) *table.Table {
	u := table.TimeUnitFor(len(rows)*2+1, func(i int) float64 {
		if i == len(rows)*2 {
			return abs(s.DeltaUS)
		}
		if i%2 == 0 {
			return rows[i/2].BaseTotalUS
		}
		return rows[i/2].NewTotalUS
	})
	t := &table.Table{
		Header: []string{"Kernel", "Category", "Status", u.Header("Base"), u.Header("New"), u.Header("Δ"), "Δ %", "Launches", "Mean (µs)"},
		Align:  []table.Align{table.Left, table.Left, table.Left, table.Right, table.Right, table.Right, table.Right, table.Right, table.Right},
		Code:   []bool{true},
		Empty:  "No kernel changed by the cutoff's share of the stage's kernel time.",
	}
	disp := distinctShort(len(rows), func(i int) string { return rows[i].Name }, nameW)
	for i, k := range rows {
		name := disp[i]
		if k.Match == MatchNormalized {
			name += "\n≈ base: " + table.Shorten(k.BaseName, nameW)
		}
		dp := "new"
		switch {
		case k.Status == DiffRemoved:
			dp = "gone"
		case k.BaseTotalUS > 0:
			p, _ := k.DeltaPct()
			dp = plusPct(p)
		}
		delta := u.Format(k.DeltaUS)
		if k.DeltaUS >= 0 {
			delta = "+" + delta
		}
		t.Rows = append(t.Rows, []string{name, k.Category, k.Status, u.Format(k.BaseTotalUS), u.Format(k.NewTotalUS), delta, dp,
			arrow(strconv.Itoa(k.BaseCount), strconv.Itoa(k.NewCount)), arrow(meanText(k.BaseMeanUS, k.BaseCount), meanText(k.NewMeanUS, k.NewCount))})
	}
	return t
}

// arrow writes "a → b", or a alone when both are the same.
func arrow(a, b string) string {
	if a == b {
		return a
	}
	return a + " → " + b
}

func meanText(usv float64, count int) string {
	if count == 0 {
		return "-"
	}
	return strconv.FormatFloat(usv, 'f', 1, 64)
}

// FusionDiffTable is the fusion rows of one stage diff whose status changed.
func FusionDiffTable(s *StageDiff) *table.Table {
	t := &table.Table{Header: []string{"Pattern", "Base status", "New status"}, Empty: "No fusion row changed status."}
	for _, f := range s.Fusions {
		t.Rows = append(t.Rows, []string{f.Pattern, orNone(f.BaseStatus), orNone(f.NewStatus)})
	}
	return t
}

func orNone(s string) string {
	if s == "" {
		return "(no row)"
	}
	return s
}

// StageLine is the one-line summary of a stage diff: kernel time and launches on both sides
// and the change ("kernel time 628.34 ms → 693.60 ms (+65.26 ms, +10.4%), launches 4734 →
// 4734").
func (s *StageDiff) StageLine() string {
	lu := lineUnit(s.BaseKernelTimeUS, s.NewKernelTimeUS)
	d := lu(s.DeltaUS)
	if s.DeltaUS >= 0 {
		d = "+" + d
	}
	if p, ok := s.DeltaPct(); ok {
		d += ", " + plusPct(p)
	}
	return fmt.Sprintf("kernel time %s → %s (%s), launches %d → %d", lu(s.BaseKernelTimeUS), lu(s.NewKernelTimeUS), d, s.BaseKernelCount, s.NewKernelCount)
}

// ExplainedLine says how much of the stage's change the rows shown explain, and what the
// other kernels did.
func (s *StageDiff) ExplainedLine(shown []KernelDiff) string {
	var changed, unchanged int
	// A kernel's name is unique in a stage diff (an exact match would have paired two rows of
	// one name), with its status to be sure.
	listed := make(map[[2]string]bool, len(shown))
	for _, k := range shown {
		listed[[2]string{k.Name, k.Status}] = true
	}
	for _, k := range s.Kernels {
		if listed[[2]string{k.Name, k.Status}] {
			continue
		}
		if k.DeltaUS != 0 {
			changed++
		} else {
			unchanged++
		}
	}
	p, ok := s.ExplainedPct(shown)
	var line string
	switch {
	case !ok && changed == 0 && len(shown) == 0:
		return "No kernel of the stage changed."
	case !ok:
		line = "The stage's kernel time did not change"
	case len(shown) == 1:
		line = "The kernel listed explains " + pc(p) + " of the stage's change"
	default:
		line = fmt.Sprintf("The %d kernels listed explain %s of the stage's change", len(shown), pc(p))
	}
	var rest []string
	if changed > 0 {
		rest = append(rest, fmt.Sprintf("%d more changed by less than the cutoff", changed))
	}
	if unchanged > 0 {
		rest = append(rest, fmt.Sprintf("%d did not change", unchanged))
	}
	if len(rest) > 0 {
		line += "; " + strings.Join(rest, ", ")
	}
	return line + "."
}

func renderDiffDoc(w io.Writer, d *DiffReport, cutoff float64, md bool) error {
	var b strings.Builder
	nameW := textNameWidth
	write := table.WriteText
	item := ""
	paths := func(in []InputInfo) string {
		ps := make([]string, len(in))
		for i := range in {
			ps[i] = in[i].Path
			if md {
				ps[i] = table.CodeSpan(in[i].Path)
			}
		}
		return strings.Join(ps, ", ")
	}
	if md {
		nameW, write, item = mdNameWidth, table.WriteMarkdown, "- "
		b.WriteString("# Kernel Diff\n\n")
	} else {
		b.WriteString("Kernel Diff\n")
	}
	b.WriteString(item + "Base: " + paths(d.BaseInputs) + "\n")
	b.WriteString(item + "New: " + paths(d.NewInputs) + "\n")
	if cutoff > 0 {
		fmt.Fprintf(&b, "%sKernels whose change is under %s of the stage's kernel time are hidden (cutoff).\n", item, pc(cutoff))
	}
	b.WriteString("\n")
	for i := range d.Stages {
		s := &d.Stages[i]
		if md {
			b.WriteString("## " + table.EscapeMarkdown(stageTitle(s.Stage)) + "\n\n")
		} else {
			b.WriteString("== " + stageTitle(s.Stage) + " ==\n")
		}
		shown := s.Shown(cutoff)
		b.WriteString(upperFirst(s.StageLine()) + ".\n")
		b.WriteString(s.ExplainedLine(shown) + "\n")
		if md {
			b.WriteString("\n")
		}
		if err := write(&b, DiffTable(s, shown, nameW)); err != nil {
			return err
		}
		b.WriteString("\n")
		if len(s.Fusions) > 0 {
			if md {
				b.WriteString("Fusion rows whose status changed:\n\n")
			} else {
				b.WriteString("Fusion rows whose status changed:\n")
			}
			if err := write(&b, FusionDiffTable(s)); err != nil {
				return err
			}
			b.WriteString("\n")
		} else {
			b.WriteString("No fusion row changed status.\n\n")
		}
	}
	if len(d.Warnings) > 0 {
		if md {
			b.WriteString("## Warnings\n\n")
		} else {
			b.WriteString("== Warnings ==\n")
		}
		for _, wn := range d.Warnings {
			if md {
				wn = table.EscapeMarkdown(wn)
			}
			b.WriteString("- " + wn + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// renderDiffCSV writes one long-form CSV of every kernel and fusion change (numbers
// unrounded, times in µs).
func renderDiffCSV(w io.Writer, d *DiffReport) error {
	t := &table.Table{Header: []string{"table", "stage", "name", "base_name", "match", "category", "status",
		"base_total_us", "new_total_us", "delta_us", "base_count", "new_count", "base_mean_us", "new_mean_us"}}
	for _, s := range d.Stages {
		for _, k := range s.Kernels {
			t.Rows = append(t.Rows, []string{"kernel", s.Stage, k.Name, k.BaseName, k.Match, k.Category, k.Status,
				f64(k.BaseTotalUS), f64(k.NewTotalUS), f64(k.DeltaUS), strconv.Itoa(k.BaseCount), strconv.Itoa(k.NewCount), f64(k.BaseMeanUS), f64(k.NewMeanUS)})
		}
		for _, f := range s.Fusions {
			t.Rows = append(t.Rows, []string{"fusion", s.Stage, f.Pattern, "", "", "", f.BaseStatus + " -> " + f.NewStatus,
				f64(f.BaseRelatedUS), f64(f.NewRelatedUS), f64(f.NewRelatedUS - f.BaseRelatedUS)})
		}
	}
	return table.WriteCSV(w, t)
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
