package triage

import (
	"context"
	"testing"

	"github.com/sglprof/runner/reports/trace"
)

// TestScopeAndStageHooks checks the Options hooks the nsys path uses: a scope label replaces
// "unresolved" only for ops without a Python site, and a Stages answer replaces the stages
// from annotations.
func TestScopeAndStageHooks(t *testing.T) {
	b := newTB("hooks.json")
	f := b.frame("python/sglang/srt/layers/linear.py(10): forward", 0, 1000, trace.NoID)
	op := b.cpuop("aten::mm", 0, 1000, f)
	l0 := b.launch("cudaLaunchKernel", 10, 20, false)
	l1 := b.launch("cudaLaunchKernel", 30, 40, false)
	b.kernel("nvjet_tst_128x256", 0, 7, 100, 200, l0, op)               // has a Python site
	b.kernel("triton_poi_fused_gelu_2", 0, 7, 200, 260, l1, trace.NoID) // has none
	b.annot("denoising_step_0", 0, 1000, false)
	tr := b.t
	scope := tr.Names.InternString("nvtx: mlp")
	opts := Options{
		Open:   opener(map[string]*trace.Trace{tr.Path: tr}),
		Scopes: func(*trace.Trace) []trace.NameID { return []trace.NameID{scope, scope} },
	}
	in := Inputs{Files: []Input{{Path: tr.Path, Rank: NoRank}}}
	rep, err := Analyze(context.Background(), in, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Stages) != 1 || rep.Stages[0].Stage != "DenoisingStage" {
		t.Fatalf("stages = %+v, want DenoisingStage from the annotation", rep.Stages)
	}
	loc := map[string]string{}
	for _, k := range rep.Stages[0].Kernels {
		loc[k.Name] = k.Locations[0].Location
	}
	if loc["nvjet_tst_128x256"] != "python/sglang/srt/layers/linear.py:10 forward" {
		t.Errorf("a Python site must win over the scope: %q", loc["nvjet_tst_128x256"])
	}
	if loc["triton_poi_fused_gelu_2"] != "nvtx: mlp" {
		t.Errorf("op without a site: location %q, want the scope", loc["triton_poi_fused_gelu_2"])
	}

	opts.Stages = func(*trace.Trace) []string { return []string{"first", ""} }
	rep, err = Analyze(context.Background(), in, opts)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, s := range rep.Stages {
		got[s.Stage] = s.KernelCount
	}
	if len(got) != 2 || got["first"] != 1 || got[StageUnannotated] != 1 {
		t.Fatalf("stages from the hook = %v, want first 1 and %s 1", got, StageUnannotated)
	}
}

// TestAnalyzeOwnClassifierAndCatalog: Options.Classifier and Options.Catalog are what the
// report uses, and without them the embedded ones (which Analyze builds on another goroutine
// while the first trace opens).
func TestAnalyzeOwnClassifierAndCatalog(t *testing.T) {
	in := Inputs{Files: []Input{{Path: "f", Rank: NoRank}}}
	open := opener(map[string]*trace.Trace{"f": bigTrace(300, 1)})
	cls, err := ParseClassifier("norm re:.")
	if err != nil {
		t.Fatal(err)
	}
	cat, err := ParseCatalog([]byte(`{"patterns":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	cats := func(r *Report) (map[string]bool, int) {
		got, fusions := map[string]bool{}, 0
		for _, s := range r.Stages {
			for _, k := range s.Kernels {
				got[k.Category] = true
			}
			fusions += len(s.Fusions)
		}
		return got, fusions
	}
	def, err := Analyze(context.Background(), in, Options{Open: open})
	if err != nil {
		t.Fatal(err)
	}
	own, err := Analyze(context.Background(), in, Options{Open: open, Classifier: cls, Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	dc, df := cats(def)
	oc, of := cats(own)
	if !dc[CatGEMM] || !dc[CatCommunication] || df == 0 {
		t.Errorf("embedded classifier and catalog: categories %v, %d fusions; want gemm, communication and fusions", dc, df)
	}
	if len(oc) != 1 || !oc["norm"] || of != 0 {
		t.Errorf("own classifier and catalog: categories %v, %d fusions; want only norm and none", oc, of)
	}
}
