package render

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// roofColors are the roof lines' colours, one per distinct compute peak among the kernels.
var roofColors = []string{"#555555", "#8c564b", "#9467bd"}

// rooflineChart places a configuration's top kernels that have roofline figures (FLOPs and
// bytes from recorded shapes) on a log-log roofline: achieved TFLOP/s against FLOP per byte,
// under the GPU's roofs (bandwidth slope, then the compute peak of each input type present).
// ok is false when no kernel has both figures: the page then shows no empty chart.
func rooflineChart(id string, c ConfigReport) (svgChart, bool) {
	type pt struct {
		ai, tf   float64
		label    string
		peak, bw float64
	}
	var pts []pt
	gpu := ""
	for _, k := range c.Kernels {
		r := k.Roof
		if r == nil || r.Intensity <= 0 || r.TFLOPS <= 0 {
			continue
		}
		label := fmt.Sprintf("%s: %s TFLOP/s at %s FLOP/B", k.Name, sig(r.TFLOPS), sig(r.Intensity))
		if r.Bound != "" {
			label += fmt.Sprintf(", %.1f%% of the %s roof (%s-bound)", r.PctOfPeak, r.GPU, r.Bound)
		}
		pts = append(pts, pt{r.Intensity, r.TFLOPS, label, r.PeakTFLOPS, r.PeakGBps})
		if r.GPU != "" {
			gpu = r.GPU
		}
	}
	if len(pts) == 0 {
		return svgChart{}, false
	}
	title := "Roofline of the top kernels (log-log): achieved TFLOP/s against FLOP per byte"
	if gpu != "" {
		title += "; lines: the " + gpu + " roofs (HBM bandwidth, then the dense peak of the input type)"
	} else {
		title += "; the GPU is not in the peak table, so no roofs"
	}
	ch := svgChart{ID: id, Title: title, Width: chartW, Height: chartH}
	xlo, xhi, ylo, yhi := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	var peaks []float64
	bw := 0.0
	for _, p := range pts {
		xlo, xhi = math.Min(xlo, p.ai), math.Max(xhi, p.ai)
		ylo, yhi = math.Min(ylo, p.tf), math.Max(yhi, p.tf)
		if p.peak > 0 && p.bw > 0 {
			bw = p.bw
			if !containsF(peaks, p.peak) {
				peaks = append(peaks, p.peak)
			}
			ridge := p.peak * 1e3 / p.bw
			xlo, xhi = math.Min(xlo, ridge), math.Max(xhi, ridge)
			yhi = math.Max(yhi, p.peak)
		}
	}
	sort.Float64s(peaks)
	// whole decades around the data
	lx0, lx1 := math.Floor(math.Log10(xlo)), math.Ceil(math.Log10(xhi))
	ly0, ly1 := math.Floor(math.Log10(ylo)), math.Ceil(math.Log10(yhi))
	if lx1 <= lx0 {
		lx1 = lx0 + 1
	}
	if ly1 <= ly0 {
		ly1 = ly0 + 1
	}
	x := scale{lx0, lx1, padL, chartW - padR - 24} // room for the last tick's label on a phone
	y := scale{ly0, ly1, chartH - padB, padT}
	at := func(ai, tf float64) string {
		return f1(x.at(math.Log10(ai))) + "," + f1(y.at(math.Log10(tf)))
	}
	for i, pk := range peaks {
		// the bandwidth slope from the left edge (or where it enters the plot) to the ridge,
		// then flat at the peak to the right edge
		ridge := pk * 1e3 / bw
		a0 := math.Max(math.Pow(10, lx0), math.Pow(10, ly0)*1e3/bw)
		line := []string{at(a0, a0*bw/1e3), at(ridge, pk), at(math.Pow(10, lx1), pk)}
		ch.Lines = append(ch.Lines, svgLine{Points: strings.Join(line, " "), Color: roofColors[i%len(roofColors)],
			Label: sig(pk) + " TFLOP/s", LX: chartW - padR - 100, LY: y.at(math.Log10(pk)) - 4})
	}
	for _, p := range pts {
		ch.Dots = append(ch.Dots, svgDot{X: x.at(math.Log10(p.ai)), Y: y.at(math.Log10(p.tf)), Label: p.label})
	}
	for e := ly0; e <= ly1; e++ {
		ch.YTicks = append(ch.YTicks, svgTick{padL - 6, y.at(e), decade(e)})
	}
	for e := lx0; e <= lx1; e++ {
		ch.XTicks = append(ch.XTicks, svgTick{x.at(e), chartH - padB + 14, decade(e)})
	}
	return ch, true
}

func containsF(s []float64, v float64) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// decade labels 10^e as a plain number (0.01, 1, 1000).
func decade(e float64) string { return strconv.FormatFloat(math.Pow(10, e), 'f', -1, 64) }

// sig formats a figure with about three significant digits.
func sig(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'g', 2, 64)
}
