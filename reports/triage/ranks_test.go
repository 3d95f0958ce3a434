package triage

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/kineto/kinetogen"
	"github.com/sglprof/runner/reports/stats"
)

// writeRanks writes n per-rank traces (SGLang's -TP-<r> naming) of one TP run in which rank
// slow computes factor times longer and the others' all-reduces wait for it.
func writeRanks(t testing.TB, dir string, n, slow int, factor float64, flavor string) {
	t.Helper()
	for r := 0; r < n; r++ {
		scale := map[string]float64{}
		if r == slow {
			scale[kinetogen.GroupGEMM], scale[kinetogen.GroupAttention] = factor, factor
		} else {
			scale[kinetogen.GroupComm] = 1 + 10*(factor-1)
		}
		var b bytes.Buffer
		cfg := kinetogen.Config{Flavor: flavor, Steps: 2, Layers: 3, CommStream: true, WorldSize: n, WithStack: true, Rank: r, Seed: int64(r), StepScale: scale}
		if _, err := kinetogen.Write(&b, cfg); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("run-TP-%d.trace.json", r)), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Issue 17: a TP run's ranks side by side, the straggler named with the kernels that make the
// difference, and the collectives' waiting on the other ranks.
func TestRanksStraggler(t *testing.T) {
	dir := t.TempDir()
	writeRanks(t, dir, 4, 2, 1.3, kinetogen.FlavorDiffusion)
	in, err := Discover(dir, DiscoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Files) != 1 || len(in.OtherRanks) != 3 {
		t.Fatalf("discover: %d tabled files, %d other ranks; want 1 and 3", len(in.Files), len(in.OtherRanks))
	}
	r, err := Analyze(context.Background(), in, Options{Open: openKineto})
	if err != nil {
		t.Fatal(err)
	}
	if r.Ranks == nil || len(r.Ranks.Stages) == 0 {
		t.Fatalf("no ranks section: %+v", r.Ranks)
	}
	den := r.Ranks.Stages[0]
	if den.Stage != kinetogen.StageDenoising || len(den.Ranks) != 4 {
		t.Fatalf("ranks stage %q with %d ranks, want %s with 4", den.Stage, len(den.Ranks), kinetogen.StageDenoising)
	}
	if den.Straggler != "TP-2" || den.StragglerGapUS <= 0 {
		t.Errorf("straggler %q (gap %v us), want TP-2", den.Straggler, den.StragglerGapUS)
	}
	if len(den.Culprits) == 0 || (den.Culprits[0].Category != CatGEMM && den.Culprits[0].Category != CatAttention) {
		t.Errorf("culprits %+v, want the slowed GEMM/attention kernels first", den.Culprits)
	}
	for _, rr := range den.Ranks {
		if rr.CollectiveUS <= 0 {
			t.Errorf("%s: no collective time", rr.Rank)
		}
		if rr.Rank == "TP-2" && rr.CollectiveWaitUS != 0 {
			t.Errorf("the straggler waits %v us in collectives; it is the one the others wait for", rr.CollectiveWaitUS)
		}
		if rr.Rank != "TP-2" && rr.CollectiveWaitUS <= 0 {
			t.Errorf("%s does not wait for the straggler: %+v", rr.Rank, rr)
		}
	}
	for _, f := range []string{FormatText, FormatMarkdown, FormatCSV, FormatJSON} {
		var b strings.Builder
		if err := Render(&b, r, f, DefaultCutoff); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), "TP-2") || !strings.Contains(b.String(), "straggler") {
			t.Errorf("%s output does not name the straggler", f)
		}
	}
	var b strings.Builder
	_ = Render(&b, r, FormatText, DefaultCutoff)
	if !strings.Contains(b.String(), "Straggler: TP-2") || !strings.Contains(b.String(), "Collective wait (") {
		t.Errorf("text lacks the ranks table:\n%s", b.String())
	}
	// One rank only: no ranks section.
	one, err := Discover(filepath.Join(dir, "run-TP-0.trace.json"), DiscoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r1, err := Analyze(context.Background(), one, Options{Open: openKineto}); err != nil || r1.Ranks != nil {
		t.Errorf("single rank: ranks %+v, err %v", r1.Ranks, err)
	}
}

// --all-ranks keeps every rank's tables and still compares them.
func TestRanksAllRanks(t *testing.T) {
	dir := t.TempDir()
	writeRanks(t, dir, 2, 1, 1.5, kinetogen.FlavorLLM)
	in, err := Discover(dir, DiscoverOptions{AllRanks: true})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Analyze(context.Background(), in, Options{Open: openKineto})
	if err != nil {
		t.Fatal(err)
	}
	if r.Ranks == nil || r.Ranks.Stages[0].Straggler != "TP-1" {
		t.Fatalf("ranks %+v, want TP-1 the straggler", r.Ranks)
	}
}

// The ranks' reference is the lower median (stats.LowerMedian), so that with two ranks the
// faster is the reference.
func TestRankMedianIsLower(t *testing.T) {
	for _, c := range []struct {
		in   []int64
		want int64
	}{{nil, 0}, {[]int64{5}, 5}, {[]int64{9, 1}, 1}, {[]int64{3, 1, 2}, 2}, {[]int64{4, 1, 3, 2}, 2}} {
		if got := stats.LowerMedian(stats.Sorted(c.in)); got != c.want {
			t.Errorf("median(%v) = %d, want %d", c.in, got, c.want)
		}
	}
}

// A merged trace (SGLang's merged-*.trace.json, every rank's GPU its own process) is compared
// device by device.
func TestRanksMergedTrace(t *testing.T) {
	dir := t.TempDir()
	var events []json.RawMessage
	for r := 0; r < 3; r++ {
		scale := map[string]float64{kinetogen.GroupComm: 3.5}
		if r == 1 {
			scale = map[string]float64{kinetogen.GroupGEMM: 1.5, kinetogen.GroupAttention: 1.5}
		}
		var b bytes.Buffer
		if _, err := kinetogen.Write(&b, kinetogen.Config{Flavor: kinetogen.FlavorDiffusion, Steps: 2, Layers: 3, CommStream: true, WorldSize: 3, Rank: r, Seed: int64(r), StepScale: scale}); err != nil {
			t.Fatal(err)
		}
		var doc struct {
			TraceEvents []json.RawMessage `json:"traceEvents"`
		}
		if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
			t.Fatal(err)
		}
		events = append(events, doc.TraceEvents...)
	}
	js, err := json.Marshal(map[string]any{"schemaVersion": 1, "traceEvents": events})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "merged-run.trace.json")
	if err := os.WriteFile(p, js, 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := Discover(p, DiscoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Analyze(context.Background(), in, Options{Open: openKineto})
	if err != nil {
		t.Fatal(err)
	}
	if r.Ranks == nil || len(r.Ranks.Stages) == 0 || len(r.Ranks.Stages[0].Ranks) != 3 {
		t.Fatalf("merged trace: ranks %+v, want 3 devices compared", r.Ranks)
	}
	if s := r.Ranks.Stages[0]; s.Straggler != "rank1" {
		t.Errorf("merged trace straggler %q, want rank1 (device 1); ranks %+v", s.Straggler, s.Ranks)
	}
}

// Issue 17: a straggler was named for any busy gap above 0 ns; below StragglerMinPct of the
// median busy time the busiest rank is noise.
func TestStragglerNoiseThreshold(t *testing.T) {
	stats := func(busy ...int64) []rankStat {
		var out []rankStat
		for i, b := range busy {
			out = append(out, rankStat{rank: deviceRank(i), stage: "all", kernel: b, busy: b})
		}
		return out
	}
	if rs := compareRanks("all", stats(1_000_000, 1_040_000, 1_000_000, 1_000_000)); rs.Straggler != "" {
		t.Errorf("4%% above the median: straggler %q, want none", rs.Straggler)
	}
	if rs := compareRanks("all", stats(1_000_000, 1_060_000, 1_000_000, 1_000_000)); rs.Straggler != "rank1" {
		t.Errorf("6%% above the median: straggler %q, want rank1", rs.Straggler)
	}
}

// Issue 17: one unit per line of prose ("Busy 2621.87 ms, 2+-stream overlap 0.0 µs").
func TestLineUnit(t *testing.T) {
	lu := lineUnit(2_621_870, 0)
	if a, b := lu(2_621_870), lu(0); !strings.HasSuffix(a, " ms") || !strings.HasSuffix(b, " ms") {
		t.Errorf("busy %q and overlap %q are not in one unit", a, b)
	}
}

// The straggler is the rank with the most compute, not the most busy time (issue 17 review):
// in a TP run the fast ranks wait inside their all-reduces for the slow one, so every rank is
// about as busy and a busy-time straggler disappears.
func TestStragglerByCompute(t *testing.T) {
	var ss []rankStat
	for r := range 4 {
		s := rankStat{rank: RankID{-1, -1, -1, -1, r}, stage: "denoise", busy: 100_000_000, comm: 30_000_000,
			kernels: map[string]int64{"gemm": 70_000_000}, cats: map[string]string{"gemm": CatGEMM}}
		if r == 2 {
			s.busy, s.comm, s.kernels["gemm"] = 101_000_000, 5_000_000, 96_000_000
		}
		ss = append(ss, s)
	}
	rs := compareRanks("denoise", ss)
	if rs.Straggler != "rank2" {
		t.Fatalf("straggler %q, want rank2 (96 ms of compute against 70 ms; busy within 1%%)", rs.Straggler)
	}
	if rs.StragglerGapUS != 26_000 || rs.MedianComputeUS != 70_000 {
		t.Errorf("gap %v µs over median compute %v µs, want 26000 over 70000", rs.StragglerGapUS, rs.MedianComputeUS)
	}
	if r := rs.Ranks[0]; r.ComputeUS != 70_000 || r.CollectiveWaitUS != 25_000 || r.BusyUS != 100_000 {
		t.Errorf("rank0 row %+v", r)
	}
}
