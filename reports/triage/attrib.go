package triage

import (
	"fmt"
	"sort"
)

// MaxLocations bounds the Python sites listed per kernel row (the rest is small by construction:
// sites are sorted by time).
const MaxLocations = 4

// stageAliases are the mapping-trace stages searched for a formal stage, in order (§5.5).
func stageAliases(stage string) []string {
	switch stage {
	case StageExtend:
		return []string{StageExtend, StageMixed, StageAll, StageUnannotated}
	case StageDecode:
		return []string{StageDecode, StageMixed, StageAll, StageUnannotated}
	}
	return []string{stage, StageAll, StageUnannotated}
}

const globalStage = "\x00global"

func (a *analyzer) addMapping(sr stageResult) {
	if a.mappingRoof == nil {
		a.mappingRoof = map[string]map[string]*mapRoof{}
	}
	for _, st := range []string{sr.stage.Stage, globalStage} {
		m := a.mapping[st]
		if m == nil {
			m = map[string]map[siteKeyS]int64{}
			a.mapping[st] = m
		}
		mr := a.mappingRoof[st]
		if mr == nil {
			mr = map[string]*mapRoof{}
			a.mappingRoof[st] = mr
		}
		for _, g := range sr.aggs {
			if len(g.rsites) == 0 {
				continue
			}
			for _, key := range []string{g.name, "\x00" + g.base} {
				d := m[key]
				if d == nil {
					d = map[siteKeyS]int64{}
					m[key] = d
				}
				for k, ns := range g.rsites {
					d[k] += ns
				}
				r := mr[key]
				if r == nil {
					r = &mapRoof{}
					mr[key] = r
				}
				r.add(g)
			}
		}
	}
}

// mappingKey finds where a formal kernel's mapping-trace entry is: the first of the stage's
// aliases (then every stage) that holds its canonical name, else its base name.
func (a *analyzer) mappingKey(stage string, g *kagg) (st, key string, ok bool) {
	if a.mapping == nil {
		return "", "", false
	}
	for _, st := range append(stageAliases(stage), globalStage) {
		m := a.mapping[st]
		if m == nil {
			continue
		}
		if m[g.name] != nil {
			return st, g.name, true
		}
		if m["\x00"+g.base] != nil {
			return st, "\x00" + g.base, true
		}
	}
	return "", "", false
}

func (a *analyzer) lookupMapping(stage string, g *kagg) map[siteKeyS]int64 {
	st, key, ok := a.mappingKey(stage, g)
	if !ok {
		return nil
	}
	return a.mapping[st][key]
}

// lookupMappingRoof returns the mapping trace's roofline sums for a formal kernel row that has
// none of its own (a graph replay has no CPU op, hence no shapes), from the same entry its
// Python sites come from; nil when that entry cannot stand for every launch (mapRoof.usable).
func (a *analyzer) lookupMappingRoof(stage string, g *kagg) *mapRoof {
	st, key, ok := a.mappingKey(stage, g)
	if !ok {
		return nil
	}
	if r := a.mappingRoof[st][key]; r.usable() {
		return r
	}
	return nil
}

// mapRoof is the roofline sums of one kernel name in the mapping traces: its launches, how
// many of them had a cost, and the FLOPs and bytes of those.
type mapRoof struct {
	launches, costed int
	flops, bytes     float64
	class            string
	mixed, link      bool
}

func (r *mapRoof) add(g *kagg) {
	r.launches += g.count
	r.costed += g.roof.n
	r.flops += g.roof.flops
	r.bytes += g.roof.bytes
	r.link = r.link || g.roof.link
	switch {
	case g.roof.n == 0:
	case r.class == "" && !r.mixed:
		r.class, r.mixed = g.roof.class, g.roof.mixed
	case g.roof.class != r.class || g.roof.mixed:
		r.mixed = true
	}
}

// usable says the sums can stand for a formal kernel's launches: every launch of the name in
// the mapping trace had a cost. A name only some of whose launches were costed (a split-K
// GEMM's second kernel carries none, an op without shapes) would make any per-launch average
// a guess.
func (r *mapRoof) usable() bool {
	return r != nil && r.launches > 0 && r.costed == r.launches && (r.flops > 0 || r.bytes > 0)
}

// scaled is the roofline sums for n formal launches taking ns: the mapping trace's FLOPs and
// bytes per launch times n. The same code in both traces launches the same mix of shapes
// under one kernel name, so the average per launch carries over.
func (r *mapRoof) scaled(n int, ns int64) roofAgg {
	f := float64(n) / float64(r.launches)
	return roofAgg{flops: r.flops * f, bytes: r.bytes * f, ns: ns, n: n, class: r.class, mixed: r.mixed, link: r.link}
}

type siteShare struct {
	k  siteKeyS
	ns int64
}

func sortedSites(m map[siteKeyS]int64) []siteShare {
	out := make([]siteShare, 0, len(m))
	for k, ns := range m {
		out = append(out, siteShare{k, ns})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].ns != out[j].ns {
			return out[i].ns > out[j].ns
		}
		if out[i].k.loc != out[j].k.loc {
			return out[i].k.loc < out[j].k.loc
		}
		return out[i].k.cpu < out[j].k.cpu
	})
	return out
}

// locations builds a row's Python sites. In mapping-formal mode a kernel whose formal-trace
// time is not attributed to a real Python site (graph replays, unresolved) takes the mapping
// trace's sites; a kernel that has its own sites keeps them, and a disagreement with the
// mapping trace becomes a warning instead of a silent merge (W9).
func (a *analyzer) locations(c *traceCtx, g *kagg, stage string) []Location {
	own := map[siteKeyS]int64{}
	for k, ns := range g.sites {
		own[c.resolve(k)] += ns
	}
	sites := sortedSites(own)
	if a.mapping != nil {
		m := a.lookupMapping(stage, g)
		switch {
		case m == nil:
			if g.resolved < g.total {
				a.unmatched(stage, g)
			}
		case g.resolved == 0:
			ms := sortedSites(m)
			var tot int64
			for _, s := range ms {
				tot += s.ns
			}
			// Shares come from the mapping trace's distribution, applied to this kernel.
			out := make([]Location, 0, MaxLocations)
			for i, s := range ms {
				if i == MaxLocations {
					break
				}
				out = append(out, Location{Location: s.k.loc, CPUOp: s.k.cpu + " (mapping)", SharePct: pct(s.ns, tot)})
			}
			return out
		default:
			ms := sortedSites(m)
			var top string
			for _, s := range sites {
				if s.k.loc != "unresolved" && s.k.loc != "" {
					top = s.k.loc
					break
				}
			}
			if top != "" && ms[0].k.loc != top {
				a.warn = append(a.warn, fmt.Sprintf("attribution conflict in %s for %s: formal trace says %s, mapping trace says %s; showing the formal trace's sites", stage, shortName(g.name), top, ms[0].k.loc))
			}
		}
	}
	out := make([]Location, 0, MaxLocations)
	for i, s := range sites {
		if i == MaxLocations {
			break
		}
		out = append(out, Location{Location: s.k.loc, CPUOp: s.k.cpu, SharePct: pct(s.ns, g.total)})
	}
	return out
}

// unmatched counts a formal kernel without a mapping-trace match; one warning per stage
// summarises them (the first name is given so the user can search for it).
func (a *analyzer) unmatched(_ string, g *kagg) {
	if a.unmatchedN == 0 {
		a.unmatchedFirst = shortName(g.name)
	}
	a.unmatchedN++
	a.unmatchedNS += g.total
}

// shortName bounds a kernel name for warnings and cells (W14).
func shortName(s string) string { return shortenName(s, 120) }
