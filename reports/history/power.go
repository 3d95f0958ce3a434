package history

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/sglprof/runner/reports/compare"
	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/reports/render/table"
	"github.com/sglprof/runner/reports/stats"
)

// OpenReadOnly opens an existing database for reading only: nothing is created, migrated or
// changed (runner plan reads the noise of earlier runs before it runs anything). A database of
// an older schema is read as it is; one of a newer schema is refused. The connection is a
// query_only read-write one: a read-only connection to a WAL database leaves SQLite's -wal and
// -shm files behind, where this one removes them on close as a writer does.
func OpenReadOnly(ctx context.Context, path string) (*DB, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("history %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("history %s: not a regular file (%s)", path, st.Mode().Type())
	}
	sdb, err := sql.Open("sqlite", "file:"+path+"?mode=rw&_pragma=busy_timeout(5000)&_pragma=query_only(1)")
	if err != nil {
		return nil, corrupt(path, err)
	}
	h := &DB{db: sdb, path: path}
	if err := sdb.QueryRowContext(ctx, "PRAGMA user_version").Scan(&h.version); err != nil {
		sdb.Close()
		if isCorruption(err) {
			return nil, corrupt(path, err)
		}
		return nil, fmt.Errorf("history %s: %w", path, err)
	}
	if h.version > SchemaVersion {
		sdb.Close()
		return nil, fmt.Errorf("%w: %s has schema version %d but this runner knows versions up to %d", ErrNewerSchema, path, h.version, SchemaVersion)
	}
	return h, nil
}

// HeadlineMetrics are the metrics runner plan states the detection power of: what a nightly
// gate is about for each kind of plan.
func HeadlineMetrics(serve, llm bool) []string {
	switch {
	case llm:
		return []string{perf.MetricTTFT, perf.MetricTPOT, perf.MetricOutputThroughput}
	case serve:
		return []string{perf.MetricRequestLatency}
	}
	return []string{perf.MetricE2E, perf.StagePrefix + "DenoisingStage", perf.MetricDenoiseStep}
}

// PowerRow is what comparisons of one configuration's metric can detect.
type PowerRow struct {
	Config string `json:"config"`
	Metric string `json:"metric"`
	// RepeatCV is the run-to-run coefficient of variation of one repeat's value: measured
	// (the median spread of the runs in the history, Measured set, over HistoryRuns runs) or
	// compare.AssumedRunCV.
	RepeatCV    float64 `json:"repeat_cv"`
	Measured    bool    `json:"measured"`
	HistoryRuns int     `json:"history_runs"`
	// MDC is the minimum detectable change (a fraction) of runner compare between two runs of
	// the plan; 0 with HasMDC false when a side has one repeat (no run-to-run test).
	MDC    float64 `json:"mdc"`
	HasMDC bool    `json:"has_mdc"`
	// Gate is the smallest sustained change the history baseline flags with the power, from
	// the noise of the history's run medians; HasGate false before the history calibrates.
	Gate      float64 `json:"gate,omitempty"`
	HasGate   bool    `json:"has_gate"`
	Tolerance string  `json:"tolerance"`
}

// Power is what a plan's comparisons can detect before it runs.
type Power struct {
	Alpha   float64    `json:"alpha"`
	Power   float64    `json:"power"`
	Repeats int        `json:"repeats"`
	Rows    []PowerRow `json:"rows"`
}

// PlanPower states, for every configuration key and metric, the minimum detectable change of a
// comparison of two runs with repeats unprofiled repeats each (compare.PlannedMDC), from the
// repeat-to-repeat noise the history db measured for it (nil db, or no run with two repeats:
// compare.AssumedRunCV), and what the history baseline flags (db only).
func PlanPower(ctx context.Context, db *DB, plan string, keys, metrics []string, repeats int, bo BaselineOptions) (*Power, error) {
	if bo.Runs <= 0 {
		bo.Runs = 5
	}
	if bo.Consecutive <= 0 {
		bo.Consecutive = 2
	}
	co := bo.Compare.Defaults()
	out := &Power{Alpha: co.Alpha, Power: co.Power, Repeats: repeats}
	for _, key := range keys {
		for _, m := range metrics {
			row := PowerRow{Config: key, Metric: m, RepeatCV: compare.AssumedRunCV, Tolerance: co.ToleranceFor(m).Text}
			if db != nil {
				pts, err := db.recent(ctx, plan, key, m, NoiseRuns)
				if err != nil {
					return nil, err
				}
				row.HistoryRuns = len(pts)
				var spreads []float64
				for _, p := range pts {
					if p.N > 1 && !math.IsNaN(p.Spread) {
						spreads = append(spreads, p.Spread)
					}
				}
				if len(spreads) > 0 {
					row.RepeatCV, row.Measured = stats.Median(stats.Sorted(spreads)), true
				}
				if len(pts) > 0 {
					tol := ToleranceAt(pts, m, &co)
					row.Tolerance = tol.Text
					if tol.HasNoise {
						base := stats.Median(stats.Sorted(medians(pts[max(0, len(pts)-bo.Runs):])))
						j := judgement{base: base, window: min(len(pts), bo.Runs), tol: tol}
						if g := historyMDC(j, bo, &co); g >= 0 {
							row.Gate, row.HasGate = g, true
						}
					}
				}
			}
			row.MDC, row.HasMDC = compare.PlannedMDC(repeats, row.RepeatCV, co.Alpha, co.Power)
			out.Rows = append(out.Rows, row)
		}
	}
	return out, nil
}

// recent returns the last n runs (oldest first) of one configuration's metric of plan, on the
// GPU model of the plan's most recent run.
func (h *DB) recent(ctx context.Context, plan, key, metric string, n int) ([]RunPoint, error) {
	if h.version == 0 {
		return nil, nil // an empty database: no runs yet
	}
	spread := "m.spread"
	if h.version < 3 {
		spread = "NULL" // recorded before runs kept their spread
	}
	rows, err := h.db.QueryContext(ctx, `SELECT r.run_id, r.time_ns, m.median, `+spread+`, m.n FROM runs r
		JOIN metrics m ON m.run = r.id AND m.config_key = ? AND m.metric = ?
		WHERE r.plan = ? AND r.gpu_model = (SELECT gpu_model FROM runs WHERE plan = ? ORDER BY time_ns DESC, id DESC LIMIT 1)
		ORDER BY r.time_ns DESC, r.id DESC LIMIT ?`, key, metric, plan, plan, n)
	if err != nil {
		return nil, fmt.Errorf("history %s: %w", h.path, err)
	}
	defer rows.Close()
	var pts []RunPoint
	for rows.Next() {
		var p RunPoint
		var sp sql.NullFloat64
		if err := rows.Scan(&p.RunID, &p.Time, &p.Median, &sp, &p.N); err != nil {
			return nil, fmt.Errorf("history %s: %w", h.path, err)
		}
		p.Spread = math.NaN()
		if sp.Valid {
			p.Spread = sp.Float64
		}
		pts = append(pts, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("history %s: %w", h.path, err)
	}
	for i, j := 0, len(pts)-1; i < j; i, j = i+1, j-1 {
		pts[i], pts[j] = pts[j], pts[i]
	}
	return pts, nil
}

// PowerTarget is the change a plan should be able to see on its headline metrics; a plan that
// cannot is told so before it runs.
const PowerTarget = 0.10

// WritePowerText writes what the plan's comparisons can detect: a table of the MDC of runner
// compare per configuration and headline metric (and of the history baseline when a history
// measured the noise), where the noise came from, and a warning with the repeats that would do
// for every metric that cannot see a PowerTarget change. history is the database looked at
// ("" when there was none).
func WritePowerText(w io.Writer, pw *Power, history string) error {
	fmt.Fprintf(w, "\ndetection power (alpha %.2g, %.0f%% power): the smallest change each comparison finds\n", pw.Alpha, pw.Power*100)
	if len(pw.Rows) == 0 {
		_, err := fmt.Fprintln(w, "  no unprofiled (none) cells: runner compare compares only those by default, so this plan gives it nothing to compare")
		return err
	}
	gate := false
	for _, r := range pw.Rows {
		gate = gate || r.HasGate
	}
	t := &table.Table{Header: []string{"CONFIG", "METRIC", "REPEAT NOISE", fmt.Sprintf("COMPARE MDC (%d vs %d runs)", pw.Repeats, pw.Repeats)}, NoRule: true}
	if gate {
		t.Header = append(t.Header, "HISTORY GATE MDC", "TOLERANCE")
	}
	var short []PowerRow
	last := ""
	for _, r := range pw.Rows {
		cfg := r.Config
		if cfg == last {
			cfg = ""
		}
		last = r.Config
		noise := fmt.Sprintf("%.1f%% assumed", r.RepeatCV*100)
		if r.Measured {
			noise = fmt.Sprintf("%.1f%% (%d runs)", r.RepeatCV*100, r.HistoryRuns)
		}
		mdc := "none: 1 run a side"
		if r.HasMDC {
			mdc = pct(r.MDC)
		}
		if !r.HasMDC || r.MDC > PowerTarget {
			short = append(short, r)
		}
		row := []string{cfg, r.Metric, noise, mdc}
		if gate {
			g := "not calibrated yet"
			if r.HasGate {
				g = pct(r.Gate)
			}
			row = append(row, g, r.Tolerance)
		}
		t.Rows = append(t.Rows, row)
	}
	if err := table.WriteText(w, t); err != nil {
		return err
	}
	fmt.Fprintf(w, "  runner compare: Welch's t-test on the logs of per-run values, %d unprofiled runs a side; a regression also needs the change beyond its tolerance\n", pw.Repeats)
	if history == "" {
		fmt.Fprintf(w, "  noise: assumed %.0f%% run to run (no history measured it); runs append to the history, and later plans state the measured noise\n", compare.AssumedRunCV*100)
	} else if !gate {
		fmt.Fprintf(w, "  noise: %s has no calibrated history of these configurations yet (%d runs needed)\n", history, MinNoiseRuns)
	}
	fmt.Fprintf(w, "  --baseline history: tolerances follow each configuration's measured noise (%g robust SD of its run medians, at least %.0f%%) from %d recorded runs on; before that the defaults of runner compare\n", NoiseK, NoiseFloor*100, MinNoiseRuns)
	for _, r := range short {
		if !r.HasMDC {
			fmt.Fprintf(w, "warning: %s %s: one repeat a side gives runner compare no run-to-run test; repeats = %d would see a %.0f%% change at %.1f%% noise\n", r.Config, r.Metric, max(compare.RunsFor(PowerTarget, r.RepeatCV, pw.Alpha, pw.Power), 2), PowerTarget*100, r.RepeatCV*100)
			continue
		}
		msg := fmt.Sprintf("warning: %s %s: this plan cannot see a %.0f%% change (MDC %s with %d repeats at %.1f%% noise)", r.Config, r.Metric, PowerTarget*100, pct(r.MDC), pw.Repeats, r.RepeatCV*100)
		if n := compare.RunsFor(PowerTarget, r.RepeatCV, pw.Alpha, pw.Power); n > 0 {
			m, _ := compare.PlannedMDC(n, r.RepeatCV, pw.Alpha, pw.Power)
			msg += fmt.Sprintf("; repeats = %d would (MDC %s)", n, pct(m))
		} else {
			msg += "; no number of repeats up to 100 would: the noise is too large"
		}
		fmt.Fprintln(w, msg)
	}
	return nil
}

func pct(f float64) string {
	s := fmt.Sprintf("%.1f%%", f*100)
	return strings.Replace(s, ".0%", "%", 1)
}
