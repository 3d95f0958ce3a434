package triage

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sglprof/runner/reports/trace"
)

// TestIdleBreakdown: a hand-made stage with one gap of each kind, a tie at a gap's end, a
// graph replay, a tail after the last busy time and a launch-times-dropped copy; held and
// streamed alike.
func TestIdleBreakdown(t *testing.T) {
	build := func() *trace.Trace {
		b := newTB("idle.json")
		f := b.frame("python/sglang/srt/model_executor/model_runner.py(100): forward", 0, 1_000_000, trace.NoID)
		op := b.cpuop("aten::mm", 0, 1_000_000, f)
		// 0–10 µs busy; the next kernel's launch starts at 15 µs, after the GPU went idle at 10:
		// a host wait of 20 µs (10–30).
		b.kernel("gemm_a", 0, 7, 0, 10_000, b.launch("cudaLaunchKernel", -5_000, -4_000, false), op)
		b.kernel("gemm_b", 0, 7, 30_000, 40_000, b.launch("cudaLaunchKernel", 15_000, 16_000, false), op)
		// Launched at 35 µs (before the GPU went idle at 40): a 5 µs gap is kernel wait.
		b.kernel("gemm_c", 0, 7, 45_000, 50_000, b.launch("cudaLaunchKernel", 35_000, 36_000, false), op)
		// Two streams start at 150 µs after a 100 µs gap: one was launched early (at 45 µs),
		// the other late; the earliest launch decides, so it is other idle time, not host wait.
		b.kernel("gemm_d", 0, 8, 150_000, 160_000, b.launch("cudaLaunchKernel", 45_000, 46_000, false), op)
		b.kernel("gemm_e", 0, 7, 150_000, 155_000, b.launch("cudaLaunchKernel", 120_000, 121_000, false), op)
		// A graph replay launched at 170 µs starts at 200: host wait 40 µs (160–200), and its
		// second kernel (same launch) after a 2 µs gap is kernel wait, not a launch delay.
		g := b.launch("cudaGraphLaunch", 170_000, 171_000, true)
		b.kernel("graph_k1", 0, 7, 200_000, 210_000, g, trace.NoID)
		b.kernel("graph_k2", 0, 7, 212_000, 220_000, g, trace.NoID)
		// An empty op at 300 µs stretches the window: 80 µs of other idle time after the last
		// busy time.
		b.kernel("marker", 0, 7, 300_000, 300_000, trace.NoID, trace.NoID)
		return b.t
	}
	check := func(t *testing.T, s Stage, host, kern, other float64, delays int) {
		t.Helper()
		id := s.Idle
		if id == nil {
			t.Fatal("no idle figures")
		}
		if id.WindowUS != 300 || id.BusyUS != 300-host-kern-other {
			t.Errorf("window %v busy %v, want 300 and %v", id.WindowUS, id.BusyUS, 300-host-kern-other)
		}
		if id.HostWaitUS != host || id.KernelWaitUS != kern || id.OtherUS != other {
			t.Errorf("host %v kernel %v other %v, want %v %v %v", id.HostWaitUS, id.KernelWaitUS, id.OtherUS, host, kern, other)
		}
		if delays == 0 {
			if s.LaunchDelayUS != nil {
				t.Errorf("launch delays %+v without launch times", s.LaunchDelayUS)
			}
			if s.HostBound == nil || s.HostBound.LaunchTimes || s.HostBound.HostBound {
				t.Errorf("verdict %+v without launch times, want unknown (launch_times false)", s.HostBound)
			}
			return
		}
		if !s.HostBound.LaunchTimes {
			t.Error("launch_times false with launch times known")
		}
		// Single launches: delays 5, 15, 10, 105, 30 µs; max 105.
		if q := s.LaunchDelayUS; q == nil || q.Max != 105 || math.Abs(q.P50-15) > 15.0/64 {
			t.Errorf("launch delay %+v, want p50 15 (within 1/64) and max 105", q)
		}
		hb := s.HostBound
		if hb == nil || len(hb.Longest) != 2 || hb.Longest[0].GapUS != 40 || hb.Longest[1].GapUS != 20 ||
			hb.Longest[0].CPUOp != "cudaGraphLaunch replay (graph)" || hb.Longest[1].CPUOp != "aten::mm" {
			t.Errorf("host waits %+v, want the 40 µs graph replay then the 20 µs aten::mm", hb)
		}
	}
	for _, streamed := range []bool{false, true} {
		tr := build()
		in := Inputs{Files: []Input{{Path: tr.Path, Stage: "decode", Rank: NoRank}}}
		opts := Options{Open: opener(map[string]*trace.Trace{tr.Path: tr})}
		if streamed {
			opts.OpenStream = func(context.Context, string) (*OpStream, error) { return streamOf(tr, -1), nil }
		}
		rep, err := Analyze(context.Background(), in, opts)
		if err != nil {
			t.Fatal(err)
		}
		check(t, rep.Stages[0], 60, 7, 180, 5)
	}
	// Launches merged per name, their times dropped: no gap can be a host wait any more, and
	// there are no launch delays; the parts still sum to window − busy.
	tr := build()
	tr.LaunchTimesDropped = true
	rep, err := Analyze(context.Background(), Inputs{Files: []Input{{Path: tr.Path, Stage: "decode", Rank: NoRank}}},
		Options{Open: opener(map[string]*trace.Trace{tr.Path: tr})})
	if err != nil {
		t.Fatal(err)
	}
	check(t, rep.Stages[0], 0, 7+20, 180+40, 0)
	// Options.LaunchStarts gives the times back.
	starts := make([]int64, len(tr.GPUOps))
	for i, op := range tr.GPUOps {
		starts[i] = trace.NoID
		if op.Launch >= 0 {
			starts[i] = tr.Launches[op.Launch].Start
		}
	}
	rep, err = Analyze(context.Background(), Inputs{Files: []Input{{Path: tr.Path, Stage: "decode", Rank: NoRank}}},
		Options{Open: opener(map[string]*trace.Trace{tr.Path: tr}), LaunchStarts: func(*trace.Trace) []int64 { return starts }})
	if err != nil {
		t.Fatal(err)
	}
	check(t, rep.Stages[0], 60, 7, 180, 5)
}

// TestHistQuantiles: the histogram's nearest-rank percentiles are within 1/64 of the exact
// ones, exact below 128, and Max is exact.
func TestHistQuantiles(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		n := 1 + r.IntN(2000)
		var h hist
		xs := make([]int64, n)
		for i := range xs {
			switch trial % 3 {
			case 0:
				xs[i] = r.Int64N(128)
			case 1:
				xs[i] = r.Int64N(1 << 40)
			default:
				xs[i] = int64(r.ExpFloat64() * 20_000)
			}
			h.add(xs[i])
		}
		slices.Sort(xs)
		q, _ := h.quantiles()
		for _, c := range []struct {
			p   float64
			got float64
		}{{50, q.P50}, {90, q.P90}, {99, q.P99}, {100, q.Max}} {
			rank := int(float64(n)*c.p/100 + 0.999999999)
			want := float64(xs[max(rank, 1)-1])
			tol := want / 64
			if want < 128 {
				tol = 0
			}
			if d := c.got - want; d > tol || -d > tol {
				t.Fatalf("trial %d: p%v = %v, exact %v (n %d)", trial, c.p, c.got, want, n)
			}
		}
	}
}
