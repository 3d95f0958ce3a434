package nsysdb

import (
	"database/sql"
	"errors"
	"math"
	"strings"
	"sync/atomic"

	"github.com/sglprof/runner/reports/trace"
)

// directPlan is how the direct file reader (sqlitefile.go) scans one table: its b-tree root and
// the record position of every wanted column (-1 for a column the table does not have).
type directPlan struct {
	root uint32
	cols []int
}

// planDirect checks that table can be scanned from the file and maps cols to record positions.
// It refuses (errFileLayout) what the direct reader cannot reproduce exactly: WITHOUT ROWID and
// virtual tables, generated columns (not stored in the record), a wanted primary-key column (an
// INTEGER PRIMARY KEY is stored as the rowid), a wanted column with a default value (a record
// written before ALTER TABLE ADD COLUMN lacks it and SQLite fills in the default) and a wanted
// column of REAL affinity (see realAffinity).
func (r *reader) planDirect(table string, cols []string) (*directPlan, error) {
	var root sql.NullInt64
	var ddl sql.NullString
	err := r.db.QueryRowContext(r.ctx, `SELECT rootpage, sql FROM sqlite_master WHERE type = 'table' AND name = ?`, table).Scan(&root, &ddl)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, layoutErr("%s is not a table", table)
		}
		return nil, err
	}
	if !root.Valid || root.Int64 < 1 || root.Int64 > 1<<32-1 {
		return nil, layoutErr("%s has root page %d (a virtual table?)", table, root.Int64)
	}
	// Table options follow the column list's closing parenthesis ("... ) WITHOUT ROWID").
	if i := strings.LastIndexByte(ddl.String, ')'); i < 0 || strings.Contains(strings.ToUpper(ddl.String[i:]), "WITHOUT") {
		return nil, layoutErr("%s may be a WITHOUT ROWID table", table)
	}
	rows, err := r.db.QueryContext(r.ctx, `SELECT cid, name, type, pk, dflt_value IS NOT NULL, hidden FROM pragma_table_xinfo(?)`, table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	type colInfo struct {
		cid          int
		pk, dflt     bool
		real         bool
		hidden       int
		recordColumn int
	}
	info := map[string]colInfo{}
	n := 0
	for rows.Next() {
		var c colInfo
		var name, typ string
		var pk int
		if err := rows.Scan(&c.cid, &name, &typ, &pk, &c.dflt, &c.hidden); err != nil {
			return nil, err
		}
		c.real = realAffinity(typ)
		if c.hidden != 0 {
			return nil, layoutErr("%s has generated or hidden columns", table)
		}
		c.pk = pk > 0
		c.recordColumn = n
		n++
		info[name] = c
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	p := &directPlan{root: uint32(root.Int64), cols: make([]int, len(cols))}
	for i, name := range cols {
		c, ok := info[name]
		switch {
		case !ok:
			p.cols[i] = -1
		case c.pk || c.dflt || c.real:
			return nil, layoutErr("%s.%s is a key, has a default or REAL affinity", table, name)
		default:
			p.cols[i] = c.recordColumn
		}
	}
	return p, nil
}

// rowEstimate guesses how many rows table has, for sizing slices before a scan: the last rowid
// when the direct reader can see it, capped by what the file could hold; 0 when unknown.
func (r *reader) rowEstimate(table string) int {
	if r.file == nil {
		return 0
	}
	p, err := r.planDirect(table, nil)
	if err != nil {
		return 0
	}
	n, err := r.file.lastRowid(p.root)
	if err != nil || n < 0 {
		return 0
	}
	// An export's rows take tens of bytes each; a larger "count" is a sparse rowid, and
	// presizing for it would allocate more than the file could hold.
	if n > int64(r.file.pages)*int64(r.file.pageSize)/32 {
		return 0
	}
	return int(n)
}

// realAffinity says whether a declared column type has REAL affinity (SQLite's rules, in
// order: INT, then CHAR/CLOB/TEXT, then BLOB or none, then REAL/FLOA/DOUB). SQLite may store
// such a column's integral values as integers and turns them back into reals on reading, which
// the direct reader does not reproduce.
func realAffinity(typ string) bool {
	t := strings.ToUpper(typ)
	for _, s := range []string{"INT", "CHAR", "CLOB", "TEXT", "BLOB"} {
		if strings.Contains(t, s) {
			return false
		}
	}
	return strings.Contains(t, "REAL") || strings.Contains(t, "FLOA") || strings.Contains(t, "DOUB")
}

// scanInts calls fn for every row of table with the integer columns cols (NULL where a row or
// the table has none): from the file directly when it can, else through SQLite. A column that
// holds a non-integer value sends the whole table through SQLite, whose conversion rules (and
// errors) then apply as they always did. When the direct scan gives up after fn has seen rows,
// reset is called first so that the caller can drop what it collected.
func (r *reader) scanInts(table string, cols []string, reset func(), fn func(v []sql.NullInt64) error) error {
	vals := make([]sql.NullInt64, len(cols))
	if r.file != nil {
		err := r.scanDirect(table, cols, reset, fn)
		if err == nil || !errors.Is(err, errFileLayout) {
			return err
		}
		r.log.Debug("nsys: reading the table through SQLite", "table", table, "why", err)
	}
	ptrs := make([]any, len(vals))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	return r.scanSQL(table, cols, ptrs, func() error { return fn(vals) })
}

// scanSQL is the SQLite path of the table scans: it selects cols (NULL for those the table
// lacks) from table, scans each row into dest and calls row.
func (r *reader) scanSQL(table string, cols []string, dest []any, row func() error) error {
	have, err := r.columns(table)
	if err != nil {
		return err
	}
	list, _ := selectList(have, cols...)
	rows, err := r.db.QueryContext(r.ctx, "SELECT "+list+" FROM "+table)
	if err != nil {
		return r.wrap(table, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return r.wrap(table, err)
		}
		if err := row(); err != nil {
			return err
		}
	}
	return r.wrapIf(table, rows.Err())
}

// scanDirect is scanInts' direct path; errFileLayout means "use SQLite instead".
func (r *reader) scanDirect(table string, cols []string, reset func(), fn func(v []sql.NullInt64) error) error {
	p, err := r.planDirect(table, cols)
	if err != nil {
		if errors.Is(err, errFileLayout) {
			return err
		}
		return r.wrap(table, err)
	}
	seen := false
	err = r.file.scanInts(r.ctx, p.root, p.cols, func(v []sql.NullInt64) error {
		seen = true
		return fn(v)
	})
	if err != nil && errors.Is(err, errFileLayout) && seen && reset != nil {
		reset()
	}
	return err
}

// corrIndex is the set of GPU ops' correlation ids with, per id, the first runtime call that
// carries it: what SummariseAPI keeps of the runtime table. CUPTI numbers launches densely
// from 1, so the ids usually fit a flat array (4 bytes an id); a sparse set falls back to a map.
type corrIndex struct {
	lo     int64
	dense  []int32 // id-lo → 0 not wanted, -1 wanted without a call yet, else first call+1
	sparse map[int64]int32
	starts []int64 // with dense, for claim: id-lo → the first call's start
}

func newCorrIndex(ops []trace.GPUOp) *corrIndex {
	x := &corrIndex{}
	if lo, slots, ok := trace.CorrelationSpan(ops, func(o *trace.GPUOp) int64 { return o.Correlation }, 4, 4096); ok {
		x.lo, x.dense = lo, make([]int32, slots)
	} else {
		x.sparse = map[int64]int32{}
	}
	for i := range ops {
		if c := ops[i].Correlation; c != trace.NoID {
			x.mark(c)
		}
	}
	return x
}

// slot is id c's index in dense, or false when c is outside it (c-lo computed without
// overflow: ids of a hostile export may lie at both ends of int64).
func (x *corrIndex) slot(c int64) (int64, bool) {
	d := c - x.lo
	return d, c >= x.lo && d >= 0 && d < int64(len(x.dense))
}

func (x *corrIndex) mark(c int64) {
	if x.dense != nil {
		x.dense[c-x.lo] = -1
	} else {
		x.sparse[c] = -1
	}
}

// reset forgets the calls (a scan that starts over).
func (x *corrIndex) reset() {
	if x.dense != nil {
		for i, v := range x.dense {
			if v != 0 {
				x.dense[i] = -1
			}
		}
		return
	}
	for c := range x.sparse {
		x.sparse[c] = -1
	}
}

func (x *corrIndex) wanted(c int64) bool {
	if x.dense != nil {
		d, ok := x.slot(c)
		return ok && x.dense[d] != 0
	}
	_, ok := x.sparse[c]
	return ok
}

// add records call li for id c (a wanted id) unless an earlier call has it.
func (x *corrIndex) add(c int64, li int32) {
	if x.dense != nil {
		if d, ok := x.slot(c); ok && x.dense[d] == -1 {
			x.dense[d] = li + 1
		}
		return
	}
	if x.sparse[c] == -1 {
		x.sparse[c] = li + 1
	}
}

// claim records the raw name id of the call with wanted id c (ReadOptions.OneLaunchPerName):
// wanted says a GPU op has id c, first that no call had claimed it (false also for a name id
// that does not fit). Parts of a parallel scan claim concurrently, hence the atomics.
func (x *corrIndex) claim(c, nameID, start int64) (wanted, first bool) {
	d, ok := x.slot(c)
	if x.dense == nil || !ok {
		return false, false
	}
	p := &x.dense[d]
	if atomic.LoadInt32(p) == 0 {
		return false, false
	}
	if nameID < 0 || nameID >= math.MaxInt32-1 {
		return true, false
	}
	if !atomic.CompareAndSwapInt32(p, -1, int32(nameID)+1) {
		return true, false
	}
	if x.starts != nil {
		x.starts[d] = start // only the claim's winner writes it; read after the scan
	}
	return true, true
}

// first returns the first call with id c, or trace.NoID.
func (x *corrIndex) first(c int64) int32 {
	var v int32
	if x.dense != nil {
		d, ok := x.slot(c)
		if !ok {
			return trace.NoID
		}
		v = x.dense[d]
	} else {
		v = x.sparse[c]
	}
	if v <= 0 {
		return trace.NoID
	}
	return v - 1
}

// link is trace.Link for a SummariseAPI read: an nsys trace has no CPU ops, frames or flows,
// so only GPUOp.Launch is to set (the first call with the op's correlation id), and the kept
// calls are few. With one process the ids are as stored and corrIndex already knows each id's
// first call; with several, uniqueCorrelations has made them (pid<<32)|id, so a map over the
// kept calls decides. The warning is trace.Link's, counted against every runtime call.
func (r *reader) link(multi bool) {
	t := r.t
	first := func(c int64) int32 { return r.rtIndex.first(c) }
	if r.rtIndex == nil {
		first = func(int64) int32 { return trace.NoID }
	} else if multi {
		byCorr := make(map[int64]int32, len(t.Launches))
		for i := range t.Launches {
			if c := t.Launches[i].Correlation; c != trace.NoID {
				if _, ok := byCorr[c]; !ok {
					byCorr[c] = int32(i)
				}
			}
		}
		first = func(c int64) int32 {
			if li, ok := byCorr[c]; ok {
				return li
			}
			return trace.NoID
		}
	}
	unmatched := 0
	for i := range t.GPUOps {
		op := &t.GPUOps[i]
		op.Launch, op.CPUOp = trace.NoID, trace.NoID
		if op.Correlation != trace.NoID {
			op.Launch = first(op.Correlation)
		}
		if op.Launch == trace.NoID {
			unmatched++
		}
	}
	if unmatched > 0 && r.c.APICalls > 0 {
		t.Warnings = append(t.Warnings, trace.UnlinkedWarning(int64(unmatched), int64(len(t.GPUOps))))
	}
}
