package compare

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/reports/render/table"
	"github.com/sglprof/runner/reports/triage"
)

// KernelDiff explains one configuration with a regression at the kernel level: the kernel
// diff (triage.Diff) of a profiled cell of that configuration in the base run against one in
// the new run, and one verdict line per regressed stage saying which kernels make the
// difference. Result.KernelDiffs holds one per regressed configuration; Note says why one has
// no diff (no profiled cell on a side, an unreadable triage).
type KernelDiff struct {
	Config string `json:"config"`
	// Profiler is the profiler of the two cells diffed (torch or nsys; never one of each).
	Profiler string `json:"profiler,omitempty"`
	// BaseCell and NewCell are the cell directories diffed.
	BaseCell string `json:"base_cell,omitempty"`
	NewCell  string `json:"new_cell,omitempty"`
	// Verdicts are the regression verdicts explained: "DenoisingStage +30.10% (p=0.002): 94% of
	// the delta is `FlashAttnFwdSm90` (+30.0%, launches unchanged)".
	Verdicts []string `json:"verdicts,omitempty"`
	Note     string   `json:"note,omitempty"`
	// Diff is the whole kernel diff: every kernel of either cell, every stage.
	Diff *triage.DiffReport `json:"diff,omitempty"`
}

// KernelDiffTopRows is how many kernel rows of a stage text and Markdown show under a verdict.
const KernelDiffTopRows = 5

// RegressedConfigs lists the configurations with at least one regression row, in row order.
func (r *Result) RegressedConfigs() []string {
	var out []string
	seen := map[string]bool{}
	for _, row := range r.Rows {
		if row.Status == StatusRegression && !seen[row.Config] {
			seen[row.Config] = true
			out = append(out, row.Config)
		}
	}
	return out
}

// explained is one regression row with the stage of the kernel diff that explains it.
type explained struct {
	row   Row
	stage *triage.StageDiff
	// mapped is false when the row's own stage is not in the diff and stage is the one whose
	// kernel time grew the most instead.
	mapped bool
}

// stageOf names the triage stage a metric measures: the stage itself for stage/X, the
// denoising stage for the step metrics, prefill and decode for the LLM latencies; "" for
// whole-request metrics (e2e, request latency, throughput).
func stageOf(metric string) string {
	if s, ok := strings.CutPrefix(metric, perf.StagePrefix); ok {
		return s
	}
	switch metric {
	case perf.MetricDenoiseStep, perf.MetricDenoiseMean:
		return "DenoisingStage"
	case perf.MetricTTFT:
		return triage.StageExtend
	case perf.MetricTPOT, perf.MetricITL:
		return triage.StageDecode
	}
	return ""
}

// rowPriority orders the rows of a configuration for explanation: a stage's own row first,
// then the step metrics, then whole-request metrics.
func rowPriority(metric string) int {
	switch {
	case strings.HasPrefix(metric, perf.StagePrefix):
		return 0
	case stageOf(metric) != "":
		return 1
	}
	return 2
}

// explainRows pairs every regression row of the configuration (memory rows aside: kernels do
// not explain memory) with its stage of the diff, one row per stage.
func explainRows(res *Result, kd *KernelDiff) []explained {
	if kd.Diff == nil || len(kd.Diff.Stages) == 0 {
		return nil
	}
	var rows []Row
	for _, r := range res.Rows {
		if r.Config == kd.Config && r.Status == StatusRegression && r.Unit != perf.UnitMB {
			rows = append(rows, r)
		}
	}
	sort.SliceStable(rows, func(i, j int) bool { return rowPriority(rows[i].Metric) < rowPriority(rows[j].Metric) })
	// The stage whose kernel time grew the most, for rows without a stage of their own.
	var grew *triage.StageDiff
	for i := range kd.Diff.Stages {
		s := &kd.Diff.Stages[i]
		if grew == nil || s.DeltaUS > grew.DeltaUS {
			grew = s
		}
	}
	var out []explained
	seen := map[*triage.StageDiff]bool{}
	for _, r := range rows {
		e := explained{row: r, stage: grew}
		if name := stageOf(r.Metric); name != "" {
			if s := kd.Diff.Stage(name); s != nil {
				e.stage, e.mapped = s, true
			}
		} else if len(kd.Diff.Stages) == 1 {
			e.mapped = true
		}
		if seen[e.stage] {
			continue
		}
		seen[e.stage] = true
		out = append(out, e)
	}
	return out
}

// Explain fills kd.Verdicts from the regression rows of its configuration in res.
func Explain(res *Result, kd *KernelDiff) {
	kd.Verdicts = VerdictLines(res, kd, func(s string) string { return "`" + s + "`" }, func(s string) string { return s })
}

// VerdictLines writes the verdict lines of kd (see KernelDiff.Verdicts) for a format: code
// formats a kernel name and text the other words taken from the inputs (stage and metric
// names), so that Markdown and HTML can mark and escape them.
func VerdictLines(res *Result, kd *KernelDiff, code, text func(string) string) []string {
	var out []string
	for _, e := range explainRows(res, kd) {
		out = append(out, verdictLine(e, code, text))
	}
	return out
}

// verdictLine writes one regression's explanation; code formats a kernel name and text the
// words taken from the inputs (stage and metric names), so that Markdown can escape them.
func verdictLine(e explained, code, text func(string) string) string {
	r, s := e.row, e.stage
	label := r.Metric
	if name, ok := strings.CutPrefix(r.Metric, perf.StagePrefix); ok {
		label = name
	}
	p := "history"
	if r.P >= 0 {
		p = "p=" + strconv.FormatFloat(r.P, 'f', 3, 64)
	}
	head := fmt.Sprintf("%s %+.2f%% (%s)", text(label), r.DeltaPct, p)
	if !strings.HasPrefix(r.Metric, perf.StagePrefix) || !e.mapped {
		head += ", in " + text(s.Stage)
		if !e.mapped && stageOf(r.Metric) != "" {
			head += fmt.Sprintf(" (no %s in the profiled cells' traces; the stage whose kernel time grew most)", text(stageOf(r.Metric)))
		}
	}
	kp, ok := s.DeltaPct()
	if s.DeltaUS <= 0 || !ok {
		return head + fmt.Sprintf(": the stage's kernel time did not grow (%s → %s): the time went outside the GPU kernels (host work, launch gaps, synchronisation)",
			usText(s.BaseKernelTimeUS), usText(s.NewKernelTimeUS))
	}
	// The kernels that grew, largest first, until they explain 80 % of the stage's growth.
	ks := append([]triage.KernelDiff(nil), s.Kernels...)
	sort.SliceStable(ks, func(i, j int) bool { return ks[i].DeltaUS > ks[j].DeltaUS })
	short := shortNames(ks)
	var parts []string
	var cum float64
	for i, k := range ks {
		if k.DeltaUS <= 0 || len(parts) == 3 || cum >= 80 {
			break
		}
		share := k.DeltaUS * 100 / s.DeltaUS
		cum += share
		if i == 0 {
			parts = append(parts, fmt.Sprintf("%.0f%% of the delta is %s (%s)", share, code(short[i]), kernelChange(&k)))
		} else {
			parts = append(parts, fmt.Sprintf("%.0f%% %s (%s)", share, code(short[i]), kernelChange(&k)))
		}
	}
	line := head + ": " + strings.Join(parts, ", ")
	if math.Abs(r.DeltaPct) > 0 && kp < math.Abs(r.DeltaPct)/2 {
		line += fmt.Sprintf("; the stage's kernel time grew only %+.1f%%, so most of the regression is outside the GPU kernels", kp)
	}
	return line
}

// kernelChange describes one kernel's change: "+30.0%, launches unchanged", "+5.0%, launches
// 360 → 420", "new, 12 launches".
func kernelChange(k *triage.KernelDiff) string {
	switch k.Status {
	case triage.DiffAdded:
		return fmt.Sprintf("new, %d launches", k.NewCount)
	case triage.DiffRemoved:
		return fmt.Sprintf("gone, %d launches", k.BaseCount)
	}
	p, _ := k.DeltaPct()
	if k.BaseCount == k.NewCount {
		return fmt.Sprintf("%+.1f%%, launches unchanged", p)
	}
	return fmt.Sprintf("%+.1f%%, launches %d → %d", p, k.BaseCount, k.NewCount)
}

// shortNames gives each kernel its short name (triage.ShortKernelName), or a longer one where
// two kernels would read the same.
func shortNames(ks []triage.KernelDiff) []string {
	out := make([]string, len(ks))
	count := map[string]int{}
	for i, k := range ks {
		out[i] = triage.ShortKernelName(k.Name)
		count[out[i]]++
	}
	for i, k := range ks {
		if count[out[i]] > 1 {
			out[i] = table.Shorten(k.Name, 80)
		}
	}
	return out
}

// usText writes µs as ms (or µs under 0.1 ms) for a sentence.
func usText(v float64) string {
	if math.Abs(v) < 100 {
		return strconv.FormatFloat(v, 'f', 1, 64) + " µs"
	}
	return strconv.FormatFloat(v/1000, 'f', 2, 64) + " ms"
}

// KernelDiffStages returns the stages of a kernel diff that its verdicts explain, in verdict
// order, for the tables under them.
func KernelDiffStages(res *Result, kd *KernelDiff) []*triage.StageDiff {
	var out []*triage.StageDiff
	for _, e := range explainRows(res, kd) {
		out = append(out, e.stage)
	}
	return out
}

// TopKernels is the first n kernels of a stage diff that changed, in its rank order (largest
// |Δ| first).
func TopKernels(s *triage.StageDiff, n int) []triage.KernelDiff {
	var out []triage.KernelDiff
	for _, k := range s.Kernels {
		if len(out) == n {
			break
		}
		if k.DeltaUS != 0 {
			out = append(out, k)
		}
	}
	return out
}

// cellName is a cell directory's last element, which is its id.
func cellName(dir string) string {
	dir = strings.TrimRight(dir, "/")
	if i := strings.LastIndexByte(dir, '/'); i >= 0 {
		return dir[i+1:]
	}
	return dir
}

// writeKernelDiffs writes the kernel diffs of res under the comparison (text or Markdown):
// per configuration the cells diffed, the verdict lines and the top rows of each stage they
// name, or why there is no diff.
func writeKernelDiffs(w io.Writer, res *Result, md bool) error {
	for i := range res.KernelDiffs {
		kd := &res.KernelDiffs[i]
		code, text := func(s string) string { return "`" + s + "`" }, func(s string) string { return s }
		if md {
			code, text = table.CodeSpan, table.EscapeMarkdown
			fmt.Fprintf(w, "\n#### Kernel diff: %s\n\n", table.CodeSpan(kd.Config))
		} else {
			fmt.Fprintf(w, "\nkernel diff %s", kd.Config)
		}
		if kd.Diff == nil {
			if md {
				fmt.Fprintf(w, "%s\n", table.EscapeMarkdown(kd.Note))
			} else {
				fmt.Fprintf(w, ": %s\n", kd.Note)
			}
			continue
		}
		if md {
			fmt.Fprintf(w, "%s cells %s (base) → %s (new)\n\n", text(kd.Profiler), code(cellName(kd.BaseCell)), code(cellName(kd.NewCell)))
		} else {
			fmt.Fprintf(w, " (%s cells %s → %s):\n", kd.Profiler, cellName(kd.BaseCell), cellName(kd.NewCell))
		}
		for _, v := range VerdictLines(res, kd, code, text) {
			if md {
				fmt.Fprintf(w, "- %s\n", v)
			} else {
				fmt.Fprintf(w, "  %s\n", v)
			}
		}
		for _, s := range KernelDiffStages(res, kd) {
			t := triage.DiffTable(s, TopKernels(s, KernelDiffTopRows), 60)
			if md {
				fmt.Fprintf(w, "\n%s: %s\n\n", table.EscapeMarkdown(s.Stage), s.StageLine())
				if err := table.WriteMarkdown(w, t); err != nil {
					return err
				}
			} else {
				// The table is indented under its configuration like the lines above it.
				fmt.Fprintf(w, "  %s: %s\n", s.Stage, s.StageLine())
				var b strings.Builder
				if err := table.WriteText(&b, t); err != nil {
					return err
				}
				for _, l := range strings.SplitAfter(strings.TrimSuffix(b.String(), "\n"), "\n") {
					fmt.Fprintf(w, "  %s", l)
				}
				fmt.Fprintln(w)
			}
		}
		if kd.Note != "" {
			fmt.Fprintf(w, "%snote: %s\n", map[bool]string{true: "- ", false: "  "}[md], text(kd.Note))
		}
		for _, wn := range kd.Diff.Warnings {
			fmt.Fprintf(w, "%swarning: %s\n", map[bool]string{true: "- ", false: "  "}[md], text(wn))
		}
	}
	if len(res.KernelDiffs) > 0 && !md {
		fmt.Fprintln(w)
	}
	return nil
}
