package triage

import (
	"math"
	"strings"
	"testing"
)

// KernelsOnly merges names that canonicalise alike, classifies them, shares sum to 100, and
// the fusion table still finds split kernels by name.
func TestKernelsOnly(t *testing.T) {
	totals := []NameTotal{
		{Name: "void flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2> >(int)", Count: 10, TotalNS: 5_000_000},
		{Name: "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT", Count: 20, TotalNS: 3_000_000},
		{Name: "fused_add_rmsnorm_kernel<0x7f00aa>", Count: 5, TotalNS: 1_000_000},
		{Name: "fused_add_rmsnorm_kernel<0x7f00bb>", Count: 5, TotalNS: 1_000_000},
	}
	rep := KernelsOnly("x.sqlite", totals, Options{})
	if len(rep.Stages) != 1 {
		t.Fatalf("%d stages, want 1", len(rep.Stages))
	}
	st := rep.Stages[0]
	if st.KernelCount != 40 || st.KernelTimeUS != 10_000 {
		t.Errorf("count %d time %v us, want 40 and 10000", st.KernelCount, st.KernelTimeUS)
	}
	if len(st.Kernels) != 3 {
		t.Fatalf("%d rows, want 3 (the two rmsnorm instances merge): %+v", len(st.Kernels), st.Kernels)
	}
	want := []struct {
		cat   string
		share float64
	}{{CatAttention, 50}, {CatGEMM, 30}, {CatNorm, 20}}
	sum := 0.0
	for i, w := range want {
		k := st.Kernels[i]
		if k.Category != w.cat || math.Abs(k.SharePct-w.share) > 1e-9 {
			t.Errorf("row %d = %s %s %.2f%%, want %s %.0f%%", i, k.Name, k.Category, k.SharePct, w.cat, w.share)
		}
		sum += k.SharePct
	}
	if math.Abs(sum-100) > 1e-9 {
		t.Errorf("shares sum to %v", sum)
	}
	if len(st.Overlap) != 0 || len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "no overlap table") {
		t.Errorf("overlap %v warnings %v: want none and the kernels-only warning", st.Overlap, rep.Warnings)
	}
	cut := KernelsOnly("x.sqlite", totals, Options{Cutoff: 25})
	if n := len(cut.Stages[0].Kernels); n != 2 {
		t.Errorf("cutoff 25%% keeps %d rows, want 2", n)
	}
}
