package nsysdb

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/sglprof/runner/plans/infile"
)

// This file reads rowid tables straight from SQLite's documented file format
// (https://www.sqlite.org/fileformat2.html: the database header, table b-tree pages, the record
// format and overflow pages), for the full scans of the big tables of an export (kernels,
// runtime calls, NVTX events). It is a measured departure from reading everything through
// modernc.org/sqlite, whose pure-Go driver pays for locking and value conversion per row and
// column, an order of magnitude more than decoding the row here (figures in
// docs/performance.md). It is deliberately narrow: anything it
// does not expect (a WAL database, a hot journal, reserved page space it cannot account for, a
// WITHOUT ROWID table, a malformed page) is reported as errFileLayout, and the caller reads the
// table through SQLite instead. Only the scan is ours; schema, names and small tables still go
// through SQLite.

// errFileLayout marks a file or table this reader does not handle; callers fall back to SQLite.
var errFileLayout = errors.New("nsys: SQLite file layout not handled by the direct reader")

// layoutErr wraps errFileLayout with what was unexpected.
func layoutErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errFileLayout}, args...)...)
}

// Kinds of sqlValue.
const (
	valNull uint8 = iota
	valInt
	valFloat
	valText
	valBlob
)

// sqlValue is one decoded column. Bytes of text and blob values alias the page buffer and are
// valid only during the row callback.
type sqlValue struct {
	Kind  uint8
	Int   int64
	Float float64
	Bytes []byte
}

// sqlFile is an SQLite database file opened for direct table scans.
type sqlFile struct {
	f        io.ReaderAt
	closer   io.Closer
	pageSize int
	usable   int    // page size less the reserved bytes at the end of each page
	pages    uint32 // pages the file holds
}

// pageWindow is a read-ahead window of one scan: the leaves of a table that was only appended
// to lie in consecutive pages, so one read of readAhead pages replaces as many system calls.
//
// The pages are copied out of the page cache with pread, not used in place from a mapping of
// the file: a mapping's pages count in the resident size until they are handed back
// (madvise), and the page faults and hand-backs cost more than the copy. With the file
// mapped and handed back every 4 MiB, the streamed pass over a 1M-kernel export took 1.36 s
// of CPU, with pread 0.81 s (docs/performance.md); memory is the window, 256 KiB a scan.
type pageWindow struct {
	buf          []byte
	first, count uint32
	read         int64 // pages read into the window so far (tests check the read-ahead)
}

// readAhead is the read-ahead window in pages (256 KiB with 4 KiB pages).
const readAhead = 64

// readSpan is how many pages from page first on a window read takes so that it holds the pages
// the scan visits next: up to the farthest of next(0), next(1), ... (in visiting order; ok
// false ends them) that lies within readAhead pages after first, stopping at the first that
// does not. The tables of an export interleave in the file (a kernel leaf, a runtime leaf, ...),
// where this is about the whole window; a small table's leaves lie scattered (the NVTX table's
// 700 leaves of a 1M-kernel export over its 48,000 pages), where reading the whole window for
// each leaf copied 180 MB to read 3 MB.
func readSpan(first uint32, next func(i int) (uint32, bool)) uint32 {
	span := uint32(1)
	for i := 0; i < readAhead; i++ {
		p, ok := next(i)
		if !ok || p <= first || p-first >= readAhead {
			break
		}
		span = max(span, p-first+1)
	}
	return span
}

// openSQLFile opens path and checks its 100-byte header for what the scanner supports: a
// rollback-journal database (file format versions 1), UTF-8 text, the fixed payload fractions.
func openSQLFile(path string) (*sqlFile, error) {
	f, err := infile.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	s, err := newSQLFile(f, st.Size())
	if err != nil {
		f.Close()
		return nil, err
	}
	s.closer = f
	return s, nil
}

// newSQLFile checks the header of a database of size bytes read through r.
func newSQLFile(r io.ReaderAt, size int64) (*sqlFile, error) {
	var h [100]byte
	if n, err := r.ReadAt(h[:], 0); n < len(h) {
		return nil, layoutErr("short header (%v)", err)
	}
	if string(h[:16]) != string(sqliteMagic) {
		return nil, layoutErr("no SQLite magic")
	}
	ps := int(binary.BigEndian.Uint16(h[16:18]))
	if ps == 1 {
		ps = 65536
	}
	if ps < 512 || ps > 65536 || ps&(ps-1) != 0 {
		return nil, layoutErr("page size %d", ps)
	}
	if h[18] != 1 || h[19] != 1 {
		return nil, layoutErr("file format versions %d/%d (WAL or newer)", h[18], h[19])
	}
	usable := ps - int(h[20])
	if usable < 480 {
		return nil, layoutErr("usable page size %d", usable)
	}
	if h[21] != 64 || h[22] != 32 || h[23] != 32 {
		return nil, layoutErr("payload fractions %d/%d/%d", h[21], h[22], h[23])
	}
	if enc := binary.BigEndian.Uint32(h[56:60]); enc != 1 {
		return nil, layoutErr("text encoding %d (only UTF-8 is read directly)", enc)
	}
	pages := size / int64(ps)
	if pages > math.MaxUint32 {
		return nil, layoutErr("%d pages", pages)
	}
	return &sqlFile{f: r, pageSize: ps, usable: usable, pages: uint32(pages)}, nil
}

// Close closes the file.
func (s *sqlFile) Close() error {
	if s.closer == nil {
		return nil
	}
	return s.closer.Close()
}

func (s *sqlFile) readPage(pgno uint32, buf []byte) error {
	if pgno < 1 || pgno > s.pages {
		return layoutErr("page %d outside the file (%d pages)", pgno, s.pages)
	}
	n, err := s.f.ReadAt(buf[:s.pageSize], int64(pgno-1)*int64(s.pageSize))
	if n < s.pageSize {
		if err == nil || errors.Is(err, io.EOF) {
			return layoutErr("page %d is short", pgno)
		}
		return err
	}
	return nil
}

// holds says whether page pgno is in the window.
func (w *pageWindow) holds(pgno uint32) bool {
	return w.first > 0 && pgno >= w.first && pgno-w.first < w.count
}

// page returns page pgno from the window, filling the window with pages pgno to pgno+span-1
// (span at most readAhead; see readSpan) when the page is not in it. The slice is valid until
// the next call.
func (w *pageWindow) page(s *sqlFile, pgno, span uint32) ([]byte, error) {
	ps := s.pageSize
	if w.holds(pgno) {
		off := int(pgno-w.first) * ps
		return w.buf[off : off+ps], nil
	}
	if pgno < 1 || pgno > s.pages {
		return nil, layoutErr("page %d outside the file (%d pages)", pgno, s.pages)
	}
	if w.buf == nil {
		w.buf = make([]byte, readAhead*ps)
	}
	n := min(max(span, 1), uint32(readAhead), s.pages-pgno+1)
	w.first, w.count = 0, 0
	got, err := s.f.ReadAt(w.buf[:int(n)*ps], int64(pgno-1)*int64(ps))
	if got < ps {
		if err == nil || errors.Is(err, io.EOF) {
			return nil, layoutErr("page %d is short", pgno)
		}
		return nil, err
	}
	w.first, w.count = pgno, uint32(got/ps)
	w.read += int64(w.count)
	return w.buf[:ps], nil
}

// varint decodes SQLite's big-endian variable-length integer (1 to 9 bytes); n is 0 when b ends
// first.
func varint(b []byte) (v uint64, n int) {
	for i := 0; i < 8; i++ {
		if i >= len(b) {
			return 0, 0
		}
		c := b[i]
		v = v<<7 | uint64(c&0x7f)
		if c < 0x80 {
			return v, i + 1
		}
	}
	if len(b) < 9 {
		return 0, 0
	}
	return v<<8 | uint64(b[8]), 9
}

// serialSize is the body size of a record column of serial type st; ok is false for the
// reserved types 10 and 11.
func serialSize(st uint64) (int, bool) {
	switch {
	case st <= 4:
		return [...]int{0, 1, 2, 3, 4}[st], true
	case st == 5:
		return 6, true
	case st == 6, st == 7:
		return 8, true
	case st == 8, st == 9:
		return 0, true
	case st >= 12:
		if st > 1<<31 {
			return 0, false
		}
		return int((st - 12) / 2), true
	}
	return 0, false
}

// tableScan is one scan's plan and scratch state.
type tableScan struct {
	_        cacheLinePad // a scan is read per row by its own goroutine (see cacheLinePad)
	s        *sqlFile
	slot     []int // record column -> index into vals, -1 when not wanted
	maxCol   int
	rowidAt  int // index into vals that takes the rowid (INTEGER PRIMARY KEY), -1 none
	vals     []sqlValue
	overflow []byte // reassembled payload that spilled onto overflow pages
	ovPage   []byte
	ovReads  uint32 // overflow pages read so far
	win      pageWindow
	visited  uint32
	fn       func(rowid int64, vals []sqlValue) error
	// The integer-only variant (scanInts): ints replaces vals and fnInts replaces fn; fnRow
	// is fnInts with the rowid (scanIntsParts).
	ints   []sql.NullInt64
	fnInts func(vals []sql.NullInt64) error
	fnRow  func(rowid int64, vals []sql.NullInt64) error
	// absent are the positions of ints no record column fills (a column the table lacks, a
	// column asked for twice): recordInts sets them NULL per row, as it sets every other
	// position once per row, so ints need not be cleared and may move between rows (a
	// caller's fnRow may point it into its own batch: see kernelsDecoded).
	absent []int
	_      cacheLinePad
}

// scan calls fn for every row of the rowid table rooted at page root, in rowid order. cols are
// the record column numbers (schema order) to decode into fn's vals, in that order; rowidCol is
// the position in cols that is the table's INTEGER PRIMARY KEY (whose value is the rowid and is
// stored as NULL in the record), or -1. Columns a record does not have (added later by ALTER
// TABLE) are NULL. Values are as stored: a REAL-affinity column may hold integral values as
// integers, which SQLite converts on reading and this scan does not. An error from fn ends the
// scan and is returned as is; layout surprises are errFileLayout.
func (s *sqlFile) scan(ctx context.Context, root uint32, cols []int, rowidCol int, fn func(rowid int64, vals []sqlValue) error) error {
	ts := &tableScan{s: s, rowidAt: rowidCol, vals: make([]sqlValue, len(cols)), fn: fn}
	return ts.run(ctx, root, cols)
}

// scanInts is scan for integer columns, the hot path of the export reader: fn gets the
// columns as sql.NullInt64 (NULL where absent), and a column holding a real, text or blob
// value is an errFileLayout (SQLite's conversion rules apply to those). A -1 in cols is a
// column the table does not have: always NULL.
func (s *sqlFile) scanInts(ctx context.Context, root uint32, cols []int, fn func(vals []sql.NullInt64) error) error {
	ts := &tableScan{s: s, rowidAt: -1, ints: make([]sql.NullInt64, len(cols)), fnInts: fn}
	return ts.run(ctx, root, cols)
}

// plan maps record columns to output positions.
func (ts *tableScan) plan(cols []int) {
	ts.maxCol = -1
	for _, c := range cols {
		ts.maxCol = max(ts.maxCol, c)
	}
	ts.slot = make([]int, ts.maxCol+1)
	for i := range ts.slot {
		ts.slot[i] = -1
	}
	for i, c := range cols {
		if c >= 0 && i != ts.rowidAt {
			ts.slot[c] = i
		}
	}
	ts.absent = ts.absent[:0]
	for i, c := range cols {
		if c < 0 || ts.slot[c] != i {
			ts.absent = append(ts.absent, i)
		}
	}
}

// run reads the table rooted at root: cols planned (plan), then its b-tree walked depth-first.
func (ts *tableScan) run(ctx context.Context, root uint32, cols []int) error {
	s := ts.s
	ts.plan(cols)
	// Depth-first over the b-tree with one page buffer per level; interior pages hold child
	// pointers, leaves hold the rows.
	type level struct {
		buf   []byte
		hdr   int
		cells int
		next  int
		right uint32
	}
	var stack []*level
	var bufs [][]byte
	push := func(pgno uint32) error {
		ts.visited++
		if ts.visited > s.pages {
			return layoutErr("b-tree visits more pages than the file has (a cycle)")
		}
		d := len(stack)
		if d >= 64 {
			return layoutErr("b-tree deeper than 64 levels")
		}
		span := uint32(1)
		if d > 0 && !ts.win.holds(pgno) {
			// The pages visited next are the parent's next children (and their subtrees).
			top := stack[d-1]
			span = readSpan(pgno, func(i int) (uint32, bool) {
				c := top.next + i
				if c > top.cells {
					return 0, false
				}
				if c == top.cells {
					return top.right, true
				}
				ptr := int(binary.BigEndian.Uint16(top.buf[top.hdr+12+2*c:]))
				if ptr+4 > s.usable || ptr < top.hdr+12 {
					return 0, false
				}
				return binary.BigEndian.Uint32(top.buf[ptr:]), true
			})
		}
		page, err := ts.win.page(s, pgno, span)
		if err != nil {
			return err
		}
		hdr := 0
		if pgno == 1 {
			hdr = 100
		}
		switch page[hdr] {
		case 0x0d: // table leaf: decoded in place (spill reads overflow pages past the window)
			return ts.leaf(page, hdr)
		case 0x05: // table interior: kept while its subtree is read, so copied out
			for len(bufs) <= d {
				bufs = append(bufs, make([]byte, s.pageSize))
			}
			buf := bufs[d]
			copy(buf, page)
			cells := int(binary.BigEndian.Uint16(buf[hdr+3:]))
			if hdr+12+2*cells > s.usable {
				return layoutErr("page %d: %d cells do not fit", pgno, cells)
			}
			stack = append(stack, &level{buf: buf, hdr: hdr, cells: cells, right: binary.BigEndian.Uint32(buf[hdr+8:])})
			return nil
		}
		return layoutErr("page %d: type %#x is not a table b-tree page", pgno, page[hdr])
	}
	if err := push(root); err != nil {
		return err
	}
	for len(stack) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		top := stack[len(stack)-1]
		if top.next > top.cells {
			stack = stack[:len(stack)-1]
			continue
		}
		var child uint32
		if top.next < top.cells {
			ptr := int(binary.BigEndian.Uint16(top.buf[top.hdr+12+2*top.next:]))
			if ptr+4 > s.usable || ptr < top.hdr+12 {
				return layoutErr("cell pointer %d out of the page", ptr)
			}
			child = binary.BigEndian.Uint32(top.buf[ptr:])
		} else {
			child = top.right
		}
		top.next++
		if err := push(child); err != nil {
			return err
		}
	}
	return nil
}

// leaf decodes the rows of one table leaf page.
func (ts *tableScan) leaf(buf []byte, hdr int) error {
	s := ts.s
	u := s.usable
	cells := int(binary.BigEndian.Uint16(buf[hdr+3:]))
	if hdr+8+2*cells > u {
		return layoutErr("leaf: %d cells do not fit", cells)
	}
	// Payload spill thresholds of table leaves (file format §1.6).
	maxLocal := u - 35
	minLocal := (u-12)*32/255 - 23
	for i := 0; i < cells; i++ {
		p := int(binary.BigEndian.Uint16(buf[hdr+8+2*i:]))
		if p < hdr+8+2*cells || p >= u {
			return layoutErr("leaf: cell pointer %d out of the page", p)
		}
		size, n := varint(buf[p:u])
		if n == 0 || size > 1<<31 {
			return layoutErr("leaf: bad payload size")
		}
		p += n
		rowid, n := varint(buf[p:u])
		if n == 0 {
			return layoutErr("leaf: bad rowid")
		}
		p += n
		payload := int(size)
		var rec []byte
		if payload <= maxLocal {
			if p+payload > u {
				return layoutErr("leaf: payload runs off the page")
			}
			rec = buf[p : p+payload]
		} else {
			local := minLocal + (payload-minLocal)%(u-4)
			if local > maxLocal {
				local = minLocal
			}
			if p+local+4 > u {
				return layoutErr("leaf: spilled payload runs off the page")
			}
			var err error
			if rec, err = ts.spill(buf[p:p+local], binary.BigEndian.Uint32(buf[p+local:]), payload); err != nil {
				return err
			}
		}
		var err error
		if ts.ints != nil {
			err = ts.recordInts(rec, int64(rowid))
		} else {
			err = ts.record(rec, int64(rowid))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// spill reassembles a payload from its local part and its chain of overflow pages.
func (ts *tableScan) spill(local []byte, next uint32, size int) ([]byte, error) {
	s := ts.s
	if size > int(s.pages)*s.pageSize {
		return nil, layoutErr("payload of %d bytes is larger than the file", size)
	}
	if ts.ovPage == nil {
		ts.ovPage = make([]byte, s.pageSize)
	}
	out := append(ts.overflow[:0], local...)
	for len(out) < size {
		// Every overflow page belongs to one cell, so a whole scan reads each at most once;
		// more reads mean cells that share a chain (a damaged file), which could otherwise
		// cost the square of the file size.
		ts.ovReads++
		if next == 0 || ts.ovReads > s.pages {
			return nil, layoutErr("overflow chain ends early or is shared")
		}
		if err := s.readPage(next, ts.ovPage); err != nil {
			return nil, err
		}
		next = binary.BigEndian.Uint32(ts.ovPage)
		take := min(size-len(out), s.usable-4)
		out = append(out, ts.ovPage[4:4+take]...)
	}
	ts.overflow = out
	return out, nil
}

// record decodes the wanted columns of one record and calls fn.
func (ts *tableScan) record(rec []byte, rowid int64) error {
	vals := ts.vals
	for i := range vals {
		vals[i] = sqlValue{}
	}
	hsize, n := varint(rec)
	if n == 0 || hsize > uint64(len(rec)) || int(hsize) < n {
		return layoutErr("record header size")
	}
	hp, off, end := n, int(hsize), int(hsize)
	for col := 0; col <= ts.maxCol && hp < end; col++ {
		var st uint64
		if c := rec[hp]; c < 0x80 {
			st, hp = uint64(c), hp+1
		} else {
			st, n = varint(rec[hp:end])
			if n == 0 {
				return layoutErr("record serial type")
			}
			hp += n
		}
		size, ok := serialSize(st)
		if !ok || off+size > len(rec) {
			return layoutErr("record column %d: serial type %d", col, st)
		}
		if k := ts.slot[col]; k >= 0 {
			v := &vals[k]
			b := rec[off : off+size]
			switch {
			case st == 0:
			case st <= 6:
				v.Kind, v.Int = valInt, beInt(b)
			case st == 7:
				v.Kind, v.Float = valFloat, math.Float64frombits(binary.BigEndian.Uint64(b))
			case st == 8, st == 9:
				v.Kind, v.Int = valInt, int64(st-8)
			case st&1 == 1:
				v.Kind, v.Bytes = valText, b
			default:
				v.Kind, v.Bytes = valBlob, b
			}
		}
		off += size
	}
	if ts.rowidAt >= 0 {
		vals[ts.rowidAt] = sqlValue{Kind: valInt, Int: rowid}
	}
	return ts.fn(rowid, vals)
}

// recordInts is record for scanInts, the hot loop of a streamed triage (a few columns of each
// of millions of rows): the header's one-byte serial types are sized from a table and the
// wanted integers decoded by serial type, without the generic path's value kinds. Every
// position of ts.ints is written once per row (a value, or NULL for a NULL column, one past
// the record's end, or an absent one) rather than cleared first and written again.
func (ts *tableScan) recordInts(rec []byte, rowid int64) error {
	vals := ts.ints
	for _, k := range ts.absent {
		vals[k] = sql.NullInt64{}
	}
	if len(rec) == 0 {
		return layoutErr("record header size")
	}
	hsize, n := uint64(rec[0]), 1
	if hsize >= 0x80 {
		if hsize, n = varint(rec); n == 0 {
			return layoutErr("record header size")
		}
	}
	if hsize > uint64(len(rec)) || int(hsize) < n {
		return layoutErr("record header size")
	}
	// The header and body are walked by position in rec (hp, bp) rather than re-sliced per
	// column: each re-slice kept a pointer, a length and a capacity, masked the pointer, and
	// pushed the loop's state out of registers onto the stack (BenchmarkScanTables on the
	// 1M four-process NVTX export: 44-46 ns a row against 46-48 before).
	he, hp, bp := int(hsize), n, int(hsize)
	slot := ts.slot
	col := 0
	for ; col < len(slot) && hp < he; col++ {
		st := uint64(rec[hp])
		var size int
		if st < 0x80 {
			hp++
			if size = int(serialSizes[st]); size == badSerial {
				return layoutErr("record column %d: serial type %d", col, st)
			}
		} else {
			st, n = varint(rec[hp:he])
			if n == 0 {
				return layoutErr("record serial type")
			}
			hp += n
			var ok bool
			if size, ok = serialSize(st); !ok {
				return layoutErr("record column %d: serial type %d", col, st)
			}
		}
		if size > len(rec)-bp {
			return layoutErr("record column %d runs off the record", col)
		}
		if k := slot[col]; k >= 0 {
			var v int64
			switch st {
			case 0:
				vals[k] = sql.NullInt64{}
				continue
			case 1:
				v = int64(int8(rec[bp]))
			case 2:
				v = int64(int16(binary.BigEndian.Uint16(rec[bp:])))
			case 3:
				b := rec[bp : bp+3]
				v = int64(int32(uint32(b[0])<<24|uint32(b[1])<<16|uint32(b[2])<<8) >> 8)
			case 4:
				v = int64(int32(binary.BigEndian.Uint32(rec[bp:])))
			case 5:
				b := rec[bp : bp+6]
				v = int64(uint64(binary.BigEndian.Uint16(b))<<48|uint64(binary.BigEndian.Uint32(b[2:]))<<16) >> 16
			case 6:
				v = int64(binary.BigEndian.Uint64(rec[bp:]))
			case 8, 9:
				v = int64(st - 8)
			default:
				return layoutErr("record column %d is not an integer (serial type %d)", col, st)
			}
			vals[k] = sql.NullInt64{Int64: v, Valid: true}
		}
		bp += size
	}
	// Columns past the record's end (added by ALTER TABLE after it was written) are NULL.
	for ; col < len(slot); col++ {
		if k := slot[col]; k >= 0 {
			vals[k] = sql.NullInt64{}
		}
	}
	if ts.fnRow != nil {
		return ts.fnRow(rowid, vals)
	}
	return ts.fnInts(vals)
}

// badSerial marks the reserved serial types 10 and 11 in serialSizes.
const badSerial = 0xff

// serialSizes is serialSize of the serial types that fit one header byte (0 to 127).
var serialSizes = func() (t [0x80]uint8) {
	for st := range t {
		size, ok := serialSize(uint64(st))
		if !ok {
			size = badSerial
		}
		t[st] = uint8(size)
	}
	return t
}()

// beInt sign-extends a big-endian two's-complement integer of 1, 2, 3, 4, 6 or 8 bytes (the
// sizes of serial types 1 to 6).
func beInt(b []byte) int64 {
	switch len(b) {
	case 1:
		return int64(int8(b[0]))
	case 2:
		return int64(int16(binary.BigEndian.Uint16(b)))
	case 3:
		return int64(int32(uint32(b[0])<<24|uint32(b[1])<<16|uint32(b[2])<<8) >> 8)
	case 4:
		return int64(int32(binary.BigEndian.Uint32(b)))
	case 6:
		return int64(uint64(binary.BigEndian.Uint16(b))<<48|uint64(binary.BigEndian.Uint32(b[2:]))<<16) >> 16
	case 8:
		return int64(binary.BigEndian.Uint64(b))
	}
	var v int64
	if len(b) > 0 && b[0]&0x80 != 0 {
		v = -1
	}
	for _, c := range b {
		v = v<<8 | int64(c)
	}
	return v
}

// lastRowid returns the largest rowid of the table rooted at root (0 when it is empty) by
// following the right-most pointers down to the last leaf: a few page reads. In an export,
// whose rows are only ever appended, it is the row count, which lets a reader size its slices
// once instead of growing them.
func (s *sqlFile) lastRowid(root uint32) (int64, error) {
	buf := make([]byte, s.pageSize)
	pgno := root
	for depth := 0; depth < 64; depth++ {
		if err := s.readPage(pgno, buf); err != nil {
			return 0, err
		}
		hdr := 0
		if pgno == 1 {
			hdr = 100
		}
		cells := int(binary.BigEndian.Uint16(buf[hdr+3:]))
		switch buf[hdr] {
		case 0x05:
			pgno = binary.BigEndian.Uint32(buf[hdr+8:])
			continue
		case 0x0d:
			if cells == 0 {
				return 0, nil
			}
			if hdr+8+2*cells > s.usable {
				return 0, layoutErr("leaf: %d cells do not fit", cells)
			}
			p := int(binary.BigEndian.Uint16(buf[hdr+8+2*(cells-1):]))
			if p >= s.usable {
				return 0, layoutErr("leaf: cell pointer %d out of the page", p)
			}
			_, n := varint(buf[p:s.usable])
			if n == 0 {
				return 0, layoutErr("leaf: bad payload size")
			}
			rowid, m := varint(buf[p+n : s.usable])
			if m == 0 {
				return 0, layoutErr("leaf: bad rowid")
			}
			return int64(rowid), nil
		default:
			return 0, layoutErr("page %d: type %#x is not a table b-tree page", pgno, buf[hdr])
		}
	}
	return 0, layoutErr("b-tree deeper than 64 levels")
}

// leafPages lists the leaf pages of the table rooted at root in key order, reading only the
// interior pages (about one page in a few hundred): the plan of a parallel scan. All leaves of
// a b-tree are at the same depth, so the children of the deepest interior level are the
// leaves; a worker that finds anything but a leaf there reports errFileLayout.
func (s *sqlFile) leafPages(root uint32) ([]uint32, error) {
	level := []uint32{root}
	buf := make([]byte, s.pageSize)
	read := uint32(0)
	for depth := 0; depth < 64; depth++ {
		var next []uint32
		for i, pgno := range level {
			if read++; read > s.pages {
				return nil, layoutErr("b-tree visits more pages than the file has (a cycle)")
			}
			if err := s.readPage(pgno, buf); err != nil {
				return nil, err
			}
			hdr := 0
			if pgno == 1 {
				hdr = 100
			}
			switch buf[hdr] {
			case 0x0d:
				if i > 0 || len(next) > 0 {
					return nil, layoutErr("leaves and interior pages on one b-tree level")
				}
				return level, nil
			case 0x05:
			default:
				return nil, layoutErr("page %d: type %#x is not a table b-tree page", pgno, buf[hdr])
			}
			cells := int(binary.BigEndian.Uint16(buf[hdr+3:]))
			if hdr+12+2*cells > s.usable {
				return nil, layoutErr("page %d: %d cells do not fit", pgno, cells)
			}
			for c := 0; c < cells; c++ {
				ptr := int(binary.BigEndian.Uint16(buf[hdr+12+2*c:]))
				if ptr+4 > s.usable || ptr < hdr+12 {
					return nil, layoutErr("cell pointer %d out of the page", ptr)
				}
				next = append(next, binary.BigEndian.Uint32(buf[ptr:]))
			}
			next = append(next, binary.BigEndian.Uint32(buf[hdr+8:]))
			if len(next) > int(s.pages) {
				return nil, layoutErr("more children than pages")
			}
		}
		level = next
	}
	return nil, layoutErr("b-tree deeper than 64 levels")
}

// scanIntsParts is scanInts on parts goroutines: the leaves are cut into parts runs of
// consecutive keys, and part i's rows go, with their rowids, to fnFor(i), which the caller
// merges in part order (every row of part i comes before every row of part i+1). fnFor is
// called before the scan starts, once per part; each part's fn runs on its own goroutine. The
// first error stops the others and is returned.
func (s *sqlFile) scanIntsParts(ctx context.Context, root uint32, cols []int, parts int, fnFor func(part int) func(rowid int64, vals []sql.NullInt64) error) error {
	leaves, err := s.leafPages(root)
	if err != nil {
		return err
	}
	parts = max(1, min(parts, len(leaves)))
	fns := make([]func(int64, []sql.NullInt64) error, parts)
	for i := range fns {
		fns[i] = fnFor(i)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, parts)
	done := make(chan struct{}, parts)
	for p := 0; p < parts; p++ {
		lo, hi := len(leaves)*p/parts, len(leaves)*(p+1)/parts
		go func() {
			defer func() { done <- struct{}{} }()
			ts := &tableScan{s: s, rowidAt: -1, ints: make([]sql.NullInt64, len(cols)), fnRow: fns[p]}
			ts.plan(cols)
			errs[p] = ts.leaves(ctx, leaves[lo:hi], cancel)
		}()
	}
	for range parts {
		<-done
	}
	// The first real error: a part stopped by another part's failure reports context.Canceled.
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// leaves scans a run of leaf pages (one part of scanIntsParts); a failure cancels the others.
func (ts *tableScan) leaves(ctx context.Context, leaves []uint32, cancel func()) error {
	s := ts.s
	for i, pgno := range leaves {
		if i%64 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		span := uint32(1)
		if !ts.win.holds(pgno) {
			span = readSpan(pgno, func(j int) (uint32, bool) {
				if i+1+j >= len(leaves) {
					return 0, false
				}
				return leaves[i+1+j], true
			})
		}
		page, err := ts.win.page(s, pgno, span)
		if err == nil {
			hdr := 0
			if pgno == 1 {
				hdr = 100
			}
			if page[hdr] != 0x0d {
				err = layoutErr("page %d: type %#x where a leaf was expected", pgno, page[hdr])
			} else {
				err = ts.leaf(page, hdr)
			}
		}
		if err != nil {
			cancel()
			return err
		}
	}
	return nil
}
