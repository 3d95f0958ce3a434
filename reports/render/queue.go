package render

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// queueChart draws the server's queued requests over each LLM cell (from its /metrics scrapes),
// one line per cell against the time since the cell's load started: where a sweep's load
// outgrows the server. nil when no cell has a queue series.
func queueChart(cells []CellLine) []svgChart {
	var with []CellLine
	xhi, yhi := 0.0, 0.0
	for _, c := range cells {
		if c.LLM == nil || len(c.LLM.Queue) == 0 {
			continue
		}
		with = append(with, c)
		for _, p := range c.LLM.Queue {
			xhi, yhi = math.Max(xhi, float64(p.AtNS)/1e9), math.Max(yhi, p.Queued)
		}
	}
	if len(with) == 0 {
		return nil
	}
	ch := svgChart{ID: "queue-depth", Title: "Requests queued on the server over each LLM cell (its /metrics scrapes)", Width: chartW, Height: chartH}
	ch.axisTitles("time since the load started (s)", "queued requests")
	legend := len(with) > 1
	if legend {
		ch.Height += sweepLegendH * len(with)
	}
	xtop, xstep := niceTop(xhi)
	ytop, ystep := niceTop(math.Max(yhi*1.08, 1))
	xs := scale{0, xtop, padL, chartW - padR - 12}
	ys := scale{0, ytop, chartH - padB, padT}
	for i, c := range with {
		color := sweepColors[i%len(sweepColors)]
		pts := make([]string, 0, len(c.LLM.Queue))
		for _, p := range c.LLM.Queue {
			pts = append(pts, f1(xs.at(float64(p.AtNS)/1e9))+","+f1(ys.at(p.Queued)))
		}
		if len(pts) == 1 { // one scrape: a short flat segment, so it shows
			pts = append(pts, f1(xs.at(float64(c.LLM.Queue[0].AtNS)/1e9)+4)+","+f1(ys.at(c.LLM.Queue[0].Queued)))
		}
		line := svgLine{Points: strings.Join(pts, " "), Color: color, Dash: sweepDashes[(i/len(sweepColors))%len(sweepDashes)]}
		if legend {
			line.Label = shortName(c.ID, 60)
			line.LX, line.LY = padL, float64(chartH+titleH+6+sweepLegendH*i)
		} else {
			ch.Common = c.ID
		}
		peak := c.LLM.Queue[0]
		for _, p := range c.LLM.Queue {
			if p.Queued > peak.Queued {
				peak = p
			}
		}
		ch.Dots = append(ch.Dots, svgDot{X: xs.at(float64(peak.AtNS) / 1e9), Y: ys.at(peak.Queued), Color: color,
			Label: fmt.Sprintf("%s: peak %.0f queued at %.3g s", c.ID, peak.Queued, float64(peak.AtNS)/1e9)})
		ch.Lines = append(ch.Lines, line)
	}
	for v := 0.0; v <= ytop+ystep/2; v += ystep {
		ch.YTicks = append(ch.YTicks, svgTick{padL - 6, ys.at(v), strconv.FormatFloat(v, 'g', 4, 64)})
	}
	for v := 0.0; v <= xtop+xstep/2; v += xstep {
		ch.XTicks = append(ch.XTicks, svgTick{xs.at(v), chartH - padB + 14, strconv.FormatFloat(v, 'g', 6, 64)})
	}
	return []svgChart{ch}
}
