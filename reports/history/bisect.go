package history

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Bisection step outcomes (BisectStep.Outcome).
const (
	// StepMeasured: the commit was built and its cells ran; RunDir holds the results.
	StepMeasured = "measured"
	// StepSkipped: the commit could not be built or run (Reason says which); a bisection
	// steps around it as `git bisect skip` does.
	StepSkipped = "skipped"
)

// BisectStep is one batch of repeats that `runner bisect` ran (or failed to run) at one
// commit: the cache that lets a second bisection over the same range measure nothing new and
// an interrupted one resume.
type BisectStep struct {
	// Fingerprint identifies what was measured apart from the commit (the plan, the cells
	// chosen, the install command): a step is reused only by a bisection with the same one.
	Fingerprint string
	// Commit is the full commit hash.
	Commit string
	// Batch numbers the batches of repeats of one commit from 0.
	Batch   int
	Time    time.Time
	Plan    string
	RunDir  string
	Repeats int
	Outcome string
	Reason  string
}

// AppendBisectStep records one step. A step already recorded (same fingerprint, commit and
// batch) is kept as it was: the first record of a batch is the one its run directory holds.
func (h *DB) AppendBisectStep(ctx context.Context, s BisectStep) error {
	return retry(ctx, func() error {
		_, err := h.db.ExecContext(ctx, `INSERT INTO bisect_steps (fingerprint, commit_hash, batch, time_ns, plan, run_dir, repeats, outcome, reason)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (fingerprint, commit_hash, batch) DO NOTHING`,
			s.Fingerprint, s.Commit, s.Batch, s.Time.UnixNano(), s.Plan, s.RunDir, s.Repeats, s.Outcome, s.Reason)
		if err != nil {
			return fmt.Errorf("history %s: record bisection step %.12s: %w", h.path, s.Commit, err)
		}
		return nil
	})
}

// BisectSteps returns the recorded steps of one commit under one fingerprint, by batch. A
// database older than the bisection table has none.
func (h *DB) BisectSteps(ctx context.Context, fingerprint, commit string) ([]BisectStep, error) {
	if h.version < 4 {
		return nil, nil
	}
	rows, err := h.db.QueryContext(ctx, `SELECT batch, time_ns, plan, run_dir, repeats, outcome, reason FROM bisect_steps
		WHERE fingerprint = ? AND commit_hash = ? ORDER BY batch`, fingerprint, commit)
	if err != nil {
		return nil, fmt.Errorf("history %s: %w", h.path, err)
	}
	defer rows.Close()
	var out []BisectStep
	for rows.Next() {
		s := BisectStep{Fingerprint: fingerprint, Commit: commit}
		var ns int64
		if err := rows.Scan(&s.Batch, &ns, &s.Plan, &s.RunDir, &s.Repeats, &s.Outcome, &s.Reason); err != nil {
			return nil, fmt.Errorf("history %s: %w", h.path, err)
		}
		s.Time = time.Unix(0, ns).UTC()
		out = append(out, s)
	}
	return out, rows.Err()
}

// RunRef is one run of the history as a bisection's starting point sees it.
type RunRef struct {
	RunID  string
	Time   time.Time
	RunDir string
	// Commit is the backend commit the run's perf dumps recorded ("" when none did).
	Commit string
}

// Runs returns the runs of plan that measured configuration key, oldest first: `runner bisect
// --from-history` finds the run where a change began among them, and the run before it.
func (h *DB) Runs(ctx context.Context, plan, key string) ([]RunRef, error) {
	rows, err := h.db.QueryContext(ctx, `SELECT r.run_id, r.time_ns, r.run_dir, r.sglang_commit FROM runs r
		WHERE r.plan = ? AND EXISTS (SELECT 1 FROM metrics m WHERE m.run = r.id AND m.config_key = ?)
		ORDER BY r.time_ns, r.id`, plan, key)
	if err != nil {
		return nil, fmt.Errorf("history %s: %w", h.path, err)
	}
	defer rows.Close()
	var out []RunRef
	for rows.Next() {
		var r RunRef
		var ns int64
		if err := rows.Scan(&r.RunID, &ns, &r.RunDir, &r.Commit); err != nil {
			return nil, fmt.Errorf("history %s: %w", h.path, err)
		}
		r.Time = time.Unix(0, ns).UTC()
		out = append(out, r)
	}
	return out, rows.Err()
}

// LatestRun returns the newest run of plan (false when the history has none).
func (h *DB) LatestRun(ctx context.Context, plan string) (RunRef, bool, error) {
	var r RunRef
	var ns int64
	err := h.db.QueryRowContext(ctx, `SELECT run_id, time_ns, run_dir, sglang_commit FROM runs WHERE plan = ?
		ORDER BY time_ns DESC, id DESC LIMIT 1`, plan).Scan(&r.RunID, &ns, &r.RunDir, &r.Commit)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return r, false, nil
		}
		return r, false, fmt.Errorf("history %s: %w", h.path, err)
	}
	r.Time = time.Unix(0, ns).UTC()
	return r, true, nil
}
