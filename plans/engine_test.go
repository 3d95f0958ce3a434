package plans

import (
	"slices"
	"strings"
	"testing"
)

const enginePlan = `
name = "e"
[backend]
mode = "serve"
model_type = "llm"
[backend.engine_args]
vllm = ["--generation-config", "vllm"]
[matrix]
model = ["m/M"]
input_len = [64]
output_len = [8]
engine = ["sglang", "vllm"]
concurrency = [1, 4]
[matrix.server_args]
tensor-parallel-size = ["1"]
`

// TestEngineAxis: each engine makes its own cells, with the engine in id and key, the cell's
// backend.kind set to it, its own engine_args before the server_args axis, and OpenAI
// completions as the API of both engines (vLLM has no /generate).
func TestEngineAxis(t *testing.T) {
	p := mustParse(t, enginePlan)
	cells := p.Expand()
	if len(cells) != 4 {
		t.Fatalf("%d cells, want 4", len(cells))
	}
	for _, c := range cells {
		engine := "sglang"
		if strings.Contains(c.ID, "-vllm-") {
			engine = "vllm"
		} else if !strings.Contains(c.ID, "-sglang-") {
			t.Errorf("id %s names no engine", c.ID)
		}
		if c.Backend.Kind != engine || !strings.Contains(c.Key, "/engine="+engine+"/") {
			t.Errorf("cell %s: kind %q, key %s", c.ID, c.Backend.Kind, c.Key)
		}
		if c.Load.API != APICompletions {
			t.Errorf("cell %s: api %q, want completions", c.ID, c.Load.API)
		}
		want := []string{"--tensor-parallel-size", "1"}
		if engine == "vllm" {
			want = append([]string{"--generation-config", "vllm"}, want...)
		}
		if !slices.Equal(c.Backend.ExtraArgs, want) {
			t.Errorf("cell %s: extra args %q, want %q", c.ID, c.Backend.ExtraArgs, want)
		}
	}
	// A plan without the axis keeps SGLang's /generate as its default.
	if p := mustParse(t, strings.Replace(strings.Replace(enginePlan, `engine = ["sglang", "vllm"]`, "", 1), "[backend.engine_args]\nvllm = [\"--generation-config\", \"vllm\"]\n", "", 1)); p.Load.API != APIGenerate {
		t.Errorf("api %q without an engine axis, want generate", p.Load.API)
	}
}

// TestEngineAxisRefusals: what an engine-axis or vLLM plan cannot mean is refused with the fix.
func TestEngineAxisRefusals(t *testing.T) {
	for _, tc := range []struct{ name, edit, want string }{
		{"generate with vllm", "[load]\napi = \"generate\"\n", "vLLM has no /generate"},
		{"unknown engine", `engine = ["sglang", "trtllm"]`, `unknown engine "trtllm"`},
		{"twice", `engine = ["vllm", "vllm"]`, "listed twice"},
		{"command", "[backend]\ncommand = [\"x\"]", "drop backend.command"},
		{"engine_args key", "[backend.engine_args]\nlmdeploy = [\"--x\"]", `unknown engine "lmdeploy"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := enginePlan
			switch {
			case strings.HasPrefix(tc.edit, "engine"):
				src = strings.Replace(src, `engine = ["sglang", "vllm"]`, tc.edit, 1)
			case strings.HasPrefix(tc.edit, "[backend]"):
				src = strings.Replace(src, "[backend]\n", tc.edit+"\n", 1)
			case strings.HasPrefix(tc.edit, "[backend.engine_args]"):
				src = strings.Replace(src, "[backend.engine_args]\n", tc.edit+"\n", 1)
			default:
				src += tc.edit
			}
			if err := parseErr(t, src); !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
	diffusion := "name = \"d\"\n[backend]\nkind = \"vllm\"\nmode = \"serve\"\nmodel_type = \"diffusion\"\n[matrix]\nmodel = [\"m\"]\nprompt = [\"p\"]\n"
	if err := parseErr(t, diffusion); !strings.Contains(err.Error(), `kind = "vllm-omni"`) {
		t.Errorf("vllm kind with a diffusion model: %v", err)
	}
}
