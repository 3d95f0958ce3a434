package runner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/compare"
	"github.com/sglprof/runner/reports/history"
	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/reports/rundir"
)

func TestStepPlanExpandsTheWorktreeAndKeepsThePlan(t *testing.T) {
	p := &plans.Plan{Name: "b", Backend: plans.Backend{Kind: "sglang", Mode: "generate", Command: []string{"{worktree}/venv/bin/sglang"},
		Env: map[string]string{"RUNNER_SIM_KNOBS_FILE": "{worktree}/knobs", "OTHER": "x"}},
		Matrix:  plans.Matrix{Model: []string{"m/a"}, Prompt: []string{"p"}, Resolution: []string{"64x64"}, NumInferenceSteps: []int{2}, Repeats: 5},
		Profile: plans.Profile{Profilers: []string{"none", "torch"}}}
	key := p.Expand()[0].Key
	sp, ids := stepPlan(p, key, "/w/t", 3, true)
	if sp.Backend.Env["RUNNER_SIM_KNOBS_FILE"] != "/w/t/knobs" || sp.Backend.Command[0] != "/w/t/venv/bin/sglang" || sp.Backend.Env["OTHER"] != "x" {
		t.Errorf("step plan backend = %+v, want {worktree} replaced", sp.Backend)
	}
	if p.Backend.Env["RUNNER_SIM_KNOBS_FILE"] != "{worktree}/knobs" || p.Backend.Command[0] != "{worktree}/venv/bin/sglang" || p.Matrix.Repeats != 5 {
		t.Errorf("the plan itself changed: %+v", p.Backend)
	}
	var none, torch int
	for _, id := range ids {
		switch {
		case strings.Contains(id, "-none-"):
			none++
		case strings.Contains(id, "-torch-r1"):
			torch++
		default:
			t.Errorf("cell %s runs: only unprofiled repeats and the first profiled one should", id)
		}
	}
	if none != 3 || torch != 1 {
		t.Errorf("first batch runs %d unprofiled and %d torch cells, want 3 and 1: %v", none, torch, ids)
	}
	_, ids = stepPlan(p, key, "/w/t", 2, false)
	for _, id := range ids {
		if strings.Contains(id, "-torch-") {
			t.Errorf("a later batch runs the profiled cell %s again", id)
		}
	}
}

func TestMergeSetsPoolsTheRunsOfEveryBatch(t *testing.T) {
	mk := func(src string, vals ...float64) *perf.Set {
		return &perf.Set{Source: src, Configs: map[string]*perf.Config{"k": {Key: "k", Cells: []string{src}, Metrics: map[string][]float64{"e2e": vals}, Runs: map[string][]float64{"e2e": vals}}}}
	}
	s := mergeSets([]*perf.Set{mk("a", 1, 2), mk("b", 3)}, "k")
	if got := s.Configs["k"].RunValues("e2e"); len(got) != 3 || got[2] != 3 {
		t.Errorf("pooled runs = %v, want 1 2 3", got)
	}
	if s.Source != "a" || len(s.Configs["k"].Cells) != 2 {
		t.Errorf("merged set = %+v", s)
	}
}

func TestEndpointsFromHistoryAreTheCommitsAroundTheChange(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	db, err := history.Open(ctx, filepath.Join(dir, history.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p := &plans.Plan{Name: "nightly"}
	const key = "m/1024"
	commits := []string{"c1", "c1", "c2", "c3"}
	for i, c := range commits {
		run := history.Run{RunID: "run" + string(rune('1'+i)), Time: time.Unix(int64(100+i), 0), Plan: p.Name, RunDir: filepath.Join(dir, "run"+string(rune('1'+i))), Commit: c,
			Configs: []history.ConfigMetrics{{Key: key, Cells: 1, Metrics: []history.MetricValue{{Metric: "e2e", Unit: "ns", N: 1, Median: 1}}}}}
		if _, err := db.Append(ctx, run); err != nil {
			t.Fatal(err)
		}
	}
	res := compare.Result{Rows: []compare.Row{
		{Config: key, Metric: "e2e", Status: compare.StatusOK},
		{Config: key, Metric: "stage/DenoisingStage", Status: compare.StatusRegression, Change: &compare.ChangePoint{RunID: "run3"}},
	}}
	if err := os.MkdirAll(filepath.Join(dir, "run4"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := rundir.WriteJSON(filepath.Join(dir, "run4", rundir.CompareFile), res, nil); err != nil {
		t.Fatal(err)
	}
	good, bad, gotKey, err := endpointsFromHistory(ctx, db, p)
	if err != nil {
		t.Fatal(err)
	}
	if good != "c1" || bad != "c2" || gotKey != key {
		t.Errorf("from history: good %q bad %q config %q, want c1 c2 %s (runs 2 and 3, around the change)", good, bad, gotKey, key)
	}
	res.Rows[1].Change.RunID = "run2" // run1 and run2 measured the same commit
	if err := rundir.WriteJSON(filepath.Join(dir, "run4", rundir.CompareFile), res, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := endpointsFromHistory(ctx, db, p); err == nil || !strings.Contains(err.Error(), "same backend commit") {
		t.Errorf("same commit on both sides: err = %v", err)
	}
}
