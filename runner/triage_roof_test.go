package runner

import (
	"testing"

	"github.com/sglprof/runner/reports/triage"
)

// result.json's top kernels carry the triage's roofline figures and the roofs of the GPU they
// were measured against (the compute peak of the row's input type), which report.html draws.
func TestTopKernelsRoofline(t *testing.T) {
	h100, _ := triage.PeakFor("NVIDIA H100 80GB HBM3")
	rep := &triage.Report{Inputs: []triage.InputInfo{{GPU: "NVIDIA H100 80GB HBM3", Peak: &h100}}, Stages: []triage.Stage{{
		KernelTimeUS: 1100, Kernels: []triage.KernelRow{
			{Name: "gemm", TotalUS: 1000, RooflineUS: 1000, TFLOPS: 137.4, GBps: 100.7, Intensity: 1365.3, Dtype: "fp8", PctOfPeak: 6.9, Bound: "compute"},
			{Name: "rope", TotalUS: 100},
		}}}}
	ks := topKernels(rep, 3)
	if len(ks) != 2 || ks[1].Roof != nil {
		t.Fatalf("top kernels %+v: want two, the second without roofline figures", ks)
	}
	r := ks[0].Roof
	if r == nil || r.TFLOPS != 137.4 || r.Intensity != 1365.3 || r.Bound != "compute" || r.GPU != "H100 SXM" || r.PeakTFLOPS != 1979 || r.PeakGBps != 3350 {
		t.Errorf("roof %+v: want the row's figures under the H100 SXM FP8 roof (1979 TFLOP/s, 3350 GB/s)", r)
	}
}
