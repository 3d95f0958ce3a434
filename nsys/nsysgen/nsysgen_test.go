package nsysgen

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
)

func sample() Export {
	return Export{
		GPUs:      []GPU{{0, "NVIDIA H100 80GB HBM3"}},
		Processes: []Process{{100, "python3"}},
		Runtime: []Runtime{
			{Start: 10, End: 20, PID: 100, TID: 100, Correlation: 1, Name: "cudaLaunchKernel_v7000"},
			{Start: 5, End: 6, PID: 100, TID: 101, Name: "cuInit", Driver: true},
		},
		Kernels: []Kernel{{Start: 30, End: 50, Stream: 7, Correlation: 1, Name: "void foo::bar<int>(int, float)", GridX: 2, BlockX: 128, PID: 100, TID: 100}},
		Memops: []Memop{
			{Start: 60, End: 70, Stream: 7, Correlation: 2, Bytes: 1024, CopyKind: CopyHtoD, PID: 100},
			{Start: 70, End: 71, Stream: 7, Correlation: 3, Bytes: 64, Memset: true, PID: 100},
		},
		NVTX: []NVTX{
			{Start: 1, End: 100, PID: 100, TID: 100, Text: "step"},
			{Start: 2, End: 90, PID: 100, TID: 100, Text: "layer", Domain: "sglang"},
		},
	}
}

func open(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func columns(t *testing.T, db *sql.DB, table string) []string {
	t.Helper()
	rows, err := db.Query("SELECT name FROM pragma_table_info('" + table + "')")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var cols []string
	for rows.Next() {
		var c string
		rows.Scan(&c)
		cols = append(cols, c)
	}
	return cols
}

func TestWriteSchemaByVersion(t *testing.T) {
	for _, tc := range []struct {
		version, meta string
		green, recent bool
		kernelCols    int
	}{
		{"", "META_DATA_EXPORT", true, true, 40},
		{"3.13.2", "META_DATA_EXPORT", true, false, 28},
		{"2.9.1", "EXPORT_META_DATA", false, false, 27},
	} {
		t.Run(tc.version, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.sqlite")
			e := sample()
			e.Version = tc.version
			if err := Write(path, e); err != nil {
				t.Fatal(err)
			}
			db := open(t, path)
			var v string
			if err := db.QueryRow("SELECT value FROM " + tc.meta + " WHERE name='EXPORT_SCHEMA_VERSION'").Scan(&v); err != nil {
				t.Fatal(err)
			}
			want := tc.version
			if want == "" {
				want = DefaultVersion
			}
			if v != want {
				t.Errorf("schema version %q, want %q", v, want)
			}
			cols := columns(t, db, "CUPTI_ACTIVITY_KIND_KERNEL")
			if len(cols) != tc.kernelCols {
				t.Errorf("kernel table has %d columns, want %d: %v", len(cols), tc.kernelCols, cols)
			}
			joined := "," + strings.Join(cols, ",") + ","
			if strings.Contains(joined, ",greenContextId,") != tc.green {
				t.Errorf("greenContextId presence != %v", tc.green)
			}
			if strings.Contains(joined, ",graphId,") != tc.recent {
				t.Errorf("graphId presence != %v", tc.recent)
			}
			var name, short, mangled string
			var gpid int64
			err := db.QueryRow(`SELECT d.value, s.value, m.value, k.globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL k
				JOIN StringIds d ON d.id = k.demangledName JOIN StringIds s ON s.id = k.shortName
				JOIN StringIds m ON m.id = k.mangledName`).Scan(&name, &short, &mangled, &gpid)
			if err != nil {
				t.Fatal(err)
			}
			if name != "void foo::bar<int>(int, float)" || short != "bar" || mangled != "_Z3barv" {
				t.Errorf("names %q %q %q", name, short, mangled)
			}
			if gpid>>48 != VM || (gpid>>24)&0xFFFFFF != 100 || gpid&0xFFFFFF != 0 {
				t.Errorf("globalPid %d does not encode vm 1 pid 100", gpid)
			}
			var text string
			err = db.QueryRow(`SELECT coalesce(s.value, n.text) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
				WHERE n.eventType = 59 AND n.domainId = 1`).Scan(&text)
			if err != nil || text != "layer" {
				t.Errorf("registered NVTX text = %q, %v", text, err)
			}
			var class int
			if err := db.QueryRow(`SELECT eventClass FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId WHERE s.value = 'cuInit'`).Scan(&class); err != nil || class != 1 {
				t.Errorf("driver eventClass = %d, %v", class, err)
			}
		})
	}
}

func TestLazyTables(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.sqlite")
	if err := Write(path, Export{Kernels: sample().Kernels}); err != nil {
		t.Fatal(err)
	}
	db := open(t, path)
	var n int
	db.QueryRow("SELECT count(*) FROM sqlite_master WHERE name IN ('NVTX_EVENTS','CUPTI_ACTIVITY_KIND_MEMCPY','CUPTI_ACTIVITY_KIND_RUNTIME')").Scan(&n)
	if n != 0 {
		t.Errorf("%d empty tables were created; a lazy export omits them", n)
	}
}

func TestStreamingBatches(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.sqlite")
	w, err := Create(path, "")
	if err != nil {
		t.Fatal(err)
	}
	n := int64(3*batchRows(8) + 17)
	for i := int64(0); i < n; i++ {
		w.AddRuntime(Runtime{Start: int64(i), End: int64(i) + 1, PID: 1, TID: 1, Correlation: int64(i), Name: "cudaLaunchKernel_v7000"})
		w.AddKernel(Kernel{Start: int64(i), End: int64(i) + 2, Correlation: int64(i), Name: "k", PID: 1})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	db := open(t, path)
	var k, sum int64
	db.QueryRow("SELECT count(*), sum(end-start) FROM CUPTI_ACTIVITY_KIND_KERNEL").Scan(&k, &sum)
	if k != n || sum != 2*n {
		t.Errorf("kernels %d (sum %d), want %d (%d)", k, sum, n, 2*n)
	}
}

func TestBadVersion(t *testing.T) {
	for _, v := range []string{"x", "3", "4.0.0", "1.2.3", "3.a"} {
		if _, err := Create(filepath.Join(t.TempDir(), "x.sqlite"), v); err == nil {
			t.Errorf("version %q accepted", v)
		}
	}
}

func TestShortName(t *testing.T) {
	for in, want := range map[string]string{
		"saxpy(double *, double *, double *, double, int)":                        "saxpy",
		"void at::native::vectorized_elementwise_kernel<4, at::native::Foo>(int)": "vectorized_elementwise_kernel",
		"ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn":             "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn",
		"void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64>, false>()": "flash_fwd_kernel",
	} {
		if got := ShortName(in); got != want {
			t.Errorf("ShortName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestGlobalTid(t *testing.T) {
	// The layout verified on a real export: 310028055214088 is pid 1701896, tid 1701896 (vm 1).
	if got := GlobalTid(1701896, 1701896); got != 310028055214088 {
		t.Errorf("GlobalTid = %d", got)
	}
}
