package sim

import (
	"math"
	"testing"

	"github.com/sglprof/runner/reports/kineto/kinetogen"
)

func TestSlowRankKnob(t *testing.T) {
	for v, want := range map[string][2]float64{"": {-1, DefaultSlowRankFactor}, "3": {3, DefaultSlowRankFactor}, " 2=1.5 ": {2, 1.5}} {
		k, err := readKnobs(map[string]string{EnvSlowRank: v})
		if err != nil || float64(k.slowRank) != want[0] || k.slowRankF != want[1] {
			t.Errorf("%s=%q: rank %d factor %v err %v, want %v", EnvSlowRank, v, k.slowRank, k.slowRankF, err, want)
		}
	}
	for _, bad := range []string{"x", "-1", "2=0.5", "2=NaN", "2=inf", "2="} {
		if _, err := readKnobs(map[string]string{EnvSlowRank: bad}); err == nil {
			t.Errorf("%s=%q accepted", EnvSlowRank, bad)
		}
	}
}

func TestRankScale(t *testing.T) {
	base := map[string]float64{kinetogen.GroupGEMM: 2}
	if got := rankScale(base, 1, -1, 1.3); got[kinetogen.GroupGEMM] != 2 || len(got) != 1 {
		t.Errorf("no straggler: %v", got)
	}
	slow := rankScale(base, 3, 3, 1.5)
	if slow[kinetogen.GroupGEMM] != 3 || slow[kinetogen.GroupAttention] != 1.5 || slow[kinetogen.GroupComm] != 0 {
		t.Errorf("straggler scale %v", slow)
	}
	fast := rankScale(base, 0, 3, 1.5)
	// The DiT block's slowed compute weighs 97 against 5 of all-reduce: 1 + 97*0.5/5.
	if math.Abs(fast[kinetogen.GroupComm]-10.7) > 1e-9 || fast[kinetogen.GroupGEMM] != 2 {
		t.Errorf("waiting rank scale %v", fast)
	}
	if base[kinetogen.GroupComm] != 0 || len(base) != 1 {
		t.Errorf("rankScale modified its input: %v", base)
	}
}

// TestSlowRankWindowsMatch: with a straggler the other ranks wait for it inside their
// all-reduces, so every rank's denoising ends at about the same time (a real TP run), while the
// straggler spends the extra time computing (issue 17 review: the simulated straggler used to
// finish late alone, which no real TP run does).
func TestSlowRankWindowsMatch(t *testing.T) {
	type fig struct{ end, comm, first int64 }
	walk := func(rank int) fig {
		var f fig
		f.first = -1
		_, err := kinetogen.Walk(kinetogen.Config{Flavor: kinetogen.FlavorDiffusion, Layers: 8, Steps: 3, Seed: 1, CommStream: true,
			Rank: rank, WorldSize: 4, StepScale: rankScale(nil, rank, 3, 1.5)}, func(op *kinetogen.Op) {
			if op.Kind != kinetogen.OpKernel && op.Kind != kinetogen.OpMemcpy {
				return
			}
			if f.first < 0 || op.StartNS < f.first {
				f.first = op.StartNS
			}
			f.end = max(f.end, op.StartNS+op.DurNS)
			if op.Group == kinetogen.GroupComm {
				f.comm += op.DurNS
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	fast, slow := walk(0), walk(3)
	wf, ws := float64(fast.end-fast.first), float64(slow.end-slow.first)
	if math.Abs(wf-ws) > 0.05*ws {
		t.Errorf("GPU window: fast rank %.0f ns, straggler %.0f ns; want within 5%%", wf, ws)
	}
	if fast.comm < 3*slow.comm {
		t.Errorf("collective time: fast rank %d ns, straggler %d ns; the fast rank should wait in its all-reduces", fast.comm, slow.comm)
	}
}

// TestCaptureRanges: cudaProfilerStart/Stop pairs become nsys capture ranges; "stop" keeps
// the first, "repeat" every one; a start without a stop runs to the end.
func TestCaptureRanges(t *testing.T) {
	caps := []actRec{{K: "cap", S: 10, V: "start"}, {K: "cap", S: 20, V: "stop"}, {K: "cap", S: 30, V: "start"}, {K: "cap", S: 40, V: "stop"}, {K: "cap", S: 50, V: "start"}}
	if got := captureRanges(caps, false); len(got) != 1 || got[0] != [2]int64{10, 20} {
		t.Fatalf("stop: %v", got)
	}
	if got := captureRanges(caps, true); len(got) != 3 || got[1] != [2]int64{30, 40} || got[2][0] != 50 || got[2][1] != math.MaxInt64 {
		t.Fatalf("repeat: %v", got)
	}
	if got := captureRanges(nil, true); len(got) != 0 {
		t.Fatalf("no calls: %v", got)
	}
}
