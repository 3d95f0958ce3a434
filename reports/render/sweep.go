package render

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/sglprof/runner/reports/render/table"
	"github.com/sglprof/runner/reports/rundir"
)

// LLMPoint is an LLM serve cell's headline figures (from summary.json's llm row): what the
// latency-vs-throughput chart and the LLM serving table show.
type LLMPoint struct {
	OutputTPS   float64  // output tokens/s
	TPOTMS      float64  // median TPOT, ms
	TTFTMS      float64  // median TTFT, ms
	TTFTP99MS   float64  // p99 TTFT, ms
	ITLP99MS    float64  // p99 ITL, ms
	Concurrency float64  // mean requests in flight
	Goodput     *float64 // requests/s within the SLO; nil without one
	// CacheHitRate (0..1) and PeakQueued are what the server's /metrics reported, nil when it
	// was not scraped; Queue is its queued requests over the cell (queue.go).
	CacheHitRate *float64
	PeakQueued   *float64
	Queue        []rundir.QueuePoint
	// Search is the cell's SLA search ([load.search]); nil for a cell that measured one load.
	Search *rundir.LLMSearch
}

// LLMTable is the "LLM serving" table of summary.md, report.md and report.html, one row per LLM
// serve cell: bench_serving's headline figures. nil when no cell has LLM figures, so runs
// without LLM cells get no table.
func LLMTable(cells []CellLine) *table.Table {
	t := &table.Table{Header: []string{"Cell", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "ITL p99 ms", "Output tok/s", "Concurrency", "Goodput req/s"},
		Align: []table.Align{table.Left, table.Right, table.Right, table.Right, table.Right, table.Right, table.Right, table.Right}}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
	// The server's own figures get columns only when some cell has them, so runs against
	// servers without /metrics keep the table they had.
	server := slices.ContainsFunc(cells, func(c CellLine) bool {
		return c.LLM != nil && (c.LLM.CacheHitRate != nil || c.LLM.PeakQueued != nil)
	})
	if server {
		t.Header = append(t.Header, "Hit rate %", "Peak queue")
		t.Align = append(t.Align, table.Right, table.Right)
	}
	for _, c := range cells {
		l := c.LLM
		if l == nil {
			continue
		}
		good := "-"
		if l.Goodput != nil {
			good = f(*l.Goodput)
		}
		row := []string{c.ID, f(l.TTFTMS), f(l.TTFTP99MS), f(l.TPOTMS), f(l.ITLP99MS),
			strconv.FormatFloat(l.OutputTPS, 'f', 0, 64), f(l.Concurrency), good}
		if server {
			hit, queue := "-", "-"
			if l.CacheHitRate != nil {
				hit = strconv.FormatFloat(100**l.CacheHitRate, 'f', 1, 64)
			}
			if l.PeakQueued != nil {
				queue = strconv.FormatFloat(*l.PeakQueued, 'f', 0, 64)
			}
			row = append(row, hit, queue)
		}
		t.Rows = append(t.Rows, row)
	}
	if len(t.Rows) == 0 {
		return nil
	}
	return t
}

// svgLine is one series of a multi-series chart, with its legend entry: a swatch of its colour
// (and dash) and its label.
type svgLine struct {
	Points string
	Color  string
	Dash   string // stroke-dasharray; "" for solid (series past the palette's eight colours are dashed)
	Label  string
	LX, LY float64 // legend position (the swatch; the label follows it)
}

// sweepAxes are the key parts of the load axes: cells that differ only in them are one series
// of the sweep chart (the points vllm bench sweep plots), everything else (model, lengths,
// server args) tells series apart.
var sweepAxes = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`/(c[0-9]+|r(inf|[0-9.e+-]+))(/|$)`) })

// seriesKey strips the concurrency and rate parts from a cell key.
func seriesKey(key string) string {
	for {
		k := sweepAxes().ReplaceAllString(key, "$3")
		if k == key {
			return strings.TrimSuffix(k, "/")
		}
		key = k
	}
}

// loadParts are the concurrency and rate parts of a cell key ("c16", "rinf"), in key order.
func loadParts(key string) []string {
	var out []string
	for _, p := range strings.Split(key, "/") {
		if sweepAxes().MatchString("/" + p) {
			out = append(out, p)
		}
	}
	return out
}

// sweepColors are distinguishable colours (matplotlib's tab10 without its grey and olive),
// the palette of vLLM's sweep plots.
var sweepColors = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

// sweepDashes tell apart the series that reuse a colour: the first eight are solid.
var sweepDashes = []string{"", "6 3", "2 3", "8 3 2 3"}

// sweepCharts draws, for the run's ok LLM cells, median TPOT and median TTFT against output
// token throughput: one line per configuration, one point per concurrency or rate, ordered by
// throughput. nil when the run has no LLM cells.
func sweepCharts(cells []CellLine) []svgChart {
	series := map[string][]CellLine{}
	var order []string
	load := map[string]int{} // how many points have each load part
	points := 0
	for _, c := range cells {
		if c.LLM == nil || c.Verdict != "ok" || c.Profiler != "none" {
			continue
		}
		k := seriesKey(c.Key)
		if _, ok := series[k]; !ok {
			order = append(order, k)
		}
		series[k] = append(series[k], c)
		for _, p := range loadParts(c.Key) {
			load[p]++
		}
		points++
	}
	if len(order) == 0 {
		return nil
	}
	for _, k := range order {
		slices.SortStableFunc(series[k], func(a, b CellLine) int { return cmpFloat(a.LLM.OutputTPS, b.LLM.OutputTPS) })
	}
	// A point is labelled with the load parts that vary ("c16"); one every point has ("rinf")
	// would only repeat itself.
	label := func(c CellLine) string {
		var own []string
		for _, p := range loadParts(c.Key) {
			if load[p] < points {
				own = append(own, p)
			}
		}
		return strings.Join(own, " ")
	}
	common, labels := keyAxes(order)
	tpot := func(p *LLMPoint) float64 { return p.TPOTMS }
	ttft := func(p *LLMPoint) float64 { return p.TTFTMS }
	return []svgChart{
		sweepChart("sweep-tpot", "Median TPOT against output throughput, one line per configuration", "median TPOT (ms)", common, order, labels, series, tpot, label),
		sweepChart("sweep-ttft", "Median TTFT against output throughput, one line per configuration", "median TTFT (ms)", common, order, labels, series, ttft, label),
	}
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// sweepLegendH is the room under the plot for the legend, a line per series.
const sweepLegendH = 18

// niceTop rounds hi up to a multiple of a 1, 2 or 5 step that splits it into about four
// intervals, so that tick labels read 0, 250, 500 and not 0, 280, 561.
func niceTop(hi float64) (top, step float64) {
	if hi <= 0 || math.IsInf(hi, 0) || math.IsNaN(hi) {
		return 1, 0.25
	}
	raw := hi / 4
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step = 10 * mag
	for _, m := range []float64{1, 2, 2.5, 5} {
		if raw <= m*mag {
			step = m * mag
			break
		}
	}
	return math.Ceil(hi/step-1e-9) * step, step
}

func sweepChart(id, title, ytitle, common string, order, labels []string, series map[string][]CellLine, y func(*LLMPoint) float64, pointLabel func(CellLine) string) svgChart {
	ch := svgChart{ID: id, Title: title, Width: chartW, Height: chartH}
	if len(order) > 1 || labels[0] != "" {
		ch.Common = common
	} else {
		ch.Common = order[0]
	}
	ch.axisTitles("output throughput (tokens/s)", ytitle)
	legend := len(order) > 1
	if legend {
		ch.Height += sweepLegendH * len(order)
	}
	xhi, yhi := 0.0, 0.0
	for _, k := range order {
		for _, c := range series[k] {
			xhi, yhi = math.Max(xhi, c.LLM.OutputTPS), math.Max(yhi, y(c.LLM))
		}
	}
	// Headroom above the highest point for its label.
	xtop, xstep := niceTop(xhi * 1.04)
	ytop, ystep := niceTop(yhi * 1.08)
	xs := scale{0, xtop, padL, chartW - padR - 12}
	ys := scale{0, ytop, chartH - padB, padT}
	for i, k := range order {
		color := sweepColors[i%len(sweepColors)]
		var pts []string
		for _, c := range series[k] {
			px, py := xs.at(c.LLM.OutputTPS), ys.at(y(c.LLM))
			pts = append(pts, f1(px)+","+f1(py))
			ch.Dots = append(ch.Dots, svgDot{X: px, Y: py, Color: color,
				Label: fmt.Sprintf("%s: %.0f tok/s, %.3g ms", c.ID, c.LLM.OutputTPS, y(c.LLM))})
			if l := pointLabel(c); l != "" && !overlaps(ch.PointLabels, px+5, py-5, l) {
				ch.PointLabels = append(ch.PointLabels, svgTick{X: px + 5, Y: py - 5, Label: l})
			}
		}
		line := svgLine{Points: strings.Join(pts, " "), Color: color, Dash: sweepDashes[(i/len(sweepColors))%len(sweepDashes)]}
		if legend {
			line.Label = shortName(labels[i], 60)
			line.LX, line.LY = padL, float64(chartH+titleH+6+sweepLegendH*i)
		}
		ch.Lines = append(ch.Lines, line)
	}
	for v := 0.0; v <= ytop+ystep/2; v += ystep {
		ch.YTicks = append(ch.YTicks, svgTick{padL - 6, ys.at(v), strconv.FormatFloat(v, 'g', 4, 64)})
	}
	for v := 0.0; v <= xtop+xstep/2; v += xstep {
		ch.XTicks = append(ch.XTicks, svgTick{xs.at(v), chartH - padB + 14, strconv.FormatFloat(v, 'g', 6, 64)})
	}
	return ch
}

// overlaps reports whether a point label at x, y would cover one already placed (labels are
// about 6 units a character wide and 11 high at the phone's size): two points close together
// keep the first label, and the other's concurrency is in its tooltip.
func overlaps(placed []svgTick, x, y float64, label string) bool {
	for _, p := range placed {
		w := 6 * float64(max(len(p.Label), len(label)))
		if math.Abs(p.X-x) < w && math.Abs(p.Y-y) < 11 {
			return true
		}
	}
	return false
}
