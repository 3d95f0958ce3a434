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
)

// layoutProbe runs in the page after layout and writes what the test checks into a <pre>:
// the page's scroll width against the viewport, and every chart, table box and the
// comparison table's Verdict header that reaches past the viewport's right edge.
const layoutProbe = `<script>
window.addEventListener('load', () => {
  const iw = window.innerWidth, out = [];
  const right = el => el.getBoundingClientRect().right;
  document.querySelectorAll('svg.chart, .scroll, h1, h2, p, details, figure').forEach(el => {
    if (right(el) > iw + 0.5) out.push(el.tagName + (el.id ? '#' + el.id : '') + ' ' + Math.round(right(el)));
  });
  const v = document.querySelector('#compare th:last-child');
  const cells = document.querySelector('#cells th:last-child');
  const probe = {iw: iw, sw: document.scrollingElement.scrollWidth, over: out,
    verdict: v ? right(v) : -1, cellsVerdict: cells ? right(cells) : -1,
    charts: document.querySelectorAll('svg.chart').length};
  parent.postMessage(JSON.stringify(probe), '*');
});
</script>`

// frame shows report.html in an iframe of exactly the width under test (headless Chromium
// will not make a window narrower than 500 px) and copies the probe's message into a <pre>
// that --dump-dom prints.
const frame = `<!DOCTYPE html><html><body style="margin:0">
<iframe src="report.html" style="width:%dpx;height:1800px;border:0;display:block"></iframe>
<script>addEventListener('message', e => {
  const p = document.createElement('pre'); p.id = 'probe'; p.textContent = e.data; document.body.appendChild(p);
});</script></body></html>`

type probeResult struct {
	IW           float64  `json:"iw"`
	SW           float64  `json:"sw"`
	Over         []string `json:"over"`
	Verdict      float64  `json:"verdict"`
	CellsVerdict float64  `json:"cellsVerdict"`
	Charts       int      `json:"charts"`
}

// TestReportLayoutWidths opens report.html at a phone's, a small laptop's and a desktop's
// width (390, 800, 1400 px) in headless Chromium: nothing may overflow the
// viewport (no page-wide horizontal scroll; charts scale down; tables scroll inside their
// own box), and the Verdict column stays in view. It keeps the screenshots in
// $REPORT_SCREENSHOTS when that is set, for a person to look at.
func TestReportLayoutWidths(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("%s not found: install the Debian package chromium (apt-get install -y chromium) to run the browser test of report.html", chromium)
	}
	reports := map[string]*Report{"baseline": buildTestReport(t), "nobaseline": buildNoBaselineReport(t)}
	for name, rep := range reports {
		var page bytes.Buffer
		if err := WriteReportHTML(&page, rep); err != nil {
			t.Fatal(err)
		}
		for _, width := range []int{390, 800, 1400} {
			t.Run(name+"/"+itoa(width), func(t *testing.T) {
				dir := t.TempDir()
				probed := strings.Replace(page.String(), "</body>", layoutProbe+"</body>", 1)
				if err := os.WriteFile(filepath.Join(dir, "report.html"), []byte(probed), 0o644); err != nil {
					t.Fatal(err)
				}
				file := filepath.Join(dir, "frame.html")
				if err := os.WriteFile(file, []byte(fmt.Sprintf(frame, width)), 0o644); err != nil {
					t.Fatal(err)
				}
				dom := headless(t, dir, width, "--dump-dom", file)
				m := regexp.MustCompile(`<pre id="probe">([^<]*)</pre>`).FindSubmatch(dom)
				if m == nil {
					t.Fatalf("the layout probe did not run; dumped DOM:\n%.2000s", dom)
				}
				var p probeResult
				if err := json.Unmarshal([]byte(html.UnescapeString(string(m[1]))), &p); err != nil {
					t.Fatal(err)
				}
				if p.IW != float64(width) {
					t.Fatalf("viewport %v px, want %d", p.IW, width)
				}
				if p.SW > p.IW {
					t.Errorf("page scrolls sideways at %d px: scrollWidth %v > innerWidth %v", width, p.SW, p.IW)
				}
				if len(p.Over) > 0 {
					t.Errorf("past the right edge at %d px: %v", width, p.Over)
				}
				if rep.Compare != nil && (p.Verdict < 0 || p.Verdict > p.IW) {
					t.Errorf("the comparison's Verdict column is out of view at %d px (right edge %v)", width, p.Verdict)
				}
				if p.CellsVerdict < 0 || p.CellsVerdict > p.IW {
					t.Errorf("the cells table's Verdict column is out of view at %d px (right edge %v)", width, p.CellsVerdict)
				}
				if p.Charts == 0 {
					t.Errorf("no charts")
				}
				if keep := os.Getenv("REPORT_SCREENSHOTS"); keep != "" {
					shot := filepath.Join(keep, name+"-"+itoa(width)+".png")
					headless(t, dir, width, "--screenshot="+shot, file)
				}
			})
		}
	}
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
