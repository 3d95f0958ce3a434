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
	for _, st := range []string{sr.stage.Stage, globalStage} {
		m := a.mapping[st]
		if m == nil {
			m = map[string]map[siteKeyS]int64{}
			a.mapping[st] = m
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
			}
		}
	}
}

func (a *analyzer) lookupMapping(stage string, g *kagg) map[siteKeyS]int64 {
	if a.mapping == nil {
		return nil
	}
	for _, st := range append(stageAliases(stage), globalStage) {
		m := a.mapping[st]
		if m == nil {
			continue
		}
		if d := m[g.name]; d != nil {
			return d
		}
		if d := m["\x00"+g.base]; d != nil {
			return d
		}
	}
	return nil
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
