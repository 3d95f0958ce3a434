package triage

import (
	"fmt"
	"strconv"
	"strings"
)

// stageHasRoofline reports whether any kernel row of s has roofline figures (the kernel table
// then gets its roofline columns; traces without recorded shapes keep the table they had).
func stageHasRoofline(s *Stage) bool {
	for i := range s.Kernels {
		if s.Kernels[i].RooflineUS > 0 {
			return true
		}
	}
	return false
}

// rooflineHeader is the report line that names each analysed GPU and the peaks its
// percentages are against (nothing when no stage has roofline figures).
func rooflineHeader(r *Report) []string {
	has := false
	for i := range r.Stages {
		has = has || stageHasRoofline(&r.Stages[i])
	}
	if !has {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, in := range r.Inputs {
		var line string
		switch {
		case in.Peak != nil:
			p := in.Peak
			line = fmt.Sprintf("Roofline peaks: %s as %s, dense BF16 %s / FP16 %s / FP8 %s / FP32 %s TFLOP/s, HBM %s GB/s (%s)",
				orDash(in.GPU), p.GPU, num(p.BF16), num(p.FP16), num(p.FP8), num(p.FP32), num(p.HBMGBps), p.Source)
		case in.GPU != "":
			line = fmt.Sprintf("Roofline: %s is not in the peak table; achieved TFLOP/s and GB/s only, no percentage of peak", in.GPU)
		default:
			line = "Roofline: the trace names no GPU; achieved TFLOP/s and GB/s only, no percentage of peak"
		}
		if !seen[line] {
			seen[line] = true
			out = append(out, line)
		}
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// num formats a peak figure ("-" for an absent one).
func num(v float64) string {
	if v <= 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// rooflineCells are a kernel row's roofline columns: TFLOP/s, GB/s, FLOP/B and the share of
// the roof with the verdict ("13.9% compute"); "-" where unknown.
func rooflineCells(k *KernelRow) []string {
	if k.RooflineUS <= 0 {
		return []string{"-", "-", "-", "-"}
	}
	tf, ai := "-", "-"
	if k.FLOPs > 0 {
		tf = fig(k.TFLOPS)
	}
	if k.Intensity > 0 {
		ai = fig(k.Intensity)
	}
	roof := "-"
	if k.Bound != "" {
		roof = pc(k.PctOfPeak) + " " + k.Bound
	}
	if k.RooflineUS < k.TotalUS*0.999 {
		roof += fmt.Sprintf(" (of %s)", pc(k.RooflineUS*100/k.TotalUS))
	}
	if k.RooflineFrom == RooflineFromMapping {
		roof += " (mapping)"
	}
	return []string{tf, fig(k.GBps), ai, strings.TrimSpace(roof)}
}

// rooflineWords are the legend entries a kernel row's roofline cells need.
func rooflineWords(k *KernelRow) []string {
	var w []string
	if k.Bound != "" {
		w = append(w, "roof")
	}
	if k.Bound == BoundMemory && k.PctOfPeak > 100 {
		w = append(w, "roof above 100")
	}
	if _, link := copyTraffic(k.Name); link && k.GBps > 0 {
		w = append(w, "link copy")
	}
	if k.RooflineFrom == RooflineFromMapping {
		w = append(w, "roof from mapping")
	}
	return w
}

// fig formats an achieved figure with three significant digits at most one decimal
// (137.4, 12.7, 3341, 0.21).
func fig(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'g', 2, 64)
}

// rooflineHeaderCells are the titles of rooflineCells.
var rooflineHeaderCells = []string{"TFLOP/s", "GB/s", "FLOP/B", "Roof"}

// rooflineCSVHeader are the CSV columns of the roofline, after the shared ones (empty on rows
// of other tables and on kernel rows without figures).
var rooflineCSVHeader = []string{"flops", "bytes", "roofline_us", "tflops", "gbps", "flops_per_byte", "dtype", "pct_of_peak", "bound"}

// rooflineCSV pads a kernel row to the shared columns of header and appends its roofline
// columns (unrounded).
func rooflineCSV(header []string, k *KernelRow) []string {
	pad := make([]string, len(header)-len(rooflineCSVHeader)-9)
	if k.RooflineUS <= 0 {
		return append(pad, make([]string, len(rooflineCSVHeader))...)
	}
	opt := func(v float64) string {
		if v == 0 {
			return ""
		}
		return f64(v)
	}
	return append(pad, opt(k.FLOPs), opt(k.Bytes), f64(k.RooflineUS), opt(k.TFLOPS), opt(k.GBps), opt(k.Intensity),
		k.Dtype, opt(k.PctOfPeak), k.Bound)
}
