package runner

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/backends/sglang"
	"github.com/sglprof/runner/backends/vllm"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/compare"
	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/exitcode"
)

// engineSettings are the parity settings of each engine's server (the backends own their
// flags and defaults).
var engineSettings = map[string]func(plans.Cell) []backends.Setting{
	sglang.Kind: sglang.ParitySettings,
	vllm.Kind:   vllm.ParitySettings,
}

// CheckParity is the parity check of a plan with an engine axis, before anything runs: for each
// configuration (the cell key without its engine part) served by more than one engine, the
// settings that change results on which the engines' servers, as configured, differ. Nil when
// no configuration has two engines (no engine axis).
func CheckParity(cells []plans.Cell) *rundir.Parity {
	type cfg struct {
		key      string
		settings map[string][]backends.Setting
	}
	var engines []string
	var order []string
	byKey := map[string]*cfg{}
	for _, c := range cells {
		key, engine, ok := SplitEngineKey(c.Key)
		settingsOf := engineSettings[engine]
		if !ok || settingsOf == nil {
			continue
		}
		if !slices.Contains(engines, engine) {
			engines = append(engines, engine)
		}
		g := byKey[key]
		if g == nil {
			g = &cfg{key: key, settings: map[string][]backends.Setting{}}
			byKey[key] = g
			order = append(order, key)
		}
		if _, seen := g.settings[engine]; !seen {
			g.settings[engine] = settingsOf(c)
		}
	}
	if len(engines) < 2 {
		return nil
	}
	p := &rundir.Parity{Engines: engines, Checked: backends.ParitySettings, Rows: []rundir.ParityRow{}}
	for _, key := range order {
		g := byKey[key]
		if len(g.settings) < 2 {
			continue
		}
		for _, name := range backends.ParitySettings {
			vals := make([]string, len(engines))
			var same []string
			for i, e := range engines {
				vals[i] = "-"
				for _, s := range g.settings[e] {
					if s.Name == name {
						vals[i] = s.Value
						same = append(same, s.Same)
					}
				}
			}
			distinct := slices.Clone(same)
			slices.Sort(distinct)
			if len(slices.Compact(distinct)) > 1 || len(same) < len(g.settings) {
				p.Rows = append(p.Rows, rundir.ParityRow{Config: key, Setting: name, Values: vals})
			}
		}
	}
	return p
}

// SplitEngineKey takes the engine part out of a cell key: ".../engine=vllm/c8" is
// (".../c8", "vllm", true); a key without one is (key, "", false).
func SplitEngineKey(key string) (rest, engine string, ok bool) {
	parts := strings.Split(key, "/")
	for i, p := range parts {
		if e, found := strings.CutPrefix(p, plans.EngineKeyPrefix); found {
			return strings.Join(append(parts[:i:i], parts[i+1:]...), "/"), e, true
		}
	}
	return key, "", false
}

// checkParityOf is CheckParity over a run's cell records.
func checkParityOf(recs []cellRecord) *rundir.Parity {
	cells := make([]plans.Cell, len(recs))
	for i, r := range recs {
		cells[i] = r.Cell
	}
	return CheckParity(cells)
}

// SplitEngines divides a run's configurations by engine: one Set per engine in the set, whose
// configurations are keyed without the engine part, so that the engines' cells of one
// configuration meet under one key. The order is the engines' first appearance in key order.
func SplitEngines(s *perf.Set) ([]string, map[string]*perf.Set) {
	var engines []string
	out := map[string]*perf.Set{}
	for _, key := range s.Keys() {
		rest, e, ok := SplitEngineKey(key)
		if !ok {
			continue
		}
		side := out[e]
		if side == nil {
			side = &perf.Set{Source: s.Source + " [" + plans.EngineKeyPrefix + e + "]", Kind: s.Kind, RunID: s.RunID, Plan: s.Plan,
				Start: s.Start, GPU: s.GPU, Driver: s.Driver, Commit: s.Commit, Configs: map[string]*perf.Config{}}
			out[e] = side
			engines = append(engines, e)
		}
		c := *s.Configs[key]
		c.Key = rest
		side.Configs[rest] = &c
	}
	return engines, out
}

// CompareEngines compares the engines of one run with an engine axis, configuration by
// configuration: the plan's first engine is the base, the second the new side (TTFT, TPOT,
// ITL, E2E and throughput rows side by side, with the t-test's verdict on each difference).
func (n NightlyOptions) CompareEngines(cur *perf.Set, p *plans.Plan) (*compare.Result, *perf.Set, *perf.Set, error) {
	found, sets := SplitEngines(cur)
	order := slices.Clone(p.Matrix.Engine)
	for _, e := range found {
		if !slices.Contains(order, e) {
			order = append(order, e)
		}
	}
	var have []string
	for _, e := range order {
		if sets[e] != nil {
			have = append(have, e)
		}
	}
	if len(have) < 2 {
		return nil, nil, nil, &exitcode.UsageError{Err: fmt.Errorf("%s: ok cells of %d engine(s) (%s); --engines compares the engines of a run whose plan has [matrix] engine = [\"sglang\", \"vllm\"]", cur.Source, len(have), strings.Join(have, ", "))}
	}
	co, _ := n.CompareOptions(p)
	base, next := sets[have[0]], sets[have[1]]
	res, err := compare.Compare(base, next, co)
	if err != nil {
		return nil, nil, nil, &exitcode.UsageError{Err: err}
	}
	res.Profilers = n.Profilers
	if len(res.Profilers) == 0 {
		res.Profilers = perf.DefaultProfilers
	}
	res.Notes = append(res.Notes, fmt.Sprintf("engines side by side: base is %s, new is %s; a \"regression\" row means %s is worse than %s there beyond the tolerance", have[0], have[1], have[1], have[0]))
	return res, base, next, nil
}
