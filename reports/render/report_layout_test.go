package render

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sglprof/runner/reports/compare"
	"github.com/sglprof/runner/reports/perf"
)

// layoutProbe runs in the page after layout and posts to the parent frame what the test
// checks: the page's scroll width against the window; every chart, table box or block that
// reaches past the window's right edge; table headers that cover one another (a sticky
// column over the ones it scrolls past); identifiers in the tables and headings that wrap
// inside a token (anywhere but after "-", "/", "=", "_", "," or a space); chart text that the
// chart's box cuts off; and where the Verdict headers are.
const layoutProbe = `<script>
window.addEventListener('load', () => {
  const iw = window.innerWidth, over = [], overlap = [], midToken = [], clipped = [];
  const rect = el => el.getBoundingClientRect();
  document.querySelectorAll('svg.chart, .scroll, h1, h2, p, details, figure, section').forEach(el => {
    if (rect(el).right > iw + 0.5) over.push(el.tagName + (el.id ? '#' + el.id : '') + ' ' + Math.round(rect(el).right));
  });
  document.querySelectorAll('table').forEach(t => {
    const th = t.querySelectorAll('thead th');
    for (let i = 1; i < th.length; i++) {
      if (rect(th[i-1]).right > rect(th[i]).left + 1) overlap.push((t.id || 'table') + ': ' + th[i-1].textContent + ' / ' + th[i].textContent);
    }
  });
  // A line break inside an identifier shows as a character whose line (top) differs from the
  // one before it; the character before the break must be a separator.
  document.querySelectorAll('table td:first-child, table code, h2, figcaption code').forEach(el => {
    const w = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    let prev = null, prevTop = null;
    for (let n = w.nextNode(); n; n = w.nextNode()) {
      for (let i = 0; i < n.length; i++) {
        const r = document.createRange(); r.setStart(n, i); r.setEnd(n, i + 1);
        const rs = r.getClientRects(); if (rs.length === 0) continue;
        const top = rs[0].top;
        if (prevTop !== null && top > prevTop + 2 && !/[-\/=_, ]/.test(prev)) midToken.push(el.textContent.slice(0, 80) + ' (broke after ' + JSON.stringify(prev) + ')');
        prev = n.data[i]; prevTop = top;
      }
    }
  });
  document.querySelectorAll('svg.chart').forEach(svg => {
    const b = rect(svg);
    svg.querySelectorAll('text').forEach(t => {
      const r = rect(t);
      if (r.width > 0 && (r.left < b.left - 1 || r.right > b.right + 1 || r.top < b.top - 1 || r.bottom > b.bottom + 1)) clipped.push(svg.id + ': ' + t.textContent);
    });
  });
  const right = sel => { const e = document.querySelector(sel); return e ? rect(e).right : -1; };
  parent.postMessage(JSON.stringify({page: location.hash.slice(1), iw: iw, sw: document.documentElement.scrollWidth,
    over: over, overlap: overlap, midToken: [...new Set(midToken)], clipped: clipped,
    verdict: right('#compare th.verdict'), cellsVerdict: right('#cells th.verdict'),
    charts: document.querySelectorAll('svg.chart').length}), '*');
});
</script>`

// frame shows every report at every width in one page, each in an iframe of exactly that
// width (headless Chromium will not make a window narrower than 500 px), and copies each
// probe's message into a <pre> that --dump-dom prints: one Chromium start for all of them.
const frameHead = `<!DOCTYPE html><html><body style="margin:0">
<script>addEventListener('message', e => {
  const p = document.createElement('pre'); p.className = 'probe'; p.textContent = e.data; document.body.appendChild(p);
});</script>
`

type probeResult struct {
	Page         string   `json:"page"`
	IW           float64  `json:"iw"`
	SW           float64  `json:"sw"`
	Over         []string `json:"over"`
	Overlap      []string `json:"overlap"`
	MidToken     []string `json:"midToken"`
	Clipped      []string `json:"clipped"`
	Verdict      float64  `json:"verdict"`
	CellsVerdict float64  `json:"cellsVerdict"`
	Charts       int      `json:"charts"`
}

// layoutWidths are a phone's, a small laptop's and a desktop's window width.
var layoutWidths = []int{390, 800, 1400}

// TestReportLayoutWidths opens report.html of a regression run (two configurations against
// a baseline), of a run without a baseline and of an LLM sweep at 390, 800 and 1400 px in
// headless Chromium: the page never scrolls sideways (document.documentElement.scrollWidth is
// at most the window's width) and nothing reaches past its right edge (charts scale down;
// tables scroll inside their own box); no table header covers another, so every column can be
// scrolled to; identifiers wrap only between tokens; no chart text is cut off by its chart;
// and the Verdict columns are in view. It keeps screenshots in $REPORT_SCREENSHOTS when that is
// set, for a person to look at (one more Chromium start per report and width).
func TestReportLayoutWidths(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("%s not found: install the Debian package chromium (apt-get install -y chromium) to run the browser test of report.html", chromium)
	}
	reports := map[string]*Report{"regression": buildTwoConfigReport(t), "nobaseline": buildNoBaselineReport(t), "llm": llmSweepRealistic()}
	names := []string{"regression", "nobaseline", "llm"}
	pages := map[string][]byte{}
	for _, name := range names {
		var page bytes.Buffer
		if err := WriteReportHTML(&page, reports[name]); err != nil {
			t.Fatal(err)
		}
		pages[name] = page.Bytes()
	}
	// scripts/report_layout.sh makes simulated runs with `runner run` and `runner report` and
	// names their report.html files here, colon-separated: they are checked like the fixtures.
	for i, f := range filepath.SplitList(os.Getenv("REPORT_LAYOUT_PAGES")) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("page%d", i)
		names, pages[name] = append(names, name), b
		t.Logf("%s is %s", name, f)
	}
	dir := t.TempDir()
	var frame strings.Builder
	frame.WriteString(frameHead)
	for _, name := range names {
		probed := strings.Replace(string(pages[name]), "</body>", layoutProbe+"</body>", 1)
		if err := os.WriteFile(filepath.Join(dir, name+".html"), []byte(probed), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, w := range layoutWidths {
			fmt.Fprintf(&frame, "<iframe src=\"%s.html#%s/%d\" style=\"width:%dpx;height:1200px;border:0;display:block\"></iframe>\n", name, name, w, w)
		}
	}
	frame.WriteString("</body></html>\n")
	file := filepath.Join(dir, "frame.html")
	if err := os.WriteFile(file, []byte(frame.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	dom := headless(t, dir, 1400, "--dump-dom", file)
	got := map[string]probeResult{}
	for _, m := range regexp.MustCompile(`<pre class="probe">([^<]*)</pre>`).FindAllSubmatch(dom, -1) {
		var p probeResult
		if err := json.Unmarshal([]byte(html.UnescapeString(string(m[1]))), &p); err != nil {
			t.Fatal(err)
		}
		got[p.Page] = p
	}
	for _, name := range names {
		rep := reports[name] // nil for a page of $REPORT_LAYOUT_PAGES
		for _, width := range layoutWidths {
			t.Run(name+"/"+itoa(width), func(t *testing.T) {
				p, ok := got[name+"/"+itoa(width)]
				if !ok {
					t.Fatalf("the layout probe did not run; dumped DOM:\n%.2000s", dom)
				}
				if p.IW != float64(width) {
					t.Fatalf("window %v px, want %d", p.IW, width)
				}
				if p.SW > p.IW {
					t.Errorf("page scrolls sideways at %d px: document.documentElement.scrollWidth %v > window %v", width, p.SW, p.IW)
				}
				for _, l := range []struct {
					what string
					v    []string
				}{{"past the right edge", p.Over}, {"table headers over one another (a column hidden)", p.Overlap},
					{"identifiers wrapped inside a token", p.MidToken}, {"chart text cut off by its chart", p.Clipped}} {
					if len(l.v) > 0 {
						t.Errorf("%s at %d px: %q", l.what, width, l.v)
					}
				}
				if rep != nil && (rep.Compare != nil && p.Verdict < 0 || p.CellsVerdict < 0) {
					t.Errorf("a Verdict column is missing (comparison %v, cells %v)", p.Verdict, p.CellsVerdict)
				}
				if p.Verdict > p.IW || p.CellsVerdict > p.IW {
					t.Errorf("a Verdict column is out of view at %d px (right edges: comparison %v, cells %v)", width, p.Verdict, p.CellsVerdict)
				}
				if p.Charts == 0 {
					t.Errorf("no charts")
				}
			})
		}
	}
	if keep := os.Getenv("REPORT_SCREENSHOTS"); keep != "" {
		for _, name := range names {
			for _, width := range layoutWidths {
				one := filepath.Join(dir, name+"-"+itoa(width)+".frame.html")
				page := fmt.Sprintf("<!DOCTYPE html><html><body style=\"margin:0\"><iframe src=\"%s.html\" style=\"width:%dpx;height:2400px;border:0\"></iframe></body></html>", name, width)
				if err := os.WriteFile(one, []byte(page), 0o644); err != nil {
					t.Fatal(err)
				}
				headless(t, dir, width, "--screenshot="+filepath.Join(keep, name+"-"+itoa(width)+".png"), one)
			}
		}
	}
}

// buildTwoConfigReport is a regression run of two configurations (two resolutions of one
// model) against a baseline: the comparison table then has a Config column.
func buildTwoConfigReport(t *testing.T) *Report {
	t.Helper()
	base, cur := reportSets()
	for _, s := range []*perf.Set{base, cur} {
		for _, c := range s.Configs {
			// The longest stage name of the diffusion pipeline: beside a Config column and the
			// verdict it must still fit a phone.
			c.Metrics[perf.StagePrefix+"TimestepPreparationStage"] = c.Metrics[perf.StagePrefix+"DecodingStage"]
			cp := *c
			cp.Key = strings.Replace(c.Key, "1024x1024", "512x512", 1)
			// Kernel names as traces have them: longer than a phone's chart is wide.
			cp.TopKernels = []perf.KernelShare{
				{Name: "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<c10::BFloat16>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<c10::BFloat16>, at::detail::Array<char*, 1>)", Category: "elementwise", SharePct: 12.5},
				{Name: "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas", Category: "gemm", SharePct: 48.1}}
			s.Configs[cp.Key] = &cp
		}
	}
	res, err := compare.Compare(base, cur, compare.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// An environment variable's value as a tuned host has it: wider than a phone.
	res.Env = &compare.EnvDiff{Checked: true, Changes: []compare.EnvChange{{Name: "env PYTORCH_CUDA_ALLOC_CONF",
		Base: "expandable_segments:True,garbage_collection_threshold:0.6", New: "expandable_segments:False,garbage_collection_threshold:0.8,max_split_size_mb:512"}}}
	// The first run of a configuration in the history: its trend is one point.
	trend := map[string][]TrendPoint{"qwen-image/512x512/10st/s0/pabc": {{RunID: "20261127T013149Z-4eb48b", Median: 1.1e9}}}
	return BuildReport("Run report: qwen", "runs/qwen/20261127T013149Z-4eb48b", cur, base, res, trend).WithCells(testCells())
}

// llmSweepRealistic is an LLM sweep as `runner run` names its cells: a model with a long
// name, two tensor-parallel sizes, four concurrencies, one profiled cell and one failed, so
// the ids and keys differ only near their ends.
func llmSweepRealistic() *Report {
	cur := &perf.Set{Source: "runs/llm", Kind: "run", Plan: "llm-sweep", Configs: map[string]*perf.Config{}}
	var cells []CellLine
	i := 0
	for tp := 1; tp <= 2; tp++ {
		for _, c := range []int{1, 4, 16, 64} {
			key := fmt.Sprintf("llama-3-1-8b-instruct/default/defaultst/s0/p7cfb7d39/i1024/o128/tp-size=%d/c%d/rinf", tp, c)
			tps := float64(90*c*tp) / (1 + float64(c)/40)
			cur.Configs[key] = &perf.Config{Key: key, Metrics: map[string][]float64{perf.MetricOutputThroughput: {tps}}}
			cells = append(cells, CellLine{ID: fmt.Sprintf("%03d-llama-3-1-8b-instruct-i1024-o128-tp-size-%d-c%d-rinf-s0-none-r1", i, tp, c),
				Profiler: "none", Verdict: "ok", E2E: 2.1e9 + float64(c)*3e7, Key: key,
				LLM: &LLMPoint{OutputTPS: tps, TPOTMS: 11/float64(tp) + float64(c)*0.12, TTFTMS: 40 + float64(c)*2.5, TTFTP99MS: 60 + float64(c)*4,
					ITLP99MS: 14/float64(tp) + float64(c)*0.2, Concurrency: float64(c) * 0.97}})
			i++
		}
	}
	cells = append(cells,
		CellLine{ID: "008-llama-3-1-8b-instruct-i1024-o128-tp-size-2-c64-rinf-s0-torch-r1", Profiler: "torch", Verdict: "ok", Warnings: 1},
		CellLine{ID: "009-llama-3-1-8b-instruct-i1024-o128-tp-size-4-c64-rinf-s0-none-r1", Profiler: "none", Verdict: "failed",
			Cause: "server-exit: the server exited before it was ready: CUDA out of memory (log.txt line 412)"})
	r := BuildReport("Run report: llm-sweep", "runs/llm-sweep/20261127T013146Z-cb3d49", cur, nil, nil, nil).WithCells(cells)
	r.Simulated = true
	return r
}

// headless runs Chromium on file at the given window width and returns its standard output.
func headless(t *testing.T, dir string, width int, mode, file string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--window-size="+itoa(max(width, 500))+",1800",
		"--virtual-time-budget=5000", mode, "file://"+file)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	return stdout.Bytes()
}

func itoa(n int) string { return strconv.Itoa(n) }
