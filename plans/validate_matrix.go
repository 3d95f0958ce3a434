package plans

import (
	"fmt"
	"slices"
	"strings"
)

// validateMatrix checks the [matrix] axes of every mode (token lengths: validate_serve.go).
func (d *decoder) validateMatrix(p *Plan) {
	m := p.Matrix
	d.stringAxis(path("matrix", "model"), m.Model, true, `list at least one model, e.g. model = ["Qwen/Qwen-Image"] under [matrix]`)
	// An LLM cell's prompts come from its dataset ([load] dataset), so an LLM plan needs none.
	llm := d.check("backend", "model_type") && p.Backend.ModelType == ModelTypeLLM
	d.stringAxis(path("matrix", "prompt"), m.Prompt, !llm, `list at least one prompt, e.g. prompt = ["a red fox in the snow"] under [matrix]`)
	if k := path("matrix", "resolution"); d.check(k...) && m.Resolution != nil {
		if len(m.Resolution) == 0 {
			d.addKey(k, `empty axis; list at least one resolution such as ["1024x1024"], or drop the key to use the model's default`)
		}
		seen, lits := map[string]int{}, map[string]int{}
		for i, s := range m.Resolution {
			r, err := ParseResolution(s)
			if err != nil {
				d.addElem(k, i, s, err.Error())
				continue
			}
			if j, dup := seen[r.size()]; dup {
				d.addElemN(k, i, s, lits[s], fmt.Sprintf("%q is the same size as element %d; list each resolution once (use matrix.repeats to run a configuration more than once)", s, j))
			}
			seen[r.size()] = i
			lits[s]++
		}
	}
	if k := path("matrix", "num_inference_steps"); d.check(k...) && m.NumInferenceSteps != nil {
		if len(m.NumInferenceSteps) == 0 {
			d.addKey(k, "empty axis; list at least one step count such as [50], or drop the key to use the model's default")
		}
		seen := map[int]int{}
		for i, n := range m.NumInferenceSteps {
			if n <= 0 {
				d.addElem(k, i, "", fmt.Sprintf("%d steps: the number of inference steps must be > 0, e.g. 50", n))
				continue
			}
			if j, dup := seen[n]; dup {
				d.addElem(k, i, "", fmt.Sprintf("%d is listed twice (elements %d and %d); list each value once", n, j, i))
			}
			seen[n] = i
		}
	}
	if k := path("matrix", "seed"); d.check(k...) {
		if len(m.Seed) == 0 {
			d.addKey(k, "empty axis; list at least one seed such as [0], or drop the key for the default [0]")
		}
		seen := map[int64]int{}
		for i, s := range m.Seed {
			if s < 0 {
				d.addElem(k, i, "", fmt.Sprintf("seed %d is negative; seeds must be >= 0", s))
				continue
			}
			if j, dup := seen[s]; dup {
				d.addElem(k, i, "", fmt.Sprintf("seed %d is listed twice (elements %d and %d); list each seed once", s, j, i))
			}
			seen[s] = i
		}
	}
	if k := path("matrix", "repeats"); d.check(k...) && m.Repeats < 1 {
		d.addKey(k, fmt.Sprintf("repeats = %d; it must be >= 1 (1 runs each configuration once)", m.Repeats))
	}
}

// stringAxis checks a matrix axis of strings: present when required, not empty, no empty or
// duplicate values, nothing that cannot be an argv element.
func (d *decoder) stringAxis(k []string, vals []string, required bool, add string) {
	if !d.check(k...) {
		return
	}
	if vals == nil {
		if required && !d.md.IsDefined(k...) {
			d.missing(k, "required: "+add)
		}
		return
	}
	if len(vals) == 0 {
		d.addKey(k, "empty axis; "+add)
		return
	}
	seen, lits := map[string]int{}, map[string]int{}
	for i, s := range vals {
		switch {
		case strings.TrimSpace(s) == "":
			d.addElem(k, i, s, "empty value; give a non-empty string")
		case strings.ContainsRune(s, 0):
			d.addElem(k, i, "", "contains a NUL byte, which cannot be passed as a command-line argument; remove it")
		default:
			if j, dup := seen[s]; dup {
				d.addElemN(k, i, s, lits[s], fmt.Sprintf("listed twice (elements %d and %d); list each value once and use matrix.repeats to run a configuration more than once", j, i))
			}
			seen[s] = i
			lits[s]++
		}
	}
}

// cellCount is the number of cells Expand makes, or false when it exceeds MaxCells.
func cellCount(p *Plan) (int, bool) {
	n, prompts := 1, len(p.Matrix.Prompt)
	if p.Matrix.Prompt == nil && p.Backend.ModelType == ModelTypeLLM {
		prompts = 1 // an LLM plan without prompts: its dataset makes them
	}
	for _, l := range []int{len(p.Matrix.Model), prompts, max(1, len(p.Matrix.Resolution)),
		max(1, len(p.Matrix.NumInferenceSteps)), max(1, len(p.Matrix.Seed)), max(1, len(p.Matrix.InputLen)),
		max(1, len(p.Matrix.OutputLen)), len(p.Profile.Profilers), max(1, p.Matrix.Repeats),
		max(1, len(p.Matrix.Concurrency)), max(1, len(p.Matrix.RequestRate)), max(1, len(p.Matrix.Engine)), serverArgCells(append(slices.Clone(p.Matrix.ServerArgs), p.Matrix.Args...))} {
		if l > MaxCells {
			return 0, false
		}
		n *= l
		if n > MaxCells {
			return 0, false
		}
	}
	return n, true
}
