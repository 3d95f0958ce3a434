package render

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sglprof/runner/reports/compare"
	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/reports/triage"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// reportSets is a fixed run and baseline: one configuration, 6 repeats of 10 steps, the
// new run's DenoisingStage 30% slower.
func reportSets() (*perf.Set, *perf.Set) {
	mk := func(src string, factor float64) *perf.Set {
		c := &perf.Config{Key: "qwen-image/1024x1024/10st/s0/pabc", Metrics: map[string][]float64{}}
		for r := range 6 {
			jit := 1 + float64(r)*0.002
			var sum float64
			for s := range 10 {
				v := (80e6 + float64(s)*1e6) * factor * jit
				if len(c.Steps) <= s {
					c.Steps = append(c.Steps, nil)
				}
				c.Steps[s] = append(c.Steps[s], v)
				c.Metrics[perf.MetricDenoiseStep] = append(c.Metrics[perf.MetricDenoiseStep], v)
				sum += v
			}
			c.Metrics[perf.MetricE2E] = append(c.Metrics[perf.MetricE2E], sum+300e6*jit)
			c.Metrics[perf.StagePrefix+"TextEncodingStage"] = append(c.Metrics[perf.StagePrefix+"TextEncodingStage"], 180e6*jit)
			c.Metrics[perf.StagePrefix+"DenoisingStage"] = append(c.Metrics[perf.StagePrefix+"DenoisingStage"], sum)
			c.Metrics[perf.StagePrefix+"DecodingStage"] = append(c.Metrics[perf.StagePrefix+"DecodingStage"], 60e6*jit)
		}
		c.TopKernels = []perf.KernelShare{{Name: "flash_fwd_kernel", Category: "attention", SharePct: 41.5}, {Name: "nvjet_tst_128x256", Category: "gemm", SharePct: 30.2}}
		return &perf.Set{Source: src, Kind: "run", Plan: "qwen", Configs: map[string]*perf.Config{c.Key: c},
			Skipped: []perf.Skip{{Cell: "001-torch", Reason: "profiler \"torch\" distorts timings"}}}
	}
	return mk("runs/qwen/base", 1), mk("runs/qwen/new", 1.3)
}

func buildTestReport(t *testing.T) *Report {
	t.Helper()
	base, cur := reportSets()
	res, err := compare.Compare(base, cur, compare.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	trend := map[string][]TrendPoint{"qwen-image/1024x1024/10st/s0/pabc": {
		{RunID: "r1", Time: t0, Median: 1.2e9}, {RunID: "r2", Time: t0.Add(24 * time.Hour), Median: 1.21e9}, {RunID: "r3", Time: t0.Add(48 * time.Hour), Median: 1.5e9},
	}}
	return BuildReport("Run report: qwen", "runs/qwen/new", cur, base, res, trend).WithCells(testCells())
}

// testCells are a run's cells as summary.json records them: ok, ok with a warning, profiled
// and failed.
func testCells() []CellLine {
	var cells []CellLine
	for r := range 6 {
		cells = append(cells, CellLine{ID: fmt.Sprintf("%03d-qwen-image-1024x1024-s0-none-r%d", r, r+1), Profiler: "none", Verdict: "ok", E2E: 1.1e9 + float64(r)*1e6, Step: 85e6})
	}
	cells = append(cells,
		CellLine{ID: "006-qwen-image-1024x1024-s0-torch-r1", Profiler: "torch", Verdict: "ok", E2E: 1.2e9, Step: 90e6},
		CellLine{ID: "007-qwen-image-1024x1024-s0-nsys-r1", Profiler: "nsys", Verdict: "ok", Warnings: 1},
		CellLine{ID: "008-qwen-image-1024x1024-s0-none-r7", Profiler: "none", Verdict: "failed", Cause: "cuda-oom: CUDA ran out of memory. (log.txt line 23)"})
	return cells
}

// buildNoBaselineReport is a run's report without any baseline: the cells table and the
// charts of the run alone.
func buildNoBaselineReport(t *testing.T) *Report {
	t.Helper()
	_, cur := reportSets()
	cur.Skipped = append(cur.Skipped, perf.Skip{Cell: "007-nsys", Reason: "profiler \"nsys\" distorts timings"}, perf.Skip{Cell: "008-none", Reason: "verdict \"failed\": only ok cells are compared"})
	return BuildReport("Run report: qwen", "runs/qwen/new", cur, nil, nil, nil).WithCells(testCells())
}

// TestReportNoBaseline: without a baseline the report shows every cell's verdict and
// timings, and says why cells were not compared.
func TestReportNoBaseline(t *testing.T) {
	r := buildNoBaselineReport(t)
	var md, html bytes.Buffer
	if err := WriteReportMarkdown(&md, r); err != nil {
		t.Fatal(err)
	}
	if err := WriteReportHTML(&html, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"no baseline: 8 of 9 cells ok",
		"| `008-qwen-image-1024x1024-s0-none-r7` | failed |",
		"| `007-qwen-image-1024x1024-s0-nsys-r1` | ok !1 |",
		"3 cells not compared: 2 profiled (torch, nsys): a profiler slows what it measures, so profiled cells are not timing samples (--profilers all admits them); 1 not ok",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md.String())
		}
	}
	if !strings.Contains(html.String(), `<table id="cells">`) || !strings.Contains(html.String(), "profiled cells are not timing samples") {
		t.Errorf("report.html lacks the cells table or the reason cells were not compared")
	}
	reportGolden(t, "report-nobaseline.md.golden", md.Bytes())
	reportGolden(t, "report-nobaseline.html.golden", html.Bytes())
}

func TestReportGolden(t *testing.T) {
	r := buildTestReport(t)
	if !strings.Contains(r.Headline, "stage/DenoisingStage") {
		t.Fatalf("headline does not name the slowed stage: %s", r.Headline)
	}
	var md, html bytes.Buffer
	if err := WriteReportMarkdown(&md, r); err != nil {
		t.Fatal(err)
	}
	if err := WriteReportHTML(&html, r); err != nil {
		t.Fatal(err)
	}
	reportGolden(t, "report.md.golden", md.Bytes())
	reportGolden(t, "report.html.golden", html.Bytes())
	// Self-contained: nothing is fetched.
	if m := regexp.MustCompile(`(?i)(src|href)\s*=\s*"(https?:)?//`).Find(html.Bytes()); m != nil {
		t.Errorf("report.html references the network: %s", m)
	}
	if n := strings.Count(html.String(), "<svg class=\"chart\""); n != 4 {
		t.Errorf("%d charts, want 4", n)
	}
}

func reportGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./reports/render -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs; go test ./reports/render -update accepts the new output", name)
	}
}

const chromium = "/usr/bin/chromium"

// TestReportInBrowser opens report.html in headless Chromium, takes a screenshot and checks
// that every chart drew (each chart kind has a colour no other element of the page uses) and
// that the browser logged no console error.
func TestReportInBrowser(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("%s not found: install the Debian package chromium (apt-get install -y chromium) to run the browser test of report.html", chromium)
	}
	dir := t.TempDir()
	var html bytes.Buffer
	if err := WriteReportHTML(&html, buildTestReport(t)); err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(dir, "report.html")
	if err := os.WriteFile(page, html.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "shot.png")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--screenshot="+shot, "--window-size=1200,2000",
		"--enable-logging=stderr", "--v=0", "file://"+page)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	for _, bad := range []string{"Uncaught", "ERROR:CONSOLE", "CONSOLE("} {
		if strings.Contains(stderr.String(), bad) {
			t.Errorf("console error in chromium's log (%s):\n%s", bad, stderr.String())
		}
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v\n%s", err, stderr.String())
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	counts := colourCounts(img)
	for _, c := range []struct {
		what string
		rgb  [3]uint8
	}{
		{"step and trend lines (#d62728)", [3]uint8{0xd6, 0x27, 0x28}},
		{"new stage bars (#1f77b4)", [3]uint8{0x1f, 0x77, 0xb4}},
		{"baseline stage bars (#9e9e9e)", [3]uint8{0x9e, 0x9e, 0x9e}},
		{"kernel-share bars (#2ca02c)", [3]uint8{0x2c, 0xa0, 0x2c}},
	} {
		if n := counts[c.rgb]; n < 200 {
			t.Errorf("%s: %d pixels in the screenshot, want >= 200: the chart did not draw", c.what, n)
		}
	}
	// The baseline band is translucent (#9ecae1 at 50% over #fafafa): look for its blend.
	band := 0
	for rgb, n := range counts {
		if near(rgb, [3]uint8{0xcc, 0xe2, 0xed}, 6) {
			band += n
		}
	}
	if band < 200 {
		t.Errorf("baseline band: %d pixels, want >= 200", band)
	}
}

func colourCounts(img image.Image) map[[3]uint8]int {
	out := map[[3]uint8]int{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			out[[3]uint8{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8)}]++
		}
	}
	return out
}

func near(a, b [3]uint8, tol int) bool {
	for i := range a {
		d := int(a[i]) - int(b[i])
		if d < -tol || d > tol {
			return false
		}
	}
	return true
}

var _ = fmt.Sprint

// llmSweepReport is an LLM sweep's report without a baseline: two server configurations over two
// concurrencies, one cell failed, and perf configurations with serving metrics only (no steps,
// stages, kernels or history), as `runner report` builds them for LLM serve cells.
func llmSweepReport() *Report {
	cur := &perf.Set{Source: "runs/llm/new", Kind: "run", Plan: "llm-sweep", Configs: map[string]*perf.Config{}}
	var cells []CellLine
	good := 3.5
	for i, tp := range []string{"tp1", "tp2"} {
		for j, c := range []int{1, 8} {
			key := fmt.Sprintf("llama/in256/out64/%s/c%d/rinf", tp, c)
			cur.Configs[key] = &perf.Config{Key: key, Metrics: map[string][]float64{
				perf.MetricTTFT: {20e6 + float64(c)*1e6}, perf.MetricTPOT: {5e6 / float64(i+1)}, perf.MetricOutputThroughput: {float64(200 * c * (i + 1))}}}
			p := &LLMPoint{OutputTPS: float64(200 * c * (i + 1)), TPOTMS: 5 / float64(i+1), TTFTMS: 20 + float64(c), TTFTP99MS: 30 + float64(c),
				ITLP99MS: 7 / float64(i+1), Concurrency: float64(c) * 0.9}
			if c == 8 {
				p.Goodput = &good
			}
			cells = append(cells, CellLine{ID: fmt.Sprintf("%03d-llama-%s-c%d", i*2+j, tp, c), Profiler: "none", Verdict: "ok",
				E2E: 350e6 + float64(c)*1e6, Key: key, LLM: p})
		}
	}
	cells = append(cells, CellLine{ID: "004-llama-tp2-c8-torch", Profiler: "torch", Verdict: "failed", Cause: "server-exit: the server exited (log.txt line 9)"})
	return BuildReport("Run report: llm-sweep", "runs/llm/new", cur, nil, nil, nil).WithCells(cells)
}

// TestLLMReportGolden: an LLM sweep's report.md and report.html carry the LLM serving table
// (the one summary.md has) and no configuration section without anything in it.
func TestLLMReportGolden(t *testing.T) {
	r := llmSweepReport()
	var md, html bytes.Buffer
	if err := WriteReportMarkdown(&md, r); err != nil {
		t.Fatal(err)
	}
	if err := WriteReportHTML(&html, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## LLM serving",
		"| TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | ITL p99 ms | Output tok/s | Concurrency | Goodput req/s |",
		"| 003-llama-tp2-c8 | 28.00 | 38.00 | 2.50 | 3.50 | 3200 | 7.20 | 3.50 |",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md.String())
		}
	}
	if strings.Contains(md.String(), "## `") {
		t.Errorf("report.md has a configuration section with nothing in it:\n%s", md.String())
	}
	h := html.String()
	if !strings.Contains(h, `<div class="scroll" id="llm"><table>`) || !strings.Contains(h, "<td>003-llama-tp2-c8</td>") ||
		!strings.Contains(h, `<td style="text-align:right">3200</td>`) {
		t.Errorf("report.html lacks the LLM serving table")
	}
	if strings.Contains(h, "<h2>llama/") || strings.Contains(h, "no per-step times") {
		t.Errorf("report.html has a configuration section with nothing in it")
	}
	if !strings.Contains(h, `id="sweep-tpot"`) {
		t.Errorf("report.html lost the sweep charts")
	}
	reportGolden(t, "report-llm.md.golden", md.Bytes())
	reportGolden(t, "report-llm.html.golden", html.Bytes())
}

// TestReportMarkdownKernelNames: a kernel name is a code span the table writer makes, so its
// "<" and "~" show literally and only "|" is escaped; the category beside it is text, where "<"
// becomes "&lt;" so GitHub does not take it for a tag. Before, report.go put backticks around
// escaped text and a "~" showed as "\\~".
func TestReportMarkdownKernelNames(t *testing.T) {
	r := &Report{Title: "t", RunDir: "runs/x", Headline: "h", Configs: []ConfigReport{{Key: "cfg",
		Kernels: []perf.KernelShare{{Name: "void k<float>|x ~Foo()", Category: "gemm<x>", SharePct: 50}}}}}
	var md bytes.Buffer
	if err := WriteReportMarkdown(&md, r); err != nil {
		t.Fatal(err)
	}
	want := "| Top kernel | Category | Share |\n| --- | --- | ---: |\n| `void k<float>\\|x ~Foo()` | gemm&lt;x> | 50.0% |\n"
	if !strings.Contains(md.String(), want) {
		t.Errorf("report.md:\n%s\nwant the table:\n%s", md.String(), want)
	}
}

// A regression's kernel diff is a section of report.html: cells, verdict lines with the
// kernel in <code>, the stage's top rows; names from the traces are escaped.
func TestReportHTMLKernelDiff(t *testing.T) {
	r := buildTestReport(t)
	stage := func(attn float64) triage.Stage {
		return triage.Stage{Stage: "DenoisingStage<script>", KernelCount: 20, KernelTimeUS: attn + 500, Kernels: []triage.KernelRow{
			{Name: "void flash::FlashAttnFwdSm90<1>", Category: "attention", TotalUS: attn, Count: 10},
			{Name: "nvjet<b>", Category: "gemm", TotalUS: 500, Count: 10}}}
	}
	d := triage.Diff(&triage.Report{Stages: []triage.Stage{stage(1000)}}, &triage.Report{Stages: []triage.Stage{stage(1300)}})
	key := r.Configs[0].Key
	r.Compare.KernelDiffs = []compare.KernelDiff{{Config: key, Profiler: "torch", BaseCell: "runs/qwen/base/cells/006", NewCell: "runs/qwen/new/cells/006", Diff: d}}
	var html bytes.Buffer
	if err := WriteReportHTML(&html, r); err != nil {
		t.Fatal(err)
	}
	page := html.String()
	for _, want := range []string{
		`<section id="kernel-diff">`,
		`<p>torch cells <code>runs/qwen/base/cells/006</code> (base) → <code>runs/qwen/new/cells/006</code> (new)</p>`,
		`of the delta is <code>FlashAttnFwdSm90</code> (+30.0%, launches unchanged)</li>`,
		`<td><code>void flash::FlashAttnFwdSm90&lt;1&gt;</code></td><td>attention</td><td>changed</td>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	if strings.Contains(page, "<script>") || strings.Contains(page, "<b>") {
		t.Errorf("a name from the traces is not escaped in report.html")
	}
}

// The trend chart and the Markdown mark the run where a step change began.
func TestTrendMarksChange(t *testing.T) {
	r := buildTestReport(t)
	for i := range r.Configs {
		for j := range r.Configs[i].Trend {
			r.Configs[i].Trend[j].Change = r.Configs[i].Trend[j].RunID == "r3"
		}
	}
	var md, html bytes.Buffer
	if err := WriteReportMarkdown(&md, r); err != nil {
		t.Fatal(err)
	}
	if err := WriteReportHTML(&html, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "→ **1500.0ms**") || !strings.Contains(md.String(), "Step change (bold) began at run `r3`") {
		t.Errorf("markdown:\n%s", md.String())
	}
	if !strings.Contains(html.String(), `<line class="mark"`) || !strings.Contains(html.String(), ">change: r3</text>") || !strings.Contains(html.String(), "r3: 1500.0ms (a step change began here)") {
		t.Errorf("html has no change marker")
	}
}

// A configuration's first run in the history is one point: the trend chart says so (and
// when the line starts) instead of drawing a lone dot; kernel labels keep 60 characters on
// their own line over the bar (they were cut to 30 and clipped on a phone); the report says
// what a key's prompt part stands for.
func TestReportChartsExplain(t *testing.T) {
	r := buildTestReport(t)
	c := &r.Configs[0]
	c.Trend = c.Trend[:1]
	c.Kernels = []perf.KernelShare{{Name: "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1", Category: "gemm", SharePct: 48}}
	r.Prompts = []PromptKey{{Part: "p7cfb7d39", Prompt: "A cat on a mat"}}
	var html, md bytes.Buffer
	if err := WriteReportHTML(&html, r); err != nil {
		t.Fatal(err)
	}
	if err := WriteReportMarkdown(&md, r); err != nil {
		t.Fatal(err)
	}
	page := html.String()
	for _, want := range []string{
		">The history has one run of this configuration:</text>", ">r1, e2e median 1200.0ms.</text>",
		">gemm: sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x…</text>",
		`id="prompts">In the configuration keys, p7cfb7d39 is the prompt &#34;A cat on a mat&#34; (the first 8 hex digits`,
		">denoise step</text>", ">latency (ms)</text>",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	if strings.Contains(page, `id="c0-trend"`) && strings.Contains(page[strings.Index(page, `id="c0-trend"`):], `<polyline class="line" points="64.0`) {
		t.Errorf("the trend of one run still draws a line")
	}
	if !strings.Contains(md.String(), `p7cfb7d39 is the prompt "A cat on a mat"`) {
		t.Errorf("report.md does not explain the prompt part:\n%s", md.String())
	}
}
