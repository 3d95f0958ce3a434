package bisect

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/compare"
	"github.com/sglprof/runner/reports/perf"
)

const key = "model=m/res=1024"

// fakeRepo is a history of n commits whose denoising stage gets step times slower at commit
// stepAt (none when stepAt < 0), measured with run-to-run noise cv drawn from seed: every
// repeat of every commit is a fresh draw, as a different jitter seed per repeat gives.
type fakeRepo struct {
	n, stepAt int
	step, cv  float64
	seed      uint64
	broken    map[int]bool // commits whose install fails
	runs      map[int][]float64
	calls     int
}

func (f *fakeRepo) commits() []Commit {
	out := make([]Commit, f.n)
	for i := range out {
		out[i] = Commit{Hash: fmt.Sprintf("%02x", i) + strings.Repeat("a", 38), Subject: fmt.Sprintf("commit %d", i)}
	}
	return out
}

func (f *fakeRepo) index(c Commit) int {
	i, _ := strconv.ParseInt(c.Hash[:2], 16, 64)
	return int(i)
}

func (f *fakeRepo) measure(_ context.Context, c Commit, repeats int) (Measured, error) {
	i := f.index(c)
	if f.broken[i] {
		return Measured{Skipped: "install failed (exit 1)", Tried: true}, nil
	}
	if f.runs == nil {
		f.runs = map[int][]float64{}
	}
	have := len(f.runs[i])
	for r := have; r < repeats; r++ {
		rng := rand.New(rand.NewPCG(f.seed, uint64(i)<<20|uint64(r)))
		v := 2000.0 * math.Exp(rng.NormFloat64()*f.cv)
		if f.stepAt >= 0 && i >= f.stepAt {
			v *= f.step
		}
		f.runs[i] = append(f.runs[i], v)
	}
	if repeats > have {
		f.calls++
	}
	vals := append([]float64(nil), f.runs[i]...)
	set := &perf.Set{Source: c.Hash, Kind: "run", Configs: map[string]*perf.Config{
		key: {Key: key, Metrics: map[string][]float64{"stage/DenoisingStage": vals}, Runs: map[string][]float64{"stage/DenoisingStage": vals}},
	}}
	return Measured{Set: set, Repeats: len(vals), New: max(0, repeats-have)}, nil
}

// judge is the comparison `runner compare` makes, with the plan's 5% stage tolerance.
func judge(base, cur *perf.Set) (*compare.Result, error) {
	return compare.Compare(base, cur, compare.Options{Tolerances: map[string]compare.Tolerance{"stage": {Rel: 0.05, Text: "5%"}}})
}

func TestBisectNamesTheStepWithJitterForNineOfTenSeeds(t *testing.T) {
	found := 0
	for seed := range uint64(10) {
		f := &fakeRepo{n: 64, stepAt: 37, step: 1.10, cv: 0.02, seed: seed}
		res, err := Run(t.Context(), f.commits(), Options{Repeats: 3, MaxRepeats: 9, Measure: f.measure, Judge: judge})
		if err != nil {
			t.Fatal(err)
		}
		if res.FirstBad != nil && f.index(*res.FirstBad) == 37 {
			found++
		} else {
			t.Logf("seed %d: first bad %v, candidates %v", seed, res.FirstBad, res.Candidates)
		}
		if res.Measured > 8 {
			t.Errorf("seed %d: %d measured steps, want at most 8", seed, res.Measured)
		}
	}
	if found < 9 {
		t.Errorf("commit 37 found for %d of 10 seeds, want at least 9", found)
	}
}

func TestBisectSecondRunMeasuresNothingNew(t *testing.T) {
	f := &fakeRepo{n: 64, stepAt: 37, step: 1.10, cv: 0.01, seed: 1}
	opts := Options{Repeats: 2, MaxRepeats: 4, Measure: f.measure, Judge: judge}
	first, err := Run(t.Context(), f.commits(), opts)
	if err != nil {
		t.Fatal(err)
	}
	second, err := Run(t.Context(), f.commits(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if first.Measured == 0 || second.Measured != 0 {
		t.Fatalf("measured %d then %d steps, want some then none", first.Measured, second.Measured)
	}
	for _, s := range second.Steps {
		if !s.Cached {
			t.Errorf("step %d of the second run not cached", s.Index)
		}
	}
	if second.FirstBad == nil || second.FirstBad.Hash != first.FirstBad.Hash {
		t.Errorf("second run named %v, the first %v", second.FirstBad, first.FirstBad)
	}
}

func TestBisectWithoutAStepSaysTheEndpointsDoNotDiffer(t *testing.T) {
	f := &fakeRepo{n: 64, stepAt: -1, cv: 0.02, seed: 3}
	res, err := Run(t.Context(), f.commits(), Options{Repeats: 3, MaxRepeats: 6, Measure: f.measure, Judge: judge})
	if err != nil {
		t.Fatal(err)
	}
	if res.Differ || res.FirstBad != nil || len(res.Candidates) > 0 {
		t.Fatalf("differ %v first bad %v candidates %v, want the endpoints not to differ", res.Differ, res.FirstBad, res.Candidates)
	}
	if res.Measured != 2 {
		t.Errorf("%d steps measured, want the two endpoints only", res.Measured)
	}
}

func TestBisectStepsAroundACommitThatDoesNotBuild(t *testing.T) {
	f := &fakeRepo{n: 64, stepAt: 37, step: 1.10, cv: 0.01, seed: 2, broken: map[int]bool{31: true, 32: true}}
	res, err := Run(t.Context(), f.commits(), Options{Repeats: 2, MaxRepeats: 4, Measure: f.measure, Judge: judge})
	if err != nil {
		t.Fatal(err)
	}
	if res.FirstBad == nil || f.index(*res.FirstBad) != 37 {
		t.Fatalf("first bad %v, want commit 37", res.FirstBad)
	}
	if len(res.Skipped) == 0 || f.index(res.Skipped[0]) != 31 && f.index(res.Skipped[0]) != 32 {
		t.Fatalf("skipped %v, want a broken commit listed", res.Skipped)
	}
	for _, s := range res.Steps {
		if s.Verdict == Skip && !strings.Contains(s.Reason, "install failed") {
			t.Errorf("skip of %d says %q, want the install failure", s.Index, s.Reason)
		}
	}
}

func TestBisectLeavesCandidatesWhenTheCulpritDoesNotBuild(t *testing.T) {
	f := &fakeRepo{n: 16, stepAt: 9, step: 1.10, cv: 0.01, seed: 4, broken: map[int]bool{9: true}}
	res, err := Run(t.Context(), f.commits(), Options{Repeats: 2, MaxRepeats: 2, Measure: f.measure, Judge: judge})
	if err != nil {
		t.Fatal(err)
	}
	if res.FirstBad != nil || len(res.Candidates) != 2 || f.index(res.Candidates[0]) != 9 || f.index(res.Candidates[1]) != 10 {
		t.Fatalf("first bad %v candidates %v, want no single commit but 9 and 10", res.FirstBad, res.Candidates)
	}
}

func TestBisectRefusesAnEndpointThatDoesNotBuild(t *testing.T) {
	f := &fakeRepo{n: 8, stepAt: 4, step: 1.10, cv: 0.01, broken: map[int]bool{0: true}}
	_, err := Run(t.Context(), f.commits(), Options{Repeats: 2, Measure: f.measure, Judge: judge})
	if err == nil || !strings.Contains(err.Error(), "good endpoint") {
		t.Fatalf("err = %v, want the good endpoint named", err)
	}
}
