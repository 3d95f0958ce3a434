package render

import (
	"fmt"
	"html/template"
	"strings"

	"github.com/sglprof/runner/reports/rundir"
)

// The per-request timeline of an LLM cell (as vLLM's timeline plot draws one): a row per
// request in send order, a bar from send to last token and a mark at the first token, so
// queueing (first tokens drifting right of the sends) and stalls (long bars) show at a glance.

// Timeline geometry, in SVG units.
const (
	tlW, tlPadL, tlPadR, tlPadT, tlPadB = 720.0, 48.0, 12.0, 8.0, 28.0
	tlMaxH                              = 360.0 // the rows' height at most; rows get thinner
)

// timelineChart is one cell's timeline for report.html.
type timelineChart struct {
	Cell string
	SVG  template.HTML
	Left int // requests not drawn (past rundir.MaxLLMSpans)
}

// timelineCharts are the timelines of the cells that have request records.
func timelineCharts(cells []CellLine) []timelineChart {
	var out []timelineChart
	for _, c := range cells {
		if len(c.Timeline) == 0 {
			continue
		}
		out = append(out, timelineChart{Cell: c.ID, SVG: template.HTML(TimelineSVG(c.Timeline)), Left: c.TimelineLeft})
	}
	return out
}

// TimelineSVG draws requests as an SVG: the x axis is time since the measurement's start (s),
// a row per request; failed requests are red and have no first-token mark. Every value is a
// number formatted here, so the SVG needs no escaping.
func TimelineSVG(reqs []rundir.LLMSpan) string {
	end := int64(1)
	for _, r := range reqs {
		end = max(end, r.StartNS+max(r.LatencyNS, 0))
	}
	n := float64(len(reqs))
	row := min(8, max(tlMaxH/n, 1))
	h := tlPadT + row*n + tlPadB
	plotW := tlW - tlPadL - tlPadR
	x := func(ns int64) float64 { return tlPadL + plotW*float64(max(ns, 0))/float64(end) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="timeline" viewBox="0 0 %.0f %.1f" width="%.0f" height="%.1f" role="img" aria-label="request timeline">`+"\n", tlW, h, tlW, h)
	// The time axis: five ticks over the run.
	yAxis := tlPadT + row*n
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#888"/>`+"\n", tlPadL, yAxis, tlW-tlPadR, yAxis)
	for i := 0; i <= 4; i++ {
		t := end * int64(i) / 4
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" text-anchor="middle">%.3g s</text>`+"\n", x(t), yAxis+14, float64(t)/1e9)
	}
	fmt.Fprintf(&b, `<text x="4" y="%.1f" font-size="10">%d req</text>`+"\n", tlPadT+10, len(reqs))
	bar := max(row*0.7, 0.5)
	for i, r := range reqs {
		y := tlPadT + row*float64(i)
		color := "#4e79a7"
		if r.Error != "" {
			color = "#e15759"
		}
		w := max(x(r.StartNS+max(r.LatencyNS, 0))-x(r.StartNS), 0.5)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`, x(r.StartNS), y, w, bar, color)
		if r.Error == "" && r.TTFTNS > 0 {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="1.5" height="%.1f" fill="#f28e2b"/>`, x(r.StartNS+r.TTFTNS), y, bar)
		}
		b.WriteByte('\n')
	}
	b.WriteString("</svg>")
	return b.String()
}
