package triage

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/sglprof/runner/reports/render/table"
	"github.com/sglprof/runner/reports/trace"
)

// CollectiveRow is one collective kind and message size of a stage, as TraceLens's NCCL
// analyser groups them, with nccl-tests' bandwidths and the start skew across ranks.
type CollectiveRow struct {
	// Op is the collective: all_reduce, all_gather, reduce_scatter, all_to_all, send_recv,
	// broadcast, reduce, gather, scatter (or the recorded name when none of these).
	Op string `json:"op"`
	// Bytes is nccl-tests' S of one instance: the larger of the rank's in and out message
	// (all-reduce, broadcast, send/recv: the message; all-gather: the gathered output;
	// reduce-scatter and all-to-all: the whole input). 0 when the trace records no size
	// (kernels without the collective's arguments, or an unknown dtype).
	Bytes int64 `json:"bytes"`
	// DType and GroupSize are as recorded ("" and 0 when not).
	DType     string `json:"dtype,omitempty"`
	GroupSize int    `json:"group_size,omitempty"`
	// Count and TotalUS are this rank's kernels of the kind and size and their summed time.
	Count   int     `json:"count"`
	TotalUS float64 `json:"total_us"`
	// AlgoGBps is Bytes × Count over the time the transfer took (GB = 1e9 B): with other
	// ranks' traces, over the sum of each instance's shortest kernel across the ranks (the
	// rank that arrived last waited least, so its kernel is closest to the transfer itself,
	// as TraceLens's comm latency); with one rank, over TotalUS, which includes waiting for
	// late ranks. BusGBps is AlgoGBps times nccl-tests' bus factor for the op and group size
	// (0 when the group size is unknown and the factor depends on it).
	AlgoGBps float64 `json:"algo_gbps"`
	BusGBps  float64 `json:"bus_gbps"`
	// SkewUS is the mean, over the instances matched across ranks, of the latest rank's
	// kernel start minus the earliest's: how late the last rank arrived. SkewMaxUS is the
	// largest. Matched counts the instances seen on two or more ranks (the n-th instance of
	// this kind and size on each rank); 0 means no skew was measured (one rank).
	SkewUS    float64 `json:"skew_us"`
	SkewMaxUS float64 `json:"skew_max_us"`
	Matched   int     `json:"matched"`
	// Imbalance is, for all-to-all with recorded split sizes, the largest ratio over the
	// instances of the largest split to the mean split (1 = balanced; Ulysses sequence
	// parallelism and ring attention want 1).
	Imbalance float64 `json:"imbalance,omitempty"`
}

// commInst is one collective kernel of a stage: what the cross-rank matching needs.
type commInst struct {
	key   collKey
	start int64 // ns since the Unix epoch where the trace says so (Trace.BaseNS + Start)
	dur   int64
}

// collKey groups collectives into rows and matches instances across ranks.
type collKey struct {
	op    string
	bytes int64
}

// collOp names a collective from PyTorch's "Collective name" ("allreduce",
// "_allgather_base", "reduce_scatter_tensor_coalesced", "all_to_allv", "send", ...) or from an
// NCCL/RCCL kernel name ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "ncclKernel_SendRecv");
// "" when it names none.
func collOp(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		if r >= 'a' && r <= 'z' {
			b.WriteRune(r)
		}
	}
	s := b.String()
	for _, m := range []struct{ sub, op string }{
		{"allreduce", "all_reduce"}, {"crossdevicereduce", "all_reduce"},
		{"reducescatter", "reduce_scatter"}, {"allgather", "all_gather"},
		{"alltoall", "all_to_all"}, {"sendrecv", "send_recv"},
		{"broadcast", "broadcast"},
	} {
		if strings.Contains(s, m.sub) {
			return m.op
		}
	}
	// Whole words only: "reduce" and "send" are also parts of other kernel names.
	switch s {
	case "send", "recv", "sendrecv":
		return "send_recv"
	case "reduce", "gather", "scatter":
		return s
	}
	if strings.HasPrefix(s, "nccl") || strings.HasPrefix(s, "rccl") {
		for _, w := range []string{"reduce", "gather", "scatter", "send", "recv"} {
			if strings.Contains(s, w) {
				if w == "send" || w == "recv" {
					return "send_recv"
				}
				return w
			}
		}
	}
	return ""
}

// dtypeSize is the element size of PyTorch's dtype names as the profiler records them; 0 when
// unknown.
func dtypeSize(dt string) int64 {
	switch strings.ToLower(dt) {
	case "double", "long", "complexfloat", "int64", "float64":
		return 8
	case "float", "int", "float32", "int32", "complexhalf":
		return 4
	case "bfloat16", "half", "short", "float16", "int16":
		return 2
	case "byte", "char", "bool", "uint8", "int8", "signed char", "unsigned char":
		return 1
	case "complexdouble":
		return 16
	}
	if strings.HasPrefix(strings.ToLower(dt), "float8") {
		return 1
	}
	return 0
}

// busFactor is nccl-tests' bus-bandwidth factor for op on n ranks; 0 when it needs n and n is
// unknown.
func busFactor(op string, n int) float64 {
	switch op {
	case "broadcast", "reduce", "send_recv":
		return 1
	}
	if n <= 0 {
		return 0
	}
	f := float64(n-1) / float64(n)
	if op == "all_reduce" {
		return 2 * f
	}
	switch op {
	case "all_gather", "reduce_scatter", "all_to_all", "gather", "scatter":
		return f
	}
	return 0
}

// splitImbalance is the largest split over the mean split of a recorded split list
// ("[1024, 1024, 2048]"); 0 when the list is empty or unreadable.
func splitImbalance(s string) float64 {
	s = strings.Trim(strings.TrimSpace(s), "[]")
	if s == "" {
		return 0
	}
	var sum, hi float64
	n := 0
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(v >= 0) || math.IsInf(v, 0) {
			return 0 // NaN, negative or infinite: not a split size
		}
		sum += v
		hi = max(hi, v)
		n++
	}
	if n == 0 || sum == 0 || math.IsInf(sum, 0) {
		return 0
	}
	return hi / (sum / float64(n))
}

// collectives builds a stage's Collectives rows and the instances the cross-rank skew needs,
// from its communication kernels: those with recorded arguments (Trace.Comms) by their
// arguments, the others by their kernel names (with no size). It costs one pass over the
// stage's ops, and only when the stage has communication kernels.
func collectives(c *traceCtx, ops []int32, aggs []*kagg, byCanon []*kagg) ([]CollectiveRow, []commInst) {
	hasComm := len(c.t.Comms) > 0
	for _, g := range aggs {
		hasComm = hasComm || g.cat == CatCommunication
	}
	if !hasComm {
		return nil, nil
	}
	var acc collAcc
	for _, oi := range ops {
		op := &c.t.GPUOps[oi]
		cid := c.canon[op.Name]
		acc.add(c, op, oi, byCanon[cid])
	}
	return acc.finish()
}

// collAcc accumulates a stage's collectives op by op, for a held stage (collectives) and a
// streamed one (streamDev) alike.
type collAcc struct {
	rows  map[collKey]*collRowAcc
	order []collKey
	insts []commInst
	// noInsts keeps rows only: a streamed input holds memory flat whatever its length, so
	// its instances are not kept and its rows get no cross-rank skew.
	noInsts bool
	// byName caches collOp of the aggregates' names, byComm the row op of recorded
	// collectives' names: collOp allocates, and is asked per op.
	byName map[*kagg]string
	byComm map[trace.NameID]string
}

type collRowAcc struct {
	row CollectiveRow
	tot int64
}

// add counts op (index oi in Trace.GPUOps, or trace.NoID when the op is not held) if it is a
// collective: recorded arguments decide, else the name of its aggregate g when g is a
// communication kernel.
func (acc *collAcc) add(c *traceCtx, op *trace.GPUOp, oi int32, g *kagg) {
	t := c.t
	var key collKey
	var dtype string
	var group int
	var imb float64
	ci := int32(-1)
	if oi >= 0 && len(t.Comms) > 0 {
		if idx := c.commIndex(); int(oi) < len(idx) {
			ci = idx[oi]
		}
	}
	if ci >= 0 {
		cm := &t.Comms[ci]
		op, seen := acc.byComm[cm.Name]
		if !seen {
			if op = collOp(t.Name(cm.Name)); op == "" {
				op = t.Name(cm.Name)
			}
			if acc.byComm == nil {
				acc.byComm = map[trace.NameID]string{}
			}
			acc.byComm[cm.Name] = op
		}
		key.op = op
		dtype, group = t.Name(cm.DType), int(cm.GroupSize)
		key.bytes = max(cm.InElems, cm.OutElems) * dtypeSize(dtype)
		if key.op == "all_to_all" {
			imb = max(splitImbalance(t.Name(cm.InSplit)), splitImbalance(t.Name(cm.OutSplit)))
		}
	} else {
		if g == nil || g.cat != CatCommunication {
			return
		}
		kind, seen := acc.byName[g]
		if !seen {
			if acc.byName == nil {
				acc.byName = map[*kagg]string{}
			}
			kind = collOp(g.name)
			acc.byName[g] = kind
		}
		if key.op = kind; key.op == "" {
			return
		}
	}
	if acc.rows == nil {
		acc.rows = map[collKey]*collRowAcc{}
	}
	a := acc.rows[key]
	if a == nil {
		a = &collRowAcc{row: CollectiveRow{Op: key.op, Bytes: key.bytes, DType: dtype, GroupSize: group}}
		acc.rows[key] = a
		acc.order = append(acc.order, key)
	}
	a.row.Count++
	a.tot += op.Dur()
	a.row.Imbalance = max(a.row.Imbalance, imb)
	if acc.noInsts {
		return
	}
	acc.insts = append(acc.insts, commInst{key: key, start: t.BaseNS + op.Start, dur: op.Dur()})
}

// finish returns the rows, largest total first, and the instances in start order.
func (acc *collAcc) finish() ([]CollectiveRow, []commInst) {
	if len(acc.order) == 0 {
		return nil, nil
	}
	out := make([]CollectiveRow, 0, len(acc.order))
	for _, k := range acc.order {
		a := acc.rows[k]
		a.row.TotalUS = us(a.tot)
		a.row.setBandwidth(a.tot)
		out = append(out, a.row)
	}
	sortCollectives(out)
	slices.SortStableFunc(acc.insts, func(a, b commInst) int { return cmp.Compare(a.start, b.start) })
	return out, acc.insts
}

// setBandwidth sets AlgoGBps and BusGBps for the row's Count instances taking ns in all.
func (r *CollectiveRow) setBandwidth(ns int64) {
	r.AlgoGBps, r.BusGBps = 0, 0
	if r.Bytes <= 0 || ns <= 0 {
		return
	}
	r.AlgoGBps = float64(r.Bytes) * float64(r.Count) / float64(ns) // B/ns = GB/s
	r.BusGBps = r.AlgoGBps * busFactor(r.Op, r.GroupSize)
}

func sortCollectives(rows []CollectiveRow) {
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].TotalUS != rows[j].TotalUS {
			return rows[i].TotalUS > rows[j].TotalUS
		}
		if rows[i].Op != rows[j].Op {
			return rows[i].Op < rows[j].Op
		}
		return rows[i].Bytes < rows[j].Bytes
	})
}

// commIndex maps GPU op indexes to their Trace.Comms entries (-1: none; the last entry of an
// op wins), built once per trace. It is a table by op index, not a map: collectives asks it
// once per op of a stage, and a map lookup per op was most of that pass's time.
func (c *traceCtx) commIndex() []int32 {
	if c.comms == nil {
		c.comms = make([]int32, len(c.t.GPUOps))
		for i := range c.comms {
			c.comms[i] = -1
		}
		for i, cm := range c.t.Comms {
			if cm.Op >= 0 && int(cm.Op) < len(c.comms) {
				c.comms[cm.Op] = int32(i)
			}
		}
	}
	return c.comms
}

// skewStat is what the cross-rank matching found for one row.
type skewStat struct {
	sum, hi, minDur int64
	n               int
}

// applySkew matches every stage's collective instances across the ranks that ran it (the n-th
// instance of a kind and size on each rank is one collective, as TraceLens matches them per
// process group in time order) and fills the tabled stages' rows with the start skew and the
// bandwidth over each instance's shortest kernel. With one rank it does nothing.
func applySkew(rep *Report, stats []rankStat) {
	byStage := map[string][]*rankStat{}
	ranks := map[RankID]bool{}
	for i := range stats {
		byStage[stats[i].stage] = append(byStage[stats[i].stage], &stats[i])
		ranks[stats[i].rank] = true
	}
	if len(ranks) < 2 {
		return
	}
	for _, ss := range byStage {
		skews := stageSkews(ss)
		for _, s := range ss {
			if s.repIdx < 0 || s.repIdx >= len(rep.Stages) {
				continue
			}
			rows := rep.Stages[s.repIdx].Collectives
			for i := range rows {
				k := collKey{rows[i].Op, rows[i].Bytes}
				st, ok := skews[k]
				if !ok || st.n == 0 {
					continue
				}
				rows[i].Matched = st.n
				rows[i].SkewUS = us(st.sum) / float64(st.n)
				rows[i].SkewMaxUS = us(st.hi)
				if st.n == rows[i].Count {
					rows[i].setBandwidth(st.minDur)
				}
			}
		}
	}
}

// stageSkews matches the instances of one stage across its ranks (one rankStat per rank; a
// second stat of the same rank, as a merged trace's devices are, counts as another rank).
func stageSkews(ss []*rankStat) map[collKey]skewStat {
	per := make([]map[collKey][]commInst, len(ss))
	for i, s := range ss {
		per[i] = map[collKey][]commInst{}
		for _, in := range s.comms {
			per[i][in.key] = append(per[i][in.key], in)
		}
	}
	out := map[collKey]skewStat{}
	for k := range per[0] {
		var st skewStat
		for n := 0; ; n++ {
			lo, hi, minDur, seen := int64(0), int64(0), int64(0), 0
			for i := range per {
				l := per[i][k]
				if n >= len(l) {
					continue
				}
				in := l[n]
				if seen == 0 || in.start < lo {
					lo = in.start
				}
				if seen == 0 || in.start > hi {
					hi = in.start
				}
				if seen == 0 || in.dur < minDur {
					minDur = in.dur
				}
				seen++
			}
			if seen < 2 {
				break
			}
			st.sum += hi - lo
			st.hi = max(st.hi, hi-lo)
			st.minDur += minDur
			st.n++
		}
		out[k] = st
	}
	return out
}

// collectives writes the Collectives section of a text or Markdown report: one table per
// stage that has communication kernels.
func (d *doc) collectives(r *Report) error {
	has := false
	for i := range r.Stages {
		has = has || len(r.Stages[i].Collectives) > 0
	}
	if !has {
		return nil
	}
	d.heading("Collectives")
	d.leg.use("collectives")
	for i := range r.Stages {
		s := &r.Stages[i]
		if len(s.Collectives) == 0 {
			continue
		}
		d.stage(s)
		t := &table.Table{
			Header: []string{"Collective", "Size", "Ranks", "Count", "Total (ms)", "Algo GB/s", "Bus GB/s", "Skew mean (µs)", "Skew max (µs)", "A2A imbalance"},
			Align:  []table.Align{table.Left, table.Right, table.Right, table.Right, table.Right, table.Right, table.Right, table.Right, table.Right, table.Right},
		}
		for _, c := range s.Collectives {
			size, group, algo, bus, skew, skewMax, imb := "?", "?", "-", "-", "-", "-", "-"
			if c.Bytes > 0 {
				size = byteSize(c.Bytes)
				algo = strconv.FormatFloat(c.AlgoGBps, 'f', 1, 64)
				if c.BusGBps > 0 {
					bus = strconv.FormatFloat(c.BusGBps, 'f', 1, 64)
				}
			}
			if c.GroupSize > 0 {
				group = strconv.Itoa(c.GroupSize)
			}
			if c.Matched > 0 {
				skew = strconv.FormatFloat(c.SkewUS, 'f', 1, 64)
				skewMax = strconv.FormatFloat(c.SkewMaxUS, 'f', 1, 64)
			}
			if c.Imbalance > 0 {
				imb = strconv.FormatFloat(c.Imbalance, 'f', 2, 64)
			}
			t.Rows = append(t.Rows, []string{c.Op, size, group, strconv.Itoa(c.Count), strconv.FormatFloat(c.TotalUS/1e3, 'f', 3, 64),
				algo, bus, skew, skewMax, imb})
		}
		if err := d.flush(t); err != nil {
			return err
		}
	}
	return nil
}

// byteSize renders a message size in binary units, as NCCL's own logs do.
func byteSize(b int64) string {
	switch {
	case b >= 1<<30:
		return strconv.FormatFloat(float64(b)/(1<<30), 'f', 2, 64) + " GiB"
	case b >= 1<<20:
		return strconv.FormatFloat(float64(b)/(1<<20), 'f', 2, 64) + " MiB"
	case b >= 1<<10:
		return strconv.FormatFloat(float64(b)/(1<<10), 'f', 2, 64) + " KiB"
	}
	return strconv.FormatInt(b, 10) + " B"
}

// collectiveCSVRows are the Collectives rows of the long-form CSV whose header is t's (table
// "collective"): the op in name, the size and the other figures in evidence.
func collectiveCSVRows(t *table.Table, r *Report) [][]string {
	col := make(map[string]int, len(t.Header))
	for i, h := range t.Header {
		col[h] = i
	}
	var rows [][]string
	for _, s := range r.Stages {
		for _, c := range s.Collectives {
			row := make([]string, len(t.Header))
			row[col["table"]], row[col["stage"]], row[col["name"]], row[col["category"]] = "collective", s.Stage, c.Op, CatCommunication
			row[col["total_us"]], row[col["count"]] = f64(c.TotalUS), strconv.Itoa(c.Count)
			row[col["evidence"]] = fmt.Sprintf("bytes=%d dtype=%s group_size=%d algo_gbps=%s bus_gbps=%s skew_us=%s skew_max_us=%s matched=%d imbalance=%s",
				c.Bytes, c.DType, c.GroupSize, f64(c.AlgoGBps), f64(c.BusGBps), f64(c.SkewUS), f64(c.SkewMaxUS), c.Matched, f64(c.Imbalance))
			rows = append(rows, row)
		}
	}
	return rows
}
