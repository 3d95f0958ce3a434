package triage

import (
	"context"
	"testing"

	"github.com/sglprof/runner/reports/trace"
)

const kPinned = "Memcpy HtoD (Pinned -> Device)"

// sideStreamTrace: compute on stream 7 with an exposed all-reduce and an exposed pinned copy
// between the GEMMs, on streams 40 and 25 (side) or on stream 7 itself.
func sideStreamTrace(side bool) *trace.Trace {
	b := newTB("side.json")
	ncclS, copyS := int32(40), int32(25)
	if !side {
		ncclS, copyS = 7, 7
	}
	n := trace.NoID
	b.kernel(kGEMM, 0, 7, 0, 100_000, int32(n), int32(n))
	b.kernel(kNCCL, 0, ncclS, 110_000, 160_000, int32(n), int32(n))
	b.kernel(kGEMM, 0, 7, 170_000, 270_000, int32(n), int32(n))
	b.kernel(kPinned, 0, copyS, 280_000, 310_000, int32(n), int32(n))
	b.kernel(kGEMM, 0, 7, 320_000, 420_000, int32(n), int32(n))
	return b.t
}

// Review of issue 17: the DDP fixture's all-reduce already ran on NCCL's stream and was told to
// "run the collective on a side stream"; a pinned copy on its own stream was told to "make the
// copy non-blocking on a side stream". An op already off the main compute stream gets
// "start earlier".
func TestOverlapSideStreamAdvice(t *testing.T) {
	for _, side := range []bool{false, true} {
		tr := sideStreamTrace(side)
		r, err := Analyze(context.Background(), Inputs{Files: []Input{{Path: tr.Path, Stage: StageAll, Rank: NoRank}}},
			Options{Open: opener(map[string]*trace.Trace{tr.Path: tr})})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{Canonical(kNCCL): RecTryOverlap, kPinned: RecCopyPinned}
		if side {
			want = map[string]string{Canonical(kNCCL): RecSideStream, kPinned: RecSideStream}
		}
		got := map[string]string{}
		for _, o := range r.Stages[0].Overlap {
			got[o.Kernel] = o.Recommendation
		}
		for k, w := range want {
			if got[k] != w {
				t.Errorf("side stream %v: %s advised %q, want %q (rows %+v)", side, k, got[k], w, r.Stages[0].Overlap)
			}
		}
	}
}

// Review of issue 17: a 5.7 µs kernel (6.7% of an 84.6 µs stage) was P1 "act first"; P1 and
// P2 need MinActNS of summed time too.
func TestPriorityAbsoluteFloor(t *testing.T) {
	if p, rec := priority(VerdictHeadroom, CatElementwise, 5_700, 6.7, 1, 0, DepLow); p != "P3" || rec != RecDefer {
		t.Errorf("5.7 µs headroom kernel at 6.7%%: %s %s, want P3 defer", p, rec)
	}
	if p, _ := priority(VerdictHeadroom, CatElementwise, 10_000, 6.7, 1, 0, DepLow); p != "P1" {
		t.Errorf("10 µs headroom kernel at 6.7%%: %s, want P1", p)
	}
}

// checkOverlapOrder: overlap rows by priority, then share.
func checkOverlapOrder(t *testing.T, r *Report) {
	t.Helper()
	for _, s := range r.Stages {
		for i := 1; i < len(s.Overlap); i++ {
			a, b := s.Overlap[i-1], s.Overlap[i]
			if a.Priority > b.Priority || a.Priority == b.Priority && a.SharePct < b.SharePct {
				t.Errorf("stage %s: overlap row %d (%s %.1f%% %s) before (%s %.1f%% %s)", s.Stage, i, a.Priority, a.SharePct, a.Kernel, b.Priority, b.SharePct, b.Kernel)
			}
		}
	}
}

// Review of issue 17 on the shared fixtures: the TraceLens "unannotated" stage listed P2, P2,
// P1, P1, P1 (a 5.7 µs kernel among the P1s); the DDP all-reduce on NCCL's side stream and the
// pinned copy on stream 25 got side-stream advice.
func TestFixtureOverlapReview(t *testing.T) {
	t.Run("tracelens", func(t *testing.T) {
		r := analyzeFixture(t, "tracelens-mi300x-sglang-qwen3-8b-decode-hipgraph.json.gz")
		checkOverlapOrder(t, r)
		for _, s := range r.Stages {
			for _, o := range s.Overlap {
				if (o.Priority == "P1" || o.Priority == "P2") && o.TotalUS < MinActNS/1000 {
					t.Errorf("stage %s: %s %s with %.1f µs", s.Stage, o.Priority, o.Kernel, o.TotalUS)
				}
			}
		}
	})
	for _, name := range []string{"hta-a100-ddp-nccl-rank0.json.gz", "hta-a100-cudagraph-multistream-rank0.json.gz"} {
		t.Run(name, func(t *testing.T) {
			r := analyzeFixture(t, name)
			checkOverlapOrder(t, r)
			for _, s := range r.Stages {
				for _, o := range s.Overlap {
					if (o.Category == CatCommunication || o.Kernel == kPinned) && o.Verdict == VerdictHeadroom &&
						(o.Recommendation == RecTryOverlap || o.Recommendation == RecCopyPinned) {
						t.Errorf("stage %s: %s on a side stream advised %q", s.Stage, o.Kernel, o.Recommendation)
					}
				}
			}
		})
	}
}
