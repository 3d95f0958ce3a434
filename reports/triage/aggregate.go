package triage

import (
	"fmt"
	"sort"
)

// NameTotal is one kernel name's aggregate, as a database can compute it without handing over
// the kernels (nsys exports: SQL GROUP BY).
type NameTotal struct {
	Name    string
	Count   int64
	TotalNS int64
}

// KernelsOnly builds a one-stage report from per-name aggregates: the kernel table and the
// fusion table (whose back-to-back test is unknown without the kernels, so it does not lower
// any confidence), but no overlap table and no locations, which need every kernel. It is the
// path for exports too large for the full trace model: its memory grows with the number of
// kernel names, not kernels.
func KernelsOnly(path string, totals []NameTotal, opts Options) *Report {
	cls, cat := opts.Classifier, opts.Catalog
	if cls == nil {
		cls = DefaultClassifier()
	}
	if cat == nil {
		cat = DefaultCatalog()
	}
	type agg struct {
		name  string
		count int64
		ns    int64
	}
	byName := map[string]*agg{}
	var total, count int64
	for _, t := range totals {
		key := Canonical(t.Name)
		g := byName[key]
		if g == nil {
			g = &agg{name: key}
			byName[key] = g
		}
		g.count += t.Count
		g.ns += t.TotalNS
		total += t.TotalNS
		count += t.Count
	}
	aggs := make([]*agg, 0, len(byName))
	for _, g := range byName {
		aggs = append(aggs, g)
	}
	sort.Slice(aggs, func(i, j int) bool {
		if aggs[i].ns != aggs[j].ns {
			return aggs[i].ns > aggs[j].ns
		}
		return aggs[i].name < aggs[j].name
	})
	rows := make([]KernelRow, 0, len(aggs))
	for _, g := range aggs {
		rows = append(rows, KernelRow{Name: g.name, Category: cls.Classify(g.name), TotalUS: us(g.ns), Count: int(g.count),
			SharePct: pct(g.ns, total), totalNS: g.ns, Locations: []Location{}})
	}
	st := Stage{Stage: StageAll, KernelCount: int(count), KernelTimeUS: us(total), Kernels: rows, Overlap: []OverlapRow{},
		Fusions: cat.Match(rows, total, opts.Model, opts.TPSize)}
	rep := &Report{
		Inputs: []InputInfo{{Path: path, Stage: StageAll, Rank: -1, Device: -1}},
		Mode:   ModeSingle,
		Stages: []Stage{st},
		Warnings: []string{fmt.Sprintf("kernel table from per-name sums only (%d kernels, %d names): no overlap table, "+
			"no Python or NVTX locations, no busy or window time; run without --kernels-only for them", count, len(rows))},
	}
	if opts.Cutoff > 0 {
		applyCutoff(&rep.Stages[0], opts.Cutoff)
	}
	return rep
}
