package runner

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/reports/triage"
	"github.com/sglprof/runner/runner/analysis"
)

// topKernelCount is how many kernels of a cell go into summary.md.
const topKernelCount = 3

// triageCell writes triage.md (rows under the default cutoff hidden) and triage.json (every
// row) for a cell with a torch trace or an nsys export, and keeps the top kernels for the
// summary. A triage problem is a warning: the measurement
// itself is still valid. For nsys cells of diffusion runs the triage also says which denoise
// steps the --delay/--duration window covered, and the cell is invalid ("nsys-window") when
// the window missed the denoising stage entirely: its profile is of other work.
func triageCell(ctx context.Context, rec cellRecord, res *cellResult, opts *Options) {
	var root string
	var nopts analysis.NsysOptions
	switch {
	case rec.NSys != nil:
		root = filepath.Join(rec.abs, rec.NSys.Report+".sqlite")
		if _, err := os.Stat(root); err != nil {
			return
		}
		nopts = cellWindowOptions(rec, res)
	case len(res.Found.Traces) > 0:
		root = filepath.Join(rec.abs, "traces")
	default:
		return
	}
	rep, sess, err := analysis.Triage(ctx, root, triage.DiscoverOptions{}, triage.Options{Logger: opts.Logger}, nopts)
	if err != nil {
		res.Warnings = append(res.Warnings, rundir.Reason{Code: "triage", Message: fmt.Sprintf("triage of %s failed: %v", root, err)})
		return
	}
	if sess.Coverage() != nil && sess.Coverage().Missed() {
		// Kernels, but none of the denoising loop the cell measures: a profile of other work.
		res.Verdict = plans.VerdictInvalid
		res.Reasons = append(res.Reasons, rundir.Reason{Code: "nsys-window", Message: strings.Join(sess.Coverage().Warnings, "; ")})
	}
	// triage.md is for people and hides the rows under the default cutoff; triage.json keeps
	// every row, so that a kernel diff against this cell (attachKernelDiffs) covers every
	// kernel without triaging the traces again.
	for _, f := range []struct {
		name, format string
		cutoff       float64
	}{{rundir.TriageMD, "md", triage.DefaultCutoff}, {rundir.TriageJSON, "json", 0}} {
		var b bytes.Buffer
		if err := triage.Render(&b, rep, f.format, f.cutoff); err != nil {
			res.Warnings = append(res.Warnings, rundir.Reason{Code: "triage", Message: err.Error()})
			return
		}
		if err := rundir.WriteFileAtomic(filepath.Join(rec.abs, f.name), b.Bytes()); err != nil {
			res.Warnings = append(res.Warnings, rundir.Reason{Code: "triage", Message: err.Error()})
			return
		}
	}
	res.TopKernels = topKernels(rep, topKernelCount)
	for _, w := range rep.Warnings {
		if strings.HasPrefix(w, analysis.WindowPrefix) || (sess.Coverage() != nil && slices.Contains(sess.Coverage().Warnings, w)) {
			continue // said once, as the nsys-window warning above
		}
		if strings.Contains(w, "window") || strings.Contains(w, "no kernel") {
			res.Warnings = append(res.Warnings, rundir.Reason{Code: "triage", Message: w})
		}
	}
}

// cellWindowOptions asks for the window mapping of an nsys cell of a diffusion run: a run whose
// perf dump has denoise steps or a DenoisingStage. A cell of an LLM run gets none.
func cellWindowOptions(rec cellRecord, res *cellResult) analysis.NsysOptions {
	o := analysis.NsysOptions{AllowNoKernels: true, NVTXTraced: true, TotalSteps: len(res.Timings.DenoiseStepsNS)}
	if tr := rec.Cell.NSys.Trace; len(tr) > 0 {
		o.NVTXTraced = slices.Contains(tr, "nvtx")
	}
	diffusion := o.TotalSteps > 0
	for _, st := range res.Timings.Stages {
		diffusion = diffusion || st.Name == "DenoisingStage"
	}
	if res.Found.PerfDump != "" {
		if d, err := perf.ReadDumpFile(res.Found.PerfDump); err == nil {
			o.StepTimings = analysis.StepTimings(d)
		}
	}
	o.Window = diffusion
	return o
}

// topKernels takes the first n kernel rows of the stage with the most kernel time, which for a
// diffusion cell is the denoising loop.
func topKernels(rep *triage.Report, n int) []rundir.KernelShare {
	best := -1
	for i, st := range rep.Stages {
		if best < 0 || st.KernelTimeUS > rep.Stages[best].KernelTimeUS {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	var out []rundir.KernelShare
	for _, k := range rep.Stages[best].Kernels {
		if len(out) == n {
			break
		}
		out = append(out, rundir.KernelShare{Name: k.Name, Category: k.Category, TotalUS: k.TotalUS, SharePct: k.SharePct, Roof: kernelRoof(rep, &k)})
	}
	return out
}

// kernelRoof is a kernel row's roofline figures for result.json (nil without any).
func kernelRoof(rep *triage.Report, k *triage.KernelRow) *rundir.Roof {
	if k.RooflineUS <= 0 {
		return nil
	}
	r := &rundir.Roof{Intensity: k.Intensity, TFLOPS: k.TFLOPS, GBps: k.GBps, PctOfPeak: k.PctOfPeak, Bound: k.Bound}
	for _, in := range rep.Inputs {
		if in.Peak != nil {
			r.GPU, r.PeakTFLOPS, r.PeakGBps = in.Peak.GPU, in.Peak.TFLOPS(k.Dtype), in.Peak.HBMGBps
			break
		}
	}
	return r
}
