package nsysdb

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// layoutSpec describes a database built by modernc's SQLite to exercise the parts of the file
// format a freshly written export does not have: pointer-map pages and pages moved by
// auto-vacuum, freelist trunk and leaf pages, b-tree pages reused out of order.
type layoutSpec struct {
	pageSize   int
	autoVacuum string // NONE, FULL or INCREMENTAL
	rows       int
	deleteMod  int  // every deleteMod-th row (by rowid) is deleted at the end; 0: none
	dropOther  bool // a second table, as large, is dropped: its pages go to the freelist
	incVacuum  int  // INCREMENTAL: pages handed back by PRAGMA incremental_vacuum(n) at the end
	seed       uint64
}

// layoutDB writes the database of spec and returns its path. Table v has no declared column
// types, so every value is stored as inserted (a REAL affinity would store integral reals as
// integers); values are drawn from spec.seed: NULLs, integers of every width, reals, text and
// blobs from empty to several pages (overflow chains).
func layoutDB(t testing.TB, spec layoutSpec) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), fmt.Sprintf("layout-%d-%s.sqlite", spec.pageSize, spec.autoVacuum))
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// No fsync per commit: the layout on disk is the same, and the test is not about durability.
	exec("PRAGMA synchronous = OFF")
	// auto_vacuum must be set before the first table is created.
	exec(fmt.Sprintf("PRAGMA page_size = %d", spec.pageSize))
	exec("PRAGMA auto_vacuum = " + spec.autoVacuum)
	exec("CREATE TABLE v (a, b, c, d)")
	exec("CREATE TABLE w (x, y)")
	exec("CREATE INDEX v_a ON v (a)")
	rng := rand.New(rand.NewPCG(spec.seed, spec.seed^0x9e3779b97f4a7c15))
	// Several transactions: each commit of an auto-vacuum database moves pages to the end.
	for done := 0; done < spec.rows; {
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		for n := min(spec.rows-done, 1+spec.rows/4); n > 0; n-- {
			a, b, c, d := layoutValue(rng, spec.pageSize), layoutValue(rng, spec.pageSize), layoutValue(rng, spec.pageSize), layoutValue(rng, spec.pageSize)
			if _, err := tx.Exec("INSERT INTO v (a, b, c, d) VALUES (?, ?, ?, ?)", a, b, c, d); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec("INSERT INTO w (x, y) VALUES (?, ?)", layoutValue(rng, spec.pageSize), strings.Repeat("w", rng.IntN(2*spec.pageSize))); err != nil {
				t.Fatal(err)
			}
			done++
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if spec.deleteMod > 0 {
			// Interleaved deletes put freed pages in the middle of the file before more inserts.
			exec(fmt.Sprintf("DELETE FROM v WHERE rowid %% %d = %d", spec.deleteMod*3, done%(spec.deleteMod*3)))
		}
	}
	if spec.deleteMod > 0 {
		exec(fmt.Sprintf("DELETE FROM v WHERE rowid %% %d = 0", spec.deleteMod))
	}
	if spec.dropOther {
		exec("DROP TABLE w")
	}
	if spec.incVacuum > 0 {
		exec(fmt.Sprintf("PRAGMA incremental_vacuum(%d)", spec.incVacuum))
	}
	return path
}

// layoutValue is one random column value: NULL, an integer of any serial width, a real (with
// the special ones SQLite stores as is), text or a blob, short or spilling onto overflow pages.
func layoutValue(rng *rand.Rand, pageSize int) any {
	switch rng.IntN(9) {
	case 0:
		return nil
	case 1:
		return int64(rng.IntN(2)) // serial types 8 and 9
	case 2:
		return rng.Int64() >> rng.IntN(64) * int64(1-2*rng.IntN(2))
	case 3:
		return []float64{0.5, -1e300, math.SmallestNonzeroFloat64, math.MaxFloat64, 3.0}[rng.IntN(5)]
	case 4:
		return rng.NormFloat64() * 1e6
	case 5:
		return strings.Repeat(string(rune('a'+rng.IntN(26))), rng.IntN(40))
	case 6:
		return strings.Repeat("é", rng.IntN(3*pageSize))
	case 7:
		b := make([]byte, 1+rng.IntN(40)) // not empty: database/sql scans an empty blob as nil
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return b
	}
	return bytes.Repeat([]byte{0xa5}, 1+rng.IntN(2*pageSize))
}

// showValue words a value read directly as sqlRows words one read through SQLite.
func showValue(v sqlValue) string {
	switch v.Kind {
	case valInt:
		return "i" + strconv.FormatInt(v.Int, 10)
	case valFloat:
		return "f" + strconv.FormatFloat(v.Float, 'g', -1, 64)
	case valText:
		return "t" + string(v.Bytes)
	case valBlob:
		return fmt.Sprintf("b%x", v.Bytes)
	}
	return "null"
}

// sqlRows is table v read through modernc's SQLite, a row per line.
func sqlRows(t testing.TB, path string) (rows []string, root uint32) {
	t.Helper()
	// A plain path: a fuzz test's directory has a '#' in its name, which a file: URI cuts.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	root = rootPage(t, db, "v")
	q, err := db.Query(`SELECT rowid, a, b, c, d FROM v ORDER BY rowid`)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for q.Next() {
		var rowid int64
		vals := make([]any, 4)
		ptrs := []any{&rowid, &vals[0], &vals[1], &vals[2], &vals[3]}
		if err := q.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		row := []string{strconv.FormatInt(rowid, 10)}
		for _, v := range vals {
			switch v := v.(type) {
			case nil:
				row = append(row, "null")
			case int64:
				row = append(row, "i"+strconv.FormatInt(v, 10))
			case float64:
				row = append(row, "f"+strconv.FormatFloat(v, 'g', -1, 64))
			case string:
				row = append(row, "t"+v)
			case []byte:
				row = append(row, fmt.Sprintf("b%x", v))
			default:
				t.Fatalf("SQLite returned %T", v)
			}
		}
		rows = append(rows, strings.Join(row, " "))
	}
	if err := q.Err(); err != nil {
		t.Fatal(err)
	}
	return rows, root
}

// directRows is table v (rooted at root) read by the direct reader, as sqlRows words it.
func directRows(s *sqlFile, root uint32) ([]string, error) {
	var rows []string
	err := s.scan(context.Background(), root, []int{0, 1, 2, 3}, -1, func(rowid int64, v []sqlValue) error {
		rows = append(rows, fmt.Sprint(rowid, " ", showValue(v[0]), " ", showValue(v[1]), " ", showValue(v[2]), " ", showValue(v[3])))
		return nil
	})
	return rows, err
}

// checkLayout compares table v read directly (from the file and from memory), its leaf-page plan,
// last rowid and a parallel integer scan with what SQLite reads.
func checkLayout(t *testing.T, path string) {
	t.Helper()
	want, root := sqlRows(t, path)
	fromFile, err := openSQLFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fromFile.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := newSQLFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*sqlFile{"file": fromFile, "memory": plain} {
		got, err := directRows(s, root)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if d := fastDiff(want, got); d != "" {
			t.Fatalf("%s: table v (-sqlite +direct):\n%s", name, d)
		}
		last, err := s.lastRowid(root)
		if err != nil {
			t.Fatalf("%s: lastRowid: %v", name, err)
		}
		if len(want) > 0 {
			if w, _ := strconv.ParseInt(strings.Fields(want[len(want)-1])[0], 10, 64); last != w {
				t.Errorf("%s: lastRowid %d, want %d", name, last, w)
			}
		}
		// The parallel scan's plan (leaf pages from the interior pages) meets the same rows.
		const parts = 3
		seen := make([][]int64, parts)
		err = s.scanIntsParts(context.Background(), root, []int{-1}, parts, func(part int) func(int64, []sql.NullInt64) error {
			return func(rowid int64, _ []sql.NullInt64) error {
				seen[part] = append(seen[part], rowid)
				return nil
			}
		})
		if err != nil {
			t.Fatalf("%s: parallel scan: %v", name, err)
		}
		var all []string
		for _, p := range seen {
			for _, r := range p {
				all = append(all, strconv.FormatInt(r, 10))
			}
		}
		var wantIDs []string
		for _, r := range want {
			wantIDs = append(wantIDs, strings.Fields(r)[0])
		}
		if d := fastDiff(wantIDs, all); d != "" {
			t.Errorf("%s: parallel scan rowids (-sqlite +direct):\n%s", name, d)
		}
	}
}

// headerFields are the header words that say which layout features a database file has.
func headerFields(t testing.TB, path string) (largestRoot, incremental, freelistPages uint32) {
	t.Helper()
	h := make([]byte, 100)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(h, 0); err != nil {
		t.Fatal(err)
	}
	return binary.BigEndian.Uint32(h[52:]), binary.BigEndian.Uint32(h[64:]), binary.BigEndian.Uint32(h[36:])
}

// TestDirectReadAutoVacuumAndFreelist: databases with pointer-map pages (auto_vacuum FULL and
// INCREMENTAL, where commits move pages around and a dropped table's root is relocated) and
// with heavy freelists (many deleted rows, a dropped table) read the same directly as through
// SQLite, at the smallest, the default and the largest page size.
func TestDirectReadAutoVacuumAndFreelist(t *testing.T) {
	for _, ps := range []int{512, 4096, 65536} {
		rows := map[int]int{512: 1000, 4096: 600, 65536: 120}[ps]
		for _, tc := range []struct {
			name string
			spec layoutSpec
			// what the header must show, so that the test exercises what it names
			ptrmap, incremental, freelist bool
		}{
			{"full", layoutSpec{autoVacuum: "FULL", deleteMod: 3, dropOther: true}, true, false, false},
			{"incremental", layoutSpec{autoVacuum: "INCREMENTAL", deleteMod: 2, dropOther: true}, true, true, true},
			{"incremental-partly-vacuumed", layoutSpec{autoVacuum: "INCREMENTAL", deleteMod: 2, dropOther: true, incVacuum: 40}, true, true, true},
			{"freelist", layoutSpec{autoVacuum: "NONE", deleteMod: 2, dropOther: true}, false, false, true},
		} {
			t.Run(fmt.Sprint(ps, "/", tc.name), func(t *testing.T) {
				spec := tc.spec
				spec.pageSize, spec.rows, spec.seed = ps, rows, uint64(ps)
				path := layoutDB(t, spec)
				largest, inc, free := headerFields(t, path)
				if (largest != 0) != tc.ptrmap || (inc != 0) != tc.incremental || (free > 10) != tc.freelist {
					t.Fatalf("header: largest root %d, incremental %d, freelist pages %d; the database lacks what the case names", largest, inc, free)
				}
				checkLayout(t, path)
			})
		}
	}
}

// TestReadCaptureAutoVacuumAndFreelist: an export turned into an auto-vacuum database (VACUUM
// moves every table, and pointer-map pages appear among them) and one with a large freelist
// give the same capture directly as through SQLite.
func TestReadCaptureAutoVacuumAndFreelist(t *testing.T) {
	ctx := context.Background()
	for name, stmts := range map[string][]string{
		"full":        {"PRAGMA auto_vacuum = FULL", "VACUUM", "CREATE TABLE pad AS SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME", "DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE rowid % 7 = 3 AND correlationId % 50 != 1", "DROP TABLE pad"},
		"incremental": {"PRAGMA auto_vacuum = INCREMENTAL", "VACUUM", "CREATE TABLE pad AS SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL", "DROP TABLE pad", "PRAGMA incremental_vacuum(5)"},
		"freelist":    {"CREATE TABLE pad AS SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME", "INSERT INTO pad SELECT * FROM pad", "DELETE FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE rowid % 2 = 0", "DROP TABLE pad"},
	} {
		t.Run(name, func(t *testing.T) {
			path := largeExport(t, 3000, 1)
			mutate(t, path, stmts...)
			largest, _, free := headerFields(t, path)
			if name != "freelist" && largest == 0 {
				t.Fatal("VACUUM did not make an auto-vacuum database")
			}
			if name != "full" && free < 10 {
				t.Fatalf("%d freelist pages", free)
			}
			s, err := openSQLFile(path) // else ReadCapture would go through SQLite both times
			if err != nil {
				t.Fatalf("the direct reader refuses the export: %v", err)
			}
			s.Close()
			for _, lean := range []bool{false, true} {
				o := ReadOptions{SummariseAPI: lean, SkipKernelInfo: lean}
				direct, err := ReadCapture(ctx, path, o)
				if err != nil {
					t.Fatal(err)
				}
				o.noDirect = true
				viaSQL, err := ReadCapture(ctx, path, o)
				if err != nil {
					t.Fatal(err)
				}
				if d := captureDiff(viaSQL, direct); d != "" {
					t.Errorf("lean %v (-sqlite +direct):\n%s", lean, d)
				}
			}
		})
	}
}

// FuzzDirectMatchesSQLite is the differential fuzz against modernc's SQLite: the fuzzer picks
// the page size, the auto-vacuum mode, the rows, the deletes, whether a table is dropped and
// the values' seed; the direct reader must read table v exactly as SQLite does.
func FuzzDirectMatchesSQLite(f *testing.F) {
	f.Add(uint8(0), uint8(0), uint16(50), uint8(0), false, uint8(0), uint64(1))
	f.Add(uint8(0), uint8(1), uint16(300), uint8(3), true, uint8(0), uint64(2))
	f.Add(uint8(1), uint8(2), uint16(200), uint8(2), true, uint8(7), uint64(3))
	f.Add(uint8(3), uint8(2), uint16(120), uint8(1), false, uint8(0), uint64(4))
	f.Fuzz(func(t *testing.T, psExp, vacuum uint8, rows uint16, deleteMod uint8, drop bool, inc uint8, seed uint64) {
		spec := layoutSpec{
			pageSize:   512 << (psExp % 8), // 512 .. 65536
			autoVacuum: []string{"NONE", "FULL", "INCREMENTAL"}[vacuum%3],
			rows:       int(rows % 400),
			deleteMod:  int(deleteMod % 8),
			dropOther:  drop,
			seed:       seed,
		}
		if spec.autoVacuum == "INCREMENTAL" {
			spec.incVacuum = int(inc)
		}
		checkLayout(t, layoutDB(t, spec))
	})
}
