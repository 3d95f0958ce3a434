package render

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/sglprof/runner/reports/render/table"
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
}

// LLMTable is the "LLM serving" table of summary.md, report.md and report.html, one row per LLM
// serve cell: bench_serving's headline figures. nil when no cell has LLM figures, so runs
// without LLM cells get no table.
func LLMTable(cells []CellLine) *table.Table {
	t := &table.Table{Header: []string{"Cell", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "ITL p99 ms", "Output tok/s", "Concurrency", "Goodput req/s"},
		Align: []table.Align{table.Left, table.Right, table.Right, table.Right, table.Right, table.Right, table.Right, table.Right}}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
	for _, c := range cells {
		l := c.LLM
		if l == nil {
			continue
		}
		good := "-"
		if l.Goodput != nil {
			good = f(*l.Goodput)
		}
		t.Rows = append(t.Rows, []string{c.ID, f(l.TTFTMS), f(l.TTFTP99MS), f(l.TPOTMS), f(l.ITLP99MS),
			strconv.FormatFloat(l.OutputTPS, 'f', 0, 64), f(l.Concurrency), good})
	}
	if len(t.Rows) == 0 {
		return nil
	}
	return t
}

// svgLine is one series of a multi-series chart.
type svgLine struct {
	Points string
	Color  string
	Label  string
	LX, LY float64 // legend position
}

// sweepAxes are the key parts of the load axes: cells that differ only in them are one series
// of the sweep chart (the points vllm bench sweep plots), everything else (model, lengths,
// server args) tells series apart.
var sweepAxes = regexp.MustCompile(`/(c[0-9]+|r(inf|[0-9.e+-]+))(/|$)`)

// seriesKey strips the concurrency and rate parts from a cell key.
func seriesKey(key string) string {
	for {
		k := sweepAxes.ReplaceAllString(key, "$3")
		if k == key {
			return strings.TrimSuffix(k, "/")
		}
		key = k
	}
}

var sweepColors = []string{"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f"}

// sweepCharts draws, for the run's ok LLM cells, median TPOT and median TTFT against output
// token throughput: one line per configuration, one point per concurrency or rate, ordered by
// throughput. nil when the run has no LLM cells.
func sweepCharts(cells []CellLine) []svgChart {
	series := map[string][]CellLine{}
	var order []string
	for _, c := range cells {
		if c.LLM == nil || c.Verdict != "ok" || c.Profiler != "none" {
			continue
		}
		k := seriesKey(c.Key)
		if _, ok := series[k]; !ok {
			order = append(order, k)
		}
		series[k] = append(series[k], c)
	}
	if len(order) == 0 {
		return nil
	}
	for _, k := range order {
		slices.SortStableFunc(series[k], func(a, b CellLine) int { return cmpFloat(a.LLM.OutputTPS, b.LLM.OutputTPS) })
	}
	tpot := func(p *LLMPoint) float64 { return p.TPOTMS }
	ttft := func(p *LLMPoint) float64 { return p.TTFTMS }
	return []svgChart{
		sweepChart("sweep-tpot", "Median TPOT (ms) against output throughput (tokens/s), one line per configuration", order, series, tpot),
		sweepChart("sweep-ttft", "Median TTFT (ms) against output throughput (tokens/s), one line per configuration", order, series, ttft),
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
const sweepLegendH = 14

func sweepChart(id, title string, order []string, series map[string][]CellLine, y func(*LLMPoint) float64) svgChart {
	h := chartH + sweepLegendH*len(order)
	ch := svgChart{ID: id, Title: title, Width: chartW, Height: h}
	xlo, xhi, ylo, yhi := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, k := range order {
		for _, c := range series[k] {
			xlo, xhi = math.Min(xlo, c.LLM.OutputTPS), math.Max(xhi, c.LLM.OutputTPS)
			ylo, yhi = math.Min(ylo, y(c.LLM)), math.Max(yhi, y(c.LLM))
		}
	}
	xs := scale{0, xhi * 1.05, padL, chartW - padR}
	ys := scale{0, yhi * 1.1, chartH - padB, padT}
	for i, k := range order {
		color := sweepColors[i%len(sweepColors)]
		var pts []string
		for _, c := range series[k] {
			px, py := xs.at(c.LLM.OutputTPS), ys.at(y(c.LLM))
			pts = append(pts, f1(px)+","+f1(py))
			ch.Dots = append(ch.Dots, svgDot{px, py, fmt.Sprintf("%s: %.0f tok/s, %.3g ms", c.ID, c.LLM.OutputTPS, y(c.LLM))})
		}
		ch.Lines = append(ch.Lines, svgLine{Points: strings.Join(pts, " "), Color: color, Label: shortName(k, 90),
			LX: padL, LY: float64(chartH + sweepLegendH*i)})
	}
	for i := 0; i <= 4; i++ {
		v := yhi * 1.1 * float64(i) / 4
		ch.YTicks = append(ch.YTicks, svgTick{padL - 6, ys.at(v), strconv.FormatFloat(v, 'g', 3, 64)})
		xv := xhi * 1.05 * float64(i) / 4
		ch.XTicks = append(ch.XTicks, svgTick{xs.at(xv), chartH - padB + 14, strconv.FormatFloat(xv, 'f', 0, 64)})
	}
	return ch
}
