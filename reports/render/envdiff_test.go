package render

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/compare"
)

// The report shows the env diff of its comparison in both formats.
func TestReportEnvDiff(t *testing.T) {
	r := buildTestReport(t)
	r.Compare.Env = &compare.EnvDiff{Checked: true, Changes: []compare.EnvChange{{Name: "torch", Base: "2.5.1", New: "2.6.0"}, {Name: "Driver", Base: "550.54.15", New: "560.28.03"}}}
	var md, html bytes.Buffer
	if err := WriteReportMarkdown(&md, r); err != nil {
		t.Fatal(err)
	}
	if err := WriteReportHTML(&html, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"env diff (2;", "torch: 2.5.1 → 2.6.0", "Driver: 550.54.15 → 560.28.03"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	for _, want := range []string{`<section id="env-diff">`, "<td class=\"l\">torch</td><td class=\"l\">2.5.1</td><td class=\"l\">2.6.0</td>"} {
		if !strings.Contains(html.String(), want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
}
