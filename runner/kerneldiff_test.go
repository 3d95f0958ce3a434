package runner

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/history"
	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/reports/triage"
)

// addProfiledCell adds an ok cell of configuration key with profiler to the run directory dir
// and writes rep as its triage.json, rendered with cutoff (runner run writes 0).
func addProfiledCell(t *testing.T, dir, key, profiler string, repeat int, rep *triage.Report, cutoff float64) string {
	t.Helper()
	cells, err := rundir.ReadCells(dir)
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("%03d-%s-%s-r%d", len(cells.Cells), key, profiler, repeat)
	cd := filepath.Join(dir, rundir.CellsDir, id)
	if err := os.MkdirAll(cd, 0o755); err != nil {
		t.Fatal(err)
	}
	cells.Cells = append(cells.Cells, rundir.CellRecord{Cell: plans.Cell{ID: id, Key: key, Profiler: profiler, Repeat: repeat}, Dir: filepath.Join(rundir.CellsDir, id)})
	if err := rundir.WriteJSON(filepath.Join(dir, rundir.CellsFile), cells, nil); err != nil {
		t.Fatal(err)
	}
	if err := rundir.WriteJSON(filepath.Join(cd, rundir.ResultFile), &rundir.CellResult{ID: id, Key: key, Profiler: profiler, Verdict: plans.VerdictOK}, nil); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := triage.Render(&b, rep, "json", cutoff); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cd, rundir.TriageJSON), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return cd
}

// denoiseTriage is a one-stage triage: attention attnUS, GEMM 900 µs and a small kernel of
// 5 µs (under a 1 % cutoff).
func denoiseTriage(attnUS float64) *triage.Report {
	s := triage.Stage{Stage: "DenoisingStage", KernelCount: 30, KernelTimeUS: attnUS + 905, Kernels: []triage.KernelRow{
		{Name: "void flash::FlashAttnFwdSm90<128>", Category: "attention", TotalUS: attnUS, Count: 10},
		{Name: "nvjet_tst_128x256", Category: "gemm", TotalUS: 900, Count: 10},
		{Name: "tiny", Category: "elementwise", TotalUS: 5, Count: 10},
	}}
	for i := range s.Kernels {
		s.Kernels[i].SharePct = s.Kernels[i].TotalUS * 100 / s.KernelTimeUS
	}
	return &triage.Report{Mode: triage.ModeSingle, Stages: []triage.Stage{s}}
}

// CompareBaseline attaches to a regressed configuration the kernel diff of its profiled cells:
// torch preferred to nsys, each side's first repeat, read from triage.json; a triage.json
// written with a cutoff and no traces to triage again still diffs, with a warning; one
// profiler on each side is a note, not a diff.
func TestCompareBaselineKernelDiff(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	base := filepath.Join(root, "base")
	writeRun(t, base, "m", t0, 100, 101, 102, 99, 100, 98, 101)
	baseTorch := addProfiledCell(t, base, "m", plans.ProfilerTorch, 1, denoiseTriage(1000), 0)
	addProfiledCell(t, base, "m", plans.ProfilerNsys, 1, denoiseTriage(999), 0)
	curDir := filepath.Join(root, "cur")
	writeRun(t, curDir, "m", t0.Add(time.Hour), 200, 201, 202, 199, 200, 198, 201)
	curTorch2 := addProfiledCell(t, curDir, "m", plans.ProfilerTorch, 2, denoiseTriage(2000), 0)
	curTorch := addProfiledCell(t, curDir, "m", plans.ProfilerTorch, 1, denoiseTriage(1300), 0)
	cur := reload(t, curDir)

	res, _, err := NightlyOptions{Baseline: base}.CompareBaseline(ctx, cur, &plans.Plan{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.KernelDiffs) != 1 {
		t.Fatalf("kernel diffs %+v, want one for configuration m", res.KernelDiffs)
	}
	kd := res.KernelDiffs[0]
	if kd.Config != "m" || kd.Profiler != plans.ProfilerTorch || kd.BaseCell != baseTorch || kd.NewCell != curTorch || kd.Diff == nil || kd.Note != "" {
		t.Fatalf("kernel diff %+v, want torch cells %s → %s (the first repeats)", kd, baseTorch, curTorch)
	}
	if len(kd.Diff.Warnings) != 0 || len(kd.Verdicts) != 1 || !strings.Contains(kd.Verdicts[0], "100% of the delta is `FlashAttnFwdSm90` (+30.0%, launches unchanged)") {
		t.Errorf("verdicts %q, warnings %q", kd.Verdicts, kd.Diff.Warnings)
	}

	// The new run's torch cells lose their complete triage: the one left was written with a
	// cutoff and its traces are gone.
	for _, c := range []string{curTorch2, curTorch} {
		if err := os.RemoveAll(c); err != nil {
			t.Fatal(err)
		}
	}
	cells, _ := rundir.ReadCells(curDir)
	cells.Cells = cells.Cells[:len(cells.Cells)-2]
	if err := rundir.WriteJSON(filepath.Join(curDir, rundir.CellsFile), cells, nil); err != nil {
		t.Fatal(err)
	}
	cut := addProfiledCell(t, curDir, "m", plans.ProfilerTorch, 1, denoiseTriage(1300), triage.DefaultCutoff)
	res, _, err = NightlyOptions{Baseline: base}.CompareBaseline(ctx, reload(t, curDir), &plans.Plan{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if kd := res.KernelDiffs[0]; kd.NewCell != cut || kd.Diff == nil || len(kd.Diff.Warnings) != 1 || !strings.Contains(kd.Diff.Warnings[0], "cutoff") {
		t.Errorf("a cut triage.json: %+v, want a diff that warns of the cutoff", kd)
	}

	// A history baseline: the base is the newest earlier run of the history with a profiled
	// cell; a history whose runs' directories are gone says so.
	db, err := history.Open(ctx, filepath.Join(root, "h.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	gone := reload(t, base)
	gone.Source, gone.RunID = filepath.Join(root, "gone"), "gone"
	gone.Start = t0.Add(-time.Hour)
	for _, s := range []*perf.Set{gone, reload(t, base)} {
		if _, err := db.Append(ctx, history.FromSet(s, "test")); err != nil {
			t.Fatal(err)
		}
	}
	hist := NightlyOptions{Baseline: BaselineHistory, Consecutive: 1}
	res, _, err = hist.CompareBaseline(ctx, reload(t, curDir), &plans.Plan{}, db)
	if err != nil {
		t.Fatal(err)
	}
	if kd := res.KernelDiffs[0]; kd.BaseCell != baseTorch || kd.NewCell != cut || kd.Diff == nil {
		t.Errorf("history baseline: %+v, want %s → %s", kd, baseTorch, cut)
	}
	if err := os.Rename(base, filepath.Join(root, "moved")); err != nil {
		t.Fatal(err)
	}
	res, _, err = hist.CompareBaseline(ctx, reload(t, curDir), &plans.Plan{}, db)
	if err != nil {
		t.Fatal(err)
	}
	if kd := res.KernelDiffs[0]; kd.Diff != nil || !strings.Contains(kd.Note, "none of the last 5 runs of this configuration in the history") {
		t.Errorf("history without run directories: %+v, want a note", kd)
	}
	if err := os.Rename(filepath.Join(root, "moved"), base); err != nil {
		t.Fatal(err)
	}

	// Only nsys on the base side now: no diff across profilers.
	os.RemoveAll(baseTorch)
	res, _, err = NightlyOptions{Baseline: base}.CompareBaseline(ctx, reload(t, curDir), &plans.Plan{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if kd := res.KernelDiffs[0]; kd.Diff != nil || !strings.Contains(kd.Note, "the base has only nsys cells and the new run only torch cells") {
		t.Errorf("nsys against torch: %+v, want a note and no diff", kd)
	}
}

// reload reads a run directory again as a comparison side.
func reload(t *testing.T, dir string) *perf.Set {
	t.Helper()
	s, err := perf.Load(dir, perf.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
