// Package history keeps the results of every run in an embedded SQLite database
// (modernc.org/sqlite, no cgo) so that a nightly sweep can be judged against its own past: the
// rolling median of the last N valid runs of the same configuration on the same GPU model, with
// a regression declared only after K consecutive violations (the first is a warning), the rule
// of SGLang's nightly dashboard and PyTorch's HUD.
//
// The tolerance of a violation follows each configuration's measured noise unless the plan or a
// flag fixes it (noise.go): NoiseK robust standard deviations of its run-to-run changes, at
// least NoiseFloor. A violating metric's history is searched for the step change it belongs to
// (stats.StepChanges), so the verdict names the run to start a bisection from.
//
// The database is append-only. Its schema is versioned with PRAGMA user_version and migrated
// forward in one transaction; a database written by a newer runner is refused rather than
// touched. Writers use WAL, a busy timeout and BEGIN IMMEDIATE with retries, so two sweeps on
// one machine appending at once both keep every row.
package history

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/sglprof/runner/plans/infile"
	"github.com/sglprof/runner/reports/compare"
	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/reports/render/table"
	"github.com/sglprof/runner/reports/stats"
)

// FileName is the default database name inside a plan's output directory.
const FileName = "history.db"

// migrations[i] brings the schema from version i to i+1. Never edit a released migration;
// append a new one.
var migrations = []string{
	// v1: runs and their per-configuration metric medians.
	`CREATE TABLE runs (
		id INTEGER PRIMARY KEY,
		run_id TEXT NOT NULL UNIQUE,
		time_ns INTEGER NOT NULL,
		plan TEXT NOT NULL,
		run_dir TEXT NOT NULL,
		sglang_commit TEXT NOT NULL DEFAULT '',
		gpu_model TEXT NOT NULL DEFAULT '',
		driver TEXT NOT NULL DEFAULT ''
	);
	CREATE TABLE metrics (
		run INTEGER NOT NULL REFERENCES runs(id),
		config_key TEXT NOT NULL,
		metric TEXT NOT NULL,
		unit TEXT NOT NULL,
		n INTEGER NOT NULL,
		median REAL NOT NULL,
		lo REAL,
		hi REAL,
		-- Clustered by run: an append dirties one or two pages instead of one per metric,
		-- and the rolling-median query walks runs by time and looks metrics up by key.
		PRIMARY KEY (run, config_key, metric)
	) WITHOUT ROWID;`,
	// v2: per-configuration validity (a run whose cells of a configuration were all invalid
	// still records that it tried), the runner version, and the index of runs by time.
	`CREATE TABLE configs (
		run INTEGER NOT NULL REFERENCES runs(id),
		config_key TEXT NOT NULL,
		cells INTEGER NOT NULL,
		valid INTEGER NOT NULL,
		PRIMARY KEY (run, config_key)
	) WITHOUT ROWID;
	ALTER TABLE runs ADD COLUMN runner_version TEXT NOT NULL DEFAULT '';
	CREATE INDEX runs_by_time ON runs (time_ns);`,
	// v3: the repeat-to-repeat spread inside a run (standard deviation of the log per-run
	// values; NULL with fewer than two repeats), from which runner plan states what a
	// comparison of that many repeats can detect.
	`ALTER TABLE metrics ADD COLUMN spread REAL;`,
	// v4: the steps of `runner bisect`, one row per commit measured (or skipped) and batch of
	// repeats, keyed by the bisection's fingerprint (plan, cells, install command) and the full
	// commit hash. Kept apart from runs: a bisection step is a different build of the backend,
	// never part of a configuration's rolling median or noise.
	`CREATE TABLE bisect_steps (
		id INTEGER PRIMARY KEY,
		fingerprint TEXT NOT NULL,
		commit_hash TEXT NOT NULL,
		batch INTEGER NOT NULL,
		time_ns INTEGER NOT NULL,
		plan TEXT NOT NULL,
		run_dir TEXT NOT NULL,
		repeats INTEGER NOT NULL,
		outcome TEXT NOT NULL,
		reason TEXT NOT NULL DEFAULT '',
		UNIQUE (fingerprint, commit_hash, batch)
	);`,
}

// SchemaVersion is the schema version this runner writes.
var SchemaVersion = len(migrations)

// DB is an open history database.
type DB struct {
	db   *sql.DB
	path string
	// version is the schema version of a database opened read-only (OpenReadOnly); Open
	// migrates to SchemaVersion.
	version int
}

// ErrNewerSchema is returned (wrapped) for a database written by a newer runner.
var ErrNewerSchema = errors.New("history database has a newer schema")

// ErrCorrupt is returned (wrapped) for a file that is not a readable SQLite database.
var ErrCorrupt = errors.New("history database is corrupt")

// Open opens (creating if needed) the database at path and migrates it to SchemaVersion. A
// path, or a sidecar of it (-wal, -shm, -journal), that exists and is not a regular file is
// refused (errors.Is infile.ErrNotRegular).
func Open(ctx context.Context, path string) (*DB, error) {
	// SQLite opens the database and its sidecars itself, with a blocking open: a FIFO or a
	// device under one of these names would hang the runner past Ctrl-C, so each that exists
	// must be a regular file (plans/infile's check).
	for _, p := range []string{path, path + "-wal", path + "-shm", path + "-journal"} {
		if err := infile.Check(p); errors.Is(err, infile.ErrNotRegular) {
			return nil, fmt.Errorf("history: %w; pass --history with the path of a history database", err)
		}
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("history %s: %w", path, err)
		}
	}
	dsn := "file:" + path + "?_pragma=busy_timeout(15000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)&_pragma=wal_autocheckpoint(4000)&_pragma=temp_store(MEMORY)&_txlock=immediate"
	sdb, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, corrupt(path, err)
	}
	h := &DB{db: sdb, path: path, version: SchemaVersion}
	if err := h.migrate(ctx); err != nil {
		sdb.Close()
		return nil, err
	}
	return h, nil
}

func corrupt(path string, err error) error {
	return fmt.Errorf("%w: %s: %v; move it aside (mv %s %s.corrupt) and the next run starts a new history, or restore a backup; `sqlite3 %s .recover` may salvage its rows", ErrCorrupt, path, err, path, path, path)
}

func isCorruption(err error) bool {
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "not a database") || strings.Contains(s, "malformed") || strings.Contains(s, "corrupt")
}

func (h *DB) migrate(ctx context.Context) error {
	return retry(ctx, func() error {
		tx, err := h.db.BeginTx(ctx, nil)
		if err != nil {
			if isCorruption(err) {
				return corrupt(h.path, err)
			}
			return fmt.Errorf("history %s: %w", h.path, err)
		}
		defer tx.Rollback()
		var v int
		if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
			if isCorruption(err) {
				return corrupt(h.path, err)
			}
			return fmt.Errorf("history %s: %w", h.path, err)
		}
		if v > SchemaVersion {
			return fmt.Errorf("%w: %s has schema version %d but this runner knows versions up to %d; it was written by a newer runner, so it is left untouched: upgrade the runner, or pass --history with another file", ErrNewerSchema, h.path, v, SchemaVersion)
		}
		if v == SchemaVersion {
			// A quick read proves the tables are there and readable.
			if _, err := tx.ExecContext(ctx, "SELECT count(*) FROM runs"); err != nil {
				if isCorruption(err) {
					return corrupt(h.path, err)
				}
				return fmt.Errorf("history %s: %w", h.path, err)
			}
			return nil
		}
		for i := v; i < SchemaVersion; i++ {
			if _, err := tx.ExecContext(ctx, migrations[i]); err != nil {
				if isCorruption(err) {
					return corrupt(h.path, err)
				}
				return fmt.Errorf("history %s: migrate schema v%d to v%d: %w", h.path, i, i+1, err)
			}
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", SchemaVersion)); err != nil {
			return fmt.Errorf("history %s: %w", h.path, err)
		}
		return tx.Commit()
	})
}

// retry runs f again while SQLite reports the database busy or locked beyond the busy
// timeout (a long sweep holding a write lock), up to about a minute.
func retry(ctx context.Context, f func() error) error {
	var err error
	for attempt := 0; attempt < 60; attempt++ {
		err = f()
		if err == nil || !isBusy(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(10+attempt*20) * time.Millisecond):
		}
	}
	return err
}

func isBusy(err error) bool {
	s := err.Error()
	return strings.Contains(s, "SQLITE_BUSY") || strings.Contains(s, "database is locked") || strings.Contains(s, "(5)") || strings.Contains(s, "(517)")
}

// Close closes the database.
func (h *DB) Close() error { return h.db.Close() }

// Path is the database file.
func (h *DB) Path() string { return h.path }

// Run is one run as the history stores it.
type Run struct {
	RunID         string
	Time          time.Time
	Plan          string
	RunDir        string
	Commit        string
	GPU           string
	Driver        string
	RunnerVersion string
	// Configs are the measured configurations; Invalid lists the configuration keys whose
	// cells were all skipped (invalid, failed), recorded as not valid.
	Configs []ConfigMetrics
	Invalid []string
}

// ConfigMetrics is one configuration's metric summaries in one run.
type ConfigMetrics struct {
	Key     string
	Cells   int
	Metrics []MetricValue
}

// MetricValue is the median of one metric's per-repeat values in one run (each repeat's
// value being the median of its own samples), with its interval.
type MetricValue struct {
	Metric string
	Unit   string
	N      int
	Median float64
	Lo, Hi float64
	// Spread is the standard deviation of the logs of the repeats' values (their coefficient of
	// variation, near enough); HasSpread is false with fewer than two repeats.
	Spread    float64
	HasSpread bool
}

// FromSet turns a loaded run into a history Run.
func FromSet(s *perf.Set, runnerVersion string) Run {
	r := Run{RunID: s.RunID, Time: s.Start, Plan: s.Plan, RunDir: s.Source, Commit: s.Commit, GPU: s.GPU, Driver: s.Driver, RunnerVersion: runnerVersion}
	if r.RunID == "" {
		r.RunID = filepath.Base(s.Source)
	}
	for _, key := range s.Keys() {
		c := s.Configs[key]
		cm := ConfigMetrics{Key: key, Cells: len(c.Cells)}
		for _, m := range c.MetricNames() {
			vals := c.RunValues(m)
			st := compare.Summarize(vals)
			mv := MetricValue{Metric: m, Unit: perf.Unit(m), N: st.N, Median: st.Median, Lo: st.Lo, Hi: st.Hi}
			if logs, ok := stats.Logs(vals); ok && len(logs) > 1 {
				mv.Spread, mv.HasSpread = stats.StdDev(logs, 1), true
			}
			cm.Metrics = append(cm.Metrics, mv)
		}
		r.Configs = append(r.Configs, cm)
	}
	// A configuration none of whose cells was valid (all invalid or failed) is recorded as
	// such: the history shows the gap, and it never enters a rolling median.
	seen := map[string]bool{}
	for _, sk := range s.Skipped {
		if sk.Key == "" || seen[sk.Key] || s.Configs[sk.Key] != nil || strings.HasPrefix(sk.Reason, "profiler ") {
			continue
		}
		seen[sk.Key] = true
		r.Invalid = append(r.Invalid, sk.Key)
	}
	sort.Strings(r.Invalid)
	return r
}

// Append adds one run (all its rows in one transaction). Appending a run id that is already
// there is a no-op, so re-running `runner report` or a resumed run does not count twice.
func (h *DB) Append(ctx context.Context, r Run) (added bool, err error) {
	err = retry(ctx, func() error {
		added = false
		tx, err := h.db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("history %s: %w", h.path, err)
		}
		defer tx.Rollback()
		res, err := tx.ExecContext(ctx, `INSERT INTO runs (run_id, time_ns, plan, run_dir, sglang_commit, gpu_model, driver, runner_version)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO NOTHING`,
			r.RunID, r.Time.UnixNano(), r.Plan, r.RunDir, r.Commit, r.GPU, r.Driver, r.RunnerVersion)
		if err != nil {
			return fmt.Errorf("history %s: append run %s: %w", h.path, r.RunID, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil
		}
		id, err := res.LastInsertId()
		if err != nil {
			return err
		}
		// Multi-row INSERTs in small batches: one statement per batch instead of one per row
		// (far fewer round trips through the driver), small enough that binding stays cheap.
		var cfgRows [][]any
		var metRows [][]any
		for _, c := range r.Configs {
			cfgRows = append(cfgRows, []any{id, c.Key, c.Cells, 1})
			for _, m := range c.Metrics {
				var spread any // NULL: fewer than two repeats
				if m.HasSpread {
					spread = m.Spread
				}
				metRows = append(metRows, []any{id, c.Key, m.Metric, m.Unit, m.N, m.Median, m.Lo, m.Hi, spread})
			}
		}
		for _, k := range r.Invalid {
			cfgRows = append(cfgRows, []any{id, k, 0, 0})
		}
		if err := insertRows(ctx, tx, "configs (run, config_key, cells, valid)", cfgRows); err != nil {
			return fmt.Errorf("history %s: %w", h.path, err)
		}
		if err := insertRows(ctx, tx, "metrics (run, config_key, metric, unit, n, median, lo, hi, spread)", metRows); err != nil {
			return fmt.Errorf("history %s: %w", h.path, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("history %s: %w", h.path, err)
		}
		added = true
		return nil
	})
	return added, err
}

// insertRows inserts rows (all of one width) into table in batches of up to 64 rows.
func insertRows(ctx context.Context, tx *sql.Tx, table string, rows [][]any) error {
	const batch = 64
	for len(rows) > 0 {
		n := min(batch, len(rows))
		width := len(rows[0])
		tuple := "(" + strings.TrimSuffix(strings.Repeat("?,", width), ",") + ")"
		q := "INSERT INTO " + table + " VALUES " + strings.TrimSuffix(strings.Repeat(tuple+",", n), ",")
		args := make([]any, 0, n*width)
		for _, r := range rows[:n] {
			args = append(args, r...)
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
		rows = rows[n:]
	}
	return nil
}

// Filter selects history entries for List.
type Filter struct {
	Plan  string
	Cell  string // configuration key; a trailing * matches a prefix
	Since time.Time
	GPU   string
	Limit int
}

// Entry is one (run, configuration, metric) row of the history.
type Entry struct {
	RunID  string    `json:"run_id"`
	Time   time.Time `json:"time"`
	Plan   string    `json:"plan"`
	Commit string    `json:"sglang_commit,omitempty"`
	GPU    string    `json:"gpu_model"`
	Driver string    `json:"driver,omitempty"`
	Config string    `json:"config"`
	Metric string    `json:"metric"`
	Unit   string    `json:"unit"`
	N      int       `json:"n"`
	Median float64   `json:"median"`
	// Spread is the standard deviation of the logs of the run's repeat values; nil with one
	// repeat or in a run recorded by an older runner.
	Spread *float64 `json:"spread,omitempty"`
}

// List returns the history rows matching f, oldest first.
func (h *DB) List(ctx context.Context, f Filter) ([]Entry, error) {
	q := `SELECT r.run_id, r.time_ns, r.plan, r.sglang_commit, r.gpu_model, r.driver, m.config_key, m.metric, m.unit, m.n, m.median, m.spread
		FROM metrics m JOIN runs r ON r.id = m.run WHERE 1=1`
	var args []any
	if f.Plan != "" {
		q += " AND r.plan = ?"
		args = append(args, f.Plan)
	}
	if f.Cell != "" {
		if p, ok := strings.CutSuffix(f.Cell, "*"); ok {
			q += " AND substr(m.config_key, 1, ?) = ?"
			args = append(args, len(p), p)
		} else {
			q += " AND m.config_key = ?"
			args = append(args, f.Cell)
		}
	}
	if !f.Since.IsZero() {
		q += " AND r.time_ns >= ?"
		args = append(args, f.Since.UnixNano())
	}
	if f.GPU != "" {
		q += " AND r.gpu_model = ?"
		args = append(args, f.GPU)
	}
	q += " ORDER BY r.time_ns, r.id, m.config_key, m.metric"
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	rows, err := h.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("history %s: %w", h.path, err)
	}
	defer rows.Close()
	var out []Entry
	for rows.Next() {
		var e Entry
		var ns int64
		var spread sql.NullFloat64
		if err := rows.Scan(&e.RunID, &ns, &e.Plan, &e.Commit, &e.GPU, &e.Driver, &e.Config, &e.Metric, &e.Unit, &e.N, &e.Median, &spread); err != nil {
			return nil, fmt.Errorf("history %s: %w", h.path, err)
		}
		if spread.Valid {
			e.Spread = &spread.Float64
		}
		e.Time = time.Unix(0, ns).UTC()
		out = append(out, e)
	}
	return out, rows.Err()
}

// CountRuns returns the number of runs stored.
func (h *DB) CountRuns(ctx context.Context) (int, error) {
	var n int
	err := h.db.QueryRowContext(ctx, "SELECT count(*) FROM runs").Scan(&n)
	return n, err
}

// BaselineOptions configure CompareHistory.
type BaselineOptions struct {
	Runs        int // rolling median over the last Runs valid runs; 0 means 5
	Consecutive int // violations in a row before a regression; 0 means 2
	Compare     compare.Options
}

// RunPoint is one run's value of one metric as the history holds it.
type RunPoint struct {
	RunID string
	Time  int64 // ns since the epoch; 0 when unknown
	// Median is the run's median of its repeats' values.
	Median float64
	// Spread is the standard deviation of the logs of the repeats' values, NaN when the run had
	// fewer than two; N is the number of repeats.
	Spread float64
	N      int
}

// medians returns the medians of pts.
func medians(pts []RunPoint) []float64 {
	out := make([]float64, len(pts))
	for i, p := range pts {
		out[i] = p.Median
	}
	return out
}

// CompareHistory compares the configurations of cur against the history: for each metric,
// the baseline is the median of the per-run medians of the last Runs runs before cur of the
// same configuration on the same GPU model; cur violates when its median exceeds the baseline
// by more than the tolerance (noise-calibrated unless fixed, noise.go); a violation becomes a
// regression when the Consecutive-1 runs before it violated their own rolling baselines too,
// and its row names the run where the step change began. The current run itself is excluded
// from its baseline even when it was already appended.
func (h *DB) CompareHistory(ctx context.Context, cur *perf.Set, opts BaselineOptions) (*compare.Result, error) {
	if opts.Runs <= 0 {
		opts.Runs = 5
	}
	if opts.Consecutive <= 0 {
		opts.Consecutive = 2
	}
	co := opts.Compare.Defaults()
	res := &compare.Result{Mode: "history", Base: fmt.Sprintf("history %s (rolling median of the last %d runs, GPU %q)", h.path, opts.Runs, cur.GPU), New: cur.Source, Alpha: co.Alpha, Power: co.Power, SkippedNew: cur.Skipped}
	stmt, err := h.db.PrepareContext(ctx, `SELECT r.run_id, r.time_ns, m.median, m.spread, m.n FROM runs r
		JOIN metrics m ON m.run = r.id AND m.config_key = ? AND m.metric = ?
		WHERE r.gpu_model = ? AND r.run_id <> ?
		ORDER BY r.time_ns DESC, r.id DESC LIMIT ?`)
	if err != nil {
		return nil, fmt.Errorf("history %s: %w", h.path, err)
	}
	defer stmt.Close()
	curID := cur.RunID
	if curID == "" {
		curID = filepath.Base(cur.Source)
	}
	limit := max(ChangeRuns, NoiseRuns+opts.Consecutive-1, opts.Runs+opts.Consecutive-1)
	known := 0
	for _, key := range cur.Keys() {
		c := cur.Configs[key]
		for _, n := range c.Notes {
			res.Notes = append(res.Notes, "new: "+n)
		}
		hadAny := false
		for _, m := range c.MetricNames() {
			rows, err := stmt.QueryContext(ctx, key, m, cur.GPU, cur.RunID, limit)
			if err != nil {
				return nil, fmt.Errorf("history %s: %w", h.path, err)
			}
			var pts []RunPoint // newest first
			for rows.Next() {
				var p RunPoint
				var spread sql.NullFloat64
				if err := rows.Scan(&p.RunID, &p.Time, &p.Median, &spread, &p.N); err != nil {
					rows.Close()
					return nil, err
				}
				p.Spread = math.NaN()
				if spread.Valid {
					p.Spread = spread.Float64
				}
				pts = append(pts, p)
			}
			rows.Close()
			if len(pts) > 0 {
				hadAny = true
			}
			st := compare.Summarize(c.RunValues(m))
			// Oldest first, the current run last.
			series := make([]RunPoint, 0, len(pts)+1)
			for i := len(pts) - 1; i >= 0; i-- {
				series = append(series, pts[i])
			}
			now := RunPoint{RunID: curID, Median: st.Median, Spread: math.NaN(), N: st.N}
			if !cur.Start.IsZero() {
				now.Time = cur.Start.UnixNano()
			}
			series = append(series, now)
			res.Rows = append(res.Rows, historyRow(key, m, st, series, opts, &co))
		}
		if hadAny {
			known++
		} else {
			res.OnlyNew = append(res.OnlyNew, key)
		}
	}
	res.Count()
	if known == 0 {
		return res, fmt.Errorf("%w: the history %s has no earlier run of any configuration of %s on GPU %q; the first runs build the baseline", compare.ErrNothingInCommon, h.path, cur.Source, cur.GPU)
	}
	return res, nil
}

// judgement is the history rule applied to one run of a series.
type judgement struct {
	violates bool
	base     float64 // rolling median of the runs before
	window   int     // how many runs that median is of
	tol      Tolerance
}

// judge applies the rule to series[i] against the runs before it.
func judge(series []RunPoint, i int, metric string, opts BaselineOptions, co *compare.Options) judgement {
	lo := max(0, i-opts.Runs)
	win := medians(series[lo:i])
	if len(win) == 0 {
		return judgement{}
	}
	j := judgement{base: stats.Median(stats.Sorted(win)), window: len(win)}
	j.tol = ToleranceAt(series[:i], metric, co)
	limit := j.tol.Limit(j.base)
	v := series[i].Median
	if perf.HigherIsBetter(metric) {
		j.violates = j.base-v > limit
	} else {
		j.violates = v-j.base > limit
	}
	return j
}

func historyRow(key, metric string, st compare.Stat, series []RunPoint, opts BaselineOptions, co *compare.Options) compare.Row {
	row := compare.Row{Config: key, Metric: metric, Class: perf.Class(metric), Unit: perf.Unit(metric), New: st,
		Test: compare.TestHistory, P: -1, MDCPct: -1, Status: compare.StatusOK, Delta: "~"}
	last := len(series) - 1
	if last == 0 {
		row.Status = compare.StatusNoHistory
		row.Tolerance = co.ToleranceFor(metric).Text
		row.Note = "no earlier run of this configuration on this GPU"
		return row
	}
	j := judge(series, last, metric, opts, co)
	row.Base = compare.Stat{N: j.window, Median: j.base}
	row.Tolerance, row.Limit = j.tol.Text, j.tol.Limit(j.base)
	if j.tol.HasNoise {
		n := j.tol.Noise * 100
		row.NoisePct = &n
		row.MDCPct = historyMDC(j, opts, co) * 100
	}
	if j.base != 0 {
		row.DeltaPct = (st.Median/j.base - 1) * 100
	}
	row.Delta = fmt.Sprintf("%+.2f%%", row.DeltaPct)
	if !j.violates {
		if d := j.base - st.Median; (perf.HigherIsBetter(metric) && -d > row.Limit) || (!perf.HigherIsBetter(metric) && d > row.Limit) {
			row.Status = compare.StatusImprovement
		}
		return row
	}
	k := 1
	for i := last - 1; i > 0 && k < opts.Consecutive; i-- {
		if !judge(series, i, metric, opts, co).violates {
			break
		}
		k++
	}
	row.Violations = k
	if k >= opts.Consecutive {
		row.Status = compare.StatusRegression
	} else {
		row.Status = compare.StatusWarning
		row.Note = fmt.Sprintf("first violation: a regression needs %d consecutive violations", opts.Consecutive)
	}
	row.Change = changeOf(series, metric, j, co)
	return row
}

// changeOf names the first run of the step change a violating run belongs to: the last change
// of the series (its last ChangeRuns runs) found by stats.StepChanges at the configured alpha
// and larger than the tolerance, when it goes the regression's way; nil when none does (a
// slow drift has no step).
func changeOf(series []RunPoint, metric string, j judgement, co *compare.Options) *compare.ChangePoint {
	from := max(0, len(series)-ChangeRuns)
	logs, ok := stats.Logs(medians(series[from:]))
	if !ok || j.base <= 0 {
		return nil
	}
	minShift := math.Log1p(j.tol.Limit(j.base) / j.base)
	cs := stats.StepChanges(logs, co.Alpha, minShift)
	if len(cs) == 0 {
		return nil
	}
	c := cs[len(cs)-1]
	if (c.Shift > 0) == perf.HigherIsBetter(metric) {
		return nil // the last change was an improvement: the violation is not a step
	}
	p := series[from+c.Index]
	cp := &compare.ChangePoint{RunID: p.RunID, RunsAgo: len(logs) - 1 - c.Index, ShiftPct: math.Expm1(c.Shift) * 100, P: c.P}
	if p.Time > 0 {
		cp.Time = time.Unix(0, p.Time).UTC()
	}
	return cp
}

// Table is the history listing as a table: one row per entry, commits cut to 12 characters,
// medians in the metric's display unit (ms for times).
func Table(entries []Entry) *table.Table {
	t := &table.Table{Header: []string{"TIME", "RUN", "PLAN", "GPU", "COMMIT", "CONFIG", "METRIC", "N", "MEDIAN"}, NoRule: true}
	for _, e := range entries {
		commit := e.Commit
		if len(commit) > 12 {
			commit = commit[:12]
		}
		if commit == "" {
			commit = "-"
		}
		t.Rows = append(t.Rows, []string{e.Time.Format("2006-01-02 15:04"), e.RunID, e.Plan, e.GPU, commit, e.Config, e.Metric, strconv.Itoa(e.N), compare.FormatValue(e.Median, e.Unit)})
	}
	return t
}

// WriteText prints entries as an aligned table, times in ms, and the number of rows.
func WriteText(w io.Writer, entries []Entry) error {
	if err := table.WriteText(w, Table(entries)); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d rows\n", len(entries))
	return err
}
