package nsysdb

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
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
// memory: SQLite groups by the integer name id (faster than grouping on text)
// and only the per-name rows come back, whose names are then joined from StringIds. Memory is
// bounded by the number of distinct names, whatever the number of kernels; it is the path for
// exports too large for the full trace model. Rows are sorted by total time.
func KernelSummary(ctx context.Context, path string, style NameStyle) ([]KernelStat, error) {
	return kernelSummary(ctx, path, style, true)
}

// kernelSummary is KernelSummary; direct false always asks SQLite (tests compare the two).
func kernelSummary(ctx context.Context, path string, style NameStyle, direct bool) ([]KernelStat, error) {
	// No mmap_size: mapping the file is a few percent faster but makes the resident size grow
	// with the file, which is the one thing this path must not do.
	db, warnings, err := openExport(path, "")
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
	if direct && len(warnings) == 0 { // a -wal or -journal beside the file: SQLite only
		if out, err := r.kernelSummaryDirect(path, table, col); err == nil || !errors.Is(err, errFileLayout) {
			return out, err
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
	return sortKernelStats(r, table, out)
}

// sortKernelStats orders the summary by total time, then name; no rows is ErrNoKernels.
func sortKernelStats(r *reader, table string, out []KernelStat) ([]KernelStat, error) {
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

// kernelSummaryDirect is KernelSummary's GROUP BY done in Go over the direct file reader: one
// pass over the kernel table's pages, sums in a slice indexed by the name id (StringIds ids are
// small), then the names of the groups from StringIds. errFileLayout sends the caller to SQL.
func (r *reader) kernelSummaryDirect(path, table, col string) ([]KernelStat, error) {
	f, err := openSQLFile(path)
	if err != nil {
		return nil, layoutErr("%v", err)
	}
	defer f.Close()
	r.file = f
	defer func() { r.file = nil }()
	type group struct {
		count, total int64
		seen         bool
	}
	var dense []group
	sparse := map[int64]*group{}
	var null group
	err = r.scanDirect(table, []string{col, "start", "end"}, nil, func(v []sql.NullInt64) error {
		var g *group
		switch id := v[0].Int64; {
		case !v[0].Valid:
			g = &null
		case id >= 0 && id < 1<<20:
			if id >= int64(len(dense)) {
				dense = append(dense, make([]group, int(id)+1-len(dense))...)
			}
			g = &dense[id]
		default:
			if g = sparse[id]; g == nil {
				g = &group{}
				sparse[id] = g
			}
		}
		g.seen = true
		g.count++
		if v[1].Valid && v[2].Valid {
			g.total += v[2].Int64 - v[1].Int64
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if r.has("StringIds") {
		if r.strStmt, err = r.db.PrepareContext(r.ctx, `SELECT value FROM StringIds WHERE id = ?`); err != nil {
			return nil, r.wrap("StringIds", err)
		}
		defer r.strStmt.Close()
	}
	var out []KernelStat
	add := func(id int64, g *group, named bool) error {
		k := KernelStat{Count: g.count, TotalNS: g.total}
		if named && r.strStmt != nil {
			var name sql.NullString
			err := r.strStmt.QueryRowContext(r.ctx, id).Scan(&name)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return r.wrap("StringIds", err)
			}
			k.Name = name.String
		}
		out = append(out, k)
		return nil
	}
	for id := range dense {
		if dense[id].seen {
			if err := add(int64(id), &dense[id], true); err != nil {
				return nil, err
			}
		}
	}
	for id, g := range sparse {
		if err := add(id, g, true); err != nil {
			return nil, err
		}
	}
	if null.seen {
		if err := add(0, &null, false); err != nil {
			return nil, err
		}
	}
	return sortKernelStats(r, table, out)
}
