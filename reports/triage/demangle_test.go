package triage

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/trace"
)

func TestDemangled(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"_Z5saxpyPdS_S_di", "saxpy(double*, double*, double*, double, int)"},
		{"_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi64ELi8ELb0ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib",
			// as GNU c++filt 2.x prints it
			"void aiter::add_rmsnorm_quant_kernel<std::bfloat16_t, std::bfloat16_t, 64, 8, false, false, true, 1>(std::bfloat16_t*, std::bfloat16_t*, float*, std::bfloat16_t*, std::bfloat16_t*, std::bfloat16_t*, double, int, int, int, int, int, int, int, bool)"},
		{"void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>(…)", ""}, // already readable
		{"_Znot a symbol", ""},
	} {
		if got := demangled(c.in); got != c.want {
			t.Errorf("demangled(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestDemangledInTables: a mangled kernel name shows demangled in the text tables; JSON keeps
// the raw name and carries the demangled one beside it.
func TestDemangledInTables(t *testing.T) {
	const raw = "_Z5saxpyPdS_S_di"
	b := newTB("mangled.json")
	b.kernel(raw, 0, 7, 0, 10_000, b.launch("cudaLaunchKernel", -1_000, 0, false), trace.NoID)
	rep, err := Analyze(context.Background(), Inputs{Files: []Input{{Path: b.t.Path, Rank: NoRank}}},
		Options{Open: opener(map[string]*trace.Trace{b.t.Path: b.t})})
	if err != nil {
		t.Fatal(err)
	}
	var txt, js bytes.Buffer
	if err := Render(&txt, rep, FormatText, 0); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(txt.String(), "saxpy(double*, double*") || strings.Contains(txt.String(), raw) {
		t.Errorf("text tables should show the demangled name only:\n%s", txt.String())
	}
	if err := Render(&js, rep, FormatJSON, 0); err != nil {
		t.Fatal(err)
	}
	var v struct {
		Stages []struct {
			Kernels []struct{ Name, Demangled string }
		}
	}
	if err := json.Unmarshal(js.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	if k := v.Stages[0].Kernels[0]; k.Name != raw || k.Demangled != "saxpy(double*, double*, double*, double, int)" {
		t.Errorf("JSON kernel %+v, want the raw name with the demangled one beside it", k)
	}
}
