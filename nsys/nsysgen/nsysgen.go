// Package nsysgen writes SQLite files shaped like `nsys export --type sqlite` output, so the
// simulator, the tests and the benchmarks can produce Nsight Systems exports without a GPU or
// nsys. The tables, column names, column order, id encodings and enum values follow the real
// exports (schema 2.9.1 from nsys 2022.2 and the 3.x schemas up to 3.28.1 from nsys 2026.4):
// names live in StringIds, globalPid/globalTid are (vm<<48)|(pid<<24)|tid, times are
// nanoseconds on the session clock, and tables are created lazily, only when they get a row,
// as a default (`--lazy=true`) export does.
//
// Write builds a whole file from an Export; Create returns a streaming Writer that batches
// inserts inside one transaction, for exports with millions of rows.
package nsysgen

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	_ "modernc.org/sqlite" // registers the pure-Go "sqlite" database/sql driver
)

// DefaultVersion is the export schema written when none is given: nsys 2026.4's.
const DefaultVersion = "3.28.1"

// Copy kinds as nsys stores them in CUPTI_ACTIVITY_KIND_MEMCPY.copyKind (ENUM_CUDA_MEMCPY_OPER).
const (
	CopyHtoD int32 = 1
	CopyDtoH int32 = 2
	CopyHtoA int32 = 3
	CopyAtoH int32 = 4
	CopyAtoA int32 = 5
	CopyAtoD int32 = 6
	CopyDtoA int32 = 7
	CopyDtoD int32 = 8
	CopyHtoH int32 = 9
	CopyPtoP int32 = 10
)

// Kernel is one CUPTI kernel record. Name is the demangled name (what nsys shows by default);
// Short is the function name without template arguments and parameters (shortName), which is
// derived from Name when empty. The kernel table stores only the process (globalPid); TID is
// used to name the thread, and a kernel's thread is otherwise that of its launch call.
type Kernel struct {
	Start, End             int64
	Device, Stream         int32
	Correlation            int64
	Name                   string
	Short                  string
	GridX, GridY, GridZ    int32
	BlockX, BlockY, BlockZ int32
	PID, TID               int32
}

// Runtime is one CUDA runtime or driver API call. Name keeps nsys's versioned form
// (cudaLaunchKernel_v7000); Driver marks driver API calls (cuLaunchKernel), which nsys stores
// in the same table with another eventClass.
type Runtime struct {
	Start, End  int64
	PID, TID    int32
	Correlation int64
	Name        string
	Driver      bool
}

// Memop is one memcpy or memset on a device stream. CopyKind follows ENUM_CUDA_MEMCPY_OPER
// (1 HtoD, 2 DtoH, 8 DtoD, 10 PtoP) and is ignored for memsets.
type Memop struct {
	Start, End     int64
	Device, Stream int32
	Correlation    int64
	Bytes          int64
	CopyKind       int32
	Memset         bool
	PID            int32
}

// NVTX is one push/pop range. Ranges in the default domain (Domain "") are stored with inline
// text, as nsys does for unregistered strings; ranges in a named domain are stored through
// textId (registered strings) after the domain's creation event, which exercises both forms a
// reader has to handle.
type NVTX struct {
	Start, End int64
	PID, TID   int32
	Text       string
	Domain     string
}

// GPU is one device row of TARGET_INFO_GPU.
type GPU struct {
	ID   int32
	Name string
}

// Process is one row of PROCESSES.
type Process struct {
	PID  int32
	Name string
}

// Export is a whole export for Write. SessionStartUnixNs, when set, is written to
// TARGET_INFO_SESSION_START_TIME.utcEpochNs (the Unix time of session clock 0).
type Export struct {
	Version            string
	SessionStartUnixNs int64
	Kernels            []Kernel
	Runtime            []Runtime
	Memops             []Memop
	NVTX               []NVTX
	GPUs               []GPU
	Processes          []Process
}

// Write creates path (replacing an existing file) and writes e to it.
func Write(path string, e Export) error {
	w, err := Create(path, e.Version)
	if err != nil {
		return err
	}
	if e.SessionStartUnixNs != 0 {
		w.SetSessionStart(e.SessionStartUnixNs)
	}
	for _, g := range e.GPUs {
		w.AddGPU(g)
	}
	for _, p := range e.Processes {
		w.AddProcess(p)
	}
	for _, r := range e.Runtime {
		w.AddRuntime(r)
	}
	for _, k := range e.Kernels {
		w.AddKernel(k)
	}
	for _, m := range e.Memops {
		w.AddMemop(m)
	}
	for _, n := range e.NVTX {
		w.AddNVTX(n)
	}
	return w.Close()
}

// DefaultSessionStart is the session start written when none is set (2023-11-14T22:13:20Z),
// so generated files are reproducible byte for byte.
const DefaultSessionStart int64 = 1_700_000_000_000_000_000

// VM is the virtual-machine id nsys puts in the top 16 bits of every global id; real exports
// from a single host use 1.
const VM = 1

// GlobalTid encodes a pid/tid pair the way nsys does: (vm<<48)|(pid<<24)|tid.
func GlobalTid(pid, tid int32) int64 {
	return int64(VM)<<48 | int64(pid&0xFFFFFF)<<24 | int64(tid&0xFFFFFF)
}

// GlobalPid is GlobalTid with tid 0, as in globalPid columns.
func GlobalPid(pid int32) int64 { return GlobalTid(pid, 0) }

// schema describes which optional columns a schema version has.
type schema struct {
	version             string
	major, minor, micro int
}

func parseSchema(v string) (schema, error) {
	if v == "" {
		v = DefaultVersion
	}
	parts := strings.Split(v, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return schema{}, fmt.Errorf("nsysgen: schema version %q is not MAJOR.MINOR[.MICRO]", v)
	}
	var n [3]int
	for i, p := range parts {
		x, err := strconv.Atoi(p)
		if err != nil || x < 0 {
			return schema{}, fmt.Errorf("nsysgen: schema version %q is not MAJOR.MINOR[.MICRO]", v)
		}
		n[i] = x
	}
	if n[0] < 2 || n[0] > 3 {
		return schema{}, fmt.Errorf("nsysgen: schema version %q: only 2.x and 3.x exports can be generated", v)
	}
	return schema{version: v, major: n[0], minor: n[1], micro: n[2]}, nil
}

func (s schema) atLeast(major, minor int) bool {
	return s.major > major || (s.major == major && s.minor >= minor)
}

// green reports whether the schema has greenContextId columns (3.x; absent in 2.9.1).
func (s schema) green() bool { return s.major >= 3 }

// recent reports whether the schema has the 2026.x additions (kernel graphId, cluster and QMD
// columns, memcpy copyCount, NVTX binaryData/eventId). They are known present in 3.28.1 and
// absent in 3.13.2; versions in between are written without them.
func (s schema) recent() bool { return s.atLeast(3, 28) }

func (s schema) metaTable() string {
	if s.major >= 3 {
		return "META_DATA_EXPORT"
	}
	return "EXPORT_META_DATA"
}

// productVersion maps known schema versions to the nsys release that wrote them.
func (s schema) productVersion() string {
	switch fmt.Sprintf("%d.%d", s.major, s.minor) {
	case "2.9":
		return "2022.2.1.31"
	case "3.13":
		return "2024.5.1.113"
	case "3.28":
		return "2026.4.1.0"
	}
	return "0.0.0.0"
}

// table is one lazily created table with a batched multi-row insert.
type table struct {
	name    string
	ddl     string
	cols    int
	created bool
	buf     []any
	rows    int
	full    *sql.Stmt // prepared INSERT of batchRows rows
}

// batchParams bounds the parameters of one multi-row INSERT. Multi-row statements save the
// per-statement overhead, but the driver matches each positional parameter by a linear scan
// (quadratic in the parameter count), so batches stay small: 2 kernel rows, 12 runtime rows.
const batchParams = 100

// batchRows is the rows per INSERT for a table of cols columns.
func batchRows(cols int) int { return max(1, batchParams/cols) }

// Writer streams rows into a new export. Add methods never fail; the first error is kept and
// returned by Close, so a caller can write millions of rows without checking each one.
type Writer struct {
	path      string
	ctx       context.Context
	db        *sql.DB
	tx        *sql.Tx
	s         schema
	err       error
	strs      map[string]int64
	strTab    *table
	kernels   *table
	runtime   *table
	memcpy    *table
	memset    *table
	nvtx      *table
	gpus      *table
	procs     *table
	threads   *table
	all       []*table
	domains   map[string]int64
	seenTID   map[int64]bool
	procNames map[int32]string
	gridID    int64
	eventID   int64
	start     int64
	stop      int64
	session   int64
	any       bool
}

// Create starts a new export at path (an existing file is replaced) with the given schema
// version ("" means DefaultVersion). Call Close to finish it.
func Create(path string, version string) (*Writer, error) {
	s, err := parseSchema(version)
	if err != nil {
		return nil, err
	}
	for _, suffix := range []string{"", "-journal", "-wal", "-shm"} {
		if err := os.Remove(path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("nsysgen: replacing %s: %w", path, err)
		}
	}
	// The file is scratch output until Close commits it, so journaling and syncs only cost time.
	db, err := sql.Open("sqlite", "file:"+uriPath(path)+"?_pragma=journal_mode(OFF)&_pragma=synchronous(OFF)")
	if err != nil {
		return nil, fmt.Errorf("nsysgen: opening %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("nsysgen: creating %s: %w", path, err)
	}
	w := &Writer{
		path: path, ctx: ctx, db: db, tx: tx, s: s,
		strs:      map[string]int64{},
		domains:   map[string]int64{},
		seenTID:   map[int64]bool{},
		procNames: map[int32]string{},
	}
	w.defineTables()
	// StringIds and the metadata tables exist in every export, even an empty one.
	w.create(w.strTab)
	w.execDDL(w.metaDDL())
	w.execDDL(ddlSessionStart)
	w.execDDL(ddlAnalysis)
	if s.major >= 3 {
		// 2.9.1 exports carry no ENUM_* tables; 3.x exports do.
		w.writeEnums()
	}
	return w, nil
}

func (w *Writer) defineTables() {
	mk := func(name, ddl string) *table {
		t := &table{name: name, ddl: ddl, cols: countColumns(ddl)}
		w.all = append(w.all, t)
		return t
	}
	w.strTab = mk("StringIds", ddlStringIds)
	w.kernels = mk("CUPTI_ACTIVITY_KIND_KERNEL", kernelDDL(w.s))
	w.runtime = mk("CUPTI_ACTIVITY_KIND_RUNTIME", ddlRuntime)
	w.memcpy = mk("CUPTI_ACTIVITY_KIND_MEMCPY", memcpyDDL(w.s))
	w.memset = mk("CUPTI_ACTIVITY_KIND_MEMSET", memsetDDL(w.s))
	w.nvtx = mk("NVTX_EVENTS", nvtxDDL(w.s))
	w.gpus = mk("TARGET_INFO_GPU", ddlGPU)
	w.procs = mk("PROCESSES", ddlProcesses)
	w.threads = mk("ThreadNames", ddlThreadNames)
}

func (w *Writer) execDDL(ddl string) {
	if w.err != nil {
		return
	}
	if _, err := w.tx.ExecContext(w.ctx, ddl); err != nil {
		w.err = fmt.Errorf("nsysgen: %s: %w", firstLine(ddl), err)
	}
}

func (w *Writer) create(t *table) {
	if t.created {
		return
	}
	t.created = true
	w.execDDL(t.ddl)
}

// add appends one row to t, creating the table on its first row and flushing full batches.
func (w *Writer) add(t *table, vals ...any) {
	if w.err != nil {
		return
	}
	if len(vals) != t.cols {
		w.err = fmt.Errorf("nsysgen: internal error: %d values for the %d columns of %s", len(vals), t.cols, t.name)
		return
	}
	w.create(t)
	t.buf = append(t.buf, vals...)
	t.rows++
	if t.rows == batchRows(t.cols) {
		w.flush(t)
	}
}

func (w *Writer) flush(t *table) {
	if w.err != nil || t.rows == 0 {
		return
	}
	var err error
	if t.rows == batchRows(t.cols) {
		if t.full == nil {
			t.full, err = w.tx.PrepareContext(w.ctx, insertSQL(t, t.rows))
			if err != nil {
				w.err = fmt.Errorf("nsysgen: preparing insert into %s: %w", t.name, err)
				return
			}
		}
		_, err = t.full.ExecContext(w.ctx, t.buf...)
	} else {
		_, err = w.tx.ExecContext(w.ctx, insertSQL(t, t.rows), t.buf...)
	}
	if err != nil {
		w.err = fmt.Errorf("nsysgen: inserting into %s: %w", t.name, err)
		return
	}
	t.buf = t.buf[:0]
	t.rows = 0
}

func insertSQL(t *table, rows int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO ")
	b.WriteString(t.name)
	b.WriteString(" VALUES ")
	row := "(" + strings.Repeat("?,", t.cols-1) + "?)"
	for i := 0; i < rows; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(row)
	}
	return b.String()
}

// str interns s into StringIds and returns its id.
func (w *Writer) str(s string) int64 {
	if id, ok := w.strs[s]; ok {
		return id
	}
	id := int64(len(w.strs) + 1)
	w.strs[s] = id
	w.add(w.strTab, id, s)
	return id
}

func (w *Writer) span(start, end int64) {
	if !w.any || start < w.start {
		w.start = start
	}
	if !w.any || end > w.stop {
		w.stop = end
	}
	w.any = true
}

// thread records a (pid, tid) pair so Close can name it in ThreadNames.
func (w *Writer) thread(pid, tid int32) int64 {
	g := GlobalTid(pid, tid)
	w.seenTID[g] = true
	return g
}

// SetSessionStart sets the Unix time (ns) of session clock 0.
func (w *Writer) SetSessionStart(unixNs int64) { w.session = unixNs }

// AddGPU adds a TARGET_INFO_GPU row.
func (w *Writer) AddGPU(g GPU) {
	// vmId, id, name, busLocation, isDiscrete, l2CacheSize, totalMemory, memoryBandwidth,
	// clockRate, smCount, pwGpuId, uuid, luid, chipName, cuDevice, then 26 limits.
	vals := []any{int64(VM) << 48, g.ID, g.Name, fmt.Sprintf("0000:%02x:00.0", g.ID+3), 1,
		nil, nil, nil, nil, nil, g.ID, nil, 0, nil, g.ID}
	for len(vals) < w.gpus.cols {
		vals = append(vals, nil)
	}
	w.add(w.gpus, vals...)
}

// AddProcess adds a PROCESSES row.
func (w *Writer) AddProcess(p Process) {
	w.procNames[p.PID] = p.Name
	w.add(w.procs, GlobalPid(p.PID), p.PID, p.Name)
}

// Driver/runtime event classes of CUPTI_ACTIVITY_KIND_RUNTIME.eventClass as real exports store them.
const (
	eventClassRuntime = 0
	eventClassDriver  = 1
)

// AddRuntime adds a CUPTI_ACTIVITY_KIND_RUNTIME row.
func (w *Writer) AddRuntime(r Runtime) {
	w.span(r.Start, r.End)
	class := eventClassRuntime
	if r.Driver {
		class = eventClassDriver
	}
	// start, end, eventClass, globalTid, correlationId, nameId, returnValue, callchainId
	w.add(w.runtime, r.Start, r.End, class, w.thread(r.PID, r.TID), r.Correlation, w.str(r.Name), 0, nil)
}

// AddKernel adds a CUPTI_ACTIVITY_KIND_KERNEL row.
func (w *Writer) AddKernel(k Kernel) {
	w.span(k.Start, k.End)
	if k.TID != 0 {
		w.thread(k.PID, k.TID)
	}
	short := k.Short
	if short == "" {
		short = ShortName(k.Name)
	}
	w.gridID++
	grid := func(x int32) int32 {
		if x == 0 {
			return 1
		}
		return x
	}
	vals := make([]any, 0, w.kernels.cols)
	vals = append(vals, k.Start, k.End, k.Device, 1)
	if w.s.green() {
		vals = append(vals, nil)
	}
	vals = append(vals, k.Stream, k.Correlation, GlobalPid(k.PID),
		w.str(k.Name), w.str(short), w.str(Mangle(short)),
		0, 0, 32, // launchType, cacheConfig, registersPerThread
		grid(k.GridX), grid(k.GridY), grid(k.GridZ), grid(k.BlockX), grid(k.BlockY), grid(k.BlockZ),
		0, 0, 0, 0, // static/dynamic shared memory, local memory per thread/total
		w.gridID, 0, nil, 0) // gridId, sharedMemoryExecuted, graphNodeId, sharedMemoryLimitConfig
	if w.s.recent() {
		// qmdBulkReleaseDone, qmdPreexitDone, qmdLastCtaDone, graphId, clusterX..Z,
		// clusterSchedulingPolicy, maxPotentialClusterSize, maxActiveClusters,
		// sharedMemoryRequestedPercentage, tensorSizeMinusOneElements
		vals = append(vals, nil, nil, nil, nil, 0, 0, 0, 0, nil, nil, nil, nil)
	}
	w.add(w.kernels, vals...)
}

// memory kinds of ENUM_CUDA_MEM_KIND.
const (
	memPageable = 0
	memDevice   = 2
)

// AddMemop adds a CUPTI_ACTIVITY_KIND_MEMCPY or _MEMSET row.
func (w *Writer) AddMemop(m Memop) {
	w.span(m.Start, m.End)
	if m.Memset {
		vals := []any{m.Start, m.End, m.Device, 1}
		if w.s.green() {
			vals = append(vals, nil)
		}
		// value, bytes, graphNodeId, memKind
		vals = append(vals, m.Stream, m.Correlation, GlobalPid(m.PID), 0, m.Bytes, nil, memDevice)
		w.add(w.memset, vals...)
		return
	}
	src, dst := memDevice, memDevice
	switch m.CopyKind {
	case CopyHtoD:
		src = memPageable
	case CopyDtoH:
		dst = memPageable
	case CopyHtoH:
		src, dst = memPageable, memPageable
	}
	vals := []any{m.Start, m.End, m.Device, 1}
	if w.s.green() {
		vals = append(vals, nil)
	}
	vals = append(vals, m.Stream, m.Correlation, GlobalPid(m.PID), m.Bytes, m.CopyKind,
		nil, src, dst, // deprecatedSrcId, srcKind, dstKind
		m.Device, 1, m.Device, 1, // srcDeviceId, srcContextId, dstDeviceId, dstContextId
		nil, nil, nil) // migrationCause, graphNodeId, virtualAddress
	if w.s.recent() {
		vals = append(vals, 1) // copyCount
	}
	w.add(w.memcpy, vals...)
}

// NVTX event types of ENUM_NSYS_EVENT_TYPE.
const (
	nvtxPushPop      = 59
	nvtxDomainCreate = 75
)

// AddNVTX adds an NVTX push/pop range (and its domain's creation event the first time a named
// domain is seen).
func (w *Writer) AddNVTX(n NVTX) {
	w.span(n.Start, n.End)
	gtid := w.thread(n.PID, n.TID)
	var domainID int64
	var text, textID any = n.Text, nil
	if n.Domain != "" {
		id, ok := w.domains[n.Domain]
		if !ok {
			id = int64(len(w.domains) + 1)
			w.domains[n.Domain] = id
			w.nvtxRow(n.Start, nil, nvtxDomainCreate, n.Domain, gtid, nil, id)
		}
		domainID = id
		text, textID = nil, w.str(n.Text)
	}
	w.nvtxRow(n.Start, n.End, nvtxPushPop, text, gtid, textID, domainID)
}

func (w *Writer) nvtxRow(start int64, end any, eventType int, text any, gtid int64, textID any, domainID int64) {
	// start, end, eventType, rangeId, category, color, text, globalTid, endGlobalTid, textId,
	// domainId, then the payload union (uint64 .. jsonText).
	vals := []any{start, end, eventType, nil, nil, nil, text, gtid, nil, textID, domainID,
		nil, nil, nil, nil, nil, nil, nil, nil}
	if w.s.recent() {
		w.eventID++
		vals = append(vals, nil, w.eventID) // binaryData, eventId
	}
	w.add(w.nvtx, vals...)
}

// Close writes the derived tables (thread names, session details, metadata), commits, and
// closes the file. It returns the first error of the whole write.
func (w *Writer) Close() error {
	if w.db == nil {
		return errors.New("nsysgen: Close called twice")
	}
	defer func() { w.db = nil }()
	// Every thread that made a call gets a ThreadNames row; a process's main thread (tid ==
	// pid) carries the process name, as on Linux.
	tids := make([]int64, 0, len(w.seenTID))
	for g := range w.seenTID {
		tids = append(tids, g)
	}
	slices.Sort(tids)
	for _, g := range tids {
		pid, tid := int32(g>>24)&0xFFFFFF, int32(g)&0xFFFFFF
		name, ok := w.procNames[pid]
		if !ok || tid != pid {
			name = fmt.Sprintf("thread %d", tid)
		}
		w.add(w.threads, w.str(name), 10, g)
	}
	session := w.session
	if session == 0 {
		session = DefaultSessionStart
	}
	w.add(w.metaSession(), session, "", "")
	w.add(w.metaAnalysis(), int64(VM)<<48, w.stop-w.start, w.start, w.stop)
	meta := [][2]string{
		{"EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"},
		{"EXPORT_PRODUCT_VERSION", w.s.productVersion()},
		{"EXPORT_SCHEMA_VERSION", fmt.Sprintf("%d.%d.%d", w.s.major, w.s.minor, w.s.micro)},
		{"EXPORT_SCHEMA_VERSION_MAJOR", strconv.Itoa(w.s.major)},
		{"EXPORT_SCHEMA_VERSION_MINOR", strconv.Itoa(w.s.minor)},
		{"EXPORT_SCHEMA_VERSION_MICRO", strconv.Itoa(w.s.micro)},
		{"EXPORT_LAZY", "true"},
		{"EXPORT_GENERATOR", "runner nsysgen"},
	}
	mt := &table{name: w.s.metaTable(), cols: 2, created: true}
	for _, kv := range meta {
		w.add(mt, kv[0], kv[1])
	}
	w.flush(mt)
	for _, t := range w.all {
		w.flush(t)
		if t.full != nil {
			t.full.Close()
		}
	}
	if w.err != nil {
		w.tx.Rollback()
		w.db.Close()
		return w.err
	}
	if err := w.tx.Commit(); err != nil {
		w.db.Close()
		return fmt.Errorf("nsysgen: committing %s: %w", w.path, err)
	}
	if err := w.db.Close(); err != nil {
		return fmt.Errorf("nsysgen: closing %s: %w", w.path, err)
	}
	return nil
}

func (w *Writer) metaSession() *table {
	t := &table{name: "TARGET_INFO_SESSION_START_TIME", cols: 3, created: true}
	w.all = append(w.all, t)
	return t
}

func (w *Writer) metaAnalysis() *table {
	t := &table{name: "ANALYSIS_DETAILS", cols: 4, created: true}
	w.all = append(w.all, t)
	return t
}

func (w *Writer) writeEnums() {
	for _, e := range enums {
		w.execDDL(fmt.Sprintf("CREATE TABLE %s (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT)", e.table))
		t := &table{name: e.table, cols: 3, created: true}
		for _, v := range e.values {
			w.add(t, v.id, v.name, v.label)
		}
		w.flush(t)
	}
}

// ShortName derives nsys's shortName from a demangled kernel name: the function name without
// return type, namespace qualification, template arguments or parameter list
// ("void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)" → "vectorized_elementwise_kernel").
func ShortName(demangled string) string {
	s := demangled
	// Drop the parameter list: the last top-level "(...)".
	if i := topLevelParen(s); i >= 0 {
		s = s[:i]
	}
	// Drop template arguments at the end.
	s = strings.TrimSpace(s)
	for strings.HasSuffix(s, ">") {
		depth := 0
		cut := -1
		for i := len(s) - 1; i >= 0; i-- {
			switch s[i] {
			case '>':
				depth++
			case '<':
				depth--
			}
			if depth == 0 {
				cut = i
				break
			}
		}
		if cut <= 0 {
			break
		}
		s = strings.TrimSpace(s[:cut])
	}
	// Drop the return type and namespaces.
	if i := strings.LastIndexAny(s, " :"); i >= 0 {
		s = s[i+1:]
	}
	if s == "" {
		return demangled
	}
	return s
}

// topLevelParen returns the index of the "(" opening the trailing parameter list, or -1.
func topLevelParen(s string) int {
	if !strings.HasSuffix(strings.TrimSpace(s), ")") {
		return -1
	}
	depth := 0
	for i := len(s) - 1; i >= 0; i-- {
		switch s[i] {
		case ')':
			depth++
		case '(':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// Mangle returns a plausible Itanium-mangled symbol for a short name (a free function taking
// no arguments), so mangledName rows reference a realistic-looking string.
func Mangle(short string) string {
	return "_Z" + strconv.Itoa(len(short)) + short + "v"
}

func countColumns(ddl string) int {
	open := strings.IndexByte(ddl, '(')
	body := ddl[open+1 : strings.LastIndexByte(ddl, ')')]
	n := 0
	for _, line := range strings.Split(body, ",") {
		if strings.TrimSpace(line) != "" {
			n++
		}
	}
	return n
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '('); i >= 0 {
		return strings.TrimSpace(s[:i])
	}
	return s
}

// uriPath escapes the characters that would end the path part of an SQLite file: URI.
func uriPath(p string) string {
	return strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(p)
}
