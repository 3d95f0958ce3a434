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
	for _, want := range []string{`<section class="config" id="sweep">`, `id="sweep-tpot"`, `id="sweep-ttft"`, "m/i1/o1/tp-size=2</text>", "<title>002: 900 tok/s, 8 ms</title>"} {
		if !strings.Contains(html.String(), want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	if sweepCharts(cells[4:]) != nil {
		t.Error("a run without ok unprofiled LLM cells got a sweep chart")
	}
}
