package render

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/reports/rundir"
)

// A configuration whose top kernels carry roofline figures gets a roofline chart: a dot per
// kernel at its intensity and TFLOP/s, under the GPU's roof (bandwidth slope, then the peak),
// with the figures in the dot's title; a kernel without figures is not drawn, and a
// configuration without any gets no chart.
func TestReportRooflineChart(t *testing.T) {
	h100 := func(ai, tf, pct float64, bound string) *rundir.Roof {
		return &rundir.Roof{Intensity: ai, TFLOPS: tf, PctOfPeak: pct, Bound: bound, GPU: "H100 SXM", PeakTFLOPS: 989.5, PeakGBps: 3350}
	}
	r := &Report{Title: "t", RunDir: "runs/x", Headline: "h", Configs: []ConfigReport{
		{Key: "with", Kernels: []perf.KernelShare{
			{Name: "nvjet_gemm", Category: "gemm", SharePct: 60, Roof: h100(1365.3, 137.4, 13.9, "compute")},
			{Name: "flash_fwd", Category: "attention", SharePct: 20, Roof: h100(70.5, 4.4, 1.8, "memory")},
			{Name: "rope", Category: "rope", SharePct: 5},
		}},
		{Key: "without", Kernels: []perf.KernelShare{{Name: "rope", Category: "rope", SharePct: 5}}},
	}}
	var b bytes.Buffer
	if err := WriteReportHTML(&b, r); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if strings.Count(page, `-roofline"`) != 1 || !strings.Contains(page, `id="c0-roofline"`) {
		t.Fatalf("want exactly one roofline chart, for the first configuration:\n%s", page)
	}
	ch, ok := rooflineChart("x", r.Configs[0])
	if !ok || len(ch.Dots) != 2 || len(ch.Lines) != 1 {
		t.Fatalf("chart: ok %v, %d dots, %d roofs; want 2 dots under 1 roof", ok, len(ch.Dots), len(ch.Lines))
	}
	if !strings.Contains(ch.Dots[0].Label, "nvjet_gemm: 137 TFLOP/s at 1365 FLOP/B, 13.9% of the H100 SXM roof (compute-bound)") {
		t.Errorf("dot label %q", ch.Dots[0].Label)
	}
	// The roof's points: a rising bandwidth slope to the ridge, then flat at the peak.
	pts := regexp.MustCompile(`[-0-9.]+,[-0-9.]+`).FindAllString(ch.Lines[0].Points, -1)
	if len(pts) != 3 {
		t.Fatalf("roof points %q, want three (slope start, ridge, right edge)", ch.Lines[0].Points)
	}
	ridgeY, _ := strconv.ParseFloat(strings.Split(pts[1], ",")[1], 64)
	edgeY, _ := strconv.ParseFloat(strings.Split(pts[2], ",")[1], 64)
	startY, _ := strconv.ParseFloat(strings.Split(pts[0], ",")[1], 64)
	if ridgeY != edgeY || startY <= ridgeY {
		t.Errorf("roof %q: want a rising slope to the ridge, then flat", ch.Lines[0].Points)
	}
	// Every dot is on or under the roof (a smaller y is higher on the page).
	for _, d := range ch.Dots {
		if d.Y < ridgeY {
			t.Errorf("dot %q above the peak (y %v < %v)", d.Label, d.Y, ridgeY)
		}
	}
	if _, ok := rooflineChart("y", r.Configs[1]); ok {
		t.Error("a configuration without roofline figures got a chart")
	}
	// Narrow-screen safe like the other charts: a viewBox, scaled by CSS width 100%.
	if !regexp.MustCompile(`<svg class="chart" id="c0-roofline"[^>]*viewBox="0 0 560 220"`).MatchString(page) {
		t.Error("roofline svg has no viewBox of the shared chart size")
	}
}
