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
	// No mmap_size: mapping the file is a few percent faster but makes the resident size grow
	// with the file, which is the one thing this path must not do.
	db, _, err := openExport(path, "")
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
	// Group by the integer id, then join the few resulting ids to StringIds: grouping on the
	// text would compare strings for every kernel.
	q := `SELECT s.value, g.n, g.total FROM (SELECT ` + col + ` AS id, count(*) AS n, sum("end" - start) AS total FROM ` +
		table + ` GROUP BY 1) AS g LEFT JOIN StringIds AS s ON s.id = g.id`
	if !r.has("StringIds") {
		q = `SELECT NULL, count(*), sum("end" - start) FROM ` + table + ` GROUP BY ` + col
	}
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, r.wrap(table, err)
	}
	var out []KernelStat
	for rows.Next() {
		var k KernelStat
		var name sql.NullString
		if err := rows.Scan(&name, &k.Count, &k.TotalNS); err != nil {
			rows.Close()
			return nil, r.wrap(table, err)
		}
		k.Name = name.String
		out = append(out, k)
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return nil, r.wrap(table, err)
	}
	if len(out) == 0 {
		return nil, r.noKernels(table + " is empty (the --delay/--duration capture window missed the kernels, or the application never launched one)")
	}
	slices.SortFunc(out, func(a, b KernelStat) int {
		if c := cmp.Compare(b.TotalNS, a.TotalNS); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}
