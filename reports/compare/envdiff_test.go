package compare

import (
	"bytes"
	"testing"
)

// The env diff in the text and Markdown formats (goldens), and clock states that differ
// holding the golden comparison's two regressions.
func TestEnvDiffGolden(t *testing.T) {
	for _, f := range []string{"text", "md", "json"} {
		t.Run(f, func(t *testing.T) {
			base, cur := goldenSets()
			res, err := Compare(base, cur, Options{})
			if err != nil {
				t.Fatal(err)
			}
			res.Env = &EnvDiff{Checked: true, Changes: []EnvChange{
				{Name: "Driver", Base: "550.54.15", New: "560.28.03"},
				{Name: "torch", Base: "2.5.1", New: "2.6.0"},
				{Name: "GPU clocks", Base: "locked", New: "not locked"},
			}, ClocksDiffer: "GPU clocks were locked in base and not locked in new; no regression is called between runs measured under different clock states: lock the clocks for both (nvidia-smi -lgc), or pass --ignore-env"}
			res.HoldRegressions("GPU clocks were locked in base and not locked in new")
			if res.Regressed() || res.Regressions != 0 {
				t.Errorf("regressions = %d after HoldRegressions, want 0", res.Regressions)
			}
			held := 0
			for _, r := range res.Rows {
				if r.Status == StatusEnvDiffers {
					held++
				}
			}
			if held != 2 {
				t.Errorf("%d rows held, want the 2 regressions", held)
			}
			var b bytes.Buffer
			if err := Write(&b, f, res, base, cur); err != nil {
				t.Fatal(err)
			}
			golden(t, "envdiff."+f+".golden", b.Bytes())
		})
	}
}

// Two runs whose environments match say so; a comparison without manifests says nothing.
func TestEnvDiffNoneAndUnchecked(t *testing.T) {
	var b bytes.Buffer
	writeEnvDiff(&b, &Result{Env: &EnvDiff{Checked: true}}, "")
	if got := b.String(); got != "env diff: none (driver, CUDA, torch, triton, flashinfer, NCCL, sglang, clocks and the CUDA_/NCCL_/SGLANG_ variables match)\n" {
		t.Errorf("matching environments: %q", got)
	}
	b.Reset()
	writeEnvDiff(&b, &Result{}, "")
	if b.Len() != 0 {
		t.Errorf("unchecked: %q, want nothing", b.String())
	}
}
