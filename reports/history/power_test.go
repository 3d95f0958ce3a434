package history

import (
	"context"
	"database/sql"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/compare"
	"github.com/sglprof/runner/reports/perf"
)

// Without a history the MDC comes from the assumed noise; with one it comes from the measured
// repeat spread (about the simulator's 1 %) and the history gate's MDC is stated too.
func TestPlanPower(t *testing.T) {
	ctx := context.Background()
	keys := []string{"qwen/1024x1024"}
	metrics := HeadlineMetrics(false, false)
	pw, err := PlanPower(ctx, nil, "nightly", keys, metrics, 3, BaselineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := compare.PlannedMDC(3, compare.AssumedRunCV, 0.05, 0.8)
	if r := pw.Rows[0]; r.Measured || !r.HasMDC || r.MDC != want || r.HasGate || r.Metric != perf.MetricE2E {
		t.Fatalf("no history: %+v", r)
	}

	path := filepath.Join(t.TempDir(), "h.db")
	db := open(t, path)
	nightly(t, db, 3, []float64{1, 1, 1, 1, 1, 1}, BaselineOptions{})
	db.Close()
	ro, err := OpenReadOnly(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	pw, err = PlanPower(ctx, ro, "nightly", keys, []string{perf.MetricE2E, perf.StagePrefix + "DenoisingStage"}, 6, BaselineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range pw.Rows {
		if !r.Measured || r.HistoryRuns != 6 || math.Abs(r.RepeatCV-0.01) > 0.004 || !r.HasGate || !(r.MDC < 0.03) || !(r.Gate < 0.06) {
			t.Fatalf("measured: %+v", r)
		}
	}
	var b strings.Builder
	if err := WritePowerText(&b, pw, path); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"HISTORY GATE MDC", "(6 runs)", "COMPARE MDC (6 vs 6 runs)"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("text lacks %q:\n%s", w, b.String())
		}
	}
	if strings.Contains(b.String(), "warning") {
		t.Errorf("6 repeats at 1%% noise see 10%%:\n%s", b.String())
	}
	// Reading left nothing beside the database (a read-only WAL connection leaves -wal, -shm).
	ro.Close()
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Errorf("files beside the database after a read: %v", ents)
	}
}

// A plan that cannot see a 10 % change says so, with the repeats that would.
func TestPlanPowerWarns(t *testing.T) {
	pw, err := PlanPower(context.Background(), nil, "p", []string{"cfg"}, []string{perf.MetricE2E}, 2, BaselineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	WritePowerText(&b, pw, "")
	if !strings.Contains(b.String(), "warning: cfg e2e: this plan cannot see a 10% change (MDC 11.3%") || !strings.Contains(b.String(), "repeats = 3 would") {
		t.Fatalf("two repeats at 2%% noise:\n%s", b.String())
	}
	pw, _ = PlanPower(context.Background(), nil, "p", []string{"cfg"}, []string{perf.MetricE2E}, 1, BaselineOptions{})
	b.Reset()
	WritePowerText(&b, pw, "")
	if !strings.Contains(b.String(), "none: 1 run a side") || !strings.Contains(b.String(), "one repeat a side gives runner compare no run-to-run test") {
		t.Fatalf("one repeat:\n%s", b.String())
	}
}

// A database of an older schema (v2: no per-run spread) is read as it is: no migration, no
// write, the noise assumed.
func TestOpenReadOnlyOlderSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.db")
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{migrations[0], migrations[1], "PRAGMA user_version = 2",
		"INSERT INTO runs (run_id, time_ns, plan, run_dir, gpu_model) VALUES ('old', 1, 'p', '/x', 'H100')",
		"INSERT INTO metrics VALUES (1, 'cfg', 'e2e', 'ns', 6, 1000, 0, 0)"} {
		if _, err := raw.Exec(q); err != nil {
			t.Fatal(q, err)
		}
	}
	raw.Close()
	ctx := context.Background()
	db, err := OpenReadOnly(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	pw, err := PlanPower(ctx, db, "p", []string{"cfg"}, []string{perf.MetricE2E}, 3, BaselineOptions{})
	db.Close()
	if err != nil || pw.Rows[0].HistoryRuns != 1 || pw.Rows[0].Measured {
		t.Fatalf("%v %+v", err, pw)
	}
	raw, _ = sql.Open("sqlite", "file:"+path)
	defer raw.Close()
	var v int
	raw.QueryRow("PRAGMA user_version").Scan(&v)
	if v != 2 {
		t.Fatalf("user_version = %d: a read-only open migrated the database", v)
	}
	if _, err := OpenReadOnly(ctx, filepath.Join(t.TempDir(), "missing.db")); err == nil {
		t.Fatal("a missing database opened")
	}
}
