package sim

import (
	"context"
	"math"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/sglprof/runner/reports/kineto"
	"github.com/sglprof/runner/reports/trace"
	"github.com/sglprof/runner/reports/triage"
)

// TestLateRankSkew: an 8-rank /start_profile window with RUNNER_SIM_LATE_RANK=3=2 (rank 3
// starts every all-reduce 2 ms late, the others wait for it inside NCCL) triages, in process,
// to all-reduce rows whose start skew across the ranks is 2000 µs ± 1 %, on every instance.
func TestLateRankSkew(t *testing.T) {
	k, err := readKnobs(map[string]string{EnvLateRank: "3=2"})
	if err != nil {
		t.Fatal(err)
	}
	prof := diffusersProfile
	prof.layers = 2 // two transformer blocks: four all-reduces per step are enough
	s := &server{k: k, prof: prof, model: "sim/model"}
	win := &diffusionWindow{id: "w", steps: 2, stepNS: 20_000_000, textNS: 1_000_000, vaeNS: 1_000_000, firstNS: 1_766_000_000_000_000_000}
	dir := t.TempDir()
	const ranks = 8
	for r := range ranks {
		p := filepath.Join(dir, "w-full_stages-global-rank"+strconv.Itoa(r)+".trace.json.gz")
		if err := writeGzTrace(p, s.windowRankConfig(win, r, ranks)); err != nil {
			t.Fatal(err)
		}
	}
	in, err := triage.Discover(dir, triage.DiscoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	open := func(ctx context.Context, p string) (*trace.Trace, error) {
		tr, err := kineto.ReadFile(ctx, p, kineto.Options{})
		if err == nil {
			trace.Link(tr)
		}
		return tr, err
	}
	rep, err := triage.Analyze(context.Background(), in, triage.Options{Open: open})
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, st := range rep.Stages {
		for _, c := range st.Collectives {
			if c.Op != "all_reduce" {
				continue
			}
			rows++
			if c.Matched != c.Count || c.Count == 0 {
				t.Errorf("stage %s: %d of %d all-reduces matched across the ranks", st.Stage, c.Matched, c.Count)
			}
			if math.Abs(c.SkewUS-2000) > 20 || math.Abs(c.SkewMaxUS-2000) > 20 {
				t.Errorf("stage %s: all-reduce skew mean %.3f µs, max %.3f µs; want 2000 ± 1 %%", st.Stage, c.SkewUS, c.SkewMaxUS)
			}
			if c.GroupSize != ranks || c.Bytes <= 0 || c.BusGBps <= 0 {
				t.Errorf("stage %s: all-reduce row %+v lacks its recorded size or group", st.Stage, c)
			}
		}
	}
	if rows == 0 {
		t.Fatal("no all-reduce row in the report")
	}
	// Without the knob the same window has no skew: the 2 ms come from it.
	s.k.lateRank = -1
	for r := range ranks {
		p := filepath.Join(dir, "w-full_stages-global-rank"+strconv.Itoa(r)+".trace.json.gz")
		if err := writeGzTrace(p, s.windowRankConfig(win, r, ranks)); err != nil {
			t.Fatal(err)
		}
	}
	rep, err = triage.Analyze(context.Background(), in, triage.Options{Open: open})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range rep.Stages {
		for _, c := range st.Collectives {
			if c.SkewMaxUS != 0 {
				t.Errorf("no late rank: stage %s %s skew %.3f µs, want 0", st.Stage, c.Op, c.SkewMaxUS)
			}
		}
	}
}

func TestParseLateRank(t *testing.T) {
	for in, want := range map[string][2]int64{"3": {3, 2_000_000}, "0=2.5": {0, 2_500_000}, " 7 = 1 ": {7, 1_000_000}} {
		r, ns, err := parseLateRank(in)
		if err != nil || int64(r) != want[0] || ns != want[1] {
			t.Errorf("parseLateRank(%q) = %d, %d, %v; want %v", in, r, ns, err, want)
		}
	}
	for _, in := range []string{"", "x", "-1", "3=0", "3=-2", "3=NaN", "3=1e9"} {
		if _, _, err := parseLateRank(in); err == nil {
			t.Errorf("parseLateRank(%q): no error", in)
		}
	}
}
