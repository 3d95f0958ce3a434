package history

import (
	"context"
	"fmt"
)

// RunDirs returns the run directories of the latest runs before cur (any run but runID) that
// measured configuration key on GPU model gpu, newest first, at most limit of them. A
// regression found against the history's rolling median is explained by diffing the kernels
// of the new run against one of these (runner/kerneldiff.go): the history keeps medians, not
// traces.
func (h *DB) RunDirs(ctx context.Context, key, gpu, runID string, limit int) ([]string, error) {
	rows, err := h.db.QueryContext(ctx, `SELECT r.run_dir FROM runs r
		WHERE r.gpu_model = ? AND r.run_id <> ?
		AND EXISTS (SELECT 1 FROM metrics m WHERE m.run = r.id AND m.config_key = ?)
		ORDER BY r.time_ns DESC, r.id DESC LIMIT ?`, gpu, runID, key, limit)
	if err != nil {
		return nil, fmt.Errorf("history %s: %w", h.path, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var d string
		if err := rows.Scan(&d); err != nil {
			return nil, fmt.Errorf("history %s: %w", h.path, err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}
