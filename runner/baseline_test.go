package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/compare"
	"github.com/sglprof/runner/reports/history"
	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/exitcode"
)

// writeRun writes a finished run directory whose cells of configuration key took e2e × 10 ms
// each.
func writeRun(t *testing.T, dir, key string, start time.Time, e2e ...int64) *perf.Set {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := rundir.WriteJSON(filepath.Join(dir, rundir.ManifestFile), &rundir.Manifest{Plan: "p", Start: start, GPUs: []rundir.GPUInfo{{Name: "H100"}}}, nil); err != nil {
		t.Fatal(err)
	}
	var cells rundir.Cells
	for i, ns := range e2e {
		id := fmt.Sprintf("%03d-%s-none-r%d", i, key, i+1)
		cells.Cells = append(cells.Cells, rundir.CellRecord{Cell: plans.Cell{ID: id}, Dir: filepath.Join(rundir.CellsDir, id)})
		if err := os.MkdirAll(filepath.Join(dir, rundir.CellsDir, id), 0o755); err != nil {
			t.Fatal(err)
		}
		r := &rundir.CellResult{ID: id, Key: key, Profiler: plans.ProfilerNone, Verdict: plans.VerdictOK, Timings: rundir.Timings{WallNS: ns * 1e7, E2ENS: ns * 1e7}}
		if err := rundir.WriteJSON(filepath.Join(filepath.Join(dir, rundir.CellsDir, id), rundir.ResultFile), r, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := rundir.WriteJSON(filepath.Join(dir, rundir.CellsFile), &cells, nil); err != nil {
		t.Fatal(err)
	}
	if err := rundir.WriteJSON(filepath.Join(dir, rundir.SummaryJSON), &rundir.Summary{Plan: "p", RunDir: dir}, nil); err != nil {
		t.Fatal(err)
	}
	s, err := perf.Load(dir, perf.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// CompareBaseline resolves every kind of baseline the three callers (run, compare, report)
// name, and sorts its failures into the classes they map to exit codes.
func TestCompareBaseline(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	base := filepath.Join(root, "base")
	writeRun(t, base, "m", t0, 100, 101, 102, 99, 100, 98, 101)
	cur := writeRun(t, filepath.Join(root, "cur"), "m", t0.Add(time.Hour), 200, 201, 202, 199, 200, 198, 201)
	other := filepath.Join(root, "other")
	writeRun(t, other, "x", t0, 100, 101, 102)
	p := &plans.Plan{}

	res, b, err := NightlyOptions{}.CompareBaseline(ctx, cur, p, nil)
	if res != nil || b != nil || err != nil {
		t.Errorf("no baseline: %v, %v, %v; want nothing", res, b, err)
	}

	res, b, err = NightlyOptions{Baseline: base}.CompareBaseline(ctx, cur, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b == nil || b.Source != base || !res.Regressed() || !slices.Equal(res.Profilers, perf.DefaultProfilers) {
		t.Errorf("run directory baseline: base %v, regressed %v, profilers %v; want the base set, a regression, the default profilers", b, res.Regressed(), res.Profilers)
	}

	var ue *exitcode.UsageError
	for name, n := range map[string]NightlyOptions{
		"missing":           {Baseline: filepath.Join(root, "missing")},
		"nothing in common": {Baseline: other},
	} {
		_, _, err = n.CompareBaseline(ctx, cur, p, nil)
		if !errors.As(err, &ue) || NoBaselineYet(err) {
			t.Errorf("%s: err = %v; want a usage error", name, err)
		}
	}

	if _, _, err = (NightlyOptions{Baseline: BaselineHistory}).CompareBaseline(ctx, cur, p, nil); !errors.Is(err, ErrNoHistory) {
		t.Errorf("history without a database: err = %v, want ErrNoHistory", err)
	}

	db, err := history.Open(ctx, filepath.Join(root, "history.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	n := NightlyOptions{Baseline: BaselineHistory, Profilers: []string{"all"}}
	_, _, err = n.CompareBaseline(ctx, cur, p, db)
	if !NoBaselineYet(err) || !errors.Is(err, compare.ErrNothingInCommon) || errors.As(err, &ue) {
		t.Errorf("empty history: err = %v; want NoBaselineYet", err)
	}
	for i := range 3 {
		s := writeRun(t, filepath.Join(root, fmt.Sprint("h", i)), "m", t0.Add(time.Duration(i)*time.Minute), 100, 100, 100)
		if _, err := db.Append(ctx, history.FromSet(s, "test")); err != nil {
			t.Fatal(err)
		}
	}
	res, b, err = n.CompareBaseline(ctx, cur, p, db)
	if err != nil {
		t.Fatal(err)
	}
	if b != nil || res.Mode != "history" || !strings.Contains(res.Base, "history") || !slices.Equal(res.Profilers, []string{"all"}) {
		t.Errorf("history baseline: base %v, mode %q (%s), profilers %v", b, res.Mode, res.Base, res.Profilers)
	}
}
