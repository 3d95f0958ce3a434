package nsys

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
)

// KernelStat is one kernel name's aggregate from the streaming summary. It has no min, max or
// median on purpose: the streaming path runs the same single GROUP BY as the sqlite3 shell
// reference (count and sum), and per-kernel distributions come from the full Read path.
type KernelStat struct {
	Name    string `json:"name"`
	Count   int64  `json:"count"`
	TotalNS int64  `json:"total_ns"`
}

// KernelSummary aggregates the kernel table per kernel name without loading kernels into
// memory: SQLite groups by the integer name id (about a third faster than grouping on text)
// and only the per-name rows come back, whose names are then joined from StringIds. Memory is
// bounded by the number of distinct names, whatever the number of kernels; it is the path for
// exports too large for the full trace model. Rows are sorted by total time.
func KernelSummary(ctx context.Context, path string, style NameStyle) ([]KernelStat, error) {
	db, _, err := openExport(path)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	r := &reader{ctx: ctx, db: db, path: path, c: &Capture{Tables: map[string]bool{}}, cols: map[string]map[string]bool{}}
	if err := r.tables(); err != nil {
		return nil, err
	}
	if !r.has("META_DATA_EXPORT") && !r.has("EXPORT_META_DATA") && !r.has("StringIds") {
		return nil, fmt.Errorf("nsys: %s: %w: it has neither META_DATA_EXPORT/EXPORT_META_DATA nor StringIds", path, ErrNotExport)
	}
	const table = "CUPTI_ACTIVITY_KIND_KERNEL"
	if !r.has(table) {
		return nil, r.noKernels("the export has no " + table + " table (profiled without --trace=cuda, or no kernel was launched)")
	}
	have, err := r.columns(table)
	if err != nil {
		return nil, err
	}
	col := "demangledName"
	switch style {
	case Short:
		col = "shortName"
	case Mangled:
		col = "mangledName"
	}
	if !have[col] {
		col = "shortName"
		if !have[col] {
			col = "demangledName"
		}
	}
	q := `SELECT ` + col + `, count(*), sum("end" - start) FROM ` + table + ` GROUP BY 1`
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, r.wrap(table, err)
	}
	type agg struct {
		id int64
		KernelStat
	}
	var aggs []agg
	for rows.Next() {
		var a agg
		var id sql.NullInt64
		if err := rows.Scan(&id, &a.Count, &a.TotalNS); err != nil {
			rows.Close()
			return nil, r.wrap(table, err)
		}
		a.id = id.Int64
		aggs = append(aggs, a)
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return nil, r.wrap(table, err)
	}
	if len(aggs) == 0 {
		return nil, r.noKernels(table + " is empty (the --delay/--duration capture window missed the kernels, or the application never launched one)")
	}
	names, err := stringsByID(ctx, db, func(yield func(int64) bool) {
		for _, a := range aggs {
			if !yield(a.id) {
				return
			}
		}
	})
	if err != nil {
		return nil, r.wrap("StringIds", err)
	}
	out := make([]KernelStat, len(aggs))
	for i, a := range aggs {
		out[i] = a.KernelStat
		out[i].Name = names[a.id]
	}
	slices.SortFunc(out, func(a, b KernelStat) int {
		if c := cmp.Compare(b.TotalNS, a.TotalNS); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

// stringsByID fetches the StringIds values of the given ids with one primary-key lookup each.
func stringsByID(ctx context.Context, db *sql.DB, ids func(func(int64) bool)) (map[int64]string, error) {
	stmt, err := db.PrepareContext(ctx, `SELECT value FROM StringIds WHERE id = ?`)
	if err != nil {
		return nil, err
	}
	defer stmt.Close()
	out := map[int64]string{}
	for id := range ids {
		if _, ok := out[id]; ok {
			continue
		}
		var s string
		if err := stmt.QueryRowContext(ctx, id).Scan(&s); err != nil && err != sql.ErrNoRows {
			return nil, err
		}
		out[id] = s
	}
	return out, nil
}
