package history

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sglprof/runner/reports/compare"
	"github.com/sglprof/runner/reports/perf"
)

func run(id string, t time.Time, e2e float64) Run {
	return Run{RunID: id, Time: t, Plan: "p", RunDir: "/runs/p/" + id, GPU: "H100", Driver: "550",
		Configs: []ConfigMetrics{{Key: "cfg", Cells: 6, Metrics: []MetricValue{{Metric: perf.MetricE2E, Unit: perf.UnitNS, N: 6, Median: e2e}}}}}
}

func open(t testing.TB, path string) *DB {
	t.Helper()
	db, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestAppendListIdempotent(t *testing.T) {
	ctx := context.Background()
	db := open(t, filepath.Join(t.TempDir(), "h.db"))
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for i := range 3 {
		if added, err := db.Append(ctx, run(fmt.Sprint("r", i), t0.Add(time.Duration(i)*24*time.Hour), 1e9)); err != nil || !added {
			t.Fatal(added, err)
		}
	}
	if added, err := db.Append(ctx, run("r1", t0, 5e9)); err != nil || added {
		t.Fatalf("re-append of r1: added=%v err=%v", added, err)
	}
	all, err := db.List(ctx, Filter{Plan: "p"})
	if err != nil || len(all) != 3 || all[0].RunID != "r0" || all[2].Median != 1e9 {
		t.Fatalf("list: %v %+v", err, all)
	}
	recent, _ := db.List(ctx, Filter{Since: t0.Add(36 * time.Hour)})
	if len(recent) != 1 || recent[0].RunID != "r2" {
		t.Fatalf("since: %+v", recent)
	}
	none, _ := db.List(ctx, Filter{Cell: "other*"})
	if len(none) != 0 {
		t.Fatalf("cell filter: %+v", none)
	}
}

// TestMigrateV1 builds a version-1 database by hand and checks that Open upgrades it in place
// and keeps its rows.
func TestMigrateV1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.db")
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{migrations[0], "PRAGMA user_version = 1",
		"INSERT INTO runs (run_id, time_ns, plan, run_dir, gpu_model) VALUES ('old', 1, 'p', '/x', 'H100')",
		"INSERT INTO metrics VALUES (1, 'cfg', 'e2e', 'ns', 6, 1000, 0, 0)"} {
		if _, err := raw.Exec(q); err != nil {
			t.Fatal(q, err)
		}
	}
	raw.Close()
	db := open(t, path)
	var v int
	db.db.QueryRow("PRAGMA user_version").Scan(&v)
	if v != SchemaVersion {
		t.Fatalf("user_version = %d, want %d", v, SchemaVersion)
	}
	e, err := db.List(context.Background(), Filter{})
	if err != nil || len(e) != 1 || e[0].RunID != "old" {
		t.Fatalf("rows after migration: %v %+v", err, e)
	}
	if _, err := db.Append(context.Background(), run("new", time.Now(), 1)); err != nil {
		t.Fatal(err)
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.db")
	db := open(t, path)
	db.db.Exec("PRAGMA user_version = 99")
	db.Close()
	before, _ := os.ReadFile(path)
	_, err := Open(context.Background(), path)
	if !errors.Is(err, ErrNewerSchema) || !strings.Contains(err.Error(), "newer runner") {
		t.Fatalf("err = %v", err)
	}
	after, _ := os.ReadFile(path)
	if string(before) != string(after) {
		t.Fatal("a newer database was modified")
	}
}

func TestCorruptRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.db")
	os.WriteFile(path, []byte(strings.Repeat("this is not sqlite\n", 500)), 0o644)
	_, err := Open(context.Background(), path)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "mv ") {
		t.Fatalf("err = %v", err)
	}
}

// TestConcurrentWriters appends from two connections at once (as two sweeps would) and
// requires every row.
func TestConcurrentWriters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.db")
	open(t, path).Close()
	const per = 60
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db, err := Open(context.Background(), path)
			if err != nil {
				errs <- err
				return
			}
			defer db.Close()
			for i := range per {
				if _, err := db.Append(context.Background(), run(fmt.Sprintf("w%d-%d", w, i), time.Now(), 1e9)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	n, err := open(t, path).CountRuns(context.Background())
	if err != nil || n != 2*per {
		t.Fatalf("runs = %d (%v), want %d", n, err, 2*per)
	}
}

func cur(id string, e2e float64) *perf.Set {
	return &perf.Set{Source: id, RunID: id, GPU: "H100", Configs: map[string]*perf.Config{
		"cfg": {Key: "cfg", Metrics: map[string][]float64{perf.MetricE2E: {e2e, e2e, e2e, e2e, e2e, e2e}}},
	}}
}

// TestRollingMedianConsecutive: five steady runs, then a slow one (a warning), then another
// slow one (a regression); a slow run on another GPU model is not compared with H100 runs.
func TestRollingMedianConsecutive(t *testing.T) {
	ctx := context.Background()
	db := open(t, filepath.Join(t.TempDir(), "h.db"))
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for i, v := range []float64{1.00e9, 1.02e9, 0.98e9, 5e9 /* one odd night */, 1.01e9} {
		db.Append(ctx, run(fmt.Sprint("r", i), t0.Add(time.Duration(i)*time.Hour), v))
	}
	opts := BaselineOptions{}
	res, err := db.CompareHistory(ctx, cur("steady", 1.03e9), opts)
	if err != nil || res.Rows[0].Status != compare.StatusOK || res.Rows[0].Base.Median != 1.01e9 || res.Rows[0].Base.N != 5 {
		t.Fatalf("steady: %v %+v", err, res.Rows)
	}
	res, _ = db.CompareHistory(ctx, cur("slow1", 1.3e9), opts)
	if r := res.Rows[0]; r.Status != compare.StatusWarning || r.Violations != 1 || res.Regressed() {
		t.Fatalf("first violation: %+v", r)
	}
	db.Append(ctx, run("slow1", t0.Add(10*time.Hour), 1.3e9))
	res, _ = db.CompareHistory(ctx, cur("slow2", 1.3e9), opts)
	if r := res.Rows[0]; r.Status != compare.StatusRegression || r.Violations != 2 || !res.Regressed() {
		t.Fatalf("second violation: %+v", r)
	}
	var text strings.Builder
	if err := compare.WriteText(&text, res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "1020.0ms (5 runs)") || !strings.Contains(text.String(), "(history n=5)") || !strings.Contains(text.String(), "REGRESSION") {
		t.Fatalf("history text:\n%s", text.String())
	}
	other := cur("a100", 9e9)
	other.GPU = "A100"
	if _, err := db.CompareHistory(ctx, other, opts); !errors.Is(err, compare.ErrNothingInCommon) {
		t.Fatalf("other GPU: %v", err)
	}
}

// BenchmarkAppend10000 appends 10,000 runs of 4 configurations × 12 metrics each.
func BenchmarkAppend10000(b *testing.B) {
	for range b.N {
		b.StopTimer()
		db := open(b, filepath.Join(b.TempDir(), "h.db"))
		t0 := time.Now()
		runs := make([]Run, 10000)
		for i := range runs {
			r := Run{RunID: fmt.Sprint("r", i), Time: t0.Add(time.Duration(i) * time.Minute), Plan: "p", GPU: "H100"}
			for c := range 4 {
				cm := ConfigMetrics{Key: fmt.Sprint("cfg", c), Cells: 6}
				for m := range 12 {
					cm.Metrics = append(cm.Metrics, MetricValue{Metric: fmt.Sprint("stage/S", m), Unit: "ns", N: 6, Median: 1e9})
				}
				r.Configs = append(r.Configs, cm)
			}
			runs[i] = r
		}
		b.StartTimer()
		for _, r := range runs {
			if _, err := db.Append(context.Background(), r); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func TestFromSetRecordsInvalidConfigs(t *testing.T) {
	s := cur("r9", 1e9)
	s.Skipped = []perf.Skip{{Cell: "x1", Key: "broken", Reason: `verdict "invalid": only ok cells are compared`}, {Cell: "x2", Key: "cfg", Reason: `verdict "failed"`}, {Cell: "x3", Key: "prof", Reason: `profiler "torch" distorts timings`}}
	r := FromSet(s, "v1")
	if len(r.Configs) != 1 || len(r.Invalid) != 1 || r.Invalid[0] != "broken" {
		t.Fatalf("configs %+v invalid %v", r.Configs, r.Invalid)
	}
	db := open(t, filepath.Join(t.TempDir(), "h.db"))
	if _, err := db.Append(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	var valid int
	if err := db.db.QueryRow("SELECT valid FROM configs WHERE config_key = 'broken'").Scan(&valid); err != nil || valid != 0 {
		t.Fatalf("valid = %d, %v", valid, err)
	}
}

// BenchmarkCompareHistory is `runner compare --baseline history` against a database of
// 10,000 runs (one configuration, 12 metrics each).
func BenchmarkCompareHistory(b *testing.B) {
	db := open(b, filepath.Join(b.TempDir(), "h.db"))
	t0 := time.Now()
	for i := range 10000 {
		r := Run{RunID: fmt.Sprint("r", i), Time: t0.Add(time.Duration(i) * time.Minute), Plan: "p", GPU: "H100"}
		cm := ConfigMetrics{Key: "cfg", Cells: 6}
		for m := range 12 {
			cm.Metrics = append(cm.Metrics, MetricValue{Metric: fmt.Sprint("stage/S", m), Unit: "ns", N: 6, Median: 1e9})
		}
		r.Configs = append(r.Configs, cm)
		if _, err := db.Append(context.Background(), r); err != nil {
			b.Fatal(err)
		}
	}
	s := &perf.Set{Source: "now", RunID: "now", GPU: "H100", Configs: map[string]*perf.Config{"cfg": {Key: "cfg", Metrics: map[string][]float64{}}}}
	for m := range 12 {
		s.Configs["cfg"].Metrics[fmt.Sprint("stage/S", m)] = []float64{1e9, 1e9, 1e9, 1e9, 1e9, 1e9}
	}
	b.ResetTimer()
	for range b.N {
		res, err := db.CompareHistory(context.Background(), s, BaselineOptions{})
		if err != nil || len(res.Rows) != 12 || res.Rows[0].Base.N != 5 {
			b.Fatalf("%v %+v", err, res)
		}
	}
}

// TestWriteText: the listing is one aligned table (no rule, as before), commits cut to 12
// characters or "-", medians in the metric's unit, and a row count.
func TestWriteText(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	entries := []Entry{
		{RunID: "r1", Time: at, Plan: "p", GPU: "H100", Commit: "0123456789abcdef", Config: "cfg", Metric: perf.MetricE2E, Unit: perf.UnitNS, N: 6, Median: 2e9},
		{RunID: "r2", Time: at.Add(time.Hour), Plan: "p", GPU: "H100", Config: "cfg/long", Metric: "peak_memory", Unit: perf.UnitMB, N: 12, Median: 512},
	}
	var b strings.Builder
	if err := WriteText(&b, entries); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"TIME              RUN  PLAN  GPU   COMMIT        CONFIG    METRIC       N   MEDIAN\n" +
		"2026-01-02 03:04  r1   p     H100  0123456789ab  cfg       e2e          6   2000.0ms\n" +
		"2026-01-02 04:04  r2   p     H100  -             cfg/long  peak_memory  12  512.0MB\n" +
		"2 rows\n"
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}
