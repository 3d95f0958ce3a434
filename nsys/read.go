package nsys

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/sglprof/runner/reports/trace"

	_ "modernc.org/sqlite" // registers the pure-Go "sqlite" database/sql driver
)

// Errors a caller can test with errors.Is; the wrapped messages say what to do next.
var (
	// ErrNotSQLite: the file is not an SQLite database (perhaps a .nsys-rep that needs exporting).
	ErrNotSQLite = errors.New("not an SQLite database")
	// ErrNotExport: an SQLite database without the tables of an nsys export.
	ErrNotExport = errors.New("not an Nsight Systems SQLite export")
	// ErrNoKernels: an export without a kernel table, or with an empty one.
	ErrNoKernels = errors.New("no CUDA kernels in the export")
)

// NameStyle picks which of nsys's three kernel names becomes the op name.
type NameStyle int

// Kernel name styles: demangled ("void at::native::foo<float>(int)", what nsys and Kineto
// show), short ("foo", the function without arguments) and mangled ("_ZN2at6native3fooIfEEvi").
const (
	Demangled NameStyle = iota
	Short
	Mangled
)

// ReadOptions tunes Read. The zero value reads everything with demangled kernel names.
type ReadOptions struct {
	// Logger receives debug lines about the schema and table sizes; nil discards them.
	Logger *slog.Logger
	// KernelNames picks the name style of kernel ops (Capture keeps the other two as well).
	KernelNames NameStyle
	// AllowNoKernels reads an export without kernels instead of failing with ErrNoKernels (the
	// reason becomes a trace warning): the window mapping still wants its NVTX ranges and
	// capture window to say why nothing was captured.
	AllowNoKernels bool
}

// KernelInfo is what nsys records about a kernel beyond the shared trace model.
type KernelInfo struct {
	Op             int32 // index into Trace.GPUOps
	Demangled      trace.NameID
	Short          trace.NameID
	Mangled        trace.NameID
	Grid, Block    [3]int32
	PID            int32
	RawCorrelation int64 // correlationId as stored (GPUOp.Correlation may be made unique per process)
}

// MemopInfo is what nsys records about a memcpy or memset beyond the shared trace model.
type MemopInfo struct {
	Op       int32 // index into Trace.GPUOps
	CopyKind int32 // ENUM_CUDA_MEMCPY_OPER; 0 for memsets
	Memset   bool
	PID      int32
}

// RangeInfo is what nsys records about an NVTX range beyond the shared trace model.
type RangeInfo struct {
	Domain string // "" for the default domain
	Style  string // "PushPop" or "StartEnd"
}

// Thread is one named thread of the export (ThreadNames joined with globalTid).
type Thread struct {
	PID, TID int32
	Name     string
}

// Capture is everything Read takes out of an export: the shared trace model plus the facts only
// nsys has. Slices named after trace slices are parallel to them (Ranges[i] describes
// Trace.Annotations[i], Driver[i] describes Trace.Launches[i]).
type Capture struct {
	Trace          *trace.Trace
	Schema         Version
	SchemaText     string // EXPORT_SCHEMA_VERSION as written ("" when absent)
	ProductVersion string // EXPORT_PRODUCT_VERSION, e.g. 2022.2.1.31
	Kernels        []KernelInfo
	Memops         []MemopInfo
	Ranges         []RangeInfo
	Driver         []bool
	Threads        []Thread
	// APIRaw maps a launch name as stored in the trace (version suffix stripped) to the raw
	// nsys name (cudaLaunchKernel_v7000), for nsys-compatible summaries.
	APIRaw map[trace.NameID]string
	// NVTXEvents counts every NVTX_EVENTS row (marks, domain and thread naming included);
	// Trace.Annotations holds only the ranges.
	NVTXEvents int
	// SessionStartUnixNs is TARGET_INFO_SESSION_START_TIME.utcEpochNs: the Unix time of the
	// session clock's zero (0 when absent). Trace times stay on the session clock.
	SessionStartUnixNs int64
	// WindowStart/WindowEnd are the captured interval on the session clock
	// (ANALYSIS_DETAILS.startTime/stopTime, else the first and last event).
	WindowStart, WindowEnd int64
	// Tables lists the tables the export has (lazy exports omit empty ones).
	Tables map[string]bool
}

// Read reads an nsys SQLite export into the shared trace model (Format "nsys") and links GPU
// ops to their launch calls.
func Read(ctx context.Context, path string, opts ReadOptions) (*trace.Trace, error) {
	c, err := ReadCapture(ctx, path, opts)
	if err != nil {
		return nil, err
	}
	return c.Trace, nil
}

// sqliteMagic is the first 16 bytes of every SQLite 3 database.
var sqliteMagic = []byte("SQLite format 3\x00")

// openExport checks the file and opens it read-only. immutable=1 tells SQLite that nobody can
// change the file, so it takes no locks and writes nothing (no -journal, no -shm): that is what
// lets us read a database another process holds locked, or one on a read-only file system.
// It is unsafe only when a writer left a hot journal or WAL beside the file, in which case we
// fall back to a plain read-only open and say so.
func openExport(path string, pragmas string) (*sql.DB, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("nsys: opening %s: %w", path, err)
	}
	head := make([]byte, len(sqliteMagic))
	n, err := io.ReadFull(f, head)
	f.Close()
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, nil, fmt.Errorf("nsys: reading %s: %w", path, err)
	}
	if !bytes.Equal(head[:n], sqliteMagic) {
		hint := "pass the .sqlite file that `nsys export --type sqlite` writes"
		if strings.HasSuffix(path, ".nsys-rep") || strings.HasSuffix(path, ".qdrep") {
			hint = "export it first with `nsys export --type sqlite " + path + "`"
		}
		return nil, nil, fmt.Errorf("nsys: %s: %w (%s)", path, ErrNotSQLite, hint)
	}
	var warnings []string
	params := "mode=ro&immutable=1"
	for _, side := range []string{"-wal", "-journal"} {
		if _, err := os.Stat(path + side); err == nil {
			params = "mode=ro"
			warnings = append(warnings, fmt.Sprintf("%s%s exists (a writer is or was active); reading without the immutable flag, so a concurrent writer can make the read fail", path, side))
		}
	}
	db, err := sql.Open("sqlite", "file:"+uriPath(path)+"?"+params+pragmas)
	if err != nil {
		return nil, nil, fmt.Errorf("nsys: opening %s: %w", path, err)
	}
	// Two connections: one streams a table while the other resolves StringIds ids on the fly.
	db.SetMaxOpenConns(2)
	return db, warnings, nil
}

// uriPath escapes the characters that would end the path part of an SQLite file: URI.
func uriPath(p string) string {
	return strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(p)
}

// reader carries the state of one Read.
type reader struct {
	ctx     context.Context
	db      *sql.DB
	path    string
	log     *slog.Logger
	c       *Capture
	t       *trace.Trace
	cols    map[string]map[string]bool
	strStmt *sql.Stmt
	strs    map[int64]trace.NameID // StringIds id → interned name
	pids    map[int32]bool
}

// ReadCapture reads an export and returns the trace model together with the nsys-only facts.
func ReadCapture(ctx context.Context, path string, opts ReadOptions) (*Capture, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	db, warnings, err := openExport(path, "")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	t := trace.New(path, "nsys")
	t.Warnings = append(t.Warnings, warnings...)
	r := &reader{
		ctx: ctx, db: db, path: path, log: log, t: t,
		c:    &Capture{Trace: t, APIRaw: map[trace.NameID]string{}, Tables: map[string]bool{}},
		cols: map[string]map[string]bool{},
		strs: map[int64]trace.NameID{},
		pids: map[int32]bool{},
	}
	if err := r.tables(); err != nil {
		return nil, err
	}
	if err := r.schema(); err != nil {
		return nil, err
	}
	if r.has("StringIds") {
		r.strStmt, err = db.PrepareContext(ctx, `SELECT value FROM StringIds WHERE id = ?`)
		if err != nil {
			return nil, r.wrap("StringIds", err)
		}
		defer r.strStmt.Close()
	}
	if err := r.kernels(opts.KernelNames); err != nil {
		if !opts.AllowNoKernels || !errors.Is(err, ErrNoKernels) {
			return nil, err
		}
		t.Warnings = append(t.Warnings, err.Error())
	}
	steps := []func() error{r.memops, r.runtime, r.nvtx, r.devices, r.processes, r.session}
	for _, step := range steps {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := step(); err != nil {
			return nil, err
		}
	}
	r.uniqueCorrelations()
	trace.Link(t)
	t.Events = int64(len(t.GPUOps) + len(t.Launches) + r.c.NVTXEvents)
	log.Debug("nsys export read", "path", path, "schema", r.c.SchemaText, "kernels", len(r.c.Kernels),
		"memops", len(r.c.Memops), "launches", len(t.Launches), "ranges", len(t.Annotations))
	return r.c, nil
}

func (r *reader) wrap(table string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("nsys: %s: reading %s: %w", r.path, table, err)
}

func (r *reader) has(table string) bool { return r.c.Tables[table] }

// tables lists the export's tables; the open is lazy, so this is also where a damaged file
// or a non-database first fails.
func (r *reader) tables() error {
	rows, err := r.db.QueryContext(r.ctx, `SELECT name FROM sqlite_master WHERE type IN ('table', 'view')`)
	if err != nil {
		if strings.Contains(err.Error(), "not a database") || strings.Contains(err.Error(), "malformed") {
			return fmt.Errorf("nsys: %s: %w (%v); re-export it with `nsys export --type sqlite`", r.path, ErrNotSQLite, err)
		}
		return r.wrap("sqlite_master", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return r.wrap("sqlite_master", err)
		}
		r.c.Tables[name] = true
	}
	return r.wrapIf("sqlite_master", rows.Err())
}

func (r *reader) wrapIf(table string, err error) error {
	if err == nil {
		return nil
	}
	return r.wrap(table, err)
}

// columns returns the column set of a table (cached).
func (r *reader) columns(table string) (map[string]bool, error) {
	if c, ok := r.cols[table]; ok {
		return c, nil
	}
	rows, err := r.db.QueryContext(r.ctx, `SELECT name FROM pragma_table_info(?)`, table)
	if err != nil {
		return nil, r.wrap(table, err)
	}
	defer rows.Close()
	c := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, r.wrap(table, err)
		}
		c[name] = true
	}
	r.cols[table] = c
	return c, r.wrapIf(table, rows.Err())
}

// selectList quotes the wanted columns that exist and puts NULL in place of the others, so one
// scan loop serves every schema version.
func selectList(have map[string]bool, want ...string) (string, []string) {
	var missing []string
	parts := make([]string, len(want))
	for i, w := range want {
		if have[w] {
			parts[i] = `"` + w + `"`
		} else {
			parts[i] = "NULL"
			missing = append(missing, w)
		}
	}
	return strings.Join(parts, ", "), missing
}

// schema finds the export's schema version and decides whether the file is an export at all.
func (r *reader) schema() error {
	meta := ""
	for _, m := range []string{"META_DATA_EXPORT", "EXPORT_META_DATA"} {
		if r.has(m) {
			meta = m
			break
		}
	}
	if meta == "" {
		if !r.has("StringIds") {
			return fmt.Errorf("nsys: %s: %w: it has neither META_DATA_EXPORT/EXPORT_META_DATA nor StringIds; pass the file written by `nsys export --type sqlite report.nsys-rep`", r.path, ErrNotExport)
		}
		r.t.Warnings = append(r.t.Warnings, "the export has no META_DATA_EXPORT/EXPORT_META_DATA table, so its schema version is unknown; reading the tables that look like nsys's")
		return nil
	}
	rows, err := r.db.QueryContext(r.ctx, `SELECT name, value FROM "`+meta+`"`)
	if err != nil {
		return r.wrap(meta, err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var value sql.NullString
		if err := rows.Scan(&name, &value); err != nil {
			return r.wrap(meta, err)
		}
		switch name {
		case "EXPORT_SCHEMA_VERSION":
			r.c.SchemaText = value.String
		case "EXPORT_PRODUCT_VERSION":
			r.c.ProductVersion = value.String
		}
	}
	if err := rows.Err(); err != nil {
		return r.wrap(meta, err)
	}
	r.t.Meta["export_schema_version"] = r.c.SchemaText
	r.t.Meta["nsys_version"] = r.c.ProductVersion
	v, err := ParseVersion(r.c.SchemaText)
	switch {
	case err != nil:
		r.t.Warnings = append(r.t.Warnings, fmt.Sprintf("unreadable export schema version (%v); reading the tables that look like nsys's", err))
	case NewestKnown.Less(v):
		r.t.Warnings = append(r.t.Warnings, fmt.Sprintf("export schema %s is newer than the newest this reader knows (%s); reading the known tables and columns, anything new is ignored — check the numbers against `nsys stats`", v, NewestKnown))
	case v.Less(OldestKnown):
		r.t.Warnings = append(r.t.Warnings, fmt.Sprintf("export schema %s is older than the oldest this reader knows (%s); reading the known tables and columns", v, OldestKnown))
	}
	r.c.Schema = v
	return nil
}

// name maps a StringIds id to an interned name, querying each distinct id once.
func (r *reader) name(id int64) (trace.NameID, error) {
	if n, ok := r.strs[id]; ok {
		return n, nil
	}
	var s string
	if r.strStmt != nil {
		err := r.strStmt.QueryRowContext(r.ctx, id).Scan(&s)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return 0, r.wrap("StringIds", err)
		}
		if errors.Is(err, sql.ErrNoRows) {
			s = "<string " + strconv.FormatInt(id, 10) + ">"
		}
	}
	n := r.t.Names.InternString(s)
	r.strs[id] = n
	return n, nil
}

func (r *reader) noKernels(why string) error {
	hints := "re-profile with `nsys profile --trace=cuda,nvtx ...`"
	if r.has("CUPTI_ACTIVITY_KIND_GRAPH_TRACE") {
		var n int64
		r.db.QueryRowContext(r.ctx, `SELECT count(*) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE`).Scan(&n)
		if n > 0 {
			hints = fmt.Sprintf("%d whole-graph records were traced instead: re-profile with `--cuda-graph-trace=node` to get per-kernel rows", n)
		}
	}
	return fmt.Errorf("nsys: %s: %w: %s; %s", r.path, ErrNoKernels, why, hints)
}

func (r *reader) kernels(style NameStyle) error {
	const table = "CUPTI_ACTIVITY_KIND_KERNEL"
	if !r.has(table) {
		return r.noKernels("the export has no " + table + " table (the run was profiled without CUDA tracing, e.g. without --trace=cuda, or the application never launched a kernel; lazy exports omit empty tables)")
	}
	have, err := r.columns(table)
	if err != nil {
		return err
	}
	for _, need := range []string{"start", "end", "deviceId", "streamId"} {
		if !have[need] {
			return fmt.Errorf("nsys: %s: %s has no %q column (schema %q); this export layout is not supported", r.path, table, need, r.c.SchemaText)
		}
	}
	if !have["demangledName"] && !have["shortName"] {
		return fmt.Errorf("nsys: %s: %s has neither demangledName nor shortName (schema %q); this export layout is not supported", r.path, table, r.c.SchemaText)
	}
	list, _ := selectList(have, "start", "end", "deviceId", "streamId", "correlationId", "globalPid",
		"demangledName", "shortName", "mangledName", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")
	rows, err := r.db.QueryContext(r.ctx, "SELECT "+list+" FROM "+table)
	if err != nil {
		return r.wrap(table, err)
	}
	defer rows.Close()
	var (
		start, end, gpid, corr, dem, short, mang sql.NullInt64
		device, stream                           int32
		g                                        [6]sql.NullInt64
	)
	for rows.Next() {
		if err := rows.Scan(&start, &end, &device, &stream, &corr, &gpid, &dem, &short, &mang,
			&g[0], &g[1], &g[2], &g[3], &g[4], &g[5]); err != nil {
			return r.wrap(table, err)
		}
		if !dem.Valid {
			dem = short
		}
		if !short.Valid {
			short = dem
		}
		ki := KernelInfo{Op: int32(len(r.t.GPUOps)), RawCorrelation: trace.NoID}
		if ki.Demangled, err = r.name(dem.Int64); err != nil {
			return err
		}
		if ki.Short, err = r.name(short.Int64); err != nil {
			return err
		}
		if mang.Valid {
			if ki.Mangled, err = r.name(mang.Int64); err != nil {
				return err
			}
		}
		for i := range 3 {
			ki.Grid[i], ki.Block[i] = int32(g[i].Int64), int32(g[3+i].Int64)
		}
		_, ki.PID, _ = SplitGlobalID(gpid.Int64)
		r.pids[ki.PID] = true
		if corr.Valid {
			ki.RawCorrelation = corr.Int64
		}
		name := ki.Demangled
		switch style {
		case Short:
			name = ki.Short
		case Mangled:
			if ki.Mangled != 0 {
				name = ki.Mangled
			}
		}
		r.t.GPUOps = append(r.t.GPUOps, trace.GPUOp{
			Start: start.Int64, End: end.Int64, Correlation: ki.RawCorrelation, ExternalID: trace.NoID,
			Name: name, Device: device, Stream: stream, Kind: trace.OpKernel, Launch: trace.NoID, CPUOp: trace.NoID,
		})
		r.c.Kernels = append(r.c.Kernels, ki)
	}
	if err := rows.Err(); err != nil {
		return r.wrap(table, err)
	}
	if len(r.c.Kernels) == 0 {
		return r.noKernels(table + " is empty (the --delay/--duration capture window missed the part of the run that launched kernels, or the application never launched one)")
	}
	return nil
}

func (r *reader) memops() error {
	for _, table := range []string{"CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"} {
		if !r.has(table) {
			continue
		}
		memset := table == "CUPTI_ACTIVITY_KIND_MEMSET"
		have, err := r.columns(table)
		if err != nil {
			return err
		}
		list, _ := selectList(have, "start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes", "copyKind")
		rows, err := r.db.QueryContext(r.ctx, "SELECT "+list+" FROM "+table)
		if err != nil {
			return r.wrap(table, err)
		}
		var (
			start, end, corr, gpid, nbytes, kind sql.NullInt64
			device, stream                       sql.NullInt64
		)
		names := map[int32]trace.NameID{}
		for rows.Next() {
			if err := rows.Scan(&start, &end, &device, &stream, &corr, &gpid, &nbytes, &kind); err != nil {
				rows.Close()
				return r.wrap(table, err)
			}
			mi := MemopInfo{Op: int32(len(r.t.GPUOps)), Memset: memset}
			if !memset {
				mi.CopyKind = int32(kind.Int64)
			}
			_, mi.PID, _ = SplitGlobalID(gpid.Int64)
			r.pids[mi.PID] = true
			name, ok := names[mi.CopyKind]
			if !ok {
				label := MemsetOpName
				if !memset {
					label = MemcpyOpName(mi.CopyKind)
				}
				name = r.t.Names.InternString(label)
				names[mi.CopyKind] = name
			}
			op := trace.GPUOp{
				Start: start.Int64, End: end.Int64, Correlation: trace.NoID, ExternalID: trace.NoID,
				Bytes: nbytes.Int64, Name: name, Device: int32(device.Int64), Stream: int32(stream.Int64),
				Kind: trace.OpMemcpy, Launch: trace.NoID, CPUOp: trace.NoID,
			}
			if memset {
				op.Kind = trace.OpMemset
			}
			if corr.Valid {
				op.Correlation = corr.Int64
			}
			r.t.GPUOps = append(r.t.GPUOps, op)
			r.c.Memops = append(r.c.Memops, mi)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return r.wrap(table, err)
		}
	}
	return nil
}

func (r *reader) runtime() error {
	const table = "CUPTI_ACTIVITY_KIND_RUNTIME"
	if !r.has(table) {
		r.t.Warnings = append(r.t.Warnings, "the export has no "+table+" table, so kernels cannot be joined to their launch calls (no launch overhead, API summary or NVTX scopes)")
		return nil
	}
	have, err := r.columns(table)
	if err != nil {
		return err
	}
	list, _ := selectList(have, "start", "end", "globalTid", "correlationId", "nameId")
	rows, err := r.db.QueryContext(r.ctx, "SELECT "+list+" FROM "+table)
	if err != nil {
		return r.wrap(table, err)
	}
	defer rows.Close()
	type apiName struct {
		name   trace.NameID
		graph  bool
		driver bool
	}
	byID := map[int64]apiName{}
	var start, end, gtid, corr, nameID sql.NullInt64
	for rows.Next() {
		if err := rows.Scan(&start, &end, &gtid, &corr, &nameID); err != nil {
			return r.wrap(table, err)
		}
		an, ok := byID[nameID.Int64]
		if !ok {
			raw, err := r.name(nameID.Int64)
			if err != nil {
				return err
			}
			rawText := r.t.Names.String(raw)
			an = apiName{name: r.t.Names.InternString(StripAPIVersion(rawText)), graph: IsGraphLaunch(rawText), driver: IsDriverAPI(rawText)}
			byID[nameID.Int64] = an
			r.c.APIRaw[an.name] = rawText
		}
		_, pid, tid := SplitGlobalID(gtid.Int64)
		r.pids[pid] = true
		l := trace.Launch{Start: start.Int64, End: end.Int64, Correlation: trace.NoID, ExternalID: trace.NoID,
			Name: an.name, PID: pid, TID: tid, Graph: an.graph, Frame: trace.NoID}
		if corr.Valid {
			l.Correlation = corr.Int64
		}
		r.t.Launches = append(r.t.Launches, l)
		r.c.Driver = append(r.c.Driver, an.driver)
	}
	return r.wrapIf(table, rows.Err())
}

// NVTX event types (ENUM_NSYS_EVENT_TYPE). The NVTXT ones come from nsys's own text-file
// annotations and are summarised like the others.
const (
	evMark            = 34
	evPushPop         = 59
	evStartEnd        = 60
	evNVTXTPushPop    = 70
	evNVTXTStartEnd   = 71
	evNVTXDomainCreat = 75
)

func (r *reader) nvtx() error {
	const table = "NVTX_EVENTS"
	if !r.has(table) {
		return nil // lazy exports omit it when nothing was annotated
	}
	have, err := r.columns(table)
	if err != nil {
		return err
	}
	list, _ := selectList(have, "start", "end", "eventType", "text", "textId", "globalTid", "domainId")
	rows, err := r.db.QueryContext(r.ctx, "SELECT "+list+" FROM "+table)
	if err != nil {
		return r.wrap(table, err)
	}
	defer rows.Close()
	type domainKey struct {
		pid int32
		id  int64
	}
	domains := map[domainKey]string{}
	type pending struct {
		ann    trace.Annotation
		domain domainKey
		style  string
	}
	var ranges []pending
	var (
		start, end, evType, textID, gtid, domainID sql.NullInt64
		text                                       sql.NullString
	)
	for rows.Next() {
		if err := rows.Scan(&start, &end, &evType, &text, &textID, &gtid, &domainID); err != nil {
			return r.wrap(table, err)
		}
		r.c.NVTXEvents++
		var registered string
		if textID.Valid {
			id, err := r.name(textID.Int64)
			if err != nil {
				return err
			}
			registered = r.t.Names.String(id)
		}
		label := nvtxText(text.String, text.Valid, registered, textID.Valid)
		_, pid, tid := SplitGlobalID(gtid.Int64)
		switch evType.Int64 {
		case evNVTXDomainCreat:
			domains[domainKey{pid, domainID.Int64}] = label
		case evPushPop, evStartEnd, evNVTXTPushPop, evNVTXTStartEnd:
			if !end.Valid {
				continue // a range still open when the capture ended
			}
			style := "PushPop"
			if evType.Int64 == evStartEnd || evType.Int64 == evNVTXTStartEnd {
				style = "StartEnd"
			}
			r.pids[pid] = true
			ranges = append(ranges, pending{
				ann: trace.Annotation{Start: start.Int64, End: end.Int64, Name: r.t.Names.InternString(label),
					PID: pid, TID: tid, Device: trace.NoID, ExternalID: trace.NoID},
				domain: domainKey{pid, domainID.Int64},
				style:  style,
			})
		}
	}
	if err := rows.Err(); err != nil {
		return r.wrap(table, err)
	}
	for _, p := range ranges {
		r.t.Annotations = append(r.t.Annotations, p.ann)
		r.c.Ranges = append(r.c.Ranges, RangeInfo{Domain: domains[p.domain], Style: p.style})
	}
	return nil
}

func (r *reader) devices() error {
	seen := map[int32]bool{}
	if r.has("TARGET_INFO_GPU") {
		have, err := r.columns("TARGET_INFO_GPU")
		if err != nil {
			return err
		}
		list, _ := selectList(have, "id", "name")
		rows, err := r.db.QueryContext(r.ctx, "SELECT "+list+" FROM TARGET_INFO_GPU")
		if err != nil {
			return r.wrap("TARGET_INFO_GPU", err)
		}
		defer rows.Close()
		for rows.Next() {
			var id sql.NullInt64
			var name sql.NullString
			if err := rows.Scan(&id, &name); err != nil {
				return r.wrap("TARGET_INFO_GPU", err)
			}
			if seen[int32(id.Int64)] {
				continue
			}
			seen[int32(id.Int64)] = true
			r.t.Devices = append(r.t.Devices, trace.Device{ID: int32(id.Int64), Name: name.String})
		}
		if err := rows.Err(); err != nil {
			return r.wrap("TARGET_INFO_GPU", err)
		}
	}
	// Devices that ran ops but have no TARGET_INFO_GPU row still get an entry.
	for i := range r.t.GPUOps {
		d := r.t.GPUOps[i].Device
		if !seen[d] {
			seen[d] = true
			r.t.Devices = append(r.t.Devices, trace.Device{ID: d, Name: "GPU " + strconv.Itoa(int(d))})
		}
	}
	slices.SortFunc(r.t.Devices, func(a, b trace.Device) int { return int(a.ID) - int(b.ID) })
	return nil
}

// processes names the pids that own events (PROCESSES lists every process on the host, kernel
// threads included, which is noise) and the threads of those pids.
func (r *reader) processes() error {
	names := map[int32]string{}
	if r.has("PROCESSES") {
		have, err := r.columns("PROCESSES")
		if err != nil {
			return err
		}
		list, _ := selectList(have, "globalPid", "pid", "name")
		rows, err := r.db.QueryContext(r.ctx, "SELECT "+list+" FROM PROCESSES")
		if err != nil {
			return r.wrap("PROCESSES", err)
		}
		for rows.Next() {
			var gpid, pid sql.NullInt64
			var name sql.NullString
			if err := rows.Scan(&gpid, &pid, &name); err != nil {
				rows.Close()
				return r.wrap("PROCESSES", err)
			}
			p := int32(pid.Int64)
			if !pid.Valid {
				_, p, _ = SplitGlobalID(gpid.Int64)
			}
			if r.pids[p] {
				names[p] = name.String
			}
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return r.wrap("PROCESSES", err)
		}
	}
	if r.has("ThreadNames") && r.has("StringIds") {
		rows, err := r.db.QueryContext(r.ctx, `SELECT nameId, globalTid FROM ThreadNames`)
		if err != nil {
			return r.wrap("ThreadNames", err)
		}
		defer rows.Close()
		for rows.Next() {
			var nameID, gtid sql.NullInt64
			if err := rows.Scan(&nameID, &gtid); err != nil {
				return r.wrap("ThreadNames", err)
			}
			_, pid, tid := SplitGlobalID(gtid.Int64)
			if !r.pids[pid] {
				continue
			}
			id, err := r.name(nameID.Int64)
			if err != nil {
				return err
			}
			r.c.Threads = append(r.c.Threads, Thread{PID: pid, TID: tid, Name: r.t.Names.String(id)})
			if _, ok := names[pid]; !ok && pid == tid {
				names[pid] = r.t.Names.String(id)
			}
		}
		if err := rows.Err(); err != nil {
			return r.wrap("ThreadNames", err)
		}
		slices.SortFunc(r.c.Threads, func(a, b Thread) int {
			if a.PID != b.PID {
				return int(a.PID - b.PID)
			}
			return int(a.TID - b.TID)
		})
	}
	pids := make([]int32, 0, len(r.pids))
	for p := range r.pids {
		pids = append(pids, p)
	}
	slices.Sort(pids)
	for _, p := range pids {
		r.t.Processes = append(r.t.Processes, trace.Process{PID: p, Name: names[p], Rank: trace.NoID})
	}
	return nil
}

// session reads the clock facts: the Unix time of session clock zero and the captured window.
func (r *reader) session() error {
	if r.has("TARGET_INFO_SESSION_START_TIME") {
		var utc sql.NullInt64
		err := r.db.QueryRowContext(r.ctx, `SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1`).Scan(&utc)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return r.wrap("TARGET_INFO_SESSION_START_TIME", err)
		}
		r.c.SessionStartUnixNs = utc.Int64
		if utc.Valid {
			r.t.Meta["session_start_unix_ns"] = strconv.FormatInt(utc.Int64, 10)
		}
	}
	haveWindow := false
	if r.has("ANALYSIS_DETAILS") {
		var start, stop sql.NullInt64
		err := r.db.QueryRowContext(r.ctx, `SELECT startTime, stopTime FROM ANALYSIS_DETAILS LIMIT 1`).Scan(&start, &stop)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return r.wrap("ANALYSIS_DETAILS", err)
		}
		if start.Valid && stop.Valid && stop.Int64 > start.Int64 {
			r.c.WindowStart, r.c.WindowEnd, haveWindow = start.Int64, stop.Int64, true
		}
	}
	if !haveWindow {
		// The first and last event of any kind: an export without kernels (AllowNoKernels)
		// still has a window when it captured NVTX ranges or API calls.
		first, last, seen := int64(0), int64(0), false
		add := func(s, e int64) {
			if !seen || s < first {
				first = s
			}
			if !seen || e > last {
				last = e
			}
			seen = true
		}
		for _, op := range r.t.GPUOps {
			add(op.Start, op.End)
		}
		for _, l := range r.t.Launches {
			add(l.Start, l.End)
		}
		for _, a := range r.t.Annotations {
			add(a.Start, a.End)
		}
		r.c.WindowStart, r.c.WindowEnd = first, last
	}
	return nil
}

// uniqueCorrelations makes correlation ids unique across processes. CUPTI numbers launches per
// process, so an export of several ranks repeats ids; the shared Link joins on the id alone.
// With more than one process each id becomes (pid<<32)|id in both GPU ops and launches
// (KernelInfo.RawCorrelation keeps the stored value).
func (r *reader) uniqueCorrelations() {
	pids := map[int32]bool{}
	for _, k := range r.c.Kernels {
		pids[k.PID] = true
	}
	for _, l := range r.t.Launches {
		pids[l.PID] = true
	}
	if len(pids) < 2 {
		return
	}
	enc := func(pid int32, c int64) int64 {
		if c == trace.NoID {
			return c
		}
		return int64(pid)<<32 | (c & 0xFFFFFFFF)
	}
	for _, k := range r.c.Kernels {
		op := &r.t.GPUOps[k.Op]
		op.Correlation = enc(k.PID, op.Correlation)
	}
	for _, m := range r.c.Memops {
		op := &r.t.GPUOps[m.Op]
		op.Correlation = enc(m.PID, op.Correlation)
	}
	for i := range r.t.Launches {
		l := &r.t.Launches[i]
		l.Correlation = enc(l.PID, l.Correlation)
	}
	r.t.Meta["correlation_ids"] = "(pid<<32)|correlationId, because the export has several processes"
}
