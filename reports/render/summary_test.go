package render

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/rundir"
)

// The summary files are rendered reports: golden files pin their layout.
func TestSummaryGolden(t *testing.T) {
	s := &rundir.Summary{
		Plan: "qwen-image", RunDir: "runs/qwen-image/20261121T180000Z-abcdef",
		Cells: []rundir.SummaryRow{
			{ID: "000-qwen-image-1024x1024-s0-none-r1", Verdict: "ok", WallNS: 21_500_000_000, E2ENS: 20_327_600_000, MeanDenoiseStepNS: 400_400_000,
				Warnings: []string{"perf-dump-missing: no dump; expected when nsys stops the application"}},
			{ID: "001-qwen-image-1024x1024-s0-torch-r1", Verdict: "ok", WallNS: 24_100_000_000, E2ENS: 20_890_900_000, MeanDenoiseStepNS: 411_600_000,
				TopKernels: []rundir.KernelShare{{Name: "void flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1> > > >", Category: "attention", SharePct: 34.7}, {Name: "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT", Category: "gemm", SharePct: 31.9}}},
			{ID: "002-acme-model-default-s0-none-r1", Verdict: "invalid", WallNS: 3_000_000_000, Reasons: []string{"diffusers-fallback: sglang ran the diffusers backend | quoted", "perf-dump-missing: no dump"},
				Cause: "diffusers-fallback: sglang ran the diffusers backend (log.txt line 2; 1 more in cells/002-acme-model-default-s0-none-r1/result.json)"},
			{ID: "003-acme-model-default-s0-none-r2", Verdict: rundir.VerdictNotRun},
		},
		Counts: map[string]int{"ok": 2, "invalid": 1, rundir.VerdictNotRun: 1}, Interrupted: true,
	}
	var table bytes.Buffer
	if err := SummaryTable(&table, s); err != nil {
		t.Fatal(err)
	}
	reportGolden(t, "summary.txt.golden", table.Bytes())
	reportGolden(t, "summary.md.golden", SummaryMarkdown(s))
}

// TestSummaryMarkdownNastyKernel: a kernel name with "|" and a newline stays inside the Top
// kernels cell of summary.md (the row stays one line with six cells).
func TestSummaryMarkdownNastyKernel(t *testing.T) {
	s := &rundir.Summary{Plan: "p", RunDir: "runs/p/x", Counts: map[string]int{"ok": 1}, Cells: []rundir.SummaryRow{
		{ID: "000-c", Verdict: "ok", WallNS: 1e9, TopKernels: []rundir.KernelShare{{Name: "k<a|b>\nnext", Category: "gemm", SharePct: 50}, {Name: "plain", Category: "other", SharePct: 10}}},
	}}
	var row string
	for _, l := range strings.Split(string(SummaryMarkdown(s)), "\n") {
		if strings.HasPrefix(l, "| 000-c ") {
			row = l
		}
	}
	// "<" outside a code span becomes "&lt;": GitHub took "<a|b>" for a tag and dropped it.
	want := `| 000-c | ok | 1.0s | - | - | k&lt;a\|b><br>next (gemm, 50.0%)<br>plain (other, 10.0%) |`
	if row != want {
		t.Errorf("row:\n%s\nwant:\n%s", row, want)
	}
}
