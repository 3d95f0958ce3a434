package triage

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/sglprof/runner/reports/render/table"
)

// Output formats accepted by Render.
const (
	FormatText     = "text"
	FormatMarkdown = "md"
	FormatJSON     = "json"
	FormatCSV      = "csv"
)

// Cell bounds (W14): long C++ template names are shortened pprof-style.
const (
	textNameWidth = 100
	mdNameWidth   = 140
	siteLines     = 3
)

// Render writes r in format (text, md, json, csv), hiding rows whose share is below cutoff
// percent (0 shows every row). r itself is not modified.
func Render(w io.Writer, r *Report, format string, cutoff float64) error {
	v := filtered(r, cutoff)
	if r.Diff != nil && format != FormatJSON {
		return RenderDiff(w, r.Diff, format, cutoff)
	}
	switch format {
	case FormatJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false) // kernel names are full of <...>; keep them readable
		if err := enc.Encode(v); err != nil {
			return fmt.Errorf("write triage json: %w", err)
		}
		return nil
	case FormatMarkdown, "markdown":
		if err := renderDoc(w, v, cutoff, true); err != nil {
			return err
		}
		return renderSections(w, v, table.Markdown)
	case FormatText, "":
		if err := renderDoc(w, v, cutoff, false); err != nil {
			return err
		}
		return renderSections(w, v, table.Text)
	case FormatCSV:
		return renderCSV(w, v)
	}
	return fmt.Errorf("unknown triage format %q; use text, md, json or csv", format)
}

// filtered returns a copy of r with rows under cutoff removed and nil slices made empty, so the
// JSON contract always has arrays where it promises them.
func filtered(r *Report, cutoff float64) *Report {
	c := *r
	c.Inputs = nonNil(r.Inputs)
	c.Warnings = nonNil(r.Warnings)
	c.Stages = make([]Stage, len(r.Stages))
	for i, s := range r.Stages {
		s.Kernels = append([]KernelRow{}, s.Kernels...)
		s.Overlap = append([]OverlapRow{}, s.Overlap...)
		s.Fusions = append([]FusionRow{}, s.Fusions...)
		applyCutoff(&s, cutoff)
		for k := range s.Kernels {
			s.Kernels[k].Locations = nonNil(s.Kernels[k].Locations)
		}
		for k := range s.Fusions {
			s.Fusions[k].Evidence = nonNil(s.Fusions[k].Evidence)
			s.Fusions[k].CandidatePaths = nonNil(s.Fusions[k].CandidatePaths)
		}
		c.Stages[i] = s
	}
	return &c
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func stageTitle(s string) string {
	if s == StageExtend || strings.HasPrefix(s, StageExtend+" ") {
		return "extend/prefill" + strings.TrimPrefix(s, StageExtend)
	}
	return s
}

// ms formats a duration given in µs: milliseconds with two decimals like the anchor, or
// microseconds below 0.1 ms so that small kernels do not all print as 0.00 ms.
func ms(usv float64) string {
	if usv < 100 {
		return strconv.FormatFloat(usv, 'f', 1, 64) + " µs"
	}
	return strconv.FormatFloat(usv/1000, 'f', 2, 64) + " ms"
}

// lineUnit formats the times of one line of prose in one unit, chosen by the largest as the
// tables choose theirs ("Busy 2621.87 ms, 2+-stream overlap 0.0 µs").
func lineUnit(usv ...float64) func(float64) string {
	return unitLine(unitFor(len(usv), func(i int) float64 { return usv[i] }))
}

// unitLine formats times of a line of prose in u, with the unit after each.
func unitLine(u unit) func(float64) string {
	return func(v float64) string { return u.Format(v) + " " + u.Label }
}

// stageUnit is the one time unit of a stage's kernel, overlap and fusion tables and their
// summary lines (add_rmsnorm_quant read 0.35 ms in the kernel table and
// 346.8 µs in the overlap table): ms when the largest row of the three tables reaches a
// millisecond, else µs; a stage without rows goes by its summed kernel time.
func stageUnit(s *Stage) unit {
	var vals []float64
	for _, k := range s.Kernels {
		vals = append(vals, k.TotalUS)
	}
	for _, o := range s.Overlap {
		vals = append(vals, o.TotalUS)
	}
	for _, f := range s.Fusions {
		vals = append(vals, f.RelatedUS)
	}
	if len(vals) == 0 {
		vals = append(vals, s.KernelTimeUS)
	}
	return unitFor(len(vals), func(i int) float64 { return vals[i] })
}

func pc(p float64) string { return strconv.FormatFloat(p, 'f', 1, 64) + "%" }

func modeLabel(m string) string {
	if m == ModeSingle {
		return "single-trace"
	}
	return m
}

// doc is one text or Markdown rendering in progress.
type doc struct {
	b         strings.Builder
	md        bool
	nameW     int
	write     func(io.Writer, *table.Table) error
	showStage bool
	leg       legend
}

func (d *doc) heading(s string) {
	if d.md {
		d.b.WriteString("## " + s + "\n")
	} else {
		d.b.WriteString("== " + s + " ==\n")
	}
}

func (d *doc) sub(s string) {
	if d.md {
		d.b.WriteString("##### " + s + "\n")
	} else {
		d.b.WriteString("-- " + s + " --\n")
	}
}

func (d *doc) flush(t *table.Table) error {
	if err := d.write(&d.b, t); err != nil {
		return err
	}
	d.b.WriteString("\n")
	return nil
}

func (d *doc) stage(s *Stage) {
	if d.showStage {
		d.sub(stageTitle(s.Stage))
	}
}

func renderDoc(w io.Writer, r *Report, cutoff float64, md bool) error {
	d := &doc{md: md, nameW: textNameWidth, write: table.WriteText,
		showStage: len(r.Stages) > 1 || (len(r.Stages) == 1 && r.Stages[0].Stage != StageAll)}
	if md {
		d.nameW, d.write = mdNameWidth, table.WriteMarkdown
	}
	d.header(r, cutoff)
	d.leg.use("busy")
	if r.API != nil {
		d.leg.use("sync")
	}
	if r.Mode == ModeMappingFormal {
		d.leg.use("formal")
	}
	if r.Ranks != nil {
		d.heading("Ranks")
		d.leg.use("straggler", "collective wait")
		for _, rs := range r.Ranks.Stages {
			if err := renderRankStage(&d.b, rs, d.sub, d.flush, d.nameW); err != nil {
				return err
			}
		}
	}
	if err := d.collectives(r); err != nil {
		return err
	}
	for _, part := range []struct {
		title string
		table func(s *Stage) error
	}{
		{"Kernel Table", func(s *Stage) error { return d.kernels(s, cutoff) }},
		{"Overlap Opportunity Table", d.overlap},
		{"Fuse Opportunity Table", d.fusions},
	} {
		d.heading(part.title)
		for i := range r.Stages {
			d.stage(&r.Stages[i])
			if err := part.table(&r.Stages[i]); err != nil {
				return err
			}
		}
	}
	if err := d.idleSection(r); err != nil {
		return err
	}
	if len(d.leg.used) > 0 {
		d.heading("Legend")
		d.leg.write(&d.b, md)
		d.b.WriteString("\n")
	}
	if len(r.Warnings) > 0 {
		d.heading("Warnings")
		for _, wn := range r.Warnings {
			d.b.WriteString("- " + wn + "\n")
		}
	}
	_, err := io.WriteString(w, d.b.String())
	return err
}

// header writes the report's title lines: mode, inputs, model, TP size and the cutoff.
//
// In Markdown the title is a heading and the other lines list items (as plain lines they made
// one paragraph on GitHub), with the paths in code spans; text is unchanged.
func (d *doc) header(r *Report, cutoff float64) {
	b := &d.b
	item, text, paths := "", func(s string) string { return s }, func(in []InputInfo) string {
		ps := make([]string, len(in))
		for i := range in {
			ps[i] = in[i].Path
		}
		return strings.Join(ps, ", ")
	}
	if d.md {
		item, text = "- ", table.EscapeMarkdown
		paths = func(in []InputInfo) string {
			ps := make([]string, len(in))
			for i := range in {
				ps[i] = table.CodeSpan(in[i].Path)
			}
			return strings.Join(ps, ", ")
		}
		b.WriteString("# Triage View\n\n")
	} else {
		b.WriteString("Triage View\n")
	}
	b.WriteString(item + "Mode: " + modeLabel(r.Mode) + "\n")
	if r.Mode == ModeMappingFormal {
		b.WriteString(item + "Mapping traces: " + paths(r.Mapping) + "\n")
		b.WriteString(item + "Formal traces: " + paths(r.Inputs) + "\n")
	} else {
		b.WriteString(item + "Input traces: " + paths(r.Inputs) + "\n")
	}
	if r.Model != "" {
		b.WriteString(item + "Model: " + text(r.Model) + "\n")
	}
	if r.TPSize > 0 {
		b.WriteString(item + "TP size: " + strconv.Itoa(r.TPSize) + "\n")
	}
	if cutoff > 0 {
		fmt.Fprintf(b, "%sRows under %s of the stage's kernel time are hidden (cutoff).\n", item, pc(cutoff))
	}
	for _, l := range rooflineHeader(r) {
		b.WriteString(item + text(l) + "\n")
	}
	b.WriteString("\n")
}

// kernels writes one stage's kernel table.
func (d *doc) kernels(s *Stage, cutoff float64) error {
	u := stageUnit(s)
	lu := unitLine(u)
	fmt.Fprintf(&d.b, "Share = %% of the stage's summed kernel time: %s over %d GPU ops (busy %s, window %s).\n",
		lu(s.KernelTimeUS), s.KernelCount, lu(s.BusyUS), lu(s.WindowUS))
	disp := distinctShort(len(s.Kernels), func(i int) string { return displayName(s.Kernels[i].Name) }, d.nameW)
	gt := "GPU time (" + u.Label + ")"
	t := &table.Table{
		Header: []string{"Kernel", "Category", gt, "Share", "Launches", "Python location (site share)", "CPU op"},
		Align:  []table.Align{table.Left, table.Left, table.Right, table.Right, table.Right, table.Left, table.Left},
		Empty:  fmt.Sprintf("No kernel rows at or above %s share.", pc(cutoff)),
	}
	if !d.md {
		t.Header = []string{"Kernel", "Category", gt, "Share", "sum%", "Launches", "Python location (site share)", "CPU op"}
		t.Align = []table.Align{table.Left, table.Left, table.Right, table.Right, table.Right, table.Right, table.Left, table.Left}
	}
	roof := stageHasRoofline(s)
	if roof {
		t.Header = append(t.Header, rooflineHeaderCells...)
		for range rooflineHeaderCells {
			t.Align = append(t.Align, table.Right)
		}
	}
	var cum float64
	for i, k := range s.Kernels {
		cum += k.SharePct
		loc, cpu := siteCells(k.Locations)
		row := []string{disp[i], k.Category, u.Format(k.TotalUS), pc(k.SharePct)}
		if !d.md {
			row = append(row, pc(cum))
		}
		row = append(row, strconv.Itoa(k.Count), loc, cpu)
		if roof {
			row = append(row, rooflineCells(&s.Kernels[i])...)
			d.leg.use(rooflineWords(&s.Kernels[i])...)
		}
		t.Rows = append(t.Rows, row)
	}
	return d.flush(t)
}

// overlap writes one stage's overlap table.
func (d *doc) overlap(s *Stage) error {
	multi := pct(s.Summary.MultiStreamNS, int64(s.BusyUS*1000))
	u := stageUnit(s)
	lu := unitLine(u)
	fmt.Fprintf(&d.b, "Busy %s, 2+-stream overlap %s (%s of busy), peak %d of %d streams; share = %% of summed kernel time.\n",
		lu(s.BusyUS), lu(us(s.Summary.MultiStreamNS)), pc(multi), s.Summary.PeakStreams, s.Summary.Streams)
	disp := distinctShort(len(s.Overlap), func(i int) string { return displayName(s.Overlap[i].Kernel) }, d.nameW)
	t := &table.Table{
		Header: []string{"Priority", "Verdict", "Kernel", "Python scope", "GPU time (" + u.Label + ")", "Share", "Exclusive / hidden", "Dep risk", "Recommendation"},
		Align:  []table.Align{table.Left, table.Left, table.Left, table.Left, table.Right, table.Right, table.Right},
		Empty:  "No overlap rows cleared the reporting bar.",
	}
	for i, o := range s.Overlap {
		t.Rows = append(t.Rows, []string{o.Priority, o.Verdict, disp[i], o.Scope, u.Format(o.TotalUS), pc(o.SharePct),
			pc(o.ExclusivePct) + " / " + pc(o.HiddenPct), o.DepRisk, o.Recommendation})
		d.leg.use(o.Priority, o.Verdict, o.DepRisk, o.Recommendation)
	}
	return d.flush(t)
}

// fusions writes one stage's fusion table; in a terminal the rationales go under it.
func (d *doc) fusions(s *Stage) error {
	u := stageUnit(s)
	t := &table.Table{
		Header: []string{"Pattern", "Status", "Confidence", "Related GPU time (" + u.Label + ")", "Share", "Evidence kernels", "Current kernel Python location", "Candidate fused Python path", "Rationale"},
		Align:  []table.Align{table.Left, table.Left, table.Left, table.Right, table.Right},
		Empty:  "No catalog fusion pattern matched this stage.",
	}
	for _, f := range s.Fusions {
		t.Rows = append(t.Rows, []string{f.Pattern, f.Status, f.Confidence, u.Format(f.RelatedUS), pc(f.SharePct),
			strings.Join(abbrev(f.Evidence), "\n"), strings.Join(f.Locations, "\n"), strings.Join(f.CandidatePaths, "\n"), f.Rationale})
		d.leg.use(f.Status, "confidence "+f.Confidence)
	}
	if !d.md {
		// The rationale is long prose; in a terminal it goes under the table.
		t.Header = t.Header[:8]
		for i := range t.Rows {
			t.Rows[i] = t.Rows[i][:8]
		}
	}
	if err := d.flush(t); err != nil {
		return err
	}
	if !d.md {
		for _, f := range s.Fusions {
			d.b.WriteString("* " + f.Pattern + ": " + f.Rationale + "\n")
		}
		if len(s.Fusions) > 0 {
			d.b.WriteString("\n")
		}
	}
	return nil
}

// renderRankStage writes one stage's per-rank table with its straggler line.
func renderRankStage(b *strings.Builder, rs RankStage, sub func(string), flush func(*table.Table) error, nameW int) error {
	sub(stageTitle(rs.Stage))
	if rs.Straggler == "" {
		fmt.Fprintf(b, "No straggler: no rank's compute time exceeds the median (%s) by %s%% of it or more.\n", ms(rs.MedianComputeUS),
			strconv.FormatFloat(StragglerMinPct, 'f', -1, 64))
	} else {
		lu := lineUnit(rs.StragglerGapUS, rs.MedianComputeUS)
		var parts []string
		for _, c := range rs.Culprits {
			parts = append(parts, fmt.Sprintf("%s (+%s)", table.Shorten(c.Kernel, nameW/2), lu(c.DiffUS)))
		}
		fmt.Fprintf(b, "Straggler: %s, compute %s over the median %s (%s)", rs.Straggler, lu(rs.StragglerGapUS), lu(rs.MedianComputeUS),
			pc(100*rs.StragglerGapUS/maxf(rs.MedianComputeUS, 1e-9)))
		if len(parts) > 0 {
			b.WriteString("; kernels making the difference: " + strings.Join(parts, ", "))
		}
		b.WriteString(".\n")
	}
	n := len(rs.Ranks)
	u := unitFor(n*2, func(i int) float64 {
		if i < n {
			return rs.Ranks[i].KernelTimeUS
		}
		return rs.Ranks[i-n].BusyUS
	})
	t := &table.Table{
		Header: []string{"Rank", "Kernel time (" + u.Label + ")", "Busy (" + u.Label + ")", "Busy vs median (" + u.Label + ")",
			"Compute (" + u.Label + ")", "Compute vs median (" + u.Label + ")", "Collective (" + u.Label + ")", "Collective wait (" + u.Label + ")", "Note"},
		Align: []table.Align{table.Left, table.Right, table.Right, table.Right, table.Right, table.Right, table.Right, table.Right, table.Left},
	}
	for _, r := range rs.Ranks {
		mark := ""
		if r.Rank == rs.Straggler {
			mark = "straggler"
		}
		signed := func(v float64) string {
			if v > 0 {
				return "+" + u.Format(v)
			}
			return u.Format(v)
		}
		t.Rows = append(t.Rows, []string{r.Rank, u.Format(r.KernelTimeUS), u.Format(r.BusyUS), signed(r.BusyVsMedianUS),
			u.Format(r.ComputeUS), signed(r.ComputeVsMedianUS), u.Format(r.CollectiveUS), u.Format(r.CollectiveWaitUS), mark})
	}
	return flush(t)
}

func siteCells(ls []Location) (string, string) {
	if len(ls) == 0 {
		return "unresolved", "-"
	}
	var loc, cpu []string
	for i, l := range ls {
		if i == siteLines {
			break
		}
		s := l.Location
		if len(ls) > 1 {
			s += fmt.Sprintf(" (site share %.0f%%)", l.SharePct)
		}
		loc = append(loc, s)
		cpu = append(cpu, l.CPUOp)
	}
	return strings.Join(loc, "\n"), strings.Join(cpu, "\n")
}

func f64(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// renderCSV writes one long-form CSV: a "table" column says which table a row belongs to and
// the columns that table does not use are empty. Numbers are unrounded.
func renderCSV(w io.Writer, r *Report) error {
	t := &table.Table{Header: []string{"table", "stage", "name", "category", "total_us", "count", "share_pct",
		"location", "cpu_op", "priority", "verdict", "exclusive_pct", "hidden_pct", "dep_risk", "recommendation",
		"status", "confidence", "evidence", "candidate_paths", "rationale"}}
	t.Header = append(t.Header, rooflineCSVHeader...)
	if r.Ranks != nil {
		for _, rs := range r.Ranks.Stages {
			for _, rr := range rs.Ranks {
				verdict := ""
				if rr.Rank == rs.Straggler {
					verdict = "straggler"
				}
				// total_us is the busy time; the rationale column carries the other figures.
				t.Rows = append(t.Rows, []string{"rank", rs.Stage, rr.Rank, "", f64(rr.BusyUS), "", "", "", "", "", verdict, "", "", "", "", "", "", "", "",
					fmt.Sprintf("kernel_time_us=%s collective_us=%s collective_wait_us=%s busy_vs_median_us=%s compute_us=%s compute_vs_median_us=%s",
						f64(rr.KernelTimeUS), f64(rr.CollectiveUS), f64(rr.CollectiveWaitUS), f64(rr.BusyVsMedianUS), f64(rr.ComputeUS), f64(rr.ComputeVsMedianUS))})
			}
		}
	}
	for _, s := range r.Stages {
		for _, k := range s.Kernels {
			var loc, cpu []string
			for _, l := range k.Locations {
				loc = append(loc, fmt.Sprintf("%s (%s%%)", l.Location, f64(l.SharePct)))
				cpu = append(cpu, l.CPUOp)
			}
			row := []string{"kernel", s.Stage, k.Name, k.Category, f64(k.TotalUS), strconv.Itoa(k.Count), f64(k.SharePct),
				strings.Join(loc, "; "), strings.Join(cpu, "; ")}
			t.Rows = append(t.Rows, append(row, rooflineCSV(t.Header, &k)...))
		}
		for _, o := range s.Overlap {
			t.Rows = append(t.Rows, []string{"overlap", s.Stage, o.Kernel, o.Category, f64(o.TotalUS), "", f64(o.SharePct),
				o.Scope, "", o.Priority, o.Verdict, f64(o.ExclusivePct), f64(o.HiddenPct), o.DepRisk, o.Recommendation})
		}
		for _, f := range s.Fusions {
			t.Rows = append(t.Rows, []string{"fusion", s.Stage, f.Pattern, "", f64(f.RelatedUS), "", f64(f.SharePct),
				strings.Join(f.Locations, "; "), "", "", "", "", "", "", "", f.Status, f.Confidence,
				strings.Join(f.Evidence, "; "), strings.Join(f.CandidatePaths, "; "), f.Rationale})
		}
	}
	t.Rows = append(t.Rows, collectiveCSVRows(t, r)...)
	t.Rows = append(t.Rows, idleCSVRows(r, len(t.Header))...)
	t.Rows = append(t.Rows, sectionCSVRows(t, r)...)
	return table.WriteCSV(w, t)
}
