package render

import (
	"bytes"
	"strings"
	"testing"
)

func TestSeriesKey(t *testing.T) {
	for in, want := range map[string]string{
		"m/default/defaultst/s0/p1/i128/o32/tp-size=2/c8/r4":   "m/default/defaultst/s0/p1/i128/o32/tp-size=2",
		"m/default/defaultst/s0/p1/i128/o32/c16/rinf":          "m/default/defaultst/s0/p1/i128/o32",
		"m/default/defaultst/s0/p1/i128/o32/tp-size=2/r0.5":    "m/default/defaultst/s0/p1/i128/o32/tp-size=2",
		"qwen-image/1024x1024/50st/s0/p7cfb7d39":               "qwen-image/1024x1024/50st/s0/p7cfb7d39",
		"m/default/defaultst/s0/p1/i128/o32/c8/rinf/extra=yes": "m/default/defaultst/s0/p1/i128/o32/extra=yes",
	} {
		if got := seriesKey(in); got != want {
			t.Errorf("seriesKey(%q) = %q, want %q", in, got, want)
		}
	}
}

// An LLM sweep gets a latency-against-throughput chart: one line per configuration (tp-size),
// points in throughput order; profiled and failed cells stay out.
func TestSweepChartInHTML(t *testing.T) {
	cell := func(id, key string, tps, tpot float64) CellLine {
		return CellLine{ID: id, Key: key, Profiler: "none", Verdict: "ok", LLM: &LLMPoint{OutputTPS: tps, TPOTMS: tpot, TTFTMS: 2 * tpot}}
	}
	cells := []CellLine{
		cell("000", "m/i1/o1/tp-size=1/c1", 100, 10),
		cell("001", "m/i1/o1/tp-size=1/c8", 600, 14),
		cell("002", "m/i1/o1/tp-size=2/c8", 900, 8),
		cell("003", "m/i1/o1/tp-size=2/c1", 150, 6),
		{ID: "004", Key: "m/i1/o1/tp-size=3/c1", Profiler: "torch", Verdict: "ok", LLM: &LLMPoint{OutputTPS: 1, TPOTMS: 1}},
		{ID: "005", Key: "m/i1/o1/tp-size=4/c1", Profiler: "none", Verdict: "failed", LLM: &LLMPoint{OutputTPS: 1, TPOTMS: 1}},
	}
	charts := sweepCharts(cells)
	if len(charts) != 2 || len(charts[0].Lines) != 2 || len(charts[0].Dots) != 4 {
		t.Fatalf("charts %+v", charts)
	}
	// tp-size=2's points are ordered by throughput: 003 (150 tok/s) before 002 (900 tok/s).
	if !strings.HasPrefix(charts[0].Dots[2].Label, "003:") || !strings.HasPrefix(charts[0].Dots[3].Label, "002:") {
		t.Errorf("dots %+v", charts[0].Dots)
	}
	var html bytes.Buffer
	r := (&Report{Title: "t", RunDir: "r"}).WithCells(cells)
	if err := WriteReportHTML(&html, r); err != nil {
		t.Fatal(err)
	}
	// Read like vLLM's sweep plots: each line its own colour, its points in that colour, a legend
	// with a swatch per line naming only what tells the lines apart (the caption gives what they
	// share), points labelled with their concurrency, axes titled with their units, round ticks.
	if a, b := charts[0].Lines[0].Color, charts[0].Lines[1].Color; a == b {
		t.Errorf("both lines are %s", a)
	}
	for _, d := range charts[0].Dots {
		want := charts[0].Lines[0].Color
		if strings.Contains(d.Label, "tp-size") || d.Label[:3] == "002" || d.Label[:3] == "003" {
			want = charts[0].Lines[1].Color
		}
		if d.Color != want {
			t.Errorf("dot %q is %s, want its line's %s", d.Label, d.Color, want)
		}
	}
	for _, want := range []string{`<section class="config" id="sweep">`, `id="sweep-tpot"`, `id="sweep-ttft"`,
		`<rect x="72.0" y="`, `fill="#ff7f0e"/>`, ">tp-size=1</text>", ">tp-size=2</text>",
		"configurations <code>m/<wbr>i1/<wbr>o1/<wbr>*</code>, the legend gives the parts marked *",
		`<text class="point" x="`, `">c8</text>`, ">output throughput (tokens/s)</text>", ">median TPOT (ms)</text>",
		`text-anchor="middle">250</text>`, `text-anchor="middle">1000</text>`,
		"<title>002: 900 tok/s, 8 ms</title>"} {
		if !strings.Contains(html.String(), want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	if sweepCharts(cells[4:]) != nil {
		t.Error("a run without ok unprofiled LLM cells got a sweep chart")
	}
}

// keyAxes keeps what tells keys apart and states what they share once.
func TestKeyAxes(t *testing.T) {
	for _, c := range []struct {
		keys   []string
		common string
		labels []string
	}{
		{[]string{"m/default/s0/p1/tp-size=1", "m/default/s0/p1/tp-size=2"}, "m/default/s0/p1/*", []string{"tp-size=1", "tp-size=2"}},
		{[]string{"q/512x512/4st/s0/pa", "q/1024x1024/4st/s0/pb"}, "q/*/4st/s0/*", []string{"512x512/pa", "1024x1024/pb"}},
		{[]string{"q/512x512/4st", "q/512x512/4st"}, "q/512x512/4st", []string{"", ""}},
		{[]string{"a/b", "a/b/c"}, "", []string{"a/b", "a/b/c"}},
		{nil, "", []string{}},
	} {
		common, labels := keyAxes(c.keys)
		if common != c.common || strings.Join(labels, "|") != strings.Join(c.labels, "|") {
			t.Errorf("keyAxes(%q) = %q, %q; want %q, %q", c.keys, common, labels, c.common, c.labels)
		}
	}
}

// Tick tops are round: 1, 2, 2.5 or 5 times a power of ten, split in about four.
func TestNiceTop(t *testing.T) {
	for _, c := range []struct{ hi, top, step float64 }{{1121, 1500, 500}, {13.1, 15, 5}, {0.7, 0.8, 0.2}, {100, 100, 25}, {0, 1, 0.25}} {
		if top, step := niceTop(c.hi); top != c.top || step != c.step {
			t.Errorf("niceTop(%v) = %v, %v; want %v, %v", c.hi, top, step, c.top, c.step)
		}
	}
}
