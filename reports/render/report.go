package render

import (
	"bytes"
	_ "embed"
	"fmt"
	"html"
	"html/template"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sglprof/runner/reports/compare"
	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/reports/render/table"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/reports/triage"
)

// Report is what `runner report` shows for one run: the comparison rows (when there is a
// baseline) and, per configuration, the data of four charts. report.md and report.html are
// both rendered from one Report, so the page and the job summary never disagree.
type Report struct {
	Title    string
	RunDir   string
	Baseline string // "" when there is none
	Headline string
	Compare  *compare.Result
	Configs  []ConfigReport
	Skipped  []perf.Skip
	// Cells lists every cell of the run with its verdict and timings (from summary.json), so
	// a report without a baseline still shows what the run measured; see WithCells.
	Cells []CellLine
	// Simulated is set for a run of the simulators (its manifest says so): the report says so
	// at the top, so invented timings are never read as measurements.
	Simulated bool
	// Prompts says which prompt each "p…" part of the run's keys stands for (a hash of it).
	Prompts []PromptKey
	// Parity is the run's engine parity check (summary.json); nil without an engine axis.
	Parity *rundir.Parity
}

// PromptKey is a configuration key's prompt part ("p7cfb7d39") and the prompt it hashes.
type PromptKey struct {
	Part, Prompt string
}

// PromptNote is the sentence that explains the prompt parts of the keys: keys carry a hash of
// the prompt, not the prompt, so that they stay short.
func (r *Report) PromptNote() string {
	if len(r.Prompts) == 0 {
		return ""
	}
	var parts []string
	for _, p := range r.Prompts {
		parts = append(parts, fmt.Sprintf("%s is the prompt %q", p.Part, shortName(p.Prompt, 80)))
	}
	return "In the configuration keys, " + strings.Join(parts, "; ") + " (the first 8 hex digits of the prompt's SHA-256, which keeps keys short)."
}

// SimulatedNote is the banner of every output of a simulated run.
const SimulatedNote = "Simulated run: sglang and nsys were replaced by the runner's built-in simulators; no GPU was used and the timings are invented, not measurements."

// CellLine is one cell of the run as its summary recorded it.
type CellLine struct {
	ID       string
	Profiler string
	Verdict  string
	E2E      float64 // ns; 0 when the cell has none
	Step     float64 // mean denoise step, ns; 0 when none
	Warnings int
	Cause    string // the root cause of a cell that is not ok
	// Key and LLM are set for LLM serve cells: the latency-vs-throughput chart groups cells by
	// key without their concurrency and rate parts.
	Key string
	LLM *LLMPoint
	// Timeline is an LLM cell's requests for its timeline chart (timeline.go), TimelineLeft
	// the requests past those (not drawn).
	Timeline     []rundir.LLMSpan
	TimelineLeft int
}

// WithCells adds the run's cells; without a comparison the headline then says what was
// measured instead of only that nothing was compared.
func (r *Report) WithCells(cells []CellLine) *Report {
	r.Cells = cells
	if r.Compare == nil && len(cells) > 0 {
		ok := 0
		for _, c := range cells {
			if c.Verdict == "ok" {
				ok++
			}
		}
		r.Headline = fmt.Sprintf("no baseline: %d of %d cells ok, timings below; pass --baseline history or a run directory to compare", ok, len(cells))
	}
	return r
}

// SkippedSummary says in one line why cells were left out of the comparison, grouped by
// cause ("12 profiled (torch, nsys): profilers distort timings; --profilers all admits
// them"), for the line that introduces the list.
func (r *Report) SkippedSummary() string {
	if len(r.Skipped) == 0 {
		return ""
	}
	var profiled, notOK, notRun, noTimings, other int
	profilers := map[string]bool{}
	var names []string
	for _, s := range r.Skipped {
		switch {
		case strings.HasPrefix(s.Reason, "profiler "):
			profiled++
			if f := strings.Fields(s.Reason); len(f) > 1 && !profilers[f[1]] {
				profilers[f[1]] = true
				names = append(names, strings.Trim(f[1], `"`))
			}
		case strings.HasPrefix(s.Reason, "verdict "):
			notOK++
		case strings.HasPrefix(s.Reason, "no result.json"):
			notRun++
		case strings.HasPrefix(s.Reason, "no timings"):
			noTimings++
		default:
			other++
		}
	}
	var parts []string
	if profiled > 0 {
		parts = append(parts, fmt.Sprintf("%d profiled (%s): a profiler slows what it measures, so profiled cells are not timing samples (--profilers all admits them)", profiled, strings.Join(names, ", ")))
	}
	for _, g := range []struct {
		n    int
		what string
	}{{notOK, "not ok"}, {notRun, "not run"}, {noTimings, "without timings"}, {other, "other"}} {
		if g.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", g.n, g.what))
		}
	}
	cells := "cells"
	if len(r.Skipped) == 1 {
		cells = "cell"
	}
	return fmt.Sprintf("%d %s not compared: %s", len(r.Skipped), cells, strings.Join(parts, "; "))
}

// ConfigReport is one configuration's charts.
type ConfigReport struct {
	Key     string
	Rows    []compare.Row
	Steps   []StepPoint
	Stages  []StageBar
	Kernels []perf.KernelShare
	Trend   []TrendPoint
}

// empty reports whether the configuration has nothing to chart: no steps, stages or kernels,
// and no history beyond this run's own point (which the cells table already shows). An LLM
// serve cell's configuration is such (its figures are in the LLM serving table), and a heading
// over nothing would only pad the report.
func (c ConfigReport) empty() bool {
	return len(c.Steps) == 0 && len(c.Stages) == 0 && len(c.Kernels) == 0 && len(c.Trend) <= 1
}

// StepPoint is one denoising step: the new run's median and range, and the baseline's band
// (min..max of its samples at that step) when there is a sample baseline.
type StepPoint struct {
	Step                 int
	Median, Min, Max     float64 // ns
	HasBase              bool
	BaseMedian, BLo, BHi float64
}

// StageBar is one stage's median time in the new run and the baseline.
type StageBar struct {
	Name    string
	New     float64 // ns
	Base    float64 // ns; 0 without a baseline
	Status  string
	HasBase bool
}

// TrendPoint is one earlier (or the current) run's e2e median from the history.
type TrendPoint struct {
	RunID  string
	Time   time.Time
	Median float64 // ns
	// Change marks the first run of a step change (history.TrendChanges): the chart draws a
	// marker there, the run to start a bisection from.
	Change bool
}

// BuildReport assembles a Report. base may be nil (no baseline or a history baseline); res
// may be nil (no baseline); trend maps configuration keys to their history.
func BuildReport(title, runDir string, cur, base *perf.Set, res *compare.Result, trend map[string][]TrendPoint) *Report {
	r := &Report{Title: title, RunDir: runDir, Compare: res, Skipped: cur.Skipped, Headline: "no baseline: nothing compared"}
	if res != nil {
		r.Baseline = res.Base
		r.Headline = compare.Headline(res)
	}
	for _, key := range cur.Keys() {
		c := cur.Configs[key]
		cr := ConfigReport{Key: key, Kernels: c.TopKernels, Trend: trend[key]}
		if res != nil {
			for _, row := range res.Rows {
				if row.Config == key {
					cr.Rows = append(cr.Rows, row)
				}
			}
		}
		var bc *perf.Config
		if base != nil {
			bc = base.Configs[key]
		}
		for i, s := range c.Steps {
			st := compare.Summarize(s)
			p := StepPoint{Step: i, Median: st.Median, Min: minOf(s), Max: maxOf(s)}
			if bc != nil && i < len(bc.Steps) && len(bc.Steps[i]) > 0 {
				p.HasBase = true
				p.BaseMedian = compare.Summarize(bc.Steps[i]).Median
				p.BLo, p.BHi = minOf(bc.Steps[i]), maxOf(bc.Steps[i])
			}
			cr.Steps = append(cr.Steps, p)
		}
		if bc == nil {
			// A history baseline has no per-step samples, only the rolling median of the
			// step time: draw it as a flat band of ± its tolerance.
			for _, row := range cr.Rows {
				if row.Metric == perf.MetricDenoiseStep && row.History() && row.Base.N > 0 {
					for i := range cr.Steps {
						p := &cr.Steps[i]
						p.HasBase, p.BaseMedian = true, row.Base.Median
						p.BLo, p.BHi = row.Base.Median-row.Limit, row.Base.Median+row.Limit
					}
				}
			}
		}
		for _, m := range c.MetricNames() {
			name, ok := strings.CutPrefix(m, perf.StagePrefix)
			if !ok {
				continue
			}
			b := StageBar{Name: name, New: compare.Summarize(c.Metrics[m]).Median}
			if bc != nil && len(bc.Metrics[m]) > 0 {
				b.Base, b.HasBase = compare.Summarize(bc.Metrics[m]).Median, true
			}
			for _, row := range cr.Rows {
				if row.Metric == m {
					b.Status = row.Status
					if row.History() { // history rows carry the rolling median
						b.Base, b.HasBase = row.Base.Median, true
					}
				}
			}
			cr.Stages = append(cr.Stages, b)
		}
		r.Configs = append(r.Configs, cr)
	}
	return r
}

func minOf(v []float64) float64 {
	m := math.Inf(1)
	for _, x := range v {
		m = math.Min(m, x)
	}
	return m
}

func maxOf(v []float64) float64 {
	m := math.Inf(-1)
	for _, x := range v {
		m = math.Max(m, x)
	}
	return m
}

// WriteReportMarkdown writes report.md: headline, comparison table, then per configuration
// the stage table, top kernels and the e2e trend. It stays well under GitHub's 1 MiB job
// summary limit for sweeps of hundreds of cells because it has no per-step rows.
func WriteReportMarkdown(w io.Writer, r *Report) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s\n\n", table.EscapeMarkdown(r.Title))
	if r.Simulated {
		fmt.Fprintf(&b, "> **%s**\n\n", SimulatedNote)
	}
	fmt.Fprintf(&b, "Run %s", table.CodeSpan(r.RunDir))
	if r.Baseline != "" {
		fmt.Fprintf(&b, " against %s", table.CodeSpan(r.Baseline))
	}
	b.WriteString("\n\n")
	if n := r.PromptNote(); n != "" {
		fmt.Fprintf(&b, "%s\n\n", table.EscapeMarkdown(n))
	}
	if r.Compare != nil {
		if err := compare.WriteMarkdown(&b, r.Compare); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(&b, "**%s**\n", r.Headline)
	}
	if err := writeCellsMarkdown(&b, r.Cells); err != nil {
		return err
	}
	if t := LLMTable(r.Cells); t != nil {
		b.WriteString("\n## LLM serving\n\n")
		if err := table.WriteMarkdown(&b, t); err != nil {
			return err
		}
	}
	if t := SearchTable(r.Cells); t != nil {
		b.WriteString("\n## SLA frontier\n\n")
		if err := table.WriteMarkdown(&b, t); err != nil {
			return err
		}
	}
	writeParitySummary(&b, &rundir.Summary{Parity: r.Parity})
	for _, c := range r.Configs {
		if c.empty() {
			continue
		}
		fmt.Fprintf(&b, "\n## %s\n\n", table.CodeSpan(c.Key))
		if len(c.Stages) > 0 {
			t := &table.Table{Header: []string{"Stage", "New", "Base", "Verdict"},
				Align: []table.Align{table.Left, table.Right, table.Right, table.Left}}
			for _, s := range c.Stages {
				base := "-"
				if s.HasBase {
					base = compare.FormatValue(s.Base, perf.UnitNS)
				}
				t.Rows = append(t.Rows, []string{s.Name, compare.FormatValue(s.New, perf.UnitNS), base, orDash(s.Status)})
			}
			if err := table.WriteMarkdown(&b, t); err != nil {
				return err
			}
		}
		if len(c.Steps) > 0 {
			last := c.Steps[len(c.Steps)-1]
			fmt.Fprintf(&b, "\nDenoise steps: %d, first %s, last %s (median of the pooled repeats)\n", len(c.Steps), compare.FormatValue(c.Steps[0].Median, perf.UnitNS), compare.FormatValue(last.Median, perf.UnitNS))
		}
		if len(c.Kernels) > 0 {
			t := &table.Table{Header: []string{"Top kernel", "Category", "Share"},
				Align: []table.Align{table.Left, table.Left, table.Right}, Code: []bool{true}}
			for _, k := range c.Kernels {
				t.Rows = append(t.Rows, []string{shortName(k.Name, 80), k.Category, fmt.Sprintf("%.1f%%", k.SharePct)})
			}
			b.WriteString("\n")
			if err := table.WriteMarkdown(&b, t); err != nil {
				return err
			}
		}
		if len(c.Trend) > 0 {
			var parts, changes []string
			for _, t := range c.Trend {
				v := compare.FormatValue(t.Median, perf.UnitNS)
				if t.Change {
					v = "**" + v + "**"
					changes = append(changes, table.CodeSpan(t.RunID))
				}
				parts = append(parts, v)
			}
			fmt.Fprintf(&b, "\nE2E history (oldest first): %s\n", strings.Join(parts, " → "))
			if len(changes) > 0 {
				fmt.Fprintf(&b, "\nStep change (bold) began at run %s\n", strings.Join(changes, ", "))
			}
		}
	}
	if len(r.Skipped) > 0 {
		fmt.Fprintf(&b, "\n<details><summary>%s</summary>\n\n", r.SkippedSummary())
		for _, s := range r.Skipped {
			fmt.Fprintf(&b, "- %s: %s\n", table.CodeSpan(s.Cell), table.EscapeMarkdown(s.Reason))
		}
		b.WriteString("\n</details>\n")
	}
	_, err := w.Write(b.Bytes())
	return err
}

// writeCellsMarkdown writes the table of the run's cells: verdict (with its warning count),
// e2e and mean step time, and the root cause of a cell that is not ok.
func writeCellsMarkdown(b *bytes.Buffer, cells []CellLine) error {
	if len(cells) == 0 {
		return nil
	}
	t := &table.Table{Header: []string{"Cell", "Verdict", "E2E", "Mean step", "Profiler", "Note"},
		Align: []table.Align{table.Left, table.Left, table.Right, table.Right, table.Left, table.Left},
		Code:  []bool{true}}
	for _, c := range cells {
		t.Rows = append(t.Rows, []string{c.ID, c.VerdictLabel(), nsOrDash(c.E2E), nsOrDash(c.Step), orDash(c.Profiler), orDash(c.Cause)})
	}
	b.WriteString("\n## Cells\n\n")
	return table.WriteMarkdown(b, t)
}

// VerdictLabel is the verdict with the warning marker the terminal summary uses ("ok !2").
func (c CellLine) VerdictLabel() string {
	if c.Warnings == 0 {
		return c.Verdict
	}
	return fmt.Sprintf("%s !%d", c.Verdict, c.Warnings)
}

func nsOrDash(ns float64) string {
	if ns <= 0 {
		return "-"
	}
	return compare.FormatValue(ns, perf.UnitNS)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func shortName(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// Chart geometry: every chart is a fixed-size SVG so the browser test knows where to look.
const (
	chartW, chartH = 560, 220
	padL, padR     = 64, 16
	padT, padB     = 16, 32
)

// svgChart is one chart's drawing, computed in Go so the template only places elements.
type svgChart struct {
	ID     string
	Title  string
	Width  int
	Height int
	Band   string // polygon points of the baseline band
	BaseLn string // polyline of the baseline median
	Line   string // polyline of the new series
	Dots   []svgDot
	Bars   []svgBar
	Lines  []svgLine // multi-series charts (sweepCharts)
	Marks  []svgMark // vertical markers (the start of a step change in the trend chart)
	YTicks []svgTick
	XTicks []svgTick
	// XTitle and YTitle name the axes with their units, under the x ticks and up the left edge.
	XTitle, YTitle svgTick
	// PointLabels are small labels over points (the concurrency or rate of a sweep's point).
	PointLabels []svgTick
	// Common is what every series of the chart shares (a configuration key with "*" where the
	// series differ); the caption shows it, the legend only the differing parts.
	Common string
	// Empty is the chart's message, a line each, when it has nothing to draw (or, for a
	// history of one run, what the one point is).
	Empty []svgTick
}

// message is an Empty text of one or more lines.
func message(lines ...string) []svgTick {
	var out []svgTick
	for i, l := range lines {
		out = append(out, svgTick{X: 12, Y: 28 + 18*float64(i), Label: l})
	}
	return out
}

// axisTitles names a chart's axes: x centred under its tick labels (the chart grows by
// titleH for it), y turned up the left edge.
func (ch *svgChart) axisTitles(x, y string) {
	ch.XTitle = svgTick{X: (padL + chartW - padR) / 2, Y: chartH + 6, Label: x}
	ch.YTitle = svgTick{X: -(padT + chartH - padB) / 2, Y: 14, Label: y}
	ch.Height += titleH
}

// titleH is the room under the x tick labels for the x axis' title.
const titleH = 14

type svgDot struct {
	X, Y  float64
	Label string
	Color string // "" for the chart's one series colour
}

type svgBar struct {
	X, Y, W, H float64
	Class      string
	Label      string
	Text       string
	TX, TY     float64
}

// svgMark is a vertical line across the plot at X with a label at its top.
type svgMark struct {
	X, Y1, Y2 float64
	Label     string
}

type svgTick struct {
	X, Y  float64
	Label string
}

type scale struct{ lo, hi, a, b float64 }

func (s scale) at(v float64) float64 {
	if s.hi == s.lo {
		return (s.a + s.b) / 2
	}
	return s.a + (v-s.lo)/(s.hi-s.lo)*(s.b-s.a)
}

func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func stepChart(id string, c ConfigReport) svgChart {
	ch := svgChart{ID: id, Title: "Denoise step latency: new median (red); shaded: baseline min–max, or history median ± tolerance", Width: chartW, Height: chartH}
	if len(c.Steps) == 0 {
		ch.Empty = message("no per-step times")
		return ch
	}
	ch.axisTitles("denoise step", "latency (ms)")
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range c.Steps {
		lo, hi = math.Min(lo, p.Min), math.Max(hi, p.Max)
		if p.HasBase {
			lo, hi = math.Min(lo, p.BLo), math.Max(hi, p.BHi)
		}
	}
	lo, hi = lo*0.95, hi*1.05
	x := scale{0, float64(max(len(c.Steps)-1, 1)), padL, chartW - padR}
	y := scale{lo, hi, chartH - padB, padT}
	var line, bline, upper, lower []string
	for _, p := range c.Steps {
		px := x.at(float64(p.Step))
		line = append(line, f1(px)+","+f1(y.at(p.Median)))
		ch.Dots = append(ch.Dots, svgDot{X: px, Y: y.at(p.Median), Label: fmt.Sprintf("step %d: %s", p.Step, compare.FormatValue(p.Median, perf.UnitNS))})
		if p.HasBase {
			upper = append(upper, f1(px)+","+f1(y.at(p.BHi)))
			lower = append([]string{f1(px) + "," + f1(y.at(p.BLo))}, lower...)
			bline = append(bline, f1(px)+","+f1(y.at(p.BaseMedian)))
		}
	}
	ch.Line = strings.Join(line, " ")
	if len(upper) > 0 {
		if len(upper) == 1 { // a band needs width
			upper = append(upper, upper[0])
			lower = append(lower, lower[0])
		}
		ch.Band = strings.Join(append(upper, lower...), " ")
		ch.BaseLn = strings.Join(bline, " ")
	}
	for i := 0; i <= 4; i++ {
		v := lo + (hi-lo)*float64(i)/4
		ch.YTicks = append(ch.YTicks, svgTick{padL - 6, y.at(v), f1(v / 1e6)})
	}
	stride := max(1, len(c.Steps)/8)
	for i := 0; i < len(c.Steps); i += stride {
		ch.XTicks = append(ch.XTicks, svgTick{x.at(float64(i)), chartH - padB + 14, strconv.Itoa(i)})
	}
	return ch
}

// hbars draws labelled horizontal bars; values share one scale. Each label is on its own line
// above its bar, where it has the chart's whole width (kernel names are long; a column of
// labels left of the bars cut them to a few words, and on a phone cut them off).
func hbars(id, title string, labels []string, vals [][]float64, classes []string, texts []string) svgChart {
	const rowH, labelH = 34.0, 14.0
	h := int(padT) + int(rowH)*len(labels) + 4
	ch := svgChart{ID: id, Title: title, Width: chartW, Height: max(h, 60)}
	if len(labels) == 0 {
		ch.Empty = message("nothing to show")
		return ch
	}
	hi := 0.0
	for _, v := range vals {
		for _, x := range v {
			hi = math.Max(hi, x)
		}
	}
	left := 12.0
	x := scale{0, hi, left, chartW - padR - 70}
	if hi == 0 {
		x = scale{0, 1, left, chartW - padR - 70}
	}
	for i, l := range labels {
		y0 := padT + float64(i)*rowH
		n := len(vals[i])
		bh := (rowH - labelH - 4) / float64(max(n, 1))
		for j, v := range vals[i] {
			w := math.Max(x.at(v)-left, 1)
			cls := "bar"
			if j == 0 && n == 2 {
				cls = "bar base"
			} else if classes[i] != "" {
				cls = "bar " + classes[i]
			}
			ch.Bars = append(ch.Bars, svgBar{X: left, Y: y0 + labelH + float64(j)*bh, W: w, H: bh - 1, Class: cls, Label: l})
		}
		last := &ch.Bars[len(ch.Bars)-1]
		last.Text, last.TX, last.TY = texts[i], left+math.Max(x.at(vals[i][n-1])-left, 1)+4, y0+labelH+(rowH-labelH-4)/2
		// 60 characters fit the chart's width at the phone's larger type (13 units a letter).
		ch.PointLabels = append(ch.PointLabels, svgTick{X: left, Y: y0 + labelH - 3, Label: shortName(l, 60)})
	}
	return ch
}

func stageChart(id string, c ConfigReport) svgChart {
	var labels, classes, texts []string
	var vals [][]float64
	for _, s := range c.Stages {
		labels = append(labels, s.Name)
		v := []float64{s.New}
		if s.HasBase {
			v = []float64{s.Base, s.New}
		}
		vals = append(vals, v)
		cls := ""
		if s.Status == compare.StatusRegression {
			cls = "regression"
		}
		classes = append(classes, cls)
		texts = append(texts, compare.FormatValue(s.New, perf.UnitNS))
	}
	return hbars(id, "Stage breakdown (grey: baseline, blue: new, red: regression)", labels, vals, classes, texts)
}

func kernelChart(id string, c ConfigReport) svgChart {
	var labels, classes, texts []string
	var vals [][]float64
	for _, k := range c.Kernels {
		labels = append(labels, k.Category+": "+k.Name)
		vals = append(vals, []float64{k.SharePct})
		classes = append(classes, "kernel")
		texts = append(texts, fmt.Sprintf("%.1f%%", k.SharePct))
	}
	ch := hbars(id, "Top kernels, share of GPU time (from triage)", labels, vals, classes, texts)
	if len(labels) == 0 {
		ch.Empty = message("no triage (profile a cell with torch or nsys)")
	}
	return ch
}

func trendChart(id string, c ConfigReport) svgChart {
	ch := svgChart{ID: id, Title: "E2E history, oldest to newest; dashed: where a step change began", Width: chartW, Height: chartH}
	switch len(c.Trend) {
	case 0:
		ch.Empty = message("no history")
		return ch
	case 1:
		// One point is no trend: say what it is and when the line starts.
		t := c.Trend[0]
		ch.Empty = message("The history has one run of this configuration:",
			shortName(t.RunID, 40)+", e2e median "+compare.FormatValue(t.Median, perf.UnitNS)+".",
			"The trend line starts with the next run that records it.")
		return ch
	}
	ch.axisTitles("run, oldest to newest (hover a point for its id)", "e2e median (ms)")
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, t := range c.Trend {
		lo, hi = math.Min(lo, t.Median), math.Max(hi, t.Median)
	}
	lo, hi = lo*0.9, hi*1.1
	x := scale{0, float64(max(len(c.Trend)-1, 1)), padL, chartW - padR}
	y := scale{lo, hi, chartH - padB, padT}
	var pts []string
	for i, t := range c.Trend {
		pts = append(pts, f1(x.at(float64(i)))+","+f1(y.at(t.Median)))
		label := t.RunID + ": " + compare.FormatValue(t.Median, perf.UnitNS)
		if t.Change {
			label += " (a step change began here)"
			ch.Marks = append(ch.Marks, svgMark{X: x.at(float64(i)), Y1: padT, Y2: chartH - padB, Label: "change: " + shortName(t.RunID, 24)})
		}
		ch.Dots = append(ch.Dots, svgDot{X: x.at(float64(i)), Y: y.at(t.Median), Label: label})
	}
	ch.Line = strings.Join(pts, " ")
	for i := 0; i <= 4; i++ {
		v := lo + (hi-lo)*float64(i)/4
		ch.YTicks = append(ch.YTicks, svgTick{padL - 6, y.at(v), f1(v / 1e6)})
	}
	return ch
}

//go:embed report.html.tmpl
var reportTmpl string

// reportTemplate is parsed on first use, not at package init: every process start of the
// runner (supervisors and simulators included) would otherwise pay for parsing it.
var reportTemplate = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("report").Funcs(template.FuncMap{
		"stat":   func(s compare.Stat, unit string) string { return compare.FormatStat(s, unit) },
		"ns":     nsOrDash,
		"p":      compare.FormatP,
		"mdc":    compare.FormatMDC,
		"method": compare.MethodLine,
		"base":   compare.FormatBase,
		"lower":  strings.ToLower,
		"n":      f1,
		"brk":    breakable,
		"add":    func(a, b float64) float64 { return a + b },
	}).Parse(reportTmpl))
})

type htmlConfig struct {
	ConfigReport
	Charts []svgChart
}

// WriteReportHTML writes report.html: one self-contained page (inline CSS and SVG, no script,
// no network) with the comparison table and four charts per configuration.
func WriteReportHTML(w io.Writer, r *Report) error {
	var cs []htmlConfig
	for i, c := range r.Configs {
		if c.empty() {
			continue
		}
		id := fmt.Sprintf("c%d", i)
		charts := []svgChart{
			stepChart(id+"-steps", c), stageChart(id+"-stages", c), kernelChart(id+"-kernels", c), trendChart(id+"-trend", c),
		}
		if rc, ok := rooflineChart(id+"-roofline", c); ok {
			charts = append(charts, rc)
		}
		cs = append(cs, htmlConfig{c, charts})
	}
	var rows []htmlRow
	if r.Compare != nil {
		for _, row := range r.Compare.Rows {
			rows = append(rows, htmlRow{Row: row})
		}
		sort.SliceStable(rows, func(i, j int) bool {
			return rows[i].Status == compare.StatusRegression && rows[j].Status != compare.StatusRegression
		})
	}
	keys := make([]string, len(rows))
	for i := range rows {
		keys[i] = rows[i].Config
	}
	cfgCommon, labels := keyAxes(keys)
	cfgCol := false
	for i := range rows {
		rows[i].Label = labels[i]
		cfgCol = cfgCol || labels[i] != ""
	}
	var llm template.HTML
	if t := LLMTable(r.Cells); t != nil {
		var b strings.Builder
		if err := table.WriteHTML(&b, t); err != nil {
			return err
		}
		llm = template.HTML(b.String()) // table.WriteHTML escapes every cell
	}
	frontier, err := searchHTML(r.Cells)
	if err != nil {
		return err
	}
	timelines := timelineCharts(r.Cells)
	var parity template.HTML
	if t := ParityTable(r.Parity); t != nil {
		var b strings.Builder
		t.Title = ""
		if err := table.WriteHTML(&b, t); err != nil {
			return err
		}
		parity = template.HTML(b.String()) // table.WriteHTML escapes every cell
	}
	sweep := sweepCharts(r.Cells)
	legend := len(sweep) > 0 && len(sweep[0].Lines) > 1
	kds, err := htmlKernelDiffs(r.Compare)
	if err != nil {
		return err
	}
	return reportTemplate().Execute(w, struct {
		*Report
		Rows        []htmlRow
		CfgCommon   string // the configuration keys' shared parts ("*" where they differ)
		CfgCol      bool   // the rows differ in configuration: the table has a Config column
		Configs     []htmlConfig
		Sweep       []svgChart
		Queue       []svgChart // the server's queue depth over each LLM cell (queue.go)
		LLM         template.HTML
		Frontier    template.HTML   // the SLA frontier table (frontier.go)
		Timelines   []timelineChart // the per-request timelines of LLM cells (timeline.go)
		Parity      template.HTML   // the engine parity warnings (parity.go)
		SimNote     string
		KernelDiffs []htmlKernelDiff
		SweepLegend bool // the sweep charts have more than one line, and a legend
		// PlotL, PlotR, PlotT and PlotB are the plot area's edges, where the axes are drawn.
		PlotL, PlotR, PlotT, PlotB float64
	}{r, rows, cfgCommon, cfgCol, cs, sweep, queueChart(r.Cells), llm, frontier, timelines, parity, SimulatedNote, kds, legend, padL, chartW - padR, padT, chartH - padB})
}

// htmlRow is a comparison row of report.html with its configuration's label: the parts of
// its key that differ from the other rows' (keyAxes).
type htmlRow struct {
	compare.Row
	Label string
}

// htmlKernelDiff is one regressed configuration's kernel diff on the page: the cells diffed,
// the verdict lines and, per stage they name, its summary line and top kernel rows.
type htmlKernelDiff struct {
	Config, Profiler, BaseCell, NewCell, Note string
	Verdicts                                  []template.HTML
	Stages                                    []htmlDiffStage
	Warnings                                  []string
}

type htmlDiffStage struct {
	Stage, Line string
	Table       template.HTML
}

// htmlKernelDiffs renders the kernel diffs of a comparison for report.html (none without one).
func htmlKernelDiffs(res *compare.Result) ([]htmlKernelDiff, error) {
	if res == nil {
		return nil, nil
	}
	code := func(s string) string { return "<code>" + html.EscapeString(s) + "</code>" }
	var out []htmlKernelDiff
	for i := range res.KernelDiffs {
		kd := &res.KernelDiffs[i]
		h := htmlKernelDiff{Config: kd.Config, Profiler: kd.Profiler, BaseCell: kd.BaseCell, NewCell: kd.NewCell, Note: kd.Note}
		for _, v := range compare.VerdictLines(res, kd, code, html.EscapeString) {
			h.Verdicts = append(h.Verdicts, template.HTML(v)) // every word escaped above
		}
		for _, s := range compare.KernelDiffStages(res, kd) {
			var b strings.Builder
			if err := table.WriteHTML(&b, triage.DiffTable(s, compare.TopKernels(s, 10), 80)); err != nil {
				return nil, err
			}
			h.Stages = append(h.Stages, htmlDiffStage{Stage: s.Stage, Line: s.StageLine(), Table: template.HTML(b.String())}) // table.WriteHTML escapes every cell
		}
		if kd.Diff != nil {
			h.Warnings = kd.Diff.Warnings
		}
		out = append(out, h)
	}
	return out, nil
}
