package triage

import (
	"math"
	"testing"
)

// TestCollectivesRealNCCLArgs: on HTA's real DDP trace (NCCL 2.17, args on the kernels) the
// Collectives rows equal an independent grouping of the kernel events by their recorded
// "Collective name" and message bytes, computed with encoding/json.
func TestCollectivesRealNCCLArgs(t *testing.T) {
	p := fixture(t, "hta-a100-ddp-nccl-rank0.json.gz")
	var doc struct {
		TraceEvents []struct {
			Cat  string         `json:"cat"`
			Dur  float64        `json:"dur"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	decodeGzipJSON(t, p, &doc)
	type agg struct {
		n   int
		dur float64
	}
	want := map[collKey]*agg{}
	size := map[string]int64{"Float": 4, "Byte": 1, "Char": 1, "BFloat16": 2, "Half": 2, "Long": 8, "Int": 4}
	for _, e := range doc.TraceEvents {
		name, _ := e.Args["Collective name"].(string)
		if e.Cat != "kernel" || name == "" {
			continue
		}
		in, _ := e.Args["In msg nelems"].(float64)
		out, _ := e.Args["Out msg nelems"].(float64)
		dt, _ := e.Args["dtype"].(string)
		op := map[string]string{"allreduce": "all_reduce", "broadcast": "broadcast"}[name]
		if op == "" || size[dt] == 0 {
			t.Fatalf("unexpected collective %q of %q in the fixture", name, dt)
		}
		k := collKey{op, int64(math.Max(in, out)) * size[dt]}
		if want[k] == nil {
			want[k] = &agg{}
		}
		want[k].n++
		want[k].dur += e.Dur
	}
	r := analyzeFixture(t, "hta-a100-ddp-nccl-rank0.json.gz")
	got := map[collKey]CollectiveRow{}
	for _, s := range r.Stages {
		for _, c := range s.Collectives {
			got[collKey{c.Op, c.Bytes}] = c
		}
	}
	if len(got) != len(want) || len(want) < 2 {
		t.Fatalf("%d collective rows, independent grouping has %d: %+v", len(got), len(want), got)
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("no row for %v", k)
			continue
		}
		if g.Count != w.n || math.Abs(g.TotalUS-w.dur) > 1e-3 {
			t.Errorf("%v: count %d, %.3f µs; independent %d, %.3f µs", k, g.Count, g.TotalUS, w.n, w.dur)
		}
		wantAlgo := float64(k.bytes) * float64(w.n) / (w.dur * 1e3)
		if math.Abs(g.AlgoGBps-wantAlgo) > 1e-6*wantAlgo || g.GroupSize != 2 {
			t.Errorf("%v: algo %.6f GB/s, group %d; want %.6f, 2", k, g.AlgoGBps, g.GroupSize, wantAlgo)
		}
		if f := map[string]float64{"all_reduce": 1, "broadcast": 1}[k.op]; math.Abs(g.BusGBps-f*wantAlgo) > 1e-6*wantAlgo {
			t.Errorf("%v: bus %.6f GB/s; want %.6f (factor %g for 2 ranks)", k, g.BusGBps, f*wantAlgo, f)
		}
	}
}

// TestCollOpAndFactors pins the op names read from PyTorch's collective names and NCCL kernel
// names, and nccl-tests' bus factors.
func TestCollOpAndFactors(t *testing.T) {
	for in, want := range map[string]string{
		"allreduce": "all_reduce", "_allgather_base": "all_gather", "all_gather_into_tensor_coalesced": "all_gather",
		"reduce_scatter_tensor_coalesced": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
		"all_to_all": "all_to_all", "alltoall_base": "all_to_all", "send": "send_recv", "recv": "send_recv",
		"broadcast": "broadcast", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL": "all_reduce",
		"ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t": "send_recv", "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL": "reduce_scatter",
		"cross_device_reduce_1stage": "all_reduce", "barrier": "", "void at::native::vectorized_elementwise_kernel": "",
	} {
		if got := collOp(in); got != want {
			t.Errorf("collOp(%q) = %q, want %q", in, got, want)
		}
	}
	for _, c := range []struct {
		op   string
		n    int
		want float64
	}{{"all_reduce", 8, 1.75}, {"all_gather", 8, 0.875}, {"reduce_scatter", 4, 0.75}, {"all_to_all", 2, 0.5},
		{"send_recv", 0, 1}, {"broadcast", 8, 1}, {"all_reduce", 0, 0}} {
		if got := busFactor(c.op, c.n); got != c.want {
			t.Errorf("busFactor(%s, %d) = %g, want %g", c.op, c.n, got, c.want)
		}
	}
	if got := splitImbalance("[100, 100, 200, 0]"); got != 2 {
		t.Errorf("splitImbalance = %g, want 2", got)
	}
}

// TestCollectiveSkew: the n-th all-reduce of a size on each of three ranks is one collective;
// its skew is the latest start minus the earliest, the bandwidth uses each instance's shortest
// kernel, and a rank with an extra instance leaves that one unmatched.
func TestCollectiveSkew(t *testing.T) {
	const mb = 1 << 20
	mk := func(starts []int64, durs []int64) []commInst {
		var out []commInst
		for i := range starts {
			out = append(out, commInst{key: collKey{"all_reduce", mb}, start: starts[i], dur: durs[i]})
		}
		return out
	}
	stats := []rankStat{
		{rank: RankID{-1, -1, -1, -1, 0}, stage: "all", repIdx: 0, comms: mk([]int64{1000, 50_000}, []int64{9000, 4000})},
		{rank: RankID{-1, -1, -1, -1, 1}, stage: "all", repIdx: -1, comms: mk([]int64{3000, 50_500}, []int64{7000, 3500})},
		{rank: RankID{-1, -1, -1, -1, 2}, stage: "all", repIdx: -1, comms: mk([]int64{6000, 51_000, 90_000}, []int64{4000, 3000, 100})},
	}
	rep := &Report{Stages: []Stage{{Stage: "all", Collectives: []CollectiveRow{{Op: "all_reduce", Bytes: mb, GroupSize: 3, Count: 2, TotalUS: 13}}}}}
	applySkew(rep, stats)
	c := rep.Stages[0].Collectives[0]
	if c.Matched != 2 || c.SkewUS != (5+1)/2.0 || c.SkewMaxUS != 5 {
		t.Errorf("skew %+v; want 2 matched, mean 3 µs, max 5 µs", c)
	}
	if want := float64(2*mb) / float64(4000+3000); math.Abs(c.AlgoGBps-want) > 1e-9 {
		t.Errorf("algo %g GB/s; want %g over the shortest kernels", c.AlgoGBps, want)
	}
	one := &Report{Stages: []Stage{{Stage: "all", Collectives: []CollectiveRow{{Op: "all_reduce", Bytes: mb, Count: 2}}}}}
	applySkew(one, stats[:1])
	if one.Stages[0].Collectives[0].Matched != 0 {
		t.Error("one rank: skew measured")
	}
}

// FuzzCollectiveNames: the recorded collective name and split list are untrusted text;
// collOp and splitImbalance never panic, and an imbalance is 0 (unreadable) or at least 1.
func FuzzCollectiveNames(f *testing.F) {
	f.Add("allreduce", "[1, 2, 3]")
	f.Add("ncclDevKernel_SendRecv", "[]")
	f.Add("", "[1e308, 1e308]")
	f.Add("_reduce_scatter_base", "[-1, 2]")
	f.Fuzz(func(t *testing.T, name, split string) {
		_ = collOp(name)
		if v := splitImbalance(split); v != 0 && !(v >= 1-1e-9) {
			t.Fatalf("splitImbalance(%q) = %g", split, v)
		}
	})
}
