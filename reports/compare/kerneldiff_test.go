package compare

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/reports/triage"
)

const flashAttn = "void flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2>, 128>"

// kernelStage builds one triage stage from (name, category, µs, launches) rows.
func kernelStage(name string, rows ...any) triage.Stage {
	s := triage.Stage{Stage: name}
	for i := 0; i+3 < len(rows); i += 4 {
		k := triage.KernelRow{Name: rows[i].(string), Category: rows[i+1].(string), TotalUS: rows[i+2].(float64), Count: rows[i+3].(int)}
		s.Kernels = append(s.Kernels, k)
		s.KernelTimeUS += k.TotalUS
		s.KernelCount += k.Count
	}
	return s
}

// diffFixture is a base and new triage: DenoisingStage where attention grew 30 % (94 % of the
// stage's growth) and a GEMM a little, TextEncodingStage unchanged.
func diffFixture() *triage.DiffReport {
	base := &triage.Report{Stages: []triage.Stage{
		kernelStage("TextEncodingStage", "nvjet_a", "gemm", 100.0, 10),
		kernelStage("DenoisingStage", flashAttn, "attention", 1000.0, 360, "nvjet_b", "gemm", 2000.0, 720, "triton_poi_fused_0", "elementwise", 50.0, 360),
	}}
	cur := &triage.Report{Stages: []triage.Stage{
		kernelStage("TextEncodingStage", "nvjet_a", "gemm", 100.0, 10),
		kernelStage("DenoisingStage", flashAttn, "attention", 1300.0, 360, "nvjet_b", "gemm", 2019.0, 720, "triton_poi_fused_0", "elementwise", 50.0, 360),
	}}
	return triage.Diff(base, cur)
}

func regressionRow(metric string, delta, p float64) Row {
	return Row{Config: "cfg", Metric: metric, Unit: perf.Unit(metric), DeltaPct: delta, P: p, Status: StatusRegression}
}

// The verdict line names the stage, the compare row's change and p, and the kernel that makes
// the stage's growth, as a regression gate should say it.
func TestKernelDiffVerdict(t *testing.T) {
	res := &Result{Rows: []Row{
		regressionRow("e2e", 12, 0.002),
		regressionRow(perf.StagePrefix+"DenoisingStage", 10.5, 0.002),
		regressionRow(perf.MetricDenoiseStep, 10.5, 0.0001),
		regressionRow(perf.MetricPeakMemory, 5, 0.002),
		{Config: "other", Metric: "e2e", Status: StatusOK},
	}}
	if got := res.RegressedConfigs(); len(got) != 1 || got[0] != "cfg" {
		t.Fatalf("RegressedConfigs = %q, want [cfg]", got)
	}
	kd := KernelDiff{Config: "cfg", Diff: diffFixture()}
	Explain(res, &kd)
	// One line per stage: the stage's own row wins over denoise_step and e2e (both the
	// same stage); peak memory is not a kernel matter.
	want := []string{"DenoisingStage +10.50% (p=0.002): 94% of the delta is `FlashAttnFwdSm90` (+30.0%, launches unchanged)"}
	if strings.Join(kd.Verdicts, "\n") != strings.Join(want, "\n") {
		t.Errorf("verdicts\n%q\nwant\n%q", kd.Verdicts, want)
	}
	// A whole-request row alone is explained by the stage whose kernel time grew most.
	res.Rows = []Row{regressionRow("e2e", 12, 0.002)}
	Explain(res, &kd)
	if len(kd.Verdicts) != 1 || !strings.HasPrefix(kd.Verdicts[0], "e2e +12.00% (p=0.002), in DenoisingStage: 94% of the delta is `FlashAttnFwdSm90`") {
		t.Errorf("e2e verdict %q", kd.Verdicts)
	}
	// A history row has no p-value.
	res.Rows = []Row{regressionRow(perf.MetricDenoiseStep, 10.5, -1)}
	Explain(res, &kd)
	if len(kd.Verdicts) != 1 || !strings.HasPrefix(kd.Verdicts[0], "denoise_step +10.50% (history), in DenoisingStage: ") {
		t.Errorf("history verdict %q", kd.Verdicts)
	}
	// A stage whose kernels did not grow: the time went elsewhere.
	res.Rows = []Row{regressionRow(perf.StagePrefix+"TextEncodingStage", 20, 0.002)}
	Explain(res, &kd)
	if len(kd.Verdicts) != 1 || !strings.Contains(kd.Verdicts[0], "kernel time did not grow") || !strings.Contains(kd.Verdicts[0], "outside the GPU kernels") {
		t.Errorf("verdict for a stage without kernel growth %q", kd.Verdicts)
	}
	// A 30 % regression whose kernels grew 10 %: most of it is outside the kernels.
	res.Rows = []Row{regressionRow(perf.StagePrefix+"DenoisingStage", 30, 0.002)}
	kd.Diff.Stages[1].DeltaUS = 100 // less than half of the row's change, in percent
	Explain(res, &kd)
	if len(kd.Verdicts) != 1 || !strings.Contains(kd.Verdicts[0], "so most of the regression is outside the GPU kernels") {
		t.Errorf("verdict for a mostly-outside regression %q", kd.Verdicts)
	}
}

// Several kernels share the growth: they are named until 80 % of it, with launch changes and
// new kernels said as such.
func TestKernelDiffVerdictSeveralKernels(t *testing.T) {
	base := &triage.Report{Stages: []triage.Stage{kernelStage("decode", "a_gemm", "gemm", 100.0, 10, "b_norm", "norm", 100.0, 10)}}
	cur := &triage.Report{Stages: []triage.Stage{kernelStage("decode", "a_gemm", "gemm", 150.0, 12, "b_norm", "norm", 130.0, 10, "c_new", "elementwise", 20.0, 4)}}
	res := &Result{Rows: []Row{regressionRow(perf.MetricTPOT, 50, 0.01)}}
	kd := KernelDiff{Config: "cfg", Diff: triage.Diff(base, cur)}
	Explain(res, &kd)
	want := "tpot +50.00% (p=0.010), in decode: 50% of the delta is `a_gemm` (+50.0%, launches 10 → 12), 30% `b_norm` (+30.0%, launches unchanged)"
	if len(kd.Verdicts) != 1 || kd.Verdicts[0] != want {
		t.Errorf("verdicts %q\nwant %q", kd.Verdicts, want)
	}
}

// Text and Markdown show the cells, the verdicts and the top rows; a configuration without
// a diff shows its note; Markdown escapes what the traces named.
func TestWriteKernelDiffs(t *testing.T) {
	d := diffFixture()
	res := &Result{Mode: "samples", Rows: []Row{regressionRow(perf.StagePrefix+"DenoisingStage", 10.5, 0.002)}, Regressions: 1,
		KernelDiffs: []KernelDiff{
			{Config: "cfg", Profiler: "torch", BaseCell: "/runs/a/cells/006-x-torch-r1", NewCell: "/runs/b/cells/006-x-torch-r1", Diff: d},
			{Config: "bare", Note: "no kernel diff: neither run has an ok torch or nsys cell of this configuration"},
		}}
	var txt, md bytes.Buffer
	if err := WriteText(&txt, res); err != nil {
		t.Fatal(err)
	}
	if err := WriteMarkdown(&md, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"kernel diff cfg (torch cells 006-x-torch-r1 → 006-x-torch-r1):\n",
		"  DenoisingStage +10.50% (p=0.002): 94% of the delta is `FlashAttnFwdSm90` (+30.0%, launches unchanged)\n",
		"  DenoisingStage: kernel time 3.05 ms → 3.37 ms (+0.32 ms, +10.5%), launches 1440 → 1440\n",
		"kernel diff bare: no kernel diff: neither run",
	} {
		if !strings.Contains(txt.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, txt.String())
		}
	}
	// The unchanged TextEncodingStage and its rows are not shown; the growing kernels are, the
	// unchanged one is not.
	if strings.Contains(txt.String(), "TextEncodingStage") || strings.Contains(txt.String(), "triton_poi_fused_0") || !strings.Contains(txt.String(), "nvjet_b") {
		t.Errorf("text shows the wrong rows:\n%s", txt.String())
	}
	if !strings.HasSuffix(txt.String(), Headline(res)+"\n") {
		t.Errorf("the headline is not the last line:\n%s", txt.String())
	}
	for _, want := range []string{
		"#### Kernel diff: `cfg`\n",
		"- DenoisingStage +10.50% (p=0.002): 94% of the delta is `FlashAttnFwdSm90` (+30.0%, launches unchanged)\n",
		"| `void flash::FlashAttnFwdSm90<…>` | attention | changed |",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	// A stage name from a trace cannot break the Markdown.
	d.Stages[1].Stage = "Denoising|Stage<x>"
	res.Rows[0].Metric = perf.StagePrefix + "Denoising|Stage<x>"
	md.Reset()
	if err := WriteMarkdown(&md, res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "- Denoising\\|Stage&lt;x> +10.50%") {
		t.Errorf("stage name not escaped:\n%s", md.String())
	}
}
