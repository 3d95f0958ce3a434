package nsysdb

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/sglprof/runner/plans/infile"
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
	// KeepRange, for OpenStream only, says which NVTX ranges (by label) Capture.Trace.Annotations
	// holds, with their Capture.Ranges; nil holds none. A stream finds every op's scope and the
	// NVTX table from its own compact index of the ranges; a caller keeps the few it needs
	// itself (the triage: the ranges that name stages). It is asked once per distinct label
	// and must answer by the label alone.
	KeepRange func(label string) bool
	// AllowNoKernels reads an export without kernels instead of failing with ErrNoKernels (the
	// reason becomes a trace warning): the window mapping still wants its NVTX ranges and
	// capture window to say why nothing was captured.
	AllowNoKernels bool
	// SummariseAPI aggregates the runtime and driver calls by name while reading
	// (Capture.APIStats) instead of loading them all: Trace.Launches then holds only the calls
	// that launched a GPU op, which is all that links, NVTX scopes and the NVTX table's GPU time
	// need. The triage reads exports this way (an export has several runtime calls per kernel);
	// `--stats` (cuda_api_sum wants every duration for its median) does not.
	SummariseAPI bool
	// SkipKernelInfo leaves Capture.Kernels empty: the triage needs only the trace model, and
	// the nsys-only kernel facts (three name styles, grid, block) cost 56 bytes a kernel.
	SkipKernelInfo bool
	// OneLaunchPerName, with SummariseAPI, keeps of the launching calls only one per API name
	// and graph flag, linked from every GPU op whose own call has that name and flag, when the
	// export has no NVTX ranges and one process: a consumer that reads only a launch's name
	// and graph flag (the triage, which needs a call's own time and thread only for NVTX
	// scopes) then pays nothing per kernel for the calls. Those launches' times and threads
	// are not a call's. Capture.OneLaunchPerName says whether it applied; otherwise every
	// launching call is kept as without the option.
	OneLaunchPerName bool
	// noDirect reads every table through SQLite, noParallel scans on one goroutine (tests
	// compare the paths).
	noDirect, noParallel bool
}

// APIStat is one runtime or driver call name's aggregate over every call in the export.
type APIStat struct {
	Name                  trace.NameID // as in Trace.Launches: version suffix stripped
	Calls                 int
	TotalNS, MinNS, MaxNS int64
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
	// APIStats aggregates every runtime and driver call by name, in first-seen order, when
	// ReadOptions.SummariseAPI is set (nil otherwise).
	APIStats []APIStat
	// APICalls counts every row of the runtime table, whether or not Trace.Launches holds it.
	APICalls int
	// OneLaunchPerName says Trace.Launches holds one call per API name and graph flag
	// (ReadOptions.OneLaunchPerName applied).
	OneLaunchPerName bool
	// LaunchStarts, when OneLaunchPerName applied, holds per GPU op the start of its launch
	// call (trace.NoID without one): the idle breakdown's host wait and launch delays need it,
	// and the merged launches no longer carry it (8 bytes an op).
	LaunchStarts []int64
	// apiSummarised says APIStats is the API table's source (even when empty).
	apiSummarised bool
	// nvtx is a streamed export's index of its NVTX ranges (streamnvtx.go): NVTXSummary and
	// RangeKey read it. nil for ReadCapture.
	nvtx *nvtxIndex
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
	f, err := infile.Open(path)
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
		// SQLite opens these itself; one that is not a regular file (a FIFO) would block it.
		if err := infile.Check(path + side); errors.Is(err, infile.ErrNotRegular) {
			return nil, nil, fmt.Errorf("nsys: %w", err)
		}
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
	ctx      context.Context
	db       *sql.DB
	path     string
	log      *slog.Logger
	c        *Capture
	t        *trace.Trace
	cols     map[string]map[string]bool
	strStmt  *sql.Stmt
	strs     map[int64]trace.NameID // StringIds id → interned name
	strDense []trace.NameID         // the same for ids below 2^20
	// strAll is a small StringIds table read whole (id → value), the first name lookup's
	// work; strTried says that was tried. See preloadStrings.
	strAll   map[int64]string
	strTried bool
	pids     map[int32]bool
	opts     ReadOptions
	file     *sqlFile // direct table scans (sqlitefile.go); nil reads everything through SQLite

	kPIDs          map[int32]bool // pids of every kernel
	lastPID        int32          // the pid addPID saw last
	havePID        bool
	kPID0          int32          // the first kernel's pid
	kPIDOf         []int32        // pid of every kernel, nil while all are kPID0
	kOp0, kN       int            // the kernels are GPUOps[kOp0:kOp0+kN]
	rtPIDs         map[int32]bool // pids of every runtime call
	rtFirst, rtEnd int64          // earliest start and latest end of every runtime call
	rtIndex        *corrIndex     // SummariseAPI: GPU ops' correlation ids → first launch

	// maxRanges, when positive, ends nvtx with errTooManyRanges at the range after that many
	// (OpenStream holds the ranges, and holds only so many).
	maxRanges int
	// nvIdx, when set (OpenStream), receives every NVTX range; Trace.Annotations holds only
	// those keepRange accepts.
	nvIdx     *nvtxIndex
	keepRange func(label string) bool

	// An OpStream's kernels, which are not in GPUOps: how many, earliest start, latest end.
	streamed                int64
	streamFirst, streamLast int64
}

// ReadCapture reads an export and returns the trace model together with the nsys-only facts.
func ReadCapture(ctx context.Context, path string, opts ReadOptions) (*Capture, error) {
	r, warnings, err := openReader(ctx, path, opts)
	if err != nil {
		return nil, err
	}
	defer r.db.Close()
	log, t := r.log, r.t
	// The direct reader only for a file that no writer has touched: with a -wal or -journal
	// beside it, SQLite must merge those in.
	if len(warnings) == 0 && !opts.noDirect {
		if f, err := openSQLFile(path); err == nil {
			r.file = f
			defer f.Close()
		} else {
			log.Debug("nsys: reading every table through SQLite", "why", err)
		}
	}
	if err := r.tables(); err != nil {
		return nil, err
	}
	if err := r.schema(); err != nil {
		return nil, err
	}
	if r.has("StringIds") {
		r.strStmt, err = r.db.PrepareContext(ctx, `SELECT value FROM StringIds WHERE id = ?`)
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
	if opts.OneLaunchPerName {
		// The NVTX ranges first: whether there are any decides what runtime keeps.
		steps = []func() error{r.memops, r.nvtx, r.runtime, r.devices, r.processes, r.session}
	}
	for _, step := range steps {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := step(); err != nil {
			return nil, err
		}
	}
	multi := r.uniqueCorrelations()
	if r.opts.SummariseAPI {
		r.link(multi)
	} else {
		trace.Link(t)
	}
	t.Events = int64(len(t.GPUOps) + r.c.APICalls + r.c.NVTXEvents)
	log.Debug("nsys export read", "path", path, "schema", r.c.SchemaText, "kernels", len(r.c.Kernels),
		"memops", len(r.c.Memops), "launches", len(t.Launches), "ranges", len(t.Annotations))
	return r.c, nil
}

// openReader opens the export at path (openExport, whose warnings it returns) for one read.
func openReader(ctx context.Context, path string, opts ReadOptions) (*reader, []string, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	db, warnings, err := openExport(path, "")
	if err != nil {
		return nil, nil, err
	}
	t := trace.New(path, "nsys")
	t.Warnings = append(t.Warnings, warnings...)
	return &reader{
		ctx: ctx, db: db, path: path, log: log, t: t, opts: opts,
		c:      &Capture{Trace: t, APIRaw: map[trace.NameID]string{}, Tables: map[string]bool{}},
		cols:   map[string]map[string]bool{},
		strs:   map[int64]trace.NameID{},
		pids:   map[int32]bool{},
		rtPIDs: map[int32]bool{},
		kPIDs:  map[int32]bool{},
	}, warnings, nil
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
	if id >= 0 && id < int64(len(r.strDense)) && r.strDense[id] != 0 {
		return r.strDense[id], nil
	}
	if n, ok := r.strs[id]; ok {
		return n, nil
	}
	var s string
	if !r.strTried && r.strStmt != nil {
		r.strTried = true
		if err := r.preloadStrings(); err != nil {
			return 0, err
		}
	}
	if v, ok := r.strAll[id]; ok {
		s = v
	} else if r.strStmt != nil {
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
	// StringIds ids are small and dense: a slice answers the per-row lookups of the big
	// tables faster than the map (0, the empty name, falls through to the map).
	if id >= 0 && id < 1<<20 {
		if id >= int64(len(r.strDense)) {
			r.strDense = append(r.strDense, make([]trace.NameID, int(id)+1-len(r.strDense))...)
		}
		r.strDense[id] = n
	}
	return n, nil
}

// preloadStringsBytes is the most a StringIds table's leaf pages may hold for preloadStrings
// to read it whole: counted in bytes, not pages, since an export's page size may be up to
// 64 KiB (1,024 such pages would be 64 MiB of strings, the whole memory budget).
var preloadStringsBytes int64 = 4 << 20 // a variable so that a test can lower it

// preloadStrings reads a small StringIds table whole into r.strAll with one query, so that a
// name lookup is a map lookup and not a query of its own: an export's kernels, calls and
// ranges name a few hundred strings, and a query each was about 25 µs, 13 ms of a 1M-kernel
// triage, on the goroutine that delivers the ops. The values are what the single-row query
// gives (the first row of an id in table order, database/sql's conversion to a string); when
// the table is large (its leaves are counted through the direct reader, without which nothing
// is read), an id is not an integer or a value cannot be a string, nothing is kept and every
// lookup queries as before. A failed query is only a missed shortcut.
func (r *reader) preloadStrings() error {
	if r.file == nil {
		return nil
	}
	p, err := r.planDirect("StringIds", nil)
	if err != nil {
		return nil
	}
	leaves, err := r.file.leafPages(p.root)
	if err != nil || int64(len(leaves))*int64(r.file.pageSize) > preloadStringsBytes {
		return nil
	}
	rows, err := r.db.QueryContext(r.ctx, `SELECT id, value FROM StringIds`)
	if err != nil {
		return r.ctx.Err()
	}
	defer rows.Close()
	all := map[int64]string{}
	for rows.Next() {
		var id any
		var v string
		if err := rows.Scan(&id, &v); err != nil {
			return r.ctx.Err()
		}
		k, ok := id.(int64)
		if !ok {
			return r.ctx.Err()
		}
		if _, dup := all[k]; !dup {
			all[k] = v
		}
	}
	if rows.Err() != nil {
		return r.ctx.Err()
	}
	r.strAll = all
	return nil
}

func (r *reader) noKernels(why string) error {
	hints := "re-profile with `nsys profile --trace=cuda,nvtx ...`"
	if c, err := r.census(); err == nil && c.Kernels == 0 {
		// What the export does hold says which fix applies: advising --trace=cuda for a run
		// that passed it, but whose window opened too late, misleads.
		hints = c.NoKernelsAdvice()
		if c.Empty() {
			why = "the export holds no events of any kind"
		}
	}
	if r.has("CUPTI_ACTIVITY_KIND_GRAPH_TRACE") {
		var n int64
		r.db.QueryRowContext(r.ctx, `SELECT count(*) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE`).Scan(&n)
		if n > 0 {
			hints = fmt.Sprintf("%d whole-graph records were traced instead: re-profile with `--cuda-graph-trace=node` to get per-kernel rows", n)
		}
	}
	return fmt.Errorf("nsys: %s: %w: %s; %s", r.path, ErrNoKernels, why, hints)
}

// noKernelTable and emptyKernelTable are ErrNoKernels for an export without kernels.
func (r *reader) noKernelTable(table string) error {
	return r.noKernels("the export has no " + table + " table (the run was profiled without CUDA tracing, e.g. without --trace=cuda, or the application never launched a kernel; lazy exports omit empty tables)")
}

func (r *reader) emptyKernelTable(table string) error {
	return r.noKernels(table + " is empty (the --delay/--duration capture window missed the part of the run that launched kernels, or the application never launched one)")
}

func (r *reader) kernels(style NameStyle) error {
	const table = "CUPTI_ACTIVITY_KIND_KERNEL"
	if !r.has(table) {
		return r.noKernelTable(table)
	}
	cols, err := r.kernelColumns(table, style)
	if err != nil {
		return err
	}
	lean := r.opts.SkipKernelInfo
	ops0, k0 := len(r.t.GPUOps), len(r.c.Kernels)
	r.kOp0 = ops0
	n := r.rowEstimate(table)
	if n > 0 {
		// Room for the memory operations too, which memops appends next: a slice sized to the
		// kernels alone would be copied into one ~1.25 times as large by the first copy.
		r.t.GPUOps = grow(r.t.GPUOps, n+r.memopEstimate())
		if !r.opts.SkipKernelInfo {
			r.c.Kernels = grow(r.c.Kernels, n)
		}
	}
	reset := func() {
		r.t.GPUOps, r.c.Kernels, r.kPIDOf = r.t.GPUOps[:ops0], r.c.Kernels[:k0], nil
		clear(r.kPIDs)
	}
	parallel := false
	if lean {
		if err = r.kernelsParallel(table, style, n); err != nil && !errors.Is(err, errFileLayout) {
			return err
		}
		parallel = err == nil
		if !parallel {
			r.log.Debug("nsys: scanning on one goroutine", "table", table, "why", err)
			reset()
		}
	}
	if !parallel {
		err = r.scanInts(table, cols, reset, r.kernelRow(table, style, ops0))
	}
	if err != nil {
		return err
	}
	r.kN = len(r.t.GPUOps) - ops0
	if r.kN == 0 {
		return r.emptyKernelTable(table)
	}
	return nil
}

// kernelColumns checks that the kernel table has the columns every reader needs and returns
// the columns to decode. Without KernelInfo only the op's own name style is looked up, and
// the columns after the names are not decoded at all (the direct reader stops at the last
// wanted column).
func (r *reader) kernelColumns(table string, style NameStyle) ([]string, error) {
	have, err := r.columns(table)
	if err != nil {
		return nil, err
	}
	for _, need := range []string{"start", "end", "deviceId", "streamId"} {
		if !have[need] {
			return nil, fmt.Errorf("nsys: %s: %s has no %q column (schema %q); this export layout is not supported", r.path, table, need, r.c.SchemaText)
		}
	}
	if !have["demangledName"] && !have["shortName"] {
		return nil, fmt.Errorf("nsys: %s: %s has neither demangledName nor shortName (schema %q); this export layout is not supported", r.path, table, r.c.SchemaText)
	}
	cols := []string{"start", "end", "deviceId", "streamId", "correlationId", "globalPid",
		"demangledName", "shortName", "mangledName", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"}
	if r.opts.SkipKernelInfo {
		cols = cols[:8]
		if style == Mangled {
			cols = cols[:9]
		}
	}
	return cols, nil
}

// kernelRow is the per-row function of the sequential kernel scan.
func (r *reader) kernelRow(table string, style NameStyle, ops0 int) func(v []sql.NullInt64) error {
	lean := r.opts.SkipKernelInfo
	return func(v []sql.NullInt64) error {
		start, end, corr, gpid, dem, short := v[0], v[1], v[4], v[5], v[6], v[7]
		var mang sql.NullInt64
		if len(v) > 8 {
			mang = v[8]
		}
		if !v[2].Valid || !v[3].Valid {
			return r.wrap(table, errors.New("a kernel without deviceId or streamId"))
		}
		device, stream := int32(v[2].Int64), int32(v[3].Int64)
		if !dem.Valid {
			dem = short
		}
		if !short.Valid {
			short = dem
		}
		ki := KernelInfo{Op: int32(len(r.t.GPUOps)), RawCorrelation: trace.NoID}
		var err error
		if !lean || style != Short {
			if ki.Demangled, err = r.name(dem.Int64); err != nil {
				return err
			}
		}
		if !lean || style == Short {
			if ki.Short, err = r.name(short.Int64); err != nil {
				return err
			}
		}
		if mang.Valid {
			if ki.Mangled, err = r.name(mang.Int64); err != nil {
				return err
			}
		}
		if len(v) >= 15 {
			for i := range 3 {
				ki.Grid[i], ki.Block[i] = int32(v[9+i].Int64), int32(v[12+i].Int64)
			}
		}
		_, ki.PID, _ = SplitGlobalID(gpid.Int64)
		r.addPID(ki.PID)
		r.kernelPID(len(r.t.GPUOps)-ops0, ki.PID)
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
		if !r.opts.SkipKernelInfo {
			r.c.Kernels = append(r.c.Kernels, ki)
		}
		return nil
	}
}

// grow is slices.Grow that, for an empty slice, allocates with make: a large allocation of
// fresh memory is already zero, while slices.Grow clears it once more (tens of milliseconds for
// the ops and calls of a large export; docs/performance.md).
func grow[S ~[]E, E any](s S, n int) S {
	if len(s) == 0 {
		return make(S, 0, n)
	}
	return slices.Grow(s, n)
}

// kernelPID records the pid of kernel i (counted from the first kernel), keeping a per-kernel
// slice only once two pids have been seen: uniqueCorrelations needs it, and a single-process
// export should not pay 4 bytes a kernel for it.
func (r *reader) kernelPID(i int, pid int32) {
	if len(r.kPIDs) == 0 {
		r.kPID0 = pid
	}
	if r.kPIDOf == nil && pid == r.kPID0 && i > 0 {
		return
	}
	r.kPIDs[pid] = true
	if r.kPIDOf == nil && pid != r.kPID0 {
		r.kPIDOf = make([]int32, i, max(2*i, 1024))
		for j := range r.kPIDOf {
			r.kPIDOf[j] = r.kPID0
		}
	}
	if r.kPIDOf != nil {
		r.kPIDOf = append(r.kPIDOf, pid)
	}
}

// addPID notes a pid that owns events; consecutive rows mostly share one, so the map is
// touched only when it changes.
func (r *reader) addPID(pid int32) {
	if r.lastPID == pid && r.havePID {
		return
	}
	r.pids[pid] = true
	r.lastPID, r.havePID = pid, true
}

func (r *reader) pidOfKernel(i int) int32 {
	if r.kPIDOf != nil {
		return r.kPIDOf[i]
	}
	return r.kPID0
}

// memopEstimate guesses how many rows the memcpy and memset tables have (see rowEstimate).
func (r *reader) memopEstimate() int {
	n := 0
	for _, table := range memopTables {
		if r.has(table) {
			n += r.rowEstimate(table)
		}
	}
	return n
}

// memopTables are the tables memops reads, in its order.
var memopTables = []string{"CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"}

func (r *reader) memops() error {
	for _, table := range memopTables {
		if !r.has(table) {
			continue
		}
		memset := table == "CUPTI_ACTIVITY_KIND_MEMSET"
		names := map[int32]trace.NameID{}
		ops0, m0 := len(r.t.GPUOps), len(r.c.Memops)
		reset := func() { r.t.GPUOps, r.c.Memops = r.t.GPUOps[:ops0], r.c.Memops[:m0] }
		cols := []string{"start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes", "copyKind"}
		err := r.scanInts(table, cols, reset, func(v []sql.NullInt64) error {
			start, end, device, stream, corr, gpid, nbytes, kind := v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]
			mi := MemopInfo{Op: int32(len(r.t.GPUOps)), Memset: memset}
			if !memset {
				mi.CopyKind = int32(kind.Int64)
			}
			_, mi.PID, _ = SplitGlobalID(gpid.Int64)
			r.addPID(mi.PID)
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
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// noRuntimeWarning is the trace warning of an export without a runtime table.
const noRuntimeWarning = "the export has no CUPTI_ACTIVITY_KIND_RUNTIME table, so kernels cannot be joined to their launch calls (no launch overhead, API summary or NVTX scopes)"

// apiName is what runtime knows of a runtime call name.
type apiName struct {
	name   trace.NameID
	graph  bool
	driver bool
	stat   int // index into APIStats
}

// apiNameOf is a call's name as the trace keeps it (version suffix stripped, interned in
// names) with its graph and driver flags, from the name nsys stored.
func apiNameOf(names *trace.Names, text string) apiName {
	return apiName{name: names.InternString(StripAPIVersion(text)), graph: IsGraphLaunch(text), driver: IsDriverAPI(text)}
}

func (r *reader) runtime() error {
	const table = "CUPTI_ACTIVITY_KIND_RUNTIME"
	if r.opts.SummariseAPI {
		r.c.apiSummarised = true
	}
	if !r.has(table) {
		r.t.Warnings = append(r.t.Warnings, noRuntimeWarning)
		return nil
	}
	var want *corrIndex
	if r.opts.SummariseAPI {
		want = newCorrIndex(r.t.GPUOps)
		r.rtIndex = want
	}
	// One launch per name: only without NVTX ranges (nothing needs a call's time), with one
	// process (the link is by correlation id alone) and dense ids (corrIndex records each id's
	// call name in place); a second process or a repeated id found while scanning sends the
	// table through the per-call scan below.
	perName := want != nil && r.opts.OneLaunchPerName && len(r.t.Annotations) == 0 && len(r.kPIDs) <= 1 && want.dense != nil
	if !perName && want != nil {
		// About one kept call per GPU op.
		r.t.Launches = grow(r.t.Launches, min(len(r.t.GPUOps), r.rowEstimate(table)))
		r.c.Driver = grow(r.c.Driver, cap(r.t.Launches))
	}
	n := &runtimeNames{r: r, want: want}
	n.begin()
	if perName {
		want.starts = make([]int64, len(want.dense))
		repeated, err := r.runtimeScan(table, want, n.begin, n.resolve, true)
		if err != nil {
			return err
		}
		pids := maps.Clone(r.rtPIDs)
		maps.Copy(pids, r.kPIDs)
		if !repeated && len(pids) <= 1 {
			return r.launchPerName(want, n.resolve)
		}
		want.starts = nil
		r.log.Debug("nsys: keeping every launching call", "why", "several processes or a repeated correlation id")
		n.begin()
		r.t.Launches = grow(r.t.Launches, min(len(r.t.GPUOps), r.rowEstimate(table)))
		r.c.Driver = grow(r.c.Driver, cap(r.t.Launches))
	}
	_, err := r.runtimeScan(table, want, n.begin, n.resolve, false)
	return err
}

// runtimeNames is runtime's memo of the runtime table's call names, by raw nameId.
type runtimeNames struct {
	r      *reader
	want   *corrIndex
	byID   map[int64]apiName
	dense  []apiName // byID for ids below 2^16 (name 0 marks a hole)
	statOf map[trace.NameID]int
}

// begin starts a scan of the runtime table afresh: no names, calls, launches or pids yet.
func (n *runtimeNames) begin() {
	r := n.r
	n.byID, n.statOf, n.dense = map[int64]apiName{}, map[trace.NameID]int{}, n.dense[:0]
	r.t.Launches, r.c.Driver, r.c.APIStats, r.c.APICalls = r.t.Launches[:0], r.c.Driver[:0], r.c.APIStats[:0], 0
	clear(r.rtPIDs)
	if n.want != nil {
		n.want.reset()
	}
}

// resolve maps a raw nameId to the call's name, flags and aggregate; the first time an id
// is seen (in table order) it interns the names and registers the aggregate.
func (n *runtimeNames) resolve(id int64) (apiName, error) {
	if id >= 0 && id < int64(len(n.dense)) && n.dense[id].name != 0 {
		return n.dense[id], nil
	}
	if an, ok := n.byID[id]; ok {
		return an, nil
	}
	r := n.r
	raw, err := r.name(id)
	if err != nil {
		return apiName{}, err
	}
	rawText := r.t.Names.String(raw)
	an := apiNameOf(r.t.Names, rawText)
	if r.opts.SummariseAPI {
		j, ok := n.statOf[an.name]
		if !ok {
			j = len(r.c.APIStats)
			n.statOf[an.name] = j
			r.c.APIStats = append(r.c.APIStats, APIStat{Name: an.name})
		}
		an.stat = j
	}
	n.byID[id] = an
	if id >= 0 && id < 1<<16 && an.name != 0 {
		if id >= int64(len(n.dense)) {
			n.dense = append(n.dense, make([]apiName, int(id)+1-len(n.dense))...)
		}
		n.dense[id] = an
	}
	r.c.APIRaw[an.name] = rawText
	return an, nil
}

// launchPerName ends a one-launch-per-name scan: one launch for each call name (and graph
// flag) that a GPU op's correlation id has, and want's entries pointed at them.
func (r *reader) launchPerName(want *corrIndex, resolve func(int64) (apiName, error)) error {
	// Each id's call name → the launch of that name and graph flag.
	reps := map[apiName]int32{}
	for i, v := range want.dense {
		if v <= 0 {
			continue
		}
		an, err := resolve(int64(v - 1))
		if err != nil {
			return err
		}
		an.stat = 0
		j, ok := reps[an]
		if !ok {
			j = int32(len(r.t.Launches))
			reps[an] = j
			r.t.Launches = append(r.t.Launches, trace.Launch{Correlation: trace.NoID, ExternalID: trace.NoID,
				Name: an.name, Graph: an.graph, Frame: trace.NoID})
			r.c.Driver = append(r.c.Driver, an.driver)
		}
		want.dense[i] = j + 1
	}
	// Each GPU op's launch call start, which the merged launches no longer carry.
	r.c.LaunchStarts = make([]int64, len(r.t.GPUOps))
	for i := range r.t.GPUOps {
		r.c.LaunchStarts[i] = trace.NoID
		if c := r.t.GPUOps[i].Correlation; c != trace.NoID && c >= want.lo && c-want.lo < int64(len(want.dense)) && want.dense[c-want.lo] > 0 {
			r.c.LaunchStarts[i] = want.starts[c-want.lo]
		}
	}
	want.starts = nil
	r.c.OneLaunchPerName = true
	r.t.LaunchTimesDropped = true
	return nil
}

// runtimeScan is runtime's scan of the runtime table, on several goroutines when it can.
// perName records each wanted id's call name in want (see ReadOptions.OneLaunchPerName)
// instead of keeping the call; repeated says an id had a call already.
func (r *reader) runtimeScan(table string, want *corrIndex, begin func(), resolve func(int64) (apiName, error), perName bool) (repeated bool, err error) {
	if want != nil {
		err := r.runtimeParallel(table, want, perName, func(id int64) (trace.NameID, bool, bool, int, error) {
			an, err := resolve(id)
			return an.name, an.graph, an.driver, an.stat, err
		})
		var rep errRepeated
		if errors.As(err, &rep) {
			return true, nil
		}
		if err == nil || !errors.Is(err, errFileLayout) {
			return false, err
		}
		r.log.Debug("nsys: scanning on one goroutine", "table", table, "why", err)
		begin()
	}
	var lastPID int32 // the previous call's pid (already in the pid sets)
	cols := []string{"start", "end", "globalTid", "correlationId", "nameId"}
	err = r.scanInts(table, cols, begin, func(v []sql.NullInt64) error {
		start, end, gtid, corr, nameID := v[0], v[1], v[2], v[3], v[4]
		an, err := resolve(nameID.Int64)
		if err != nil {
			return err
		}
		_, pid, tid := SplitGlobalID(gtid.Int64)
		if pid != lastPID || r.c.APICalls == 0 {
			r.pids[pid] = true
			r.rtPIDs[pid] = true
			lastPID = pid
		}
		if r.c.APICalls == 0 || start.Int64 < r.rtFirst {
			r.rtFirst = start.Int64
		}
		if r.c.APICalls == 0 || end.Int64 > r.rtEnd {
			r.rtEnd = end.Int64
		}
		r.c.APICalls++
		if want != nil {
			d := end.Int64 - start.Int64
			st := &r.c.APIStats[an.stat]
			if st.Calls == 0 || d < st.MinNS {
				st.MinNS = d
			}
			st.MaxNS = max(st.MaxNS, d)
			st.Calls++
			st.TotalNS += d
			// Keep only the calls whose correlation id a GPU op has (in any process: which
			// process matters is settled by link once every pid is known).
			if !corr.Valid {
				return nil
			}
			if perName {
				if wanted, first := want.claim(corr.Int64, nameID.Int64, start.Int64); wanted && !first {
					repeated = true
				}
				return nil
			}
			if !want.wanted(corr.Int64) {
				return nil
			}
			want.add(corr.Int64, int32(len(r.t.Launches)))
		}
		l := trace.Launch{Start: start.Int64, End: end.Int64, Correlation: trace.NoID, ExternalID: trace.NoID,
			Name: an.name, PID: pid, TID: tid, Graph: an.graph, Frame: trace.NoID}
		if corr.Valid {
			l.Correlation = corr.Int64
		}
		r.t.Launches = append(r.t.Launches, l)
		r.c.Driver = append(r.c.Driver, an.driver)
		return nil
	})
	return repeated, err
}

// nvtxRows reads the NVTX table's columns cols into ints (nil at the text column, index 3) and
// text and calls row for each event: from the file directly when it can, else through SQLite.
// The direct path converts as database/sql does (an integer in the text column becomes its
// decimal text, a blob its bytes); anything else (a real, text in an integer column) sends the
// table through SQLite, after reset drops what row collected.
func (r *reader) nvtxRows(table string, cols []string, ints []*sql.NullInt64, text *sql.NullString, reset func(), row func() error) error {
	if r.file != nil {
		p, err := r.planDirect(table, cols)
		if err == nil {
			seen := false
			// The texts met so far, so that a repeated one is not copied into a new string
			// per row: ranges repeat a few hundred names (a denoising step's, a layer's)
			// tens of thousands of times. conv runs on one goroutine at a time.
			texts := map[string]string{}
			// conv converts a row's values as database/sql would (see above).
			conv := func(v []sqlValue, row *nvRow) error {
				for i, x := range v {
					if i == 3 {
						switch x.Kind {
						case valNull:
						case valText, valBlob:
							row.text = sql.NullString{String: internText(texts, x.Bytes), Valid: true}
						case valInt:
							row.text = sql.NullString{String: strconv.FormatInt(x.Int, 10), Valid: true}
						default:
							return layoutErr("%s.%s holds a real", table, cols[i])
						}
						continue
					}
					switch x.Kind {
					case valNull:
					case valInt:
						row.ints[i] = sql.NullInt64{Int64: x.Int, Valid: true}
					default:
						return layoutErr("%s.%s holds a non-integer value", table, cols[i])
					}
				}
				return nil
			}
			take := func(x *nvRow) error {
				seen = true
				for i, p := range ints {
					if p != nil {
						*p = x.ints[i]
					}
				}
				*text = x.text
				return row()
			}
			if r.nvIdx != nil && len(cols) <= len(nvRow{}.ints) && scanParts() >= 2 && !r.opts.noParallel {
				err = r.nvtxAhead(p, conv, take)
			} else {
				err = r.file.scan(r.ctx, p.root, p.cols, -1, func(_ int64, v []sqlValue) error {
					var x nvRow
					if err := conv(v, &x); err != nil {
						return err
					}
					return take(&x)
				})
			}
			if err == nil || !errors.Is(err, errFileLayout) {
				return err
			}
			if seen {
				reset()
			}
		}
		if !errors.Is(err, errFileLayout) {
			return r.wrap(table, err)
		}
		r.log.Debug("nsys: reading the table through SQLite", "table", table, "why", err)
	}
	dest := make([]any, len(cols))
	for i := range dest {
		if i == 3 {
			dest[i] = text
		} else {
			dest[i] = ints[i]
		}
	}
	return r.scanSQL(table, cols, dest, row)
}

// keepMemo remembers a range filter's answer per name: the ranges of an export repeat a few
// hundred names, and the filter (the triage's stage check: lower-casing, prefixes, a regular
// expression) ran once per range.
type keepMemo struct {
	ans []uint8 // per NameID: 0 not asked yet, 1 keep, 2 drop
}

// keep is keepRange(label) for the range named name (label's id), asked once per name.
func (m *keepMemo) keep(name trace.NameID, label string, keepRange func(string) bool) bool {
	if int(name) < len(m.ans) {
		if a := m.ans[name]; a != 0 {
			return a == 1
		}
	} else {
		m.ans = append(m.ans, make([]uint8, int(name)+1-len(m.ans))...)
	}
	k := keepRange(label)
	m.ans[name] = 2
	if k {
		m.ans[name] = 1
	}
	return k
}

// maxInternedTexts bounds internText's map: texts past it are copied per row, as before.
const maxInternedTexts = 4096

// internText returns b as a string, the one texts already holds for it when it does (the
// lookup with string(b) does not allocate), adding it while texts has fewer than
// maxInternedTexts.
func internText(texts map[string]string, b []byte) string {
	if s, ok := texts[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(texts) < maxInternedTexts {
		texts[s] = s
	}
	return s
}

// errTooManyRanges ends an NVTX scan at reader.maxRanges ranges.
var errTooManyRanges = errors.New("nsys: more NVTX ranges than a streamed pass holds")

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
	cols := []string{"start", "end", "eventType", "text", "textId", "globalTid", "domainId"}
	domains := map[domainKey]string{}
	// Each range's domain and style, resolved into Capture.Ranges once the table is read (a
	// domain's name may come after its first range): an index into keys, and the style in the
	// top bit. A compact 4 bytes a range, as an export may hold hundreds of thousands.
	var (
		keys   []domainKey
		keyIdx = map[domainKey]uint32{}
		styles []uint32
	)
	const startEnd = 1 << 31
	first := len(r.t.Annotations)
	var keeps keepMemo // keepRange's answer per name
	var (
		start, end, evType, textID, gtid, domainID sql.NullInt64
		text                                       sql.NullString
	)
	row := func() error {
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
				return nil // a range still open when the capture ended
			}
			dk := domainKey{pid, domainID.Int64}
			if r.nvIdx != nil {
				if r.maxRanges > 0 && len(r.nvIdx.ranges) >= r.maxRanges {
					return errTooManyRanges
				}
				name := r.t.Names.InternString(label)
				r.nvIdx.add(start.Int64, end.Int64, name, pid, tid, dk)
				r.pids[pid] = true
				if r.keepRange == nil || !keeps.keep(name, label, r.keepRange) {
					return nil
				}
			} else if r.maxRanges > 0 && len(styles) >= r.maxRanges {
				return errTooManyRanges
			}
			k, ok := keyIdx[dk]
			if !ok {
				k = uint32(len(keys))
				keyIdx[dk] = k
				keys = append(keys, dk)
			}
			if evType.Int64 == evStartEnd || evType.Int64 == evNVTXTStartEnd {
				k |= startEnd
			}
			r.pids[pid] = true
			styles = append(styles, k)
			r.t.Annotations = append(r.t.Annotations, trace.Annotation{Start: start.Int64, End: end.Int64, Name: r.t.Names.InternString(label),
				PID: pid, TID: tid, Device: trace.NoID, ExternalID: trace.NoID})
		}
		return nil
	}
	if err := r.nvtxRows(table, cols, []*sql.NullInt64{&start, &end, &evType, nil, &textID, &gtid, &domainID}, &text,
		func() {
			r.c.NVTXEvents, styles, keys = 0, styles[:0], keys[:0]
			r.t.Annotations = r.t.Annotations[:first]
			clear(domains)
			clear(keyIdx)
			if r.nvIdx != nil {
				r.nvIdx.reset()
			}
		}, row); err != nil {
		return err
	}
	if r.nvIdx != nil {
		r.nvIdx.finish(domains)
	}
	r.c.Ranges = slices.Grow(r.c.Ranges, len(styles))
	for _, k := range styles {
		ri := RangeInfo{Domain: domains[keys[k&^startEnd]], Style: "PushPop"}
		if k&startEnd != 0 {
			ri.Style = "StartEnd"
		}
		r.c.Ranges = append(r.c.Ranges, ri)
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
	addDevices(r.t, func(yield func(int32) bool) {
		for i := range r.t.GPUOps {
			if !yield(r.t.GPUOps[i].Device) {
				return
			}
		}
	})
	return nil
}

// addDevices gives each device in ids that t.Devices lacks (it ran ops but has no
// TARGET_INFO_GPU row) a "GPU N" entry, and sorts the list by id.
func addDevices(t *trace.Trace, ids iter.Seq[int32]) {
	known := map[int32]bool{}
	for _, d := range t.Devices {
		known[d.ID] = true
	}
	for d := range ids {
		if !known[d] {
			known[d] = true
			t.Devices = append(t.Devices, trace.Device{ID: d, Name: "GPU " + strconv.Itoa(int(d))})
		}
	}
	slices.SortFunc(t.Devices, func(a, b trace.Device) int { return int(a.ID) - int(b.ID) })
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
		if r.streamed > 0 { // the kernels an OpStream delivered instead of holding
			add(r.streamFirst, r.streamLast)
		}
		if !r.c.apiSummarised {
			// A summarised read counts every call in rtFirst/rtEnd below; the launches it keeps
			// may be one per name (OneLaunchPerName), whose times are no call's.
			for _, l := range r.t.Launches {
				add(l.Start, l.End)
			}
		}
		if r.c.APICalls > 0 { // every runtime call, also those SummariseAPI did not keep
			add(r.rtFirst, r.rtEnd)
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
// (KernelInfo.RawCorrelation keeps the stored value). It says whether it did.
func (r *reader) uniqueCorrelations() bool {
	pids := map[int32]bool{}
	for p := range r.kPIDs {
		pids[p] = true
	}
	for p := range r.rtPIDs { // the pids of every runtime call, kept in Launches or not
		pids[p] = true
	}
	if len(pids) < 2 {
		return false
	}
	enc := func(pid int32, c int64) int64 {
		if c == trace.NoID {
			return c
		}
		return int64(pid)<<32 | (c & 0xFFFFFFFF)
	}
	for i := 0; i < r.kN; i++ {
		op := &r.t.GPUOps[r.kOp0+i]
		op.Correlation = enc(r.pidOfKernel(i), op.Correlation)
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
	return true
}
