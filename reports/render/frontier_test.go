package render

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/reports/rundir"
)

// searchReport is a run with one SLA search cell (its probes, its best probe's timeline: three
// requests, one queued, one failed) and one plain LLM cell.
func searchReport() *Report {
	cur := &perf.Set{Source: "runs/sla/new", Kind: "run", Plan: "sla", Configs: map[string]*perf.Config{}}
	search := &rundir.LLMSearch{Axis: rundir.SearchRequestRate, SLOTTFTP99: 200, Min: 0.5, Max: 64, Best: 12.5, BestProbe: 2,
		Probes: []rundir.LLMProbe{
			{Value: 64, TTFTP99: 2400, TPOTP99: 30.5},
			{Value: 16, TTFTP99: 260, TPOTP99: 21},
			{Value: 12.5, Pass: true, TTFTP99: 150, TPOTP99: 18.25},
			{Value: 14, TTFTP99: 230, TPOTP99: 19},
		}}
	spans := []rundir.LLMSpan{
		{StartNS: 0, TTFTNS: 56e6, LatencyNS: 1500e6},
		{StartNS: 100e6, TTFTNS: 300e6, LatencyNS: 1800e6},
		{StartNS: 400e6, LatencyNS: 20e6, Error: "HTTP 500"},
	}
	cells := []CellLine{
		{ID: "000-qwen-search", Profiler: "none", Verdict: "ok", E2E: 1.6e9, Key: "qwen/in1024/out128",
			LLM:      &LLMPoint{OutputTPS: 900, TPOTMS: 15, TTFTMS: 80, TTFTP99MS: 150, ITLP99MS: 40, Concurrency: 9, Search: search},
			Timeline: spans, TimelineLeft: 7},
		{ID: "001-qwen-c1", Profiler: "none", Verdict: "ok", E2E: 1.5e9, Key: "qwen/in1024/out128/c1",
			LLM: &LLMPoint{OutputTPS: 84, TPOTMS: 11.5, TTFTMS: 56, TTFTP99MS: 56, ITLP99MS: 11.5, Concurrency: 1}},
	}
	return BuildReport("Run report: sla", "runs/sla/new", cur, nil, nil, nil).WithCells(cells)
}

// The SLA frontier table (report.md, report.html) lists every probe with its verdict and the best
// value; report.html draws each LLM cell's request timeline.
func TestSearchAndTimelineGolden(t *testing.T) {
	r := searchReport()
	var md, html bytes.Buffer
	if err := WriteReportMarkdown(&md, r); err != nil {
		t.Fatal(err)
	}
	if err := WriteReportHTML(&html, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## SLA frontier",
		"| 000-qwen-search | request_rate | 12.5 | 200 | - | 64 ✗ 2400/30.5, 16 ✗ 260/21.0, 12.5 ✓ 150/18.2, 14 ✗ 230/19.0 |",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md.String())
		}
	}
	if strings.Contains(md.String(), "001-qwen-c1 | request_rate") {
		t.Error("a cell without a search has a frontier row")
	}
	h := html.String()
	for _, want := range []string{"<h2>SLA frontier</h2>", "<h2>Request timelines</h2>", "(7 more requests not drawn)", `<svg class="timeline"`} {
		if !strings.Contains(h, want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	if n := strings.Count(h, `<svg class="timeline"`); n != 1 {
		t.Errorf("%d timelines, want 1 (the cell without records has none)", n)
	}
	reportGolden(t, "report-search.md.golden", md.Bytes())
	reportGolden(t, "report-search.html.golden", html.Bytes())
}

// The timeline SVG: a bar per request from send to end, the first-token mark where the request
// completed, red for a failed request, the time axis in seconds.
func TestTimelineSVGGolden(t *testing.T) {
	svg := TimelineSVG(searchReport().Cells[0].Timeline)
	for _, want := range []string{`fill="#e15759"`, `>1.9 s</text>`, `>3 req</text>`} {
		if !strings.Contains(svg, want) {
			t.Errorf("svg lacks %q:\n%s", want, svg)
		}
	}
	if n := strings.Count(svg, `fill="#f28e2b"`); n != 2 {
		t.Errorf("%d first-token marks, want 2 (the failed request has none):\n%s", n, svg)
	}
	reportGolden(t, "timeline.svg.golden", []byte(svg))
}

// A summary row carries its cell's search to summary.md's frontier table.
func TestSummaryFrontier(t *testing.T) {
	l := &rundir.LLMResult{Search: searchReport().Cells[0].LLM.Search}
	s := &rundir.Summary{Plan: "sla", Cells: []rundir.SummaryRow{{ID: "000-qwen-search", Verdict: "ok", LLM: rundir.NewLLMRow(l)}}}
	md := string(SummaryMarkdown(s))
	if !strings.Contains(md, "## SLA frontier") || !strings.Contains(md, "| 000-qwen-search | request_rate | 12.5 |") {
		t.Errorf("summary.md:\n%s", md)
	}
}
