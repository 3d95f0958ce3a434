package render

import (
	"bytes"
	"testing"

	"github.com/sglprof/runner/reports/rundir"
)

// TestParityGolden pins the parity table as the terminal shows it before the first cell and as
// summary.md's "Engine parity" section; a check that found nothing says what it compared.
func TestParityGolden(t *testing.T) {
	p := &rundir.Parity{Engines: []string{"sglang", "vllm"}, Checked: []string{"prefix caching", "chunked prefill"},
		Rows: []rundir.ParityRow{
			{Config: "m/i64/o8/c1", Setting: "chunked prefill", Values: []string{"on, SGLang's default chunk (by GPU memory)", "on, vLLM's default token budget"}},
			{Config: "m/i64/o8/c1", Setting: "prefix caching", Values: []string{"on (radix cache, default)", "off (--no-enable-prefix-caching)"}},
		}}
	var b bytes.Buffer
	if err := WriteParity(&b, p); err != nil {
		t.Fatal(err)
	}
	b.WriteString("--- none differ:\n")
	if err := WriteParity(&b, &rundir.Parity{Engines: p.Engines, Checked: p.Checked}); err != nil {
		t.Fatal(err)
	}
	b.WriteString("--- summary.md:\n")
	writeParitySummary(&b, &rundir.Summary{Parity: p})
	reportGolden(t, "parity.golden", b.Bytes())
}
