package runner

import (
	"strings"
	"testing"

	"github.com/sglprof/runner/plans"
)

func parsePlan(t *testing.T, src string) *plans.Plan {
	t.Helper()
	p, err := plans.Parse("plan.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const parityPlan = `
name = "p"
[backend]
mode = "serve"
model_type = "llm"
[matrix]
model = ["m/M"]
input_len = [64]
output_len = [8]
engine = ["sglang", "vllm"]
concurrency = [1, 4]
`

// TestCheckParity: the engines' defaults differ on chunked prefill and sampling, which the
// table lists per configuration; flags that align them empty it; a setting only one engine is
// given (tensor parallelism) is listed with both values.
func TestCheckParity(t *testing.T) {
	p := CheckParity(parsePlan(t, parityPlan).Expand())
	if p == nil || strings.Join(p.Engines, ",") != "sglang,vllm" {
		t.Fatalf("parity %+v", p)
	}
	got := map[string]int{}
	for _, r := range p.Rows {
		got[r.Setting]++
		if strings.Contains(r.Config, "engine=") || len(r.Values) != 2 {
			t.Errorf("row %+v: the config keeps no engine part, one value per engine", r)
		}
	}
	if got["chunked prefill"] != 2 || got["sampling"] != 2 || len(p.Rows) != 4 {
		t.Errorf("rows %+v: want chunked prefill and sampling for each of the 2 configurations", p.Rows)
	}

	aligned := strings.Replace(parityPlan, "[matrix]", `[backend.engine_args]
sglang = ["--chunked-prefill-size", "4096", "--tp-size", "2"]
vllm = ["--max-num-batched-tokens", "4096", "--generation-config", "vllm", "-tp", "2"]
[matrix]`, 1)
	if p := CheckParity(parsePlan(t, aligned).Expand()); p == nil || len(p.Rows) != 0 {
		t.Errorf("aligned engines: rows %+v, want none", p)
	}
	tp := strings.Replace(aligned, `"-tp", "2"`, `"-tp", "4"`, 1)
	p = CheckParity(parsePlan(t, tp).Expand())
	if len(p.Rows) != 2 || p.Rows[0].Setting != "tensor parallel size" || p.Rows[0].Values[0] != "2" || p.Rows[0].Values[1] != "4" {
		t.Errorf("tp 2 vs 4: rows %+v", p.Rows)
	}
	// A plan that keeps vLLM out of development mode leaves its cache warm between cells while
	// SGLang's is flushed: listed. With flush_cache off both keep theirs: not listed.
	devOff := strings.Replace(aligned, "[matrix]", "[backend.env]\nVLLM_SERVER_DEV_MODE = \"0\"\n[matrix]", 1)
	p = CheckParity(parsePlan(t, devOff).Expand())
	if len(p.Rows) != 2 || p.Rows[0].Setting != "prefix cache reset" || !strings.Contains(p.Rows[0].Values[0], "POST /flush_cache") ||
		!strings.Contains(p.Rows[0].Values[1], "not possible: backend.env VLLM_SERVER_DEV_MODE = \"0\"") {
		t.Errorf("vLLM out of development mode: rows %+v, want the prefix cache reset of each configuration", p.Rows)
	}
	if p := CheckParity(parsePlan(t, devOff+"[load]\nflush_cache = false\n").Expand()); len(p.Rows) != 0 {
		t.Errorf("flush_cache off on both: rows %+v, want none", p.Rows)
	}
	// Without an engine axis there is nothing to check.
	if p := CheckParity(parsePlan(t, strings.Replace(parityPlan, `engine = ["sglang", "vllm"]`, "", 1)).Expand()); p != nil {
		t.Errorf("no engine axis: %+v", p)
	}
}

func TestSplitEngineKey(t *testing.T) {
	for _, tc := range []struct{ key, rest, engine string }{
		{"m/i64/o8/engine=vllm/c4", "m/i64/o8/c4", "vllm"},
		{"m/i64/o8/c4", "m/i64/o8/c4", ""},
		{"engine=sglang", "", "sglang"},
	} {
		rest, e, ok := SplitEngineKey(tc.key)
		if rest != tc.rest || e != tc.engine || ok != (tc.engine != "") {
			t.Errorf("SplitEngineKey(%q) = %q, %q, %v", tc.key, rest, e, ok)
		}
	}
}
