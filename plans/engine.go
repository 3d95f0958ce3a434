package plans

import (
	"fmt"
	"maps"
	"slices"

	"github.com/BurntSushi/toml"
)

// The engine axis: `[matrix] engine = ["sglang", "vllm"]` runs the same LLM load against
// SGLang's and vLLM's servers in one plan, one run directory and one `runner compare
// --engines`. Each value is a backend.kind; the cell's id gets "-sglang"/"-vllm" and its key
// "/engine=sglang", which is how compare and the parity check pair the two engines' cells.

// KindVLLM is backend.kind for plain `vllm serve` (LLMs); "vllm-omni" is vLLM-Omni's
// diffusion server.
const KindVLLM = "vllm"

// Engines are the values of the engine axis: the LLM servers the runner drives.
var Engines = []string{DefaultKind, KindVLLM}

// EngineKeyPrefix starts the engine's part of a cell key ("/engine=vllm").
const EngineKeyPrefix = "engine="

// decodeEngine decodes [matrix] engine.
func (d *decoder) decodeEngine(rm *rawMatrix, m *Matrix) {
	decodeField(d, path("matrix", "engine"), rm.Engine, &m.Engine, `an array of strings such as ["sglang", "vllm"]`)
}

// defaultLLMAPI is load.api when the plan names none for an LLM plan: SGLang's /generate, but
// OpenAI /v1/completions (token-id prompts, exact lengths too) when any cell runs vLLM, which
// has no /generate; with an engine axis both engines then get the same API.
func defaultLLMAPI(p *Plan) string {
	if p.Backend.Kind == KindVLLM || inList(p.Matrix.Engine, KindVLLM) {
		return APICompletions
	}
	return APIGenerate
}

// validateEngine checks backend.kind = "vllm" and the engine axis.
func (d *decoder) validateEngine(p *Plan) {
	b, m := p.Backend, p.Matrix
	serve := !d.check("backend", "mode") || b.Mode == "serve"
	llm := d.check("backend", "model_type") && b.ModelType == ModelTypeLLM
	vllm := false
	if k := path("backend", "kind"); d.check(k...) && b.Kind == KindVLLM {
		vllm = true
		switch {
		case d.check("backend", "mode") && b.Mode != "serve":
			d.addKey(k, `"vllm" runs `+"`vllm serve`"+`: set backend.mode = "serve"`)
		case d.check("backend", "model_type") && !llm:
			d.addKey(k, fmt.Sprintf(`"vllm" serves LLMs (backend.model_type = "llm"), but the model type is %q; a diffusion model is served by kind = "vllm-omni"`, b.ModelType))
		}
	}
	if k := path("backend", "engine_args"); d.check(k...) {
		for _, e := range slices.Sorted(maps.Keys(b.EngineArgs)) {
			if !oneOf(e, Engines) {
				d.addKey(path("backend", "engine_args", e), fmt.Sprintf("unknown engine %q; use %s", e, quoteList(Engines)))
			}
			d.noNUL(path("backend", "engine_args", e), b.EngineArgs[e])
		}
	}
	k := path("matrix", "engine")
	if d.check(k...) && d.md.IsDefined(k...) {
		switch {
		case len(m.Engine) == 0:
			d.addKey(k, `empty axis; list the engines such as ["sglang", "vllm"], or drop the key`)
		case !serve:
			d.addKey(k, serveOnlyMsg)
		case d.check("backend", "model_type") && !llm:
			d.addKey(k, fmt.Sprintf(`the engine axis compares LLM servers (backend.model_type = "llm"), but the model type is %q`, b.ModelType))
		}
		seen := map[string]int{}
		for i, e := range m.Engine {
			if !oneOf(e, Engines) {
				d.addElem(k, i, e, fmt.Sprintf("unknown engine %q; use %s", e, quoteList(Engines)))
			} else if j, dup := seen[e]; dup {
				d.addElem(k, i, e, fmt.Sprintf("%s is listed twice (elements %d and %d); list each engine once", e, j, i))
			}
			seen[e] = i
			vllm = vllm || e == KindVLLM
		}
		for _, key := range [][]string{path("backend", "kind"), path("backend", "command"), path("backend", "url")} {
			if d.check(key...) && d.md.IsDefined(key...) {
				d.addKey(key, fmt.Sprintf("the engine axis picks each cell's server program (sglang, vllm from PATH); drop %s", toml.Key(key)))
			}
		}
	}
	if ka := path("load", "api"); vllm && d.check(ka...) && p.Load.API == APIGenerate && d.md.IsDefined(ka...) {
		d.addKey(ka, `vLLM has no /generate (SGLang's native API); use api = "completions" (token-id prompts, exact input lengths, the default with vLLM) or "chat"`)
	}
}

// enginePoints is the engine axis as llmPoints' outermost dimension (one empty point without
// the axis, so that the ids of other plans never change).
func enginePoints(m Matrix) []llmPoint {
	if len(m.Engine) == 0 {
		return []llmPoint{{}}
	}
	pts := make([]llmPoint, len(m.Engine))
	for i, e := range m.Engine {
		pts[i] = llmPoint{engine: e, id: "-" + e, key: "/" + EngineKeyPrefix + e}
	}
	return pts
}
