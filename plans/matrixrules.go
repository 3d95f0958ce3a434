package plans

import (
	"fmt"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
)

// CellRule is one [[matrix.exclude]] or [[matrix.include]] entry: it matches the cells whose
// values equal every key it gives (an absent key matches any value). As in GitHub Actions'
// matrix, exclude drops the cells of the cross product that match an exclude rule, and include
// then takes back those that also match an include rule: `exclude = profiler "nsys"` with
// `include = profiler "nsys", repeat 1` profiles one nsys repeat of each configuration instead
// of every repeat. Include never invents a cell outside the cross product, so every cell keeps
// the key and id the full matrix would give it.
type CellRule struct {
	Model       *string  `json:"model,omitempty"`
	Prompt      *string  `json:"prompt,omitempty"`
	Resolution  *string  `json:"resolution,omitempty"`
	Steps       *int     `json:"num_inference_steps,omitempty"`
	Seed        *int64   `json:"seed,omitempty"`
	InputLen    *int     `json:"input_len,omitempty"`
	OutputLen   *int     `json:"output_len,omitempty"`
	Concurrency *int     `json:"concurrency,omitempty"`
	RequestRate *float64 `json:"request_rate,omitempty"` // 0 = "inf"
	Profiler    *string  `json:"profiler,omitempty"`
	Repeat      *int     `json:"repeat,omitempty"`
}

// ruleKeys are the keys a rule may give, in documentation order.
var ruleKeys = []string{"model", "prompt", "resolution", "num_inference_steps", "seed", "input_len",
	"output_len", "concurrency", "request_rate", "profiler", "repeat"}

// ruleCell is what a rule is matched against: one cell of the cross product before it is built.
type ruleCell struct {
	model, prompt, profiler string
	res                     Resolution
	steps, in, out, conc    int
	seed                    int64
	rate                    float64
	hasConc, hasRate        bool
	repeat                  int
}

// matches reports whether every key the rule gives equals the cell's value. A resolution is
// compared after parsing, so "720p" matches "1280x720".
func (r CellRule) matches(c ruleCell) bool {
	eq := func(p *string, v string) bool { return p == nil || *p == v }
	eqi := func(p *int, v int) bool { return p == nil || *p == v }
	if !eq(r.Model, c.model) || !eq(r.Prompt, c.prompt) || !eq(r.Profiler, c.profiler) ||
		!eqi(r.Steps, c.steps) || !eqi(r.InputLen, c.in) || !eqi(r.OutputLen, c.out) || !eqi(r.Repeat, c.repeat) {
		return false
	}
	if r.Seed != nil && *r.Seed != c.seed {
		return false
	}
	if r.Resolution != nil {
		if res, err := ParseResolution(*r.Resolution); err != nil || !sameSize(res, c.res) {
			return false
		}
	}
	if r.Concurrency != nil && (!c.hasConc || *r.Concurrency != c.conc) {
		return false
	}
	if r.RequestRate != nil && (!c.hasRate || *r.RequestRate != c.rate) {
		return false
	}
	return true
}

// sameSize compares two resolutions by their pixels: a preset and its WxH form are one size.
func sameSize(a, b Resolution) bool { return a.Width == b.Width && a.Height == b.Height }

// keep applies the matrix's rules to one cell of the cross product.
func (m Matrix) keep(c ruleCell) bool {
	if !slices.ContainsFunc(m.Exclude, func(r CellRule) bool { return r.matches(c) }) {
		return true
	}
	return slices.ContainsFunc(m.Include, func(r CellRule) bool { return r.matches(c) })
}

// decodeRules decodes [[matrix.exclude]] or [[matrix.include]] (name). Unknown keys are left
// undecoded, so checkUndecoded reports them with a did-you-mean among ruleKeys.
func (d *decoder) decodeRules(name string, prim toml.Primitive) []CellRule {
	k := path("matrix", name)
	if !d.present(k) {
		return nil
	}
	var raw []map[string]toml.Primitive
	if err := d.md.PrimitiveDecode(prim, &raw); err != nil {
		d.typeError(k, prim, err, fmt.Sprintf(`an array of tables: write each rule as a [[matrix.%s]] section with keys such as profiler = "nsys"`, name))
		return nil
	}
	out := make([]CellRule, 0, len(raw))
	for i, m := range raw {
		var r CellRule
		for key := range m {
			if !slices.Contains(ruleKeys, key) {
				kk := path("matrix", name, key)
				d.reported[toml.Key(kk).String()] = true
				d.addKey(kk, fmt.Sprintf("unknown key %q in a [[matrix.%s]] rule; a rule gives some of %s", key, name, strings.Join(ruleKeys, ", ")))
			}
		}
		for _, key := range ruleKeys {
			p, ok := m[key]
			if !ok {
				continue
			}
			kk := path("matrix", name, key)
			var err error
			switch key {
			case "model":
				err = d.md.PrimitiveDecode(p, &r.Model)
			case "prompt":
				err = d.md.PrimitiveDecode(p, &r.Prompt)
			case "resolution":
				err = d.md.PrimitiveDecode(p, &r.Resolution)
			case "profiler":
				err = d.md.PrimitiveDecode(p, &r.Profiler)
			case "num_inference_steps":
				err = d.md.PrimitiveDecode(p, &r.Steps)
			case "seed":
				err = d.md.PrimitiveDecode(p, &r.Seed)
			case "input_len":
				err = d.md.PrimitiveDecode(p, &r.InputLen)
			case "output_len":
				err = d.md.PrimitiveDecode(p, &r.OutputLen)
			case "concurrency":
				err = d.md.PrimitiveDecode(p, &r.Concurrency)
			case "repeat":
				err = d.md.PrimitiveDecode(p, &r.Repeat)
			case "request_rate":
				if rate, ok := d.rate(kk, p, -1); ok {
					r.RequestRate = &rate
				}
				continue
			}
			if err != nil {
				d.typeError(kk, p, err, fmt.Sprintf("one value of the matrix's %s axis", key))
			}
		}
		if len(m) == 0 {
			d.addElem(k, i, "", fmt.Sprintf("rule %d gives no key, so it matches every cell; give the values it matches, such as profiler = \"nsys\"", i+1))
			continue
		}
		out = append(out, r)
	}
	return out
}

// validateRules checks that every value a rule gives is one the plan's axes have (a rule that
// can never match is a typo), and that the rules leave at least one cell.
func (d *decoder) validateRules(p *Plan) {
	m := p.Matrix
	for _, name := range []string{"exclude", "include"} {
		rules := m.Exclude
		if name == "include" {
			rules = m.Include
		}
		for i, r := range rules {
			bad := func(key, v string, valid []string) {
				d.addElem(path("matrix", name), i, "", fmt.Sprintf("rule %d: %s = %s is not a value of the plan's %s (%s), so the rule never matches; fix the value or add it to the axis",
					i+1, key, v, key, strings.Join(valid, ", ")))
			}
			strIn := func(key string, v *string, axis []string) {
				if v != nil && !slices.Contains(axis, *v) {
					bad(key, fmt.Sprintf("%q", *v), quoted(axis))
				}
			}
			strIn("model", r.Model, m.Model)
			strIn("prompt", r.Prompt, m.Prompt)
			strIn("profiler", r.Profiler, p.Profile.Profilers)
			if r.Resolution != nil {
				res, err := ParseResolution(*r.Resolution)
				ok := err == nil && slices.ContainsFunc(m.Resolution, func(s string) bool { x, e := ParseResolution(s); return e == nil && sameSize(x, res) })
				if !ok {
					bad("resolution", fmt.Sprintf("%q", *r.Resolution), quoted(m.Resolution))
				}
			}
			intIn := func(key string, v *int, axis []int) {
				if v != nil && !slices.Contains(axis, *v) {
					bad(key, fmt.Sprint(*v), ints(axis))
				}
			}
			intIn("num_inference_steps", r.Steps, m.NumInferenceSteps)
			intIn("input_len", r.InputLen, m.InputLen)
			intIn("output_len", r.OutputLen, m.OutputLen)
			intIn("concurrency", r.Concurrency, m.Concurrency)
			if r.Seed != nil && !slices.Contains(m.Seed, *r.Seed) {
				bad("seed", fmt.Sprint(*r.Seed), ints(m.Seed))
			}
			if r.RequestRate != nil && !slices.Contains(m.RequestRate, *r.RequestRate) {
				rates := make([]string, len(m.RequestRate))
				for j, x := range m.RequestRate {
					rates[j] = RateText(x)
				}
				bad("request_rate", RateText(*r.RequestRate), rates)
			}
			if r.Repeat != nil && (*r.Repeat < 1 || *r.Repeat > max(m.Repeats, 1)) {
				d.addElem(path("matrix", name), i, "", fmt.Sprintf("rule %d: repeat = %d is not a repeat of this plan (1 to %d)", i+1, *r.Repeat, max(m.Repeats, 1)))
			}
		}
	}
	if len(m.Exclude) > 0 && len(d.problems) == 0 && len(p.Expand()) == 0 {
		d.addKey(path("matrix", "exclude"), "the exclude rules leave no cell; narrow them or add an include rule")
	}
}

func quoted(l []string) []string {
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

func ints[T int | int64](l []T) []string {
	out := make([]string, len(l))
	for i, v := range l {
		out[i] = fmt.Sprint(v)
	}
	return out
}
