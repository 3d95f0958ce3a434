package nsysdb

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/sglprof/runner/nsys/nsysgen"
	"github.com/sglprof/runner/reports/trace"
)

// largeExport writes an export big enough for multi-level b-trees (thousands of rows over
// hundreds of pages): n kernels on two devices and three streams, three runtime calls per
// kernel (every 50th a graph launch replaying two kernels), copies, memsets and NVTX ranges
// on two threads, from one process or from pids processes that reuse correlation ids.
func largeExport(t testing.TB, n, pids int) string {
	t.Helper()
	return largeExportNVTX(t, n, pids, true)
}

// largeExportNVTX is largeExport, without NVTX ranges when nvtx is false.
func largeExportNVTX(t testing.TB, n, pids int, nvtx bool) string {
	t.Helper()
	var e nsysgen.Export
	e.Version = "3.28.1"
	e.GPUs = []nsysgen.GPU{{ID: 0, Name: "GPU A"}, {ID: 1, Name: "GPU B"}}
	names := []string{
		"void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64>, false>(Flash_fwd_params)",
		"ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn",
		"void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, at::native::FillFunctor<float>)",
		"ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
		strings.Repeat("void very_long_template_name<", 200) + "int" + strings.Repeat(">", 200) + "()", // spills onto overflow pages
	}
	for p := 0; p < pids; p++ {
		pid := int32(1000 + p)
		e.Processes = append(e.Processes, nsysgen.Process{PID: pid, Name: fmt.Sprintf("rank%d", p)})
		t0 := int64(p) * 7
		for i := 0; i < n/pids; i++ {
			corr := int64(i + 1)
			tid := pid
			if i%3 == 2 {
				tid = pid + 1
			}
			name := "cudaLaunchKernel_v7000"
			if i%50 == 0 {
				name = "cudaGraphLaunch_v10000"
			}
			e.Runtime = append(e.Runtime,
				nsysgen.Runtime{Start: t0, End: t0 + 3_000 + int64(i%5)*100, PID: pid, TID: tid, Correlation: corr, Name: name},
				nsysgen.Runtime{Start: t0 + 3_500, End: t0 + 4_000, PID: pid, TID: tid, Name: "cudaEventRecord_v3020"},
				nsysgen.Runtime{Start: t0 + 4_500, End: t0 + 6_000 - int64(i%7)*10, PID: pid, TID: tid, Correlation: corr + int64(n), Name: "cudaMemcpyAsync_v3020"})
			dur := int64(2_000 + (i*7919)%50_000)
			k := nsysgen.Kernel{Start: t0 + 5_000, End: t0 + 5_000 + dur, Device: int32(i % 2), Stream: int32(7 + i%3), Correlation: corr,
				Name: names[(i*31)%len(names)], GridX: int32(1 + i%300), BlockX: 256, PID: pid, TID: tid}
			e.Kernels = append(e.Kernels, k)
			if i%50 == 0 {
				k.Start, k.End, k.Name = k.End, k.End+1_000, names[2]
				e.Kernels = append(e.Kernels, k)
			}
			if i%10 == 0 {
				e.Memops = append(e.Memops, nsysgen.Memop{Start: t0 + 6_000, End: t0 + 7_000, Device: int32(i % 2), Stream: 7,
					Correlation: corr + int64(n), Bytes: int64(i) << 10, CopyKind: nsysgen.CopyHtoD, Memset: i%20 == 0, PID: pid})
			}
			if nvtx && i%25 == 0 {
				e.NVTX = append(e.NVTX, nsysgen.NVTX{Start: t0, End: t0 + 25*8_000, PID: pid, TID: pid, Text: fmt.Sprintf("layer.%d", i/25%4)})
			}
			t0 += 8_000
		}
	}
	path := filepath.Join(t.TempDir(), fmt.Sprintf("large-%d-%d-%v.sqlite", n, pids, nvtx))
	if err := nsysgen.Write(path, e); err != nil {
		t.Fatal(err)
	}
	return path
}

// fastDiff is cmp.Diff behind a reflect.DeepEqual check. Values that are deeply equal are
// equal under every option these tests pass (options only ignore or loosen), and go-cmp's
// reflection walk of a whole capture was two fifths of this package's test CPU; the diff is
// computed only when DeepEqual fails, so a real difference is still reported as before.
func fastDiff(a, b any, opts ...cmp.Option) string {
	if reflect.DeepEqual(a, b) {
		return ""
	}
	return cmp.Diff(a, b, opts...)
}

// namesTransformer compares interners by their strings (they have unexported fields).
var namesTransformer = cmp.Transformer("names", func(n *trace.Names) []string {
	if n == nil {
		return nil
	}
	out := make([]string, n.Len())
	for i := range out {
		out[i] = n.String(trace.NameID(i))
	}
	return out
})

// captureDiff compares two captures field by field.
func captureDiff(a, b *Capture) string {
	return fastDiff(a, b, namesTransformer, cmpopts.IgnoreUnexported(Capture{}), cmpopts.EquateEmpty())
}

// exportsUnderTest are the exports the direct reader is checked on: generated ones of every
// schema, multi-level ones from one and from two processes, and the real fixture when present.
func exportsUnderTest(t *testing.T) map[string]string {
	paths := map[string]string{}
	for _, v := range []string{"3.28.1", "3.13.2", "2.9.1"} {
		paths["sample-"+v], _ = writeSample(t, v)
	}
	paths["large"] = largeExport(t, 3000, 1)
	paths["large-2ranks"] = largeExport(t, 2000, 2)
	if p := filepath.Join("..", "..", "..", "shared", "fixtures", pipit); fileExists(p) {
		paths["pipit"] = p
	}
	return paths
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestDirectReadMatchesSQLite is the oracle test of the direct file reader: every capture read
// with it equals the capture read through SQLite alone, and the big tables really were read
// directly (the reader logs each table it hands to SQLite).
func TestDirectReadMatchesSQLite(t *testing.T) {
	for name, path := range exportsUnderTest(t) {
		t.Run(name, func(t *testing.T) {
			var log bytes.Buffer
			direct, err := ReadCapture(context.Background(), path, ReadOptions{Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			if err != nil {
				t.Fatal(err)
			}
			viaSQL, err := ReadCapture(context.Background(), path, ReadOptions{noDirect: true})
			if err != nil {
				t.Fatal(err)
			}
			if d := captureDiff(viaSQL, direct); d != "" {
				t.Errorf("direct read differs from SQLite's (-sqlite +direct):\n%s", d)
			}
			if strings.Contains(log.String(), "through SQLite") {
				t.Errorf("a table fell back to SQLite:\n%s", log.String())
			}
			if len(direct.Trace.GPUOps) == 0 || len(direct.Trace.Launches) == 0 {
				t.Errorf("nothing read: %d ops, %d launches", len(direct.Trace.GPUOps), len(direct.Trace.Launches))
			}
		})
	}
}

// TestParallelScanMatchesSequential: the lean read on several goroutines gives the capture of
// the lean read on one, name ids included, with more parts than CPUs too.
func TestParallelScanMatchesSequential(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	for name, path := range exportsUnderTest(t) {
		for _, style := range []NameStyle{Demangled, Short} {
			var log bytes.Buffer
			o := ReadOptions{KernelNames: style, SummariseAPI: true, SkipKernelInfo: true,
				Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))}
			par, err := ReadCapture(context.Background(), path, o)
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(name, "large") && strings.Contains(log.String(), "one goroutine") {
				t.Errorf("%s: a table was not scanned in parts:\n%s", name, log.String())
			}
			o.Logger = nil
			o.noParallel = true
			seq, err := ReadCapture(context.Background(), path, o)
			if err != nil {
				t.Fatal(err)
			}
			if d := captureDiff(seq, par); d != "" {
				t.Errorf("%s style %d (-sequential +parallel):\n%s", name, style, d)
			}
		}
	}
}

// TestScanIntsMatchesSQL checks the scanner row by row against SQLite on the big tables.
func TestScanIntsMatchesSQL(t *testing.T) {
	path := largeExport(t, 3000, 1)
	f, db := openBoth(t, path)
	for _, tc := range []struct {
		table string
		cols  []string
	}{
		{"CUPTI_ACTIVITY_KIND_KERNEL", []string{"start", "end", "deviceId", "streamId", "correlationId", "globalPid", "demangledName", "gridX", "blockX", "registersPerThread"}},
		{"CUPTI_ACTIVITY_KIND_RUNTIME", []string{"start", "end", "globalTid", "correlationId", "nameId", "callchainId"}},
		{"CUPTI_ACTIVITY_KIND_MEMCPY", []string{"start", "end", "bytes", "copyKind"}},
	} {
		r := &reader{ctx: context.Background(), db: db, path: path, cols: map[string]map[string]bool{}}
		plan, err := r.planDirect(tc.table, append(tc.cols, "noSuchColumn"))
		if err != nil {
			t.Fatal(err)
		}
		var got [][]sql.NullInt64
		err = f.scanInts(context.Background(), plan.root, plan.cols, func(v []sql.NullInt64) error {
			got = append(got, append([]sql.NullInt64(nil), v...))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		rows, err := db.Query(`SELECT "` + strings.Join(tc.cols, `", "`) + `", NULL FROM ` + tc.table + ` ORDER BY rowid`)
		if err != nil {
			t.Fatal(err)
		}
		var want [][]sql.NullInt64
		for rows.Next() {
			v := make([]sql.NullInt64, len(tc.cols)+1)
			ptrs := make([]any, len(v))
			for i := range v {
				ptrs[i] = &v[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			want = append(want, v)
		}
		rows.Close()
		if len(want) < 1000 && tc.table != "CUPTI_ACTIVITY_KIND_MEMCPY" {
			t.Fatalf("%s: only %d rows; the test wants a multi-level b-tree", tc.table, len(want))
		}
		if d := fastDiff(want, got); d != "" {
			t.Errorf("%s (-sqlite +direct):\n%s", tc.table, d)
		}
		// Cut into parts, in part order the rows are the same.
		leaves, err := f.leafPages(plan.root)
		if err != nil || (len(leaves) < 8 && tc.table != "CUPTI_ACTIVITY_KIND_MEMCPY") {
			t.Fatalf("%s: %d leaves, %v", tc.table, len(leaves), err)
		}
		parts := make([][][]sql.NullInt64, 3)
		err = f.scanIntsParts(context.Background(), plan.root, plan.cols, 3, func(p int) func(int64, []sql.NullInt64) error {
			return func(_ int64, v []sql.NullInt64) error {
				parts[p] = append(parts[p], append([]sql.NullInt64(nil), v...))
				return nil
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(parts[0]) == 0 || (len(parts[2]) == 0 && len(leaves) >= 3) {
			t.Errorf("%s: parts of %d, %d, %d rows", tc.table, len(parts[0]), len(parts[1]), len(parts[2]))
		}
		if d := fastDiff(want, append(append(parts[0], parts[1]...), parts[2]...)); d != "" {
			t.Errorf("%s in parts (-sqlite +direct):\n%s", tc.table, d)
		}
		last, err := f.lastRowid(plan.root)
		if err != nil || last != int64(len(want)) {
			t.Errorf("%s: lastRowid %d, %v; %d rows", tc.table, last, err, len(want))
		}
	}
}

// valuesDB writes a database that exercises every record serial type, overflow chains, short
// records (columns added by ALTER TABLE), an INTEGER PRIMARY KEY and deleted rows, with the
// given page size and rows rows (the ALTER TABLE comes at half of them).
func valuesDB(t testing.TB, pageSize, rows int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), fmt.Sprintf("values-%d.sqlite", pageSize))
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	stmts := []string{
		"PRAGMA synchronous = OFF", // no fsync per commit; the file's contents are the same
		fmt.Sprintf("PRAGMA page_size = %d", pageSize),
		"CREATE TABLE v (a INTEGER, b REAL, c TEXT, d BLOB)",
		"CREATE TABLE k (id INTEGER PRIMARY KEY, x INTEGER)",
	}
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := db.Begin() // one transaction: no sync per row
	if err != nil {
		t.Fatal(err)
	}
	ints := []int64{0, 1, -1, 2, 127, -128, 128, 32767, -32768, 1 << 23, -(1 << 23), 1<<31 - 1, -(1 << 31), 1 << 40, -(1 << 47), 1<<62 + 5, -1 << 63, 1<<63 - 1}
	for i := 0; i < rows; i++ {
		var a, b, c, d any
		if i%11 != 0 {
			a = ints[i%len(ints)] * int64(1+i%3)
		}
		if i%7 != 0 {
			b = float64(i) / 8
		}
		if i%5 != 0 {
			c = strings.Repeat(string(rune('a'+i%26)), (i*37)%(3*pageSize)+i%2*pageSize)
		}
		if i%4 == 0 {
			d = bytes.Repeat([]byte{byte(i)}, 1+(i*53)%(2*pageSize)) // not empty: database/sql scans an empty blob as nil
		}
		if _, err := tx.Exec("INSERT INTO v (a, b, c, d) VALUES (?, ?, ?, ?)", a, b, c, d); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec("INSERT INTO k (id, x) VALUES (?, ?)", int64(i)*1000-300000, i); err != nil {
			t.Fatal(err)
		}
		if i == rows/2 {
			if _, err := tx.Exec("ALTER TABLE v ADD COLUMN e INTEGER"); err != nil {
				t.Fatal(err)
			}
		}
		if i > rows/2 {
			if _, err := tx.Exec("UPDATE v SET e = ? WHERE rowid = ?", i, i+1); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := tx.Exec("DELETE FROM v WHERE rowid % 13 = 0"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestScanValuesMatchSQL checks the generic decoder (every serial type, text and blob across
// overflow pages, NULL for columns a record lacks, the rowid of an INTEGER PRIMARY KEY)
// against SQLite at the smallest and the largest page size.
func TestScanValuesMatchSQL(t *testing.T) {
	for _, ps := range []int{512, 4096, 65536} {
		t.Run(fmt.Sprint(ps), func(t *testing.T) {
			path := valuesDB(t, ps, 600)
			f, db := openBoth(t, path)
			if f.pageSize != ps {
				t.Fatalf("page size %d", f.pageSize)
			}
			rootOf := func(table string) uint32 { return rootPage(t, db, table) }
			show := func(v sqlValue) string {
				switch v.Kind {
				case valInt:
					return fmt.Sprint("i", v.Int)
				case valFloat:
					return fmt.Sprint("f", v.Float)
				case valText:
					return "t" + string(v.Bytes)
				case valBlob:
					return fmt.Sprintf("b%x", v.Bytes)
				}
				return "null"
			}
			var got []string
			err := f.scan(context.Background(), rootOf("v"), []int{4, 0, 1, 2, 3}, -1, func(rowid int64, v []sqlValue) error {
				if v[2].Kind == valInt { // column b has REAL affinity: integral reals are stored as integers
					v[2] = sqlValue{Kind: valFloat, Float: float64(v[2].Int)}
				}
				got = append(got, fmt.Sprint(rowid, show(v[0]), show(v[1]), show(v[2]), show(v[3]), show(v[4])))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			rows, err := db.Query(`SELECT rowid, e, a, b, c, d FROM v ORDER BY rowid`)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for rows.Next() {
				var rowid int64
				var e, a sql.NullInt64
				var b sql.NullFloat64
				var c sql.NullString
				var d []byte
				if err := rows.Scan(&rowid, &e, &a, &b, &c, &d); err != nil {
					t.Fatal(err)
				}
				cell := func(ok bool, s string) string {
					if !ok {
						return "null"
					}
					return s
				}
				want = append(want, fmt.Sprint(rowid, cell(e.Valid, fmt.Sprint("i", e.Int64)), cell(a.Valid, fmt.Sprint("i", a.Int64)),
					cell(b.Valid, fmt.Sprint("f", b.Float64)), cell(c.Valid, "t"+c.String), cell(d != nil, fmt.Sprintf("b%x", d))))
			}
			rows.Close()
			if d := fastDiff(want, got); d != "" {
				t.Errorf("table v (-sqlite +direct):\n%s", d)
			}
			// INTEGER PRIMARY KEY: the record holds NULL, the rowid is the value.
			var keys []string
			err = f.scan(context.Background(), rootOf("k"), []int{0, 1}, 0, func(_ int64, v []sqlValue) error {
				keys = append(keys, show(v[0])+" "+show(v[1]))
				return nil
			})
			if err != nil || len(keys) != 600 || keys[0] != "i-300000 i0" || keys[599] != "i299000 i599" {
				t.Errorf("keys: %v, %d rows, first %q", err, len(keys), keys[:min(1, len(keys))])
			}
		})
	}
}

// TestDirectReaderRefuses: what the direct reader does not handle is an errFileLayout, and the
// export reader then reads the table through SQLite with the same result.
func TestDirectReaderRefuses(t *testing.T) {
	ctx := context.Background()
	same := func(t *testing.T, path string) {
		t.Helper()
		for _, lean := range []bool{false, true} {
			direct, err := ReadCapture(ctx, path, ReadOptions{SummariseAPI: lean, SkipKernelInfo: lean})
			if err != nil {
				t.Fatal(err)
			}
			viaSQL, err := ReadCapture(ctx, path, ReadOptions{SummariseAPI: lean, SkipKernelInfo: lean, noDirect: true})
			if err != nil {
				t.Fatal(err)
			}
			if d := captureDiff(viaSQL, direct); d != "" {
				t.Errorf("lean %v (-sqlite +direct):\n%s", lean, d)
			}
		}
	}
	t.Run("wal", func(t *testing.T) {
		path := largeExport(t, 500, 1)
		mutate(t, path, "PRAGMA journal_mode = WAL")
		if _, err := openSQLFile(path); !errors.Is(err, errFileLayout) {
			t.Fatalf("WAL database opened directly: %v", err)
		}
		same(t, path)
	})
	t.Run("text-in-integer-column-late", func(t *testing.T) {
		// The scan has delivered rows when it meets the text: the reader must drop them
		// (reset) and start over through SQLite, which converts '7' to 7.
		path := largeExport(t, 2000, 1)
		mutate(t, path, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridX = '7' WHERE rowid = 1900",
			"UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = '12' WHERE rowid = 5000")
		same(t, path)
		c, err := ReadCapture(ctx, path, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c.Kernels[len(c.Kernels)-1].Op != int32(len(c.Kernels)-1) || c.APICalls != len(c.Trace.Launches) {
			t.Errorf("rows of the abandoned direct scan were kept: %d kernels, %d calls, %d launches", len(c.Kernels), c.APICalls, len(c.Trace.Launches))
		}
	})
	t.Run("nvtx-odd-values", func(t *testing.T) {
		// An integer and a blob in the text column are converted as database/sql does; a real
		// sends the table through SQLite.
		path, _ := writeSample(t, "3.28.1")
		mutate(t, path, "UPDATE NVTX_EVENTS SET text = 42 WHERE rowid = 1", "UPDATE NVTX_EVENTS SET text = CAST('blob' AS BLOB) WHERE rowid = 4")
		same(t, path)
		c, err := ReadCapture(ctx, path, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Trace.Name(c.Trace.Annotations[0].Name); got != "42" {
			t.Errorf("first range %q, want 42", got)
		}
		mutate(t, path, "UPDATE NVTX_EVENTS SET text = 1.5 WHERE rowid = 5")
		same(t, path)
	})
	t.Run("without-rowid", func(t *testing.T) {
		path, _ := writeSample(t, "3.28.1")
		mutate(t, path,
			"CREATE TABLE k2 (start INTEGER, end INTEGER, deviceId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER PRIMARY KEY, globalPid INTEGER, demangledName INTEGER, shortName INTEGER) WITHOUT ROWID",
			"INSERT INTO k2 SELECT start, end, deviceId, streamId, correlationId * 10 + rowid, globalPid, demangledName, shortName FROM CUPTI_ACTIVITY_KIND_KERNEL",
			"DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL", "ALTER TABLE k2 RENAME TO CUPTI_ACTIVITY_KIND_KERNEL")
		same(t, path)
	})
	t.Run("default-value", func(t *testing.T) {
		path, _ := writeSample(t, "3.28.1")
		mutate(t, path, "ALTER TABLE CUPTI_ACTIVITY_KIND_MEMCPY ADD COLUMN extra INTEGER DEFAULT 5",
			"ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME COLUMN gridZ TO gridZold",
			"ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL ADD COLUMN gridZ INTEGER DEFAULT 3")
		same(t, path)
		c, err := ReadCapture(ctx, path, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c.Kernels[0].Grid[2] != 3 {
			t.Errorf("gridZ %d, want the column default 3", c.Kernels[0].Grid[2])
		}
	})
	t.Run("corrupt-page", func(t *testing.T) {
		path := largeExport(t, 2000, 1)
		db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
		if err != nil {
			t.Fatal(err)
		}
		var root int64
		err = db.QueryRow(`SELECT rootpage FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL'`).Scan(&root)
		db.Close()
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		// The root is an interior page; its first child pointer now leads outside the file.
		page := make([]byte, 4096)
		if _, err := f.ReadAt(page, (root-1)*4096); err != nil || page[0] != 0x05 {
			t.Fatalf("root page type %#x, %v", page[0], err)
		}
		ptr := int(page[12])<<8 | int(page[13])
		if _, err := f.WriteAt([]byte{0x7f, 0xff, 0xff, 0xff}, (root-1)*4096+int64(ptr)); err != nil {
			t.Fatal(err)
		}
		f.Close()
		sf, err := openSQLFile(path)
		if err != nil {
			t.Fatal(err)
		}
		defer sf.Close()
		err = sf.scanInts(ctx, uint32(root), []int{0}, func([]sql.NullInt64) error { return nil })
		if !errors.Is(err, errFileLayout) {
			t.Errorf("scan of a corrupt tree: %v", err)
		}
		// SQLite is then asked and says the file is damaged; no panic, no partial capture.
		if _, err := ReadCapture(ctx, path, ReadOptions{}); err == nil {
			t.Errorf("a corrupt export read without error")
		}
	})
}

// TestSummariseAPIMatchesFullRead: the triage's lean read (API calls aggregated, only the
// calls that launched GPU ops kept, no KernelInfo) gives the same tables, links, warnings,
// window and event count as the full read.
func TestSummariseAPIMatchesFullRead(t *testing.T) {
	ctx := context.Background()
	for name, path := range exportsUnderTest(t) {
		for _, style := range []NameStyle{Demangled, Short, Mangled} {
			t.Run(fmt.Sprint(name, "/", style), func(t *testing.T) {
				full, err := ReadCapture(ctx, path, ReadOptions{KernelNames: style})
				if err != nil {
					t.Fatal(err)
				}
				lean, err := ReadCapture(ctx, path, ReadOptions{KernelNames: style, SummariseAPI: true, SkipKernelInfo: true})
				if err != nil {
					t.Fatal(err)
				}
				if len(lean.Kernels) != 0 || len(lean.Trace.Launches) > len(full.Trace.Launches) {
					t.Errorf("lean read kept %d kernel infos, %d of %d launches", len(lean.Kernels), len(lean.Trace.Launches), len(full.Trace.Launches))
				}
				if d := fastDiff(Summaries(full, 0), Summaries(lean, 0)); d != "" {
					t.Errorf("tables (-full +lean):\n%s", d)
				}
				type link struct {
					Start, End int64
					PID, TID   int32
					Name       string
					Graph      bool
				}
				links := func(c *Capture) []link {
					out := make([]link, len(c.Trace.GPUOps))
					for i, op := range c.Trace.GPUOps {
						if op.Launch != trace.NoID {
							l := c.Trace.Launches[op.Launch]
							out[i] = link{l.Start, l.End, l.PID, l.TID, c.Trace.Name(l.Name), l.Graph}
						}
					}
					return out
				}
				if d := fastDiff(links(full), links(lean)); d != "" {
					t.Errorf("op launches (-full +lean):\n%s", d)
				}
				// The lean read interns fewer names, so names are compared as text.
				type namedOp struct {
					Op   trace.GPUOp
					Name string
				}
				named := func(c *Capture) []namedOp {
					out := make([]namedOp, len(c.Trace.GPUOps))
					for i, op := range c.Trace.GPUOps {
						out[i] = namedOp{op, c.Trace.Name(op.Name)}
						out[i].Op.Name, out[i].Op.Launch = 0, 0
					}
					return out
				}
				if d := fastDiff(named(full), named(lean)); d != "" {
					t.Errorf("ops (-full +lean):\n%s", d)
				}
				if d := fastDiff(Scopes(full.Trace, nil), Scopes(lean.Trace, nil)); d != "" {
					t.Errorf("scopes (-full +lean):\n%s", d)
				}
				if full.Trace.Events != lean.Trace.Events || full.WindowStart != lean.WindowStart || full.WindowEnd != lean.WindowEnd || full.APICalls != lean.APICalls {
					t.Errorf("events %d/%d window %d-%d/%d-%d calls %d/%d", full.Trace.Events, lean.Trace.Events,
						full.WindowStart, full.WindowEnd, lean.WindowStart, lean.WindowEnd, full.APICalls, lean.APICalls)
				}
				if d := fastDiff(full.Trace.Warnings, lean.Trace.Warnings); d != "" {
					t.Errorf("warnings (-full +lean):\n%s", d)
				}
				if d := fastDiff(full.Trace.Processes, lean.Trace.Processes); d != "" {
					t.Errorf("processes (-full +lean):\n%s", d)
				}
				if d := fastDiff(full.Trace.Meta, lean.Trace.Meta); d != "" {
					t.Errorf("meta (-full +lean):\n%s", d)
				}
			})
		}
	}
}

// TestSummariseAPIUnlinkedWarning: a kernel without its launch call is warned about in the
// lean read as in the full one, though the lean read keeps no call at all.
func TestSummariseAPIUnlinkedWarning(t *testing.T) {
	path, _ := writeSample(t, "3.28.1")
	mutate(t, path, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = correlationId + 100")
	for _, o := range []ReadOptions{{}, {SummariseAPI: true}} {
		c, err := ReadCapture(context.Background(), path, o)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(c.Trace.Warnings, "\n"), "5 of 9 GPU ops have no launch call") {
			t.Errorf("SummariseAPI=%v: warnings %q", o.SummariseAPI, c.Trace.Warnings)
		}
	}
}

// FuzzSQLFileScan feeds damaged database files to the direct reader: it must end (no cycle,
// no endless overflow chain) and never panic, whatever the pages say.
func FuzzSQLFileScan(f *testing.F) {
	path := valuesDB(f, 512, 40) // small, so that the fuzzer mutates fast
	seed, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed, uint16(2), uint16(0))
	f.Add(seed, uint16(3), uint16(700))
	f.Add(seed[:2048], uint16(2), uint16(100))
	f.Add(seed, uint16(1), uint16(30))
	f.Fuzz(func(t *testing.T, data []byte, root uint16, flip uint16) {
		data = append([]byte(nil), data...)
		if int(flip) < len(data) && flip >= 100 {
			data[flip] ^= 0xff
		}
		s, err := newSQLFile(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			if !errors.Is(err, errFileLayout) {
				t.Fatalf("header error %v is not errFileLayout", err)
			}
			return
		}
		rows := 0
		limit := int(s.pages) * s.pageSize // a row takes at least a byte of a page
		err = s.scan(context.Background(), uint32(root), []int{0, 1, 2, 3, 4}, -1, func(_ int64, v []sqlValue) error {
			rows++
			if rows > limit {
				t.Fatalf("%d rows from %d pages", rows, s.pages)
			}
			for _, x := range v {
				if x.Kind > valBlob {
					t.Fatalf("kind %d", x.Kind)
				}
			}
			return nil
		})
		if err != nil && !errors.Is(err, errFileLayout) {
			t.Fatalf("scan error %v is not errFileLayout", err)
		}
		_ = s.scanInts(context.Background(), uint32(root), []int{0, 3, -1}, func([]sql.NullInt64) error { return nil })
		_, _ = s.lastRowid(uint32(root))
		_ = s.scanIntsParts(context.Background(), uint32(root), []int{1, 0}, 3, func(int) func(int64, []sql.NullInt64) error {
			return func(int64, []sql.NullInt64) error { return nil }
		})
	})
}

// TestKernelSummaryDirectMatchesSQL: the Go GROUP BY over the direct reader gives SQLite's
// per-name counts and sums, for every name style.
func TestKernelSummaryDirectMatchesSQL(t *testing.T) {
	for name, path := range exportsUnderTest(t) {
		for _, style := range []NameStyle{Demangled, Short, Mangled} {
			direct, err := kernelSummary(context.Background(), path, style, true)
			if err != nil {
				t.Fatal(err)
			}
			viaSQL, err := kernelSummary(context.Background(), path, style, false)
			if err != nil {
				t.Fatal(err)
			}
			if d := fastDiff(viaSQL, direct); d != "" {
				t.Errorf("%s style %d (-sqlite +direct):\n%s", name, style, d)
			}
			if len(direct) == 0 {
				t.Errorf("%s: no rows", name)
			}
		}
	}
}

// TestSparseRowidIsNotACount: a table whose last rowid is far beyond what the file could
// hold is read without presizing for that many rows, and reads as through SQLite.
func TestSparseRowidIsNotACount(t *testing.T) {
	path, _ := writeSample(t, "3.28.1")
	mutate(t, path, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET rowid = 4611686018427387904 WHERE rowid = (SELECT max(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)")
	f, db := openBoth(t, path)
	r := &reader{ctx: context.Background(), db: db, path: path, file: f, cols: map[string]map[string]bool{}}
	if n := r.rowEstimate("CUPTI_ACTIVITY_KIND_KERNEL"); n != 0 {
		t.Errorf("row estimate %d for a table of 5 rows with a huge rowid", n)
	}
	if n := r.rowEstimate("CUPTI_ACTIVITY_KIND_RUNTIME"); n != 9 {
		t.Errorf("row estimate %d for the 9 runtime calls", n)
	}
	direct, err := ReadCapture(context.Background(), path, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	viaSQL, err := ReadCapture(context.Background(), path, ReadOptions{noDirect: true})
	if err != nil {
		t.Fatal(err)
	}
	if d := captureDiff(viaSQL, direct); d != "" || len(direct.Kernels) != 5 {
		t.Errorf("%d kernels; (-sqlite +direct):\n%s", len(direct.Kernels), d)
	}
}

// TestOneLaunchPerName: with ReadOptions.OneLaunchPerName an export without NVTX ranges and
// with one process keeps one launch per call name and graph flag, and every op links to the
// one of its own call's name; the tables, warnings, window and event count are the lean
// read's. With NVTX ranges, several processes or a repeated correlation id, every launching
// call is kept as without the option. Both on one goroutine and in parts.
func TestOneLaunchPerName(t *testing.T) {
	ctx := context.Background()
	repeated := largeExportNVTX(t, 2000, 1, false)
	mutate(t, repeated, "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = 7 WHERE rowid = 5000")
	sparse := largeExportNVTX(t, 2000, 1, false)
	mutate(t, sparse, "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = 900000000 WHERE correlationId = (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid = 10)",
		"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = 900000000 WHERE rowid = 10")
	for _, tc := range []struct {
		name    string
		path    string
		perName bool
	}{
		{"no-nvtx", largeExportNVTX(t, 3000, 1, false), true},
		{"nvtx", largeExport(t, 3000, 1), false},
		{"two-ranks", largeExportNVTX(t, 2000, 2, false), false},
		{"repeated-id", repeated, false},
		{"sparse-ids", sparse, false},
	} {
		for _, seq := range []bool{false, true} {
			t.Run(fmt.Sprint(tc.name, "/sequential=", seq), func(t *testing.T) {
				lean, err := ReadCapture(ctx, tc.path, ReadOptions{SummariseAPI: true, SkipKernelInfo: true, noParallel: seq})
				if err != nil {
					t.Fatal(err)
				}
				one, err := ReadCapture(ctx, tc.path, ReadOptions{SummariseAPI: true, SkipKernelInfo: true, OneLaunchPerName: true, noParallel: seq})
				if err != nil {
					t.Fatal(err)
				}
				if one.OneLaunchPerName != tc.perName || lean.OneLaunchPerName {
					t.Fatalf("OneLaunchPerName %v, want %v", one.OneLaunchPerName, tc.perName)
				}
				type link struct {
					Name  string
					Graph bool
				}
				links := func(c *Capture) []link {
					out := make([]link, len(c.Trace.GPUOps))
					for i, op := range c.Trace.GPUOps {
						if op.Launch != trace.NoID {
							l := c.Trace.Launches[op.Launch]
							out[i] = link{c.Trace.Name(l.Name), l.Graph}
						}
					}
					return out
				}
				if d := fastDiff(links(lean), links(one)); d != "" {
					t.Errorf("op launches (-lean +one per name):\n%s", d)
				}
				if tc.perName {
					if len(one.Trace.Launches) != 3 { // cudaLaunchKernel, cudaGraphLaunch, cudaMemcpyAsync
						t.Errorf("%d launches, want one per call name", len(one.Trace.Launches))
					}
				} else if len(one.Trace.Launches) != len(lean.Trace.Launches) {
					t.Errorf("%d launches kept, the lean read keeps %d", len(one.Trace.Launches), len(lean.Trace.Launches))
				}
				if d := fastDiff(Summaries(lean, 0), Summaries(one, 0)); d != "" {
					t.Errorf("tables (-lean +one per name):\n%s", d)
				}
				if d := fastDiff(lean.Trace.Warnings, one.Trace.Warnings); d != "" {
					t.Errorf("warnings (-lean +one per name):\n%s", d)
				}
				if lean.Trace.Events != one.Trace.Events || lean.WindowStart != one.WindowStart || lean.WindowEnd != one.WindowEnd ||
					lean.APICalls != one.APICalls || len(lean.Trace.GPUOps) != len(one.Trace.GPUOps) {
					t.Errorf("events %d/%d window %d-%d/%d-%d calls %d/%d", lean.Trace.Events, one.Trace.Events,
						lean.WindowStart, lean.WindowEnd, one.WindowStart, one.WindowEnd, lean.APICalls, one.APICalls)
				}
				if d := fastDiff(lean.Trace.Processes, one.Trace.Processes); d != "" {
					t.Errorf("processes (-lean +one per name):\n%s", d)
				}
			})
		}
	}
}

// TestFileTruncated: a file that shrinks after it was opened (an export being rewritten) ends
// the direct scan with errFileLayout, which sends the table through SQLite, instead of rows
// read past the end.
func TestFileTruncated(t *testing.T) {
	src := largeExportNVTX(t, 3000, 1, false)
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "shrinking.sqlite")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := openSQLFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	root, cols := kernelRootAndCols(t, path)
	if err := os.Truncate(path, int64(len(data)/4)); err != nil {
		t.Fatal(err)
	}
	rows := 0
	err = s.scanInts(context.Background(), root, cols, func([]sql.NullInt64) error { rows++; return nil })
	if !errors.Is(err, errFileLayout) {
		t.Errorf("scan of a truncated file: %d rows, err = %v, want errFileLayout", rows, err)
	}
	_, err = s.leafPages(root)
	t.Logf("leafPages after truncation: %v", err)
}

// kernelRootAndCols returns the kernel table's root page and the record positions of its
// start and end columns.
func kernelRootAndCols(t *testing.T, path string) (uint32, []int) {
	t.Helper()
	db, _, err := openExport(path, "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r := &reader{ctx: context.Background(), db: db, path: path}
	p, err := r.planDirect("CUPTI_ACTIVITY_KIND_KERNEL", []string{"start", "end"})
	if err != nil {
		t.Fatal(err)
	}
	return p.root, p.cols
}

// TestReadAheadFollowsTheLeaves: a scan of a table whose leaves lie scattered over the file
// (a small table written between a big one's rows, as an export's NVTX table lies among the
// kernels and calls) reads about its own pages, not a whole read-ahead window for each; a
// table whose leaves are close together is still read a window at a time.
func TestReadAheadFollowsTheLeaves(t *testing.T) {
	path := filepath.Join(t.TempDir(), "scattered.sqlite")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	for _, s := range []string{
		"PRAGMA synchronous = OFF",
		"PRAGMA page_size = 4096",
		"CREATE TABLE big (a INTEGER, pad BLOB)",
		"CREATE TABLE small (a INTEGER, pad BLOB)",
		"BEGIN",
	} {
		if _, err := db.Exec(s); err != nil {
			t.Fatal(err)
		}
	}
	// Four small rows fill a leaf, and 20 big rows (a page each) are written after each small
	// one: the small table's leaves lie 80 pages apart, more than a window.
	for i := 0; i < 200; i++ {
		if _, err := db.Exec("INSERT INTO small VALUES (?, zeroblob(900))", i); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`INSERT INTO big WITH RECURSIVE n(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM n WHERE x < 19)
			SELECT ? * 20 + x, zeroblob(3000) FROM n`, i); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec("COMMIT"); err != nil {
		t.Fatal(err)
	}
	roots := map[string]uint32{}
	for _, name := range []string{"big", "small"} {
		roots[name] = rootPage(t, db, name)
	}
	db.Close()
	f, err := openSQLFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for name, root := range roots {
		leaves, err := f.leafPages(root)
		if err != nil {
			t.Fatal(err)
		}
		rows := 0
		ts := &tableScan{s: f, rowidAt: -1, ints: make([]sql.NullInt64, 1), fnInts: func([]sql.NullInt64) error { rows++; return nil }}
		if err := ts.run(context.Background(), root, []int{0}); err != nil {
			t.Fatal(err)
		}
		// The leaves, the interior pages (a few) and a window's worth past the last leaf.
		if limit := int64(len(leaves)) + 2*readAhead; ts.win.read > limit {
			t.Errorf("%s: %d rows on %d leaves: %d pages read, want at most %d", name, rows, len(leaves), ts.win.read, limit)
		}
		t.Logf("%s: %d rows on %d leaves: %d pages read", name, rows, len(leaves), ts.win.read)
		var par atomic.Int64
		err = f.scanIntsParts(context.Background(), root, []int{0}, 2, func(int) func(int64, []sql.NullInt64) error {
			return func(int64, []sql.NullInt64) error { par.Add(1); return nil }
		})
		if err != nil || par.Load() != int64(rows) {
			t.Errorf("%s: parallel scan: %d rows (%d sequential), %v", name, par.Load(), rows, err)
		}
	}
}

// TestScanIntsWritesEveryColumn: the integer scan writes each position of its row once per row
// (a value, or NULL for a NULL column, a column past a short record's end or a column the
// table lacks) instead of clearing the row first, so a caller may move the
// row between rows (the kernel decoder points it into its batch, whose memory held other
// rows): rows decoded into memory full of stale values are SQLite's.
func TestScanIntsWritesEveryColumn(t *testing.T) {
	path := valuesDB(t, 512, 300)
	f, db := openBoth(t, path)
	root := rootPage(t, db, "v")
	// a (NULL in some rows), e (added by ALTER TABLE: past the end of the older records), a
	// column the table lacks; b, c and d (real, text, blob) are skipped.
	cols := []int{0, 4, -1}
	stale := func() []sql.NullInt64 {
		v := make([]sql.NullInt64, len(cols))
		for i := range v {
			v[i] = sql.NullInt64{Int64: -7, Valid: true}
		}
		return v
	}
	var got [][]sql.NullInt64
	ts := &tableScan{s: f, rowidAt: -1, ints: stale()}
	ts.fnRow = func(_ int64, v []sql.NullInt64) error {
		got = append(got, append([]sql.NullInt64(nil), v...))
		ts.ints = stale()
		return nil
	}
	if err := ts.run(context.Background(), root, cols); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Query(`SELECT a, e, NULL FROM v ORDER BY rowid`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var want [][]sql.NullInt64
	nulls := [2]int{}
	for rows.Next() {
		v := make([]sql.NullInt64, len(cols))
		if err := rows.Scan(&v[0], &v[1], &v[2]); err != nil {
			t.Fatal(err)
		}
		for i := range nulls {
			if !v[i].Valid {
				nulls[i]++
			}
		}
		want = append(want, v)
	}
	if nulls[0] == 0 || nulls[1] == 0 || nulls[1] == len(want) {
		t.Fatalf("NULLs per column %v of %d rows: the table does not exercise the NULL cases", nulls, len(want))
	}
	if d := fastDiff(want, got); d != "" {
		t.Errorf("(-sqlite +direct):\n%s", d)
	}
}

// TestRecordIntsDecodesAndRefuses: recordInts decodes every integer serial type, skips a
// column whose serial type takes two header bytes, and refuses a record whose columns run
// off its end (a skipped column included), a reserved serial type, a real in a wanted column
// and a header larger than the record, as errFileLayout rather than a panic.
func TestRecordIntsDecodesAndRefuses(t *testing.T) {
	text := strings.Repeat("x", 60) // serial type 133: two header bytes (0x81 0x05)
	body := []byte(text)
	body = append(body, 0x80)                                           // 1: -128
	body = append(body, 0x80, 0x01)                                     // 2: -32767
	body = append(body, 0xff, 0xff, 0xfe)                               // 3: -2
	body = append(body, 0x7f, 0xff, 0xff, 0xff)                         // 4: 2147483647
	body = append(body, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfd)             // 6 bytes: -3
	body = append(body, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01) // 8 bytes: MinInt64+1
	hdr := []byte{0x81, 0x05, 1, 2, 3, 4, 5, 6, 8, 9, 0}
	rec := append([]byte{byte(len(hdr) + 1)}, hdr...)
	rec = append(rec, body...)
	want := []sql.NullInt64{{Int64: -128, Valid: true}, {Int64: -32767, Valid: true}, {Int64: -2, Valid: true},
		{Int64: math.MaxInt32, Valid: true}, {Int64: -3, Valid: true}, {Int64: math.MinInt64 + 1, Valid: true},
		{Int64: 0, Valid: true}, {Int64: 1, Valid: true}, {}, {}}
	cols := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10} // 10 is past the record's end
	decode := func(rec []byte) ([]sql.NullInt64, error) {
		ts := &tableScan{rowidAt: -1, ints: make([]sql.NullInt64, len(cols))}
		for i := range ts.ints {
			ts.ints[i] = sql.NullInt64{Int64: -7, Valid: true}
		}
		var got []sql.NullInt64
		ts.fnInts = func(v []sql.NullInt64) error { got = append(got, v...); return nil }
		ts.plan(cols)
		err := ts.recordInts(rec, 1)
		return got, err
	}
	got, err := decode(rec)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("decoded %v, want %v", got, want)
	}
	short := slices.Clone(rec[:len(rec)-3]) // the 8-byte column runs off the end
	skipped := slices.Clone(rec[:1+len(hdr)+10])
	skipped = append(skipped, 0x80) // the text column (skipped) claims 60 bytes and has 11
	reserved := slices.Clone(rec)
	reserved[3] = 10
	real := slices.Clone(rec)
	real[3] = 7
	bigHeader := slices.Clone(rec)
	bigHeader[0] = byte(len(rec) + 1)
	for name, r := range map[string][]byte{"short": short, "skipped-short": skipped, "reserved": reserved,
		"real": real, "header": bigHeader, "empty": nil} {
		if _, err := decode(r); !errors.Is(err, errFileLayout) {
			t.Errorf("%s: err = %v, want errFileLayout", name, err)
		}
	}
}

// openBoth opens the export at path twice: with the page reader and, read-only, through
// SQLite, the oracle the page reader is held to; both close when the test ends.
func openBoth(t *testing.T, path string) (*sqlFile, *sql.DB) {
	t.Helper()
	f, err := openSQLFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return f, db
}

// rootPage is the b-tree root page of table, as SQLite's schema gives it.
func rootPage(t testing.TB, db *sql.DB, table string) uint32 {
	t.Helper()
	var root uint32
	if err := db.QueryRow(`SELECT rootpage FROM sqlite_master WHERE name = ?`, table).Scan(&root); err != nil {
		t.Fatal(err)
	}
	return root
}

// fastDiff answers as cmp.Diff does: empty for equal values, also under an option that only
// DeepEqual would not accept, and the same report for a difference.
func TestFastDiffIsCmpDiff(t *testing.T) {
	type rec struct {
		A []int
		B string
	}
	for _, c := range []struct {
		a, b rec
		opts []cmp.Option
	}{
		{rec{[]int{1}, "x"}, rec{[]int{1}, "x"}, nil},
		{rec{nil, "x"}, rec{[]int{}, "x"}, []cmp.Option{cmpopts.EquateEmpty()}},
		{rec{nil, "x"}, rec{[]int{}, "x"}, nil},
		{rec{[]int{1}, "x"}, rec{[]int{2}, "x"}, nil},
	} {
		if got, want := fastDiff(c.a, c.b, c.opts...), cmp.Diff(c.a, c.b, c.opts...); got != want {
			t.Errorf("fastDiff(%+v, %+v) = %q, cmp.Diff says %q", c.a, c.b, got, want)
		}
	}
}
