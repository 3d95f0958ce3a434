package triage

import (
	"sort"
	"strings"

	"github.com/sglprof/runner/reports/render/table"
)

// Verdicts and recommendations of the overlap table (anchor v2 labels, plus "overlapped" for
// communication that a single trace shows already hidden behind compute).
const (
	VerdictHeadroom   = "headroom"
	VerdictLowROI     = "low-roi-hidden"
	VerdictOverlapped = "overlapped"

	RecTryOverlap = "try overlap"
	RecTryFusion  = "try fusion"
	RecCheckDeps  = "check deps"
	RecSkip       = "skip"
	RecDefer      = "defer"
	RecInspect    = "inspect"
	// RecCopyAsync is the advice for a host/device copy: pinned host memory and a non-blocking
	// copy on a side stream, or move it out of the step loop. Copies are never "try fusion".
	RecCopyAsync = "pin + async copy"
	// RecCopyAvoid is the advice for a device-to-device copy or a memset: avoid it (write in
	// place, preallocate) or move it out of the step loop.
	RecCopyAvoid = "avoid or hoist copy"
	// RecCopyPinned is the advice for a host copy whose host memory is already pinned (torch's
	// "Memcpy HtoD (Pinned -> Device)"): pinning is done, so a non-blocking copy on a side
	// stream, or moving it out of the step loop.
	RecCopyPinned = "async or hoist copy"
	// RecSideStream replaces "try overlap" and the async-copy advice for an op that already
	// runs on a side stream (not the stage's main compute stream) and is still exposed: it is
	// asynchronous already, so the advice is to start it earlier or give it independent compute
	// to overlap with.
	RecSideStream = "start earlier"

	DepHigh    = "high"
	DepUnclear = "unclear"
	DepLow     = "low"
)

func shortenName(s string, n int) string { return table.Shorten(s, n) }

type ovCand struct {
	g     *kagg
	row   *KernelRow
	score float64
	excl  float64
	hid   float64
}

// overlapRows selects and ranks the overlap table of one stage (anchor §6.4–6.6). Shares use
// the same denominator as the kernel table (the stage's summed kernel time), so one kernel
// shows one percentage everywhere (W7).
//
// main is the stage's main compute stream: a communication kernel or copy whose longest
// launch ran on another stream already runs on a side stream and is advised accordingly. The
// rows come out by priority, then share.
func (a *analyzer) overlapRows(aggs []*kagg, total int64, rows []KernelRow, dep func(g *kagg) string, main int32) []OverlapRow {
	var head, low, comm []ovCand
	for i, g := range aggs {
		if g.total < MinOverlapKernelNS || g.total == 0 {
			continue
		}
		cd := ovCand{g: g, row: &rows[i]}
		cd.hid = float64(g.hidden) / float64(g.total)
		cd.excl = 1 - cd.hid
		switch {
		case cd.excl >= HeadroomExclusiveRatio:
			cd.score = float64(g.total-g.hidden) * weightOf(g.cat)
			head = append(head, cd)
		case (g.cat == CatElementwise || g.cat == CatMemory || isLight(g.cat)) && cd.hid >= LowROIHiddenRatio:
			cd.score = float64(g.hidden)
			low = append(low, cd)
		case g.cat == CatCommunication && cd.hid >= OverlappedCommRatio:
			cd.score = float64(g.hidden)
			comm = append(comm, cd)
		}
	}
	byScore := func(cs []ovCand, computeLast bool) {
		sort.Slice(cs, func(i, j int) bool {
			if computeLast {
				ci, cj := isCompute(cs[i].g.cat), isCompute(cs[j].g.cat)
				if ci != cj {
					return !ci
				}
			}
			if cs[i].score != cs[j].score {
				return cs[i].score > cs[j].score
			}
			return cs[i].g.name < cs[j].g.name
		})
	}
	byScore(head, true)
	byScore(low, false)
	byScore(comm, false)
	var out []OverlapRow
	n := 0
	for _, cd := range head {
		if n == MaxHeadroomRows {
			break
		}
		r := a.ovRow(dep, cd, total, VerdictHeadroom, main)
		if r.Priority == "P5" {
			continue
		}
		out = append(out, r)
		n++
	}
	n = 0
	for _, cd := range low {
		if n == MaxLowROIRows {
			break
		}
		out = append(out, a.ovRow(dep, cd, total, VerdictLowROI, main))
		n++
	}
	for _, cd := range comm {
		out = append(out, a.ovRow(dep, cd, total, VerdictOverlapped, main))
	}
	// By priority, then share: P1 rows first whatever list they came from (a compute kernel's
	// headroom score put a P2 above a P1 before).
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Priority != out[j].Priority {
			return out[i].Priority < out[j].Priority
		}
		return out[i].SharePct > out[j].SharePct
	})
	return out
}

func (a *analyzer) ovRow(dep func(g *kagg) string, cd ovCand, total int64, verdict string, main int32) OverlapRow {
	g := cd.g
	r := OverlapRow{
		Verdict: verdict, Kernel: g.name, Category: g.cat, TotalUS: us(g.total),
		SharePct: pct(g.total, total), ExclusivePct: cd.excl * 100, HiddenPct: cd.hid * 100,
		DepRisk: dep(g), Scope: "unmapped",
	}
	if len(cd.row.Locations) > 0 {
		r.Scope = cd.row.Locations[0].Location
	}
	r.Priority, r.Recommendation = priority(verdict, g.cat, g.total, r.SharePct, cd.excl, cd.hid, r.DepRisk)
	if adv := copyAdvice(g.name); adv != "" && (r.Recommendation == RecTryFusion || r.Recommendation == RecCheckDeps) {
		r.Recommendation = adv
	}
	// "Run the collective on a side stream" and "make the copy non-blocking on a side stream"
	// are wrong for an op that is there already (a DDP all-reduce on NCCL's stream, a pinned
	// copy via cudaMemcpyAsync on its own stream): it is exposed because nothing independent
	// runs beside it or because it starts late.
	if g.repStr != main && (r.Recommendation == RecTryOverlap || r.Recommendation == RecCopyPinned) {
		r.Recommendation = RecSideStream
	}
	return r
}

// copyAdvice is the recommendation for a runtime copy or memset (torch "Memcpy HtoD (…)", nsys
// "[CUDA memcpy Host-to-Device]", HIP hipMemcpy…), or "" for a kernel: a copy is not fused
// with kernels, it is made asynchronous, avoided or moved out of the loop.
func copyAdvice(name string) string {
	s := strings.ToLower(name)
	if !strings.HasPrefix(s, "memcpy") && !strings.HasPrefix(s, "memset") && !strings.HasPrefix(s, "[cuda mem") &&
		!strings.HasPrefix(s, "hipmemcpy") && !strings.HasPrefix(s, "hipmemset") {
		return ""
	}
	if strings.Contains(s, "pinned") {
		return RecCopyPinned
	}
	for _, host := range []string{"htod", "dtoh", "host", "pageable", "htoh"} {
		if strings.Contains(s, host) {
			return RecCopyAsync
		}
	}
	return RecCopyAvoid
}

// priority implements the anchor's §6.6 decision table (v2 labels), given the kernel's summed
// time ns and its share of the stage. P1 and P2 need at least MinActNS as well as
// SkipShareBelowPct: a few microseconds are a large share of a tiny stage, not a first action.
func priority(verdict, cat string, ns int64, share, excl, hid float64, dep string) (string, string) {
	switch {
	case share < SkipShareBelowPct:
		return "P5", RecSkip
	case verdict == VerdictHeadroom && ns < MinActNS:
		return "P3", RecDefer
	case verdict == VerdictHeadroom && dep == DepLow && cat == CatCommunication:
		return "P1", RecTryOverlap
	case verdict == VerdictHeadroom && dep == DepLow:
		return "P1", RecTryFusion
	case verdict == VerdictHeadroom:
		return "P2", RecCheckDeps
	case verdict == VerdictLowROI:
		return "P4", RecSkip
	case excl >= DeferExclusiveRatio && dep == DepLow:
		return "P3", RecDefer
	case hid >= SkipHiddenRatio:
		return "P5", RecSkip
	case dep == DepHigh:
		return "P4", RecCheckDeps
	case dep == DepUnclear:
		return "P4", RecInspect
	}
	return "P4", RecDefer
}

// depRisk is the same-stream neighbour heuristic of §6.5 for the representative op (the
// kernel's longest launch) of a held stage: see depFrom.
func depRisk(c *traceCtx, ops []int32, iv *spans, sw *Sweep, rep int32) string {
	if rep < 0 || int(rep) >= iv.len() {
		return DepUnclear
	}
	me := iv.at(rep)
	p := sw.posOf(iv, rep)
	var nb [2]*neighbour
	for k, np := range []int32{p - 1, p + 1} {
		if np < 0 || int(np) >= len(sw.Order) {
			continue
		}
		ni := sw.Order[np]
		x := iv.at(ni)
		if x.Stream != me.Stream {
			continue
		}
		nb[k] = &neighbour{start: x.Start, end: x.End, cat: c.cats[c.canonID(c.t.GPUOps[ops[ni]].Name)], site: depSite(c, c.opSite(ops[ni]))}
	}
	return depFrom(me.Start, me.End, c.cats[c.canonID(c.t.GPUOps[ops[rep]].Name)], depSite(c, c.opSite(ops[rep])), nb[0], nb[1])
}

// neighbour is the op before or after a representative op on its stream.
type neighbour struct {
	start, end int64
	cat, site  string
}

// depFrom decides the dependency risk of an op [start, end) of category myCat at site mySite
// from its same-stream neighbours (nil where there is none): a neighbour within the tight gap
// that shares the Python file or function, or looks like a producer/consumer by category,
// makes overlap risky.
func depFrom(start, end int64, myCat, mySite string, prev, next *neighbour) string {
	tight := int64(TightGapFraction * float64(end-start))
	if tight > TightGapMaxNS {
		tight = TightGapMaxNS
	}
	if tight < TightGapMinNS {
		tight = TightGapMinNS
	}
	risky, unclear := false, false
	for k, nb := range []*neighbour{prev, next} {
		if nb == nil {
			continue
		}
		gap := nb.start - end
		if k == 0 {
			gap = start - nb.end
		}
		if gap < 0 {
			gap = 0
		}
		if gap > tight {
			continue
		}
		switch {
		case sameScope(mySite, nb.site):
			risky = true
		case myCat == CatCommunication && nb.cat != CatCommunication:
			risky = true
		case isLight(myCat) && nb.cat != CatOther:
			risky = true
		case isUnmapped(mySite) || isUnmapped(nb.site):
			unclear = true
		}
	}
	switch {
	case risky:
		return DepHigh
	case unclear:
		return DepUnclear
	}
	return DepLow
}

// depSite is an op's site k for the neighbour test; a graph replay site says nothing about
// the op's own code, so it counts as unmapped.
func depSite(c *traceCtx, k siteKey) string {
	if k.kind != kindFrame {
		return ""
	}
	return c.resolve(k).loc
}

func isUnmapped(s string) bool {
	return s == "" || s == "unresolved" || strings.HasPrefix(s, "graph replay")
}

// sameScope: two sites share a file path or a function name.
func sameScope(a, b string) bool {
	if isUnmapped(a) || isUnmapped(b) {
		return false
	}
	fa, fna, _ := strings.Cut(a, " ")
	fb, fnb, _ := strings.Cut(b, " ")
	pa, _, _ := strings.Cut(fa, ":")
	pb, _, _ := strings.Cut(fb, ":")
	return pa == pb || (fna != "" && fna == fnb)
}

// applyCutoff drops rows below cutoff percent from a stage.
func applyCutoff(s *Stage, cutoff float64) {
	if cutoff <= 0 {
		return
	}
	k := s.Kernels[:0]
	for _, r := range s.Kernels {
		if r.SharePct >= cutoff {
			k = append(k, r)
		}
	}
	s.Kernels = k
	o := s.Overlap[:0]
	for _, r := range s.Overlap {
		if r.SharePct >= cutoff {
			o = append(o, r)
		}
	}
	s.Overlap = o
	f := s.Fusions[:0]
	for _, r := range s.Fusions {
		if r.SharePct >= cutoff {
			f = append(f, r)
		}
	}
	s.Fusions = f
}
