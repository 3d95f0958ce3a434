package runner

import (
	"slices"
	"strings"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/backends/sglang"
	"github.com/sglprof/runner/backends/vllm"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
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
