package render

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/rundir"
)

// TestLLMServerMetricsReport: cells whose server reported /metrics get the hit rate and peak
// queue columns in the LLM table and a queue-depth chart in report.html; a cell without them
// shows "-" (it ran against a server without the page).
func TestLLMServerMetricsReport(t *testing.T) {
	r := llmSweepReport()
	hit := 0.42
	for i := range r.Cells {
		l := r.Cells[i].LLM
		if l == nil || i == 0 {
			continue
		}
		peak := float64(3 * i)
		l.CacheHitRate, l.PeakQueued = &hit, &peak
		l.Queue = []rundir.QueuePoint{{AtNS: 0, Queued: 0}, {AtNS: int64(i) * 5e8, Queued: peak}, {AtNS: 2e9, Queued: 1}}
	}
	var md, html bytes.Buffer
	if err := WriteReportMarkdown(&md, r); err != nil {
		t.Fatal(err)
	}
	if err := WriteReportHTML(&html, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| Goodput req/s | Hit rate % | Peak queue |",
		"| 003-llama-tp2-c8 | 28.00 | 38.00 | 2.50 | 3.50 | 3200 | 7.20 | 3.50 | 42.0 | 9 |",
		" | - | - |\n", // the first cell: no /metrics
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md.String())
		}
	}
	h := html.String()
	if !strings.Contains(h, `<svg class="chart" id="queue-depth"`) || strings.Count(h, `<polyline fill="none"`) < 3+4 {
		t.Errorf("report.html lacks the queue-depth chart with a line per cell")
	}
	if !strings.Contains(h, "<title>003-llama-tp2-c8: peak 9 queued at 1.5 s</title>") {
		t.Errorf("report.html's queue chart does not mark the peak")
	}
	reportGolden(t, "report-llm-server.md.golden", md.Bytes())
	reportGolden(t, "report-llm-server.html.golden", html.Bytes())

	// Without any server figures the table keeps its columns and there is no chart.
	r = llmSweepReport()
	html.Reset()
	if err := WriteReportHTML(&html, r); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(html.String(), "Peak queue") || strings.Contains(html.String(), "queue-depth") {
		t.Error("a run without /metrics got the server columns or chart")
	}
}

// The summary row keeps the queue's peaks when it thins a long series.
func TestQueueDepthThinning(t *testing.T) {
	var samples []rundir.ServerMetricsSample
	for i := range 1000 {
		q := float64(i % 7)
		if i == 501 {
			q = 99
		}
		samples = append(samples, rundir.ServerMetricsSample{AtNS: int64(i), Queued: &q})
	}
	row := rundir.NewLLMRow(&rundir.LLMResult{ServerMetrics: &rundir.ServerMetrics{Samples: samples}})
	if len(row.QueueDepth) > rundir.QueueDepthPoints || len(row.QueueDepth) < rundir.QueueDepthPoints/2 {
		t.Fatalf("%d points", len(row.QueueDepth))
	}
	peak := 0.0
	for _, p := range row.QueueDepth {
		peak = max(peak, p.Queued)
	}
	if peak != 99 {
		t.Errorf("the peak was thinned away: %v", row.QueueDepth)
	}
}
