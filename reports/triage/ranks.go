package triage

import (
	"sort"

	"github.com/sglprof/runner/reports/stats"
)

// RankReport is the multi-rank view of a tensor-parallel run: per stage, every
// rank's kernel and busy time side by side, the straggler, and the time each rank spends in
// collectives and waiting in them. It is present in a Report only when traces of two or more
// ranks were read.
type RankReport struct {
	Stages []RankStage `json:"stages"`
}

// RankStage compares the ranks on one stage.
type RankStage struct {
	Stage string    `json:"stage"`
	Ranks []RankRow `json:"ranks"`
	// MedianBusyUS is the median of the ranks' busy times.
	MedianBusyUS float64 `json:"median_busy_us"`
	// MedianComputeUS is the median of the ranks' compute times (busy minus collective time).
	MedianComputeUS float64 `json:"median_compute_us"`
	// Straggler is the rank with the longest compute time, and StragglerGapUS its compute time
	// minus the median (0 with no gap: then no rank straggles). Busy time does not name it: in
	// a TP run the fast ranks wait inside their collectives for the slow one, so busy time
	// evens out (HTA separates computation from communication for the same reason).
	Straggler      string  `json:"straggler"`
	StragglerGapUS float64 `json:"straggler_gap_us"`
	// Culprits are the kernels (collectives excluded: they are where the other ranks wait)
	// whose time on the straggler exceeds their median over the ranks the most.
	Culprits []RankKernelDiff `json:"culprits"`
}

// RankRow is one rank's figures for a stage.
type RankRow struct {
	Rank         string  `json:"rank"`
	KernelTimeUS float64 `json:"kernel_time_us"`
	BusyUS       float64 `json:"busy_us"`
	// CollectiveUS is the time in communication kernels (NCCL, RCCL, custom all-reduce).
	CollectiveUS float64 `json:"collective_us"`
	// CollectiveWaitUS estimates how much of CollectiveUS is waiting for the slowest rank: a
	// collective finishes on every rank together, so the rank that arrives last spends the
	// least time in it; as in HTA's comm/comp breakdown, the excess over the rank with the
	// least collective time is waiting.
	CollectiveWaitUS float64 `json:"collective_wait_us"`
	// BusyVsMedianUS is BusyUS minus the stage's median busy time.
	BusyVsMedianUS float64 `json:"busy_vs_median_us"`
	// ComputeUS is BusyUS minus CollectiveUS (at least 0): the time the rank's GPU was busy
	// with work other than waiting in or running collectives.
	ComputeUS float64 `json:"compute_us"`
	// ComputeVsMedianUS is ComputeUS minus the stage's median compute time.
	ComputeVsMedianUS float64 `json:"compute_vs_median_us"`
}

// RankKernelDiff is one kernel's excess on the straggler.
type RankKernelDiff struct {
	Kernel      string  `json:"kernel"`
	Category    string  `json:"category"`
	StragglerUS float64 `json:"straggler_us"`
	MedianUS    float64 `json:"median_us"`
	DiffUS      float64 `json:"diff_us"`
}

// MaxCulprits bounds RankStage.Culprits.
const MaxCulprits = 3

// rankStat is what Analyze keeps of one rank's stage: totals and per-kernel time, not tables.
type rankStat struct {
	rank    RankID
	stage   string
	order   int // the stage's position in its rank's pipeline order
	kernel  int64
	busy    int64
	comm    int64
	kernels map[string]int64
	cats    map[string]string
	// comms are the stage's collective instances; repIdx is the stage's index in
	// Report.Stages when its tables are shown, else -1.
	comms  []commInst
	repIdx int
}

func newRankStat(rank RankID, order int, sr stageResult) rankStat {
	rs := rankStat{rank: rank, stage: sr.stage.Stage, order: order,
		kernel: int64(sr.stage.KernelTimeUS * 1e3), busy: int64(sr.stage.BusyUS * 1e3),
		kernels: make(map[string]int64, len(sr.aggs)), cats: make(map[string]string, len(sr.aggs)), comms: sr.comms, repIdx: -1}
	for _, g := range sr.aggs {
		rs.kernels[g.name] += g.total
		rs.cats[g.name] = g.cat
		if g.cat == CatCommunication {
			rs.comm += g.total
		}
	}
	return rs
}

// buildRanks compares the ranks stage by stage; nil unless two or more ranks were read.
func buildRanks(stats []rankStat) *RankReport {
	ranks := map[RankID]bool{}
	byStage := map[string][]rankStat{}
	pos := map[string]int{}
	for _, s := range stats {
		ranks[s.rank] = true
		if _, ok := pos[s.stage]; !ok {
			pos[s.stage] = s.order
		}
		byStage[s.stage] = append(byStage[s.stage], s)
	}
	if len(ranks) < 2 {
		return nil
	}
	stages := make([]string, 0, len(byStage))
	for st := range byStage {
		stages = append(stages, st)
	}
	sort.Slice(stages, func(i, j int) bool {
		if pos[stages[i]] != pos[stages[j]] {
			return pos[stages[i]] < pos[stages[j]]
		}
		return stages[i] < stages[j]
	})
	rep := &RankReport{}
	for _, st := range stages {
		rep.Stages = append(rep.Stages, compareRanks(st, byStage[st]))
	}
	return rep
}

// StragglerMinPct is how much more compute time than the median rank (in % of the median's
// compute time) a rank must have to be named the straggler: smaller gaps are run-to-run noise.
const StragglerMinPct = 5.0

func compareRanks(stage string, ss []rankStat) RankStage {
	sort.Slice(ss, func(i, j int) bool { return ss[i].rank.less(ss[j].rank) })
	busy := make([]int64, len(ss))
	comp := make([]int64, len(ss))
	minComm := int64(-1)
	for i, s := range ss {
		busy[i] = s.busy
		comp[i] = max(s.busy-s.comm, 0)
		if minComm < 0 || s.comm < minComm {
			minComm = s.comm
		}
	}
	med, medC := stats.LowerMedian(stats.Sorted(busy)), stats.LowerMedian(stats.Sorted(comp))
	out := RankStage{Stage: stage, MedianBusyUS: us(med), MedianComputeUS: us(medC)}
	strag := 0
	for i, s := range ss {
		if comp[i] > comp[strag] {
			strag = i
		}
		out.Ranks = append(out.Ranks, RankRow{Rank: rankLabel(s.rank), KernelTimeUS: us(s.kernel), BusyUS: us(s.busy),
			CollectiveUS: us(s.comm), CollectiveWaitUS: us(s.comm - minComm), BusyVsMedianUS: us(s.busy - med),
			ComputeUS: us(comp[i]), ComputeVsMedianUS: us(comp[i] - medC)})
	}
	// Below StragglerMinPct of the median the rank with the most compute is noise (clock
	// jitter, a late launch), not a straggler to chase.
	if gap := comp[strag] - medC; gap > 0 && float64(gap)*100 >= StragglerMinPct*float64(medC) {
		out.Straggler = rankLabel(ss[strag].rank)
		out.StragglerGapUS = us(gap)
		out.Culprits = culprits(ss, strag)
	}
	return out
}

// culprits ranks the non-collective kernels by how much longer they ran on the straggler than
// their median over the ranks.
func culprits(ss []rankStat, strag int) []RankKernelDiff {
	var out []RankKernelDiff
	vals := make([]int64, len(ss))
	for name, t := range ss[strag].kernels {
		cat := ss[strag].cats[name]
		if cat == CatCommunication {
			continue
		}
		for i, s := range ss {
			vals[i] = s.kernels[name]
		}
		m := stats.LowerMedian(stats.Sorted(vals))
		if t > m {
			out = append(out, RankKernelDiff{Kernel: name, Category: cat, StragglerUS: us(t), MedianUS: us(m), DiffUS: us(t - m)})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].DiffUS != out[j].DiffUS {
			return out[i].DiffUS > out[j].DiffUS
		}
		return out[i].Kernel < out[j].Kernel
	})
	if len(out) > MaxCulprits {
		out = out[:MaxCulprits]
	}
	return out
}

func rankLabel(r RankID) string {
	if s := r.String(); s != "" {
		return s
	}
	return "rank ?"
}
