package nsysdb

import (
	"database/sql"
	"errors"
	"runtime"

	"github.com/sglprof/runner/reports/trace"
)

// The triage's lean read (SummariseAPI, SkipKernelInfo) scans the kernel and runtime tables on
// several goroutines when the direct reader can, each on its own run of the table's leaves.
// Kernels are written straight to their place (an export's rowids are 1..n; anything else
// sends the table to the sequential scan), with the raw StringIds id and globalPid parked in
// fields a kernel does not use; runtime parts keep their own sums and calls. Names are
// interned and parts merged afterwards on one goroutine in table order, so the result is the
// sequential read's, name ids included (TestParallelScanMatchesSequential).

// scanParts is how many goroutines a parallel scan uses: one per CPU the process may use, at
// most four (beyond that the scan is bound by memory bandwidth).
func scanParts() int { return min(runtime.GOMAXPROCS(0), 4) }

// kernelsParallel reads the kernel table of a lean read into r.t.GPUOps, which the caller has
// sized to the table's last rowid n; errFileLayout, having added nothing, when it cannot.
func (r *reader) kernelsParallel(table string, style NameStyle, n int) error {
	if r.file == nil || style == Mangled || scanParts() < 2 || r.opts.noParallel || len(r.t.GPUOps) != 0 || n <= 0 || cap(r.t.GPUOps) < n {
		return layoutErr("no parallel scan")
	}
	p, err := r.planDirect(table, []string{"start", "end", "deviceId", "streamId", "correlationId", "globalPid", "demangledName", "shortName"})
	if err != nil {
		if errors.Is(err, errFileLayout) {
			return err
		}
		return r.wrap(table, err)
	}
	ops := r.t.GPUOps[:n]
	type span struct{ first, last, rows int64 }
	var spans []span
	err = r.file.scanIntsParts(r.ctx, p.root, p.cols, scanParts(), func(part int) func(int64, []sql.NullInt64) error {
		spans = append(spans, span{})
		return func(rowid int64, v []sql.NullInt64) error {
			sp := &spans[part]
			if rowid < 1 || rowid > int64(n) || (sp.rows > 0 && rowid != sp.last+1) {
				return layoutErr("%s: rowid %d is not the next of 1..%d", table, rowid, n)
			}
			if sp.rows == 0 {
				sp.first = rowid
			}
			sp.last = rowid
			sp.rows++
			if !v[2].Valid || !v[3].Valid {
				return r.wrap(table, errors.New("a kernel without deviceId or streamId"))
			}
			raw := kernelNameID(style, v[6], v[7])
			corr := int64(trace.NoID)
			if v[4].Valid {
				corr = v[4].Int64
			}
			ops[rowid-1] = trace.GPUOp{
				Start: v[0].Int64, End: v[1].Int64, Correlation: corr, ExternalID: v[5].Int64, Bytes: raw,
				Device: int32(v[2].Int64), Stream: int32(v[3].Int64), Kind: trace.OpKernel, Launch: trace.NoID, CPUOp: trace.NoID,
			}
			return nil
		}
	})
	if err != nil {
		return err
	}
	// Every rowid 1..n written once: the parts' runs follow each other and add up to n.
	next := int64(1)
	for _, sp := range spans {
		if sp.rows == 0 {
			continue
		}
		if sp.first != next {
			return layoutErr("%s: rowids are not 1..%d in leaf order", table, n)
		}
		next = sp.last + 1
	}
	if next != int64(n)+1 {
		return layoutErr("%s: %d rows where the last rowid is %d", table, next-1, n)
	}
	for i := range ops {
		op := &ops[i]
		name, err := r.name(op.Bytes)
		if err != nil {
			return err
		}
		_, pid, _ := SplitGlobalID(op.ExternalID)
		op.Name, op.Bytes, op.ExternalID = name, 0, trace.NoID
		r.addPID(pid)
		r.kernelPID(i, pid)
	}
	r.t.GPUOps = ops
	return nil
}

// kernelNameID is the StringIds id of a kernel row's name in style (the mangled style starts
// from the demangled name): a row without demangledName uses its shortName and the other way
// round, as nsys's own reports do.
func kernelNameID(style NameStyle, dem, short sql.NullInt64) int64 {
	if style == Short && short.Valid || !dem.Valid {
		return short.Int64
	}
	return dem.Int64
}

// rtPart is one part of a parallel runtime scan: per-name sums by raw name id, the kept calls
// (Launch.ExternalID holding the raw name id until the merge) and the facts every call adds.
type rtPart struct {
	order    []int64 // raw name ids in first-seen order
	dense    []int32 // raw id → index+1 into stats (ids below 2^16)
	sparse   map[int64]int32
	stats    []APIStat
	launches []trace.Launch
	pids     map[int32]bool
	seenPIDs idCache // the pids already in pids
	calls    int
	first    int64
	end      int64
}

// idCache remembers the process or device ids a per-row path has already put into its sets,
// so that the row skips the map assignment. Rows of an export of several processes interleave
// them (the kernels and calls of four TP ranks, one GPU each, in time order), so remembering
// only the previous row's id missed on nearly every row, and the assignments were about 5 % of
// a streamed triage's CPU at 10M kernels of four processes.
type idCache struct {
	ids [16]int32
	n   int
}

// seen reports whether id was seen before and remembers it while there is room (beyond 16 ids
// the callers' sets take the other ids' rows, as they did before).
func (c *idCache) seen(id int32) bool {
	for _, x := range c.ids[:c.n] {
		if x == id {
			return true
		}
	}
	if c.n < len(c.ids) {
		c.ids[c.n] = id
		c.n++
	}
	return false
}

// add counts one runtime call in the part's per-name sums, process set and time span, and
// returns the call's process and thread.
func (p *rtPart) add(start, end, gtid, nameID int64) (pid, tid int32) {
	st := p.stat(nameID)
	d := end - start
	if st.Calls == 0 || d < st.MinNS {
		st.MinNS = d
	}
	st.MaxNS = max(st.MaxNS, d)
	st.Calls++
	st.TotalNS += d
	_, pid, tid = SplitGlobalID(gtid)
	if !p.seenPIDs.seen(pid) {
		p.pids[pid] = true
	}
	if p.calls == 0 || start < p.first {
		p.first = start
	}
	if p.calls == 0 || end > p.end {
		p.end = end
	}
	p.calls++
	return pid, tid
}

// merge adds src, the same call name's aggregate over other calls, to a.
func (a *APIStat) merge(src APIStat) {
	if a.Calls == 0 || src.MinNS < a.MinNS {
		a.MinNS = src.MinNS
	}
	if a.Calls == 0 || src.MaxNS > a.MaxNS {
		a.MaxNS = src.MaxNS
	}
	a.Calls += src.Calls
	a.TotalNS += src.TotalNS
}

func (p *rtPart) stat(id int64) *APIStat {
	var k int32
	switch {
	case id >= 0 && id < int64(len(p.dense)):
		k = p.dense[id]
	case id >= 0 && id < 1<<16:
		p.dense = append(p.dense, make([]int32, int(id)+1-len(p.dense))...)
	default:
		k = p.sparse[id]
	}
	if k == 0 {
		p.order = append(p.order, id)
		p.stats = append(p.stats, APIStat{})
		k = int32(len(p.stats))
		if id >= 0 && id < 1<<16 {
			p.dense[id] = k
		} else {
			p.sparse[id] = k
		}
	}
	return &p.stats[k-1]
}

// runtimeParallel is runtime's SummariseAPI scan on several goroutines; errFileLayout (with
// nothing added) when the direct reader declines. resolve is runtime's name memo, called in
// the table order of first sightings, as the sequential scan calls it.
// With perName the calls are not kept: their names go to want (corrIndex.claim), and an id
// met twice ends the scan with errRepeated.
func (r *reader) runtimeParallel(table string, want *corrIndex, perName bool, resolve func(id int64) (name trace.NameID, graph, driver bool, stat int, err error)) error {
	if r.file == nil || scanParts() < 2 || r.opts.noParallel || len(r.t.Launches) != 0 {
		return layoutErr("no parallel scan")
	}
	p, err := r.planDirect(table, []string{"start", "end", "globalTid", "correlationId", "nameId"})
	if err != nil {
		if errors.Is(err, errFileLayout) {
			return err
		}
		return r.wrap(table, err)
	}
	parts, err := r.scanRuntimeParts(p, want, perName)
	if err != nil {
		return err
	}
	return r.mergeRuntimeParts(parts, want, perName, resolve)
}

// scanRuntimeParts is runtimeParallel's scan: each part of the table sums its calls and keeps
// its wanted launches (raw nameId in ExternalID) or, with perName, claims their ids in want.
func (r *reader) scanRuntimeParts(p *directPlan, want *corrIndex, perName bool) ([]*rtPart, error) {
	// About one kept call per GPU op: the first part appends to the presized Launches, so
	// that the merge copies only the other parts.
	var parts []*rtPart
	nparts := scanParts()
	err := r.file.scanIntsParts(r.ctx, p.root, p.cols, nparts, func(part int) func(int64, []sql.NullInt64) error {
		pt := &rtPart{sparse: map[int64]int32{}, pids: map[int32]bool{}}
		switch {
		case perName:
		case part == 0:
			pt.launches = r.t.Launches
		default:
			pt.launches = make([]trace.Launch, 0, len(r.t.GPUOps)/nparts+len(r.t.GPUOps)/16+1024)
		}
		parts = append(parts, pt)
		return func(_ int64, v []sql.NullInt64) error {
			start, end, gtid, corr, nameID := v[0], v[1], v[2], v[3], v[4]
			pid, tid := pt.add(start.Int64, end.Int64, gtid.Int64, nameID.Int64)
			if !corr.Valid {
				return nil
			}
			if perName {
				if wanted, first := want.claim(corr.Int64, nameID.Int64, start.Int64); wanted && !first {
					return errRepeated{}
				}
				return nil
			}
			if !want.wanted(corr.Int64) {
				return nil
			}
			pt.launches = append(pt.launches, trace.Launch{Start: start.Int64, End: end.Int64, Correlation: corr.Int64,
				ExternalID: nameID.Int64, PID: pid, TID: tid, Frame: trace.NoID})
			return nil
		}
	})
	return parts, err
}

// mergeRuntimeParts is runtimeParallel's merge, in table order: names resolved at first
// sighting, per-name sums, pids, the time span, and the parts' launches appended to the first
// part's (each given its name, and its index in want).
func (r *reader) mergeRuntimeParts(parts []*rtPart, want *corrIndex, perName bool, resolve func(id int64) (name trace.NameID, graph, driver bool, stat int, err error)) error {
	type resolved struct {
		name          trace.NameID
		graph, driver bool
		stat          int
	}
	names := map[int64]resolved{}
	var dense []resolved // names for raw ids below 2^16, the per-call lookup of the merge
	lookup := func(id int64) resolved {
		if id >= 0 && id < int64(len(dense)) {
			return dense[id]
		}
		return names[id]
	}
	var launches []trace.Launch
	if !perName {
		launches = parts[0].launches[:0]
	}
	for _, pt := range parts {
		for i, id := range pt.order {
			rs, ok := names[id]
			if !ok {
				var err error
				if rs.name, rs.graph, rs.driver, rs.stat, err = resolve(id); err != nil {
					return err
				}
				names[id] = rs
				if id >= 0 && id < 1<<16 {
					if id >= int64(len(dense)) {
						dense = append(dense, make([]resolved, int(id)+1-len(dense))...)
					}
					dense[id] = rs
				}
			}
			r.c.APIStats[rs.stat].merge(pt.stats[i])
		}
		for pid := range pt.pids {
			r.pids[pid] = true
			r.rtPIDs[pid] = true
		}
		if pt.calls > 0 {
			if r.c.APICalls == 0 || pt.first < r.rtFirst {
				r.rtFirst = pt.first
			}
			if r.c.APICalls == 0 || pt.end > r.rtEnd {
				r.rtEnd = pt.end
			}
			r.c.APICalls += pt.calls
		}
		for _, l := range pt.launches {
			rs := lookup(l.ExternalID)
			l.Name, l.Graph, l.ExternalID = rs.name, rs.graph, trace.NoID
			want.add(l.Correlation, int32(len(launches)))
			launches = append(launches, l) // part 0 in place, the others after it
			r.c.Driver = append(r.c.Driver, rs.driver)
		}
		pt.launches = nil
	}
	if !perName {
		r.t.Launches = launches
	}
	return nil
}

// errRepeated ends a one-launch-per-name scan that met a correlation id twice.
type errRepeated struct{}

func (errRepeated) Error() string { return "nsys: a correlation id repeats in the runtime table" }
