package nsysdb

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/sglprof/runner/nsys/nsysgen"
	"github.com/sglprof/runner/reports/trace"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// fixture returns the path of a shared real-trace fixture, skipping when the folder is absent
// (as on a fresh clone).
func fixture(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join("..", "..", "..", "shared", "fixtures", name)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("fixture %s not available (%v); it lives in ../shared/fixtures beside the checkout", name, err)
	}
	return p
}

const pipit = "pipit-a100-saxpy-mpi-nsys2022.2.sqlite"

func TestReadPipitFixture(t *testing.T) {
	c, err := ReadCapture(context.Background(), fixture(t, pipit), ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr := c.Trace
	if tr.Format != "nsys" || c.SchemaText != "2.9.1" || c.Schema != (Version{2, 9, 1}) {
		t.Errorf("format %q schema %q %v", tr.Format, c.SchemaText, c.Schema)
	}
	if len(tr.Warnings) != 0 {
		t.Errorf("unexpected warnings on a known schema: %q", tr.Warnings)
	}
	kernels, memcpys := 0, 0
	var bytes int64
	for _, op := range tr.GPUOps {
		switch op.Kind {
		case trace.OpKernel:
			kernels++
			if got := tr.Name(op.Name); got != "saxpy(double *, double *, double *, double, int)" {
				t.Errorf("kernel name %q", got)
			}
			if op.Device != 0 || op.Stream != 7 {
				t.Errorf("kernel on device %d stream %d", op.Device, op.Stream)
			}
		case trace.OpMemcpy:
			memcpys++
			bytes += op.Bytes
		}
		if op.Launch == trace.NoID {
			t.Errorf("op at %d (correlation %d) not joined to its launch", op.Start, op.Correlation)
		}
	}
	if kernels != 5 || memcpys != 15 || c.NVTXEvents != 24 {
		t.Errorf("kernels %d memcpys %d nvtx events %d, want 5, 15, 24", kernels, memcpys, c.NVTXEvents)
	}
	if bytes != 15*262144000 {
		t.Errorf("memcpy bytes %d", bytes)
	}
	k := c.Kernels[0]
	if tr.Name(k.Short) != "saxpy" || tr.Name(k.Mangled) != "_Z5saxpyPdS_S_di" || k.Grid != [3]int32{2, 1, 1} || k.Block != [3]int32{512, 1, 1} || k.PID != 1230493 {
		t.Errorf("kernel info %+v (%q, %q)", k, tr.Name(k.Short), tr.Name(k.Mangled))
	}
	// The first kernel's launch is correlation 140, a cudaLaunchKernel on the main thread.
	op := tr.GPUOps[k.Op]
	l := tr.Launches[op.Launch]
	if op.Correlation != 140 || tr.Name(l.Name) != "cudaLaunchKernel" || c.APIRaw[l.Name] != "cudaLaunchKernel_v7000" || l.PID != 1230493 || l.TID != 1230493 || l.Graph {
		t.Errorf("launch %+v name %q raw %q", l, tr.Name(l.Name), c.APIRaw[l.Name])
	}
	if len(tr.Launches) != 95 {
		t.Errorf("%d launches, want 95", len(tr.Launches))
	}
	// cuModuleGetLoadingMode is the one driver call.
	drivers := 0
	for i, d := range c.Driver {
		if d {
			drivers++
			if n := tr.Name(tr.Launches[i].Name); n != "cuModuleGetLoadingMode" {
				t.Errorf("driver call %q", n)
			}
		}
	}
	if drivers != 1 {
		t.Errorf("%d driver calls, want 1", drivers)
	}
	want := []trace.Device{{ID: 0, Name: "NVIDIA A100-SXM4-40GB"}}
	if diff := fastDiff(want, tr.Devices); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}
	if len(tr.Processes) != 1 || tr.Processes[0].PID != 1230493 || tr.Processes[0].Name != "./saxpy-mpi-cuda" {
		t.Errorf("processes %+v (PROCESSES lists the whole host; only the traced one belongs)", tr.Processes)
	}
	// 22 ranges: 17 in the MPI domain through textId, 5 "saxpy" in the default domain inline.
	if len(tr.Annotations) != 22 {
		t.Fatalf("%d ranges, want 22", len(tr.Annotations))
	}
	mpi, saxpy := 0, 0
	for i, a := range tr.Annotations {
		switch {
		case c.Ranges[i].Domain == "MPI" && strings.HasPrefix(tr.Name(a.Name), "MPI_"):
			mpi++
		case c.Ranges[i].Domain == "" && tr.Name(a.Name) == "saxpy":
			saxpy++
		default:
			t.Errorf("range %q in domain %q", tr.Name(a.Name), c.Ranges[i].Domain)
		}
	}
	if mpi != 17 || saxpy != 5 {
		t.Errorf("mpi %d saxpy %d", mpi, saxpy)
	}
	if c.SessionStartUnixNs != 1687813257637297504 || c.WindowStart != 1170854025 || c.WindowEnd != 3439886539 {
		t.Errorf("session %d window %d..%d", c.SessionStartUnixNs, c.WindowStart, c.WindowEnd)
	}
	threads := map[int32]string{}
	for _, th := range c.Threads {
		threads[th.TID] = th.Name
	}
	if threads[1230493] != "MPI Rank 0" {
		t.Errorf("main thread named %q", threads[1230493])
	}
}

func TestReadShortAndMangledNames(t *testing.T) {
	for style, want := range map[NameStyle]string{Short: "saxpy", Mangled: "_Z5saxpyPdS_S_di"} {
		tr, err := Read(context.Background(), fixture(t, pipit), ReadOptions{KernelNames: style})
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range tr.GPUOps {
			if op.Kind == trace.OpKernel && tr.Name(op.Name) != want {
				t.Errorf("style %d: name %q, want %q", style, tr.Name(op.Name), want)
			}
		}
	}
}

// sampleExport is a small export that exercises every table: two threads, nested and sibling
// NVTX ranges in two domains, a graph launch replaying two kernels, copies of three kinds, a
// memset, a driver call and a synchronisation.
func sampleExport(version string) nsysgen.Export {
	const pid, main, worker = 4242, 4242, 4250
	e := nsysgen.Export{
		Version:            version,
		SessionStartUnixNs: 1_750_000_000_000_000_000,
		GPUs:               []nsysgen.GPU{{ID: 0, Name: "NVIDIA H100 80GB HBM3"}, {ID: 1, Name: "NVIDIA H100 80GB HBM3"}},
		Processes:          []nsysgen.Process{{PID: pid, Name: "python3"}},
		NVTX: []nsysgen.NVTX{
			{Start: 1_000, End: 900_000, PID: pid, TID: main, Text: "denoising_step_0"},
			{Start: 2_000, End: 400_000, PID: pid, TID: main, Text: "attention", Domain: "sglang"},
			{Start: 410_000, End: 800_000, PID: pid, TID: main, Text: "mlp", Domain: "sglang"},
			{Start: 1_000_000, End: 1_900_000, PID: pid, TID: main, Text: "denoising_step_1"},
			{Start: 500, End: 2_000_000, PID: pid, TID: worker, Text: "prefetch"},
		},
		Runtime: []nsysgen.Runtime{
			{Start: 10_000, End: 15_000, PID: pid, TID: main, Correlation: 1, Name: "cudaLaunchKernel_v7000"},
			{Start: 20_000, End: 24_000, PID: pid, TID: main, Correlation: 2, Name: "cudaLaunchKernel_v7000"},
			{Start: 420_000, End: 430_000, PID: pid, TID: main, Correlation: 3, Name: "cudaGraphLaunch_v10000"},
			{Start: 500_000, End: 505_000, PID: pid, TID: main, Correlation: 4, Name: "cudaMemcpyAsync_v3020"},
			{Start: 506_000, End: 507_000, PID: pid, TID: main, Correlation: 5, Name: "cudaMemsetAsync_v3020"},
			{Start: 600_000, End: 700_000, PID: pid, TID: main, Correlation: 6, Name: "cudaStreamSynchronize_v3020"},
			{Start: 1_100_000, End: 1_104_000, PID: pid, TID: main, Correlation: 7, Name: "cuLaunchKernel", Driver: true},
			{Start: 1_200_000, End: 1_210_000, PID: pid, TID: worker, Correlation: 8, Name: "cudaMemcpyAsync_v3020"},
			{Start: 1_300_000, End: 1_301_000, PID: pid, TID: worker, Correlation: 9, Name: "cudaMemcpyAsync_v3020"},
		},
		Kernels: []nsysgen.Kernel{
			{Start: 30_000, End: 130_000, Device: 0, Stream: 7, Correlation: 1, Name: "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64>, false>(Flash_fwd_params)", GridX: 132, GridY: 8, BlockX: 128, PID: pid, TID: main},
			{Start: 130_000, End: 150_000, Device: 0, Stream: 7, Correlation: 2, Name: "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, at::native::FillFunctor<float>)", GridX: 1024, BlockX: 128, PID: pid, TID: main},
			{Start: 440_000, End: 540_000, Device: 0, Stream: 9, Correlation: 3, Name: "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", Short: "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", GridX: 64, GridY: 2, BlockX: 256, PID: pid, TID: main},
			{Start: 540_000, End: 560_000, Device: 0, Stream: 9, Correlation: 3, Name: "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, at::native::FillFunctor<float>)", GridX: 1024, BlockX: 128, PID: pid, TID: main},
			{Start: 1_120_000, End: 1_180_000, Device: 1, Stream: 7, Correlation: 7, Name: "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64>, false>(Flash_fwd_params)", GridX: 132, GridY: 8, BlockX: 128, PID: pid, TID: main},
		},
		Memops: []nsysgen.Memop{
			{Start: 510_000, End: 520_000, Device: 0, Stream: 7, Correlation: 4, Bytes: 1 << 20, CopyKind: nsysgen.CopyHtoD, PID: pid},
			{Start: 520_000, End: 521_000, Device: 0, Stream: 7, Correlation: 5, Bytes: 4096, Memset: true, PID: pid},
			{Start: 1_220_000, End: 1_240_000, Device: 1, Stream: 7, Correlation: 8, Bytes: 4 << 20, CopyKind: nsysgen.CopyDtoH, PID: pid},
			{Start: 1_310_000, End: 1_312_000, Device: 1, Stream: 7, Correlation: 9, Bytes: 2 << 20, CopyKind: nsysgen.CopyDtoD, PID: pid},
		},
	}
	return e
}

func writeSample(t testing.TB, version string) (string, nsysgen.Export) {
	t.Helper()
	e := sampleExport(version)
	path := filepath.Join(t.TempDir(), "report.sqlite")
	if err := nsysgen.Write(path, e); err != nil {
		t.Fatal(err)
	}
	return path, e
}

// TestRoundTrip writes exports of each schema with nsysgen and checks every field comes back.
func TestRoundTrip(t *testing.T) {
	for _, version := range []string{"3.28.1", "3.13.2", "2.9.1"} {
		t.Run(version, func(t *testing.T) {
			path, e := writeSample(t, version)
			c, err := ReadCapture(context.Background(), path, ReadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			tr := c.Trace
			if c.SchemaText != version || len(tr.Warnings) != 0 {
				t.Errorf("schema %q warnings %q", c.SchemaText, tr.Warnings)
			}
			var kernels []nsysgen.Kernel
			for _, k := range c.Kernels {
				op := tr.GPUOps[k.Op]
				tid := int32(0)
				if op.Launch != trace.NoID {
					tid = tr.Launches[op.Launch].TID
				}
				kernels = append(kernels, nsysgen.Kernel{
					Start: op.Start, End: op.End, Device: op.Device, Stream: op.Stream, Correlation: op.Correlation,
					Name: tr.Name(op.Name), Short: tr.Name(k.Short),
					GridX: k.Grid[0], GridY: k.Grid[1], GridZ: k.Grid[2], BlockX: k.Block[0], BlockY: k.Block[1], BlockZ: k.Block[2],
					PID: k.PID, TID: tid,
				})
				if tr.Name(k.Mangled) != nsysgen.Mangle(tr.Name(k.Short)) {
					t.Errorf("mangled %q for short %q", tr.Name(k.Mangled), tr.Name(k.Short))
				}
			}
			wantKernels := make([]nsysgen.Kernel, len(e.Kernels))
			for i, k := range e.Kernels {
				if k.Short == "" {
					k.Short = nsysgen.ShortName(k.Name)
				}
				k.GridY, k.GridZ, k.BlockY, k.BlockZ = max(k.GridY, 1), max(k.GridZ, 1), max(k.BlockY, 1), max(k.BlockZ, 1)
				wantKernels[i] = k
			}
			if diff := fastDiff(wantKernels, kernels); diff != "" {
				t.Errorf("kernels (-want +got):\n%s", diff)
			}
			var runtime []nsysgen.Runtime
			for i, l := range tr.Launches {
				runtime = append(runtime, nsysgen.Runtime{Start: l.Start, End: l.End, PID: l.PID, TID: l.TID,
					Correlation: l.Correlation, Name: c.APIRaw[l.Name], Driver: c.Driver[i]})
				if l.Graph != (c.APIRaw[l.Name] == "cudaGraphLaunch_v10000") {
					t.Errorf("launch %q Graph=%v", c.APIRaw[l.Name], l.Graph)
				}
			}
			if diff := fastDiff(e.Runtime, runtime); diff != "" {
				t.Errorf("runtime (-want +got):\n%s", diff)
			}
			var memops []nsysgen.Memop
			for _, m := range c.Memops {
				op := tr.GPUOps[m.Op]
				memops = append(memops, nsysgen.Memop{Start: op.Start, End: op.End, Device: op.Device, Stream: op.Stream,
					Correlation: op.Correlation, Bytes: op.Bytes, CopyKind: m.CopyKind, Memset: m.Memset, PID: m.PID})
			}
			// Memcpys come before memsets (one table each).
			wantMem := []nsysgen.Memop{e.Memops[0], e.Memops[2], e.Memops[3], e.Memops[1]}
			if diff := fastDiff(wantMem, memops); diff != "" {
				t.Errorf("memops (-want +got):\n%s", diff)
			}
			var nvtx []nsysgen.NVTX
			for i, a := range tr.Annotations {
				nvtx = append(nvtx, nsysgen.NVTX{Start: a.Start, End: a.End, PID: a.PID, TID: a.TID, Text: tr.Name(a.Name), Domain: c.Ranges[i].Domain})
			}
			if diff := fastDiff(e.NVTX, nvtx); diff != "" {
				t.Errorf("nvtx (-want +got):\n%s", diff)
			}
			var gpus []nsysgen.GPU
			for _, d := range tr.Devices {
				gpus = append(gpus, nsysgen.GPU{ID: d.ID, Name: d.Name})
			}
			if diff := fastDiff(e.GPUs, gpus); diff != "" {
				t.Errorf("gpus (-want +got):\n%s", diff)
			}
			var procs []nsysgen.Process
			for _, p := range tr.Processes {
				procs = append(procs, nsysgen.Process{PID: p.PID, Name: p.Name})
			}
			if diff := fastDiff(e.Processes, procs); diff != "" {
				t.Errorf("processes (-want +got):\n%s", diff)
			}
			if c.SessionStartUnixNs != e.SessionStartUnixNs {
				t.Errorf("session start %d", c.SessionStartUnixNs)
			}
			// Graph replay: both kernels of correlation 3 join the one cudaGraphLaunch.
			for _, k := range c.Kernels {
				op := tr.GPUOps[k.Op]
				if op.Correlation == 3 && (op.Launch == trace.NoID || !tr.Launches[op.Launch].Graph) {
					t.Errorf("graph-replayed kernel %q not joined to its cudaGraphLaunch", tr.Name(op.Name))
				}
			}
		})
	}
}

// TestMultiProcessCorrelation: CUPTI numbers launches per process, so two ranks reuse ids; each
// kernel must still join its own process's launch.
func TestMultiProcessCorrelation(t *testing.T) {
	var e nsysgen.Export
	for _, pid := range []int32{100, 200} {
		e.Runtime = append(e.Runtime, nsysgen.Runtime{Start: int64(pid), End: int64(pid) + 5, PID: pid, TID: pid, Correlation: 1, Name: "cudaLaunchKernel_v7000"})
		e.Kernels = append(e.Kernels, nsysgen.Kernel{Start: int64(pid) + 10, End: int64(pid) + 20, Correlation: 1, Name: "k", PID: pid})
	}
	path := filepath.Join(t.TempDir(), "ranks.sqlite")
	if err := nsysgen.Write(path, e); err != nil {
		t.Fatal(err)
	}
	c, err := ReadCapture(context.Background(), path, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range c.Kernels {
		op := c.Trace.GPUOps[k.Op]
		if op.Launch == trace.NoID || c.Trace.Launches[op.Launch].PID != k.PID || k.RawCorrelation != 1 {
			t.Errorf("kernel of pid %d joined to launch %d", k.PID, op.Launch)
		}
	}
}

func TestBadInputs(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sqlDB := func(name string, stmts ...string) string {
		p := filepath.Join(dir, name)
		db, err := sql.Open("sqlite", p)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		for _, s := range stmts {
			if _, err := db.Exec(s); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	onlyRuntime := filepath.Join(dir, "noktable.sqlite")
	if err := nsysgen.Write(onlyRuntime, nsysgen.Export{Runtime: sampleExport("").Runtime}); err != nil {
		t.Fatal(err)
	}
	emptyKernels, _ := writeSample(t, "")
	mutate(t, emptyKernels, "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")

	for _, tc := range []struct {
		name, path string
		want       error
		says       []string
	}{
		{"missing file", filepath.Join(dir, "nope.sqlite"), os.ErrNotExist, []string{"nope.sqlite"}},
		{"json", write("trace.json", []byte(`{"traceEvents": []}`)), ErrNotSQLite, []string{"nsys export --type sqlite"}},
		{"empty", write("empty.sqlite", nil), ErrNotSQLite, nil},
		{"nsys-rep", write("report.nsys-rep", []byte("\x00NSYS binary report")), ErrNotSQLite, []string{"nsys export --type sqlite", "report.nsys-rep"}},
		{"other sqlite", sqlDB("other.sqlite", "CREATE TABLE users (id INTEGER, name TEXT)", "INSERT INTO users VALUES (1, 'x')"), ErrNotExport, []string{"nsys export --type sqlite"}},
		{"no kernel table", onlyRuntime, ErrNoKernels, []string{"--trace=cuda", "never launched"}},
		{"no kernels", emptyKernels, ErrNoKernels, []string{"--delay/--duration", "never launched"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(context.Background(), tc.path, ReadOptions{})
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if tc.want == ErrNoKernels || tc.want == ErrNotExport {
				if _, err := KernelSummary(context.Background(), tc.path, Demangled); !errors.Is(err, tc.want) {
					t.Errorf("KernelSummary: %v, want %v", err, tc.want)
				}
			}
		})
	}
}

// mutate edits a generated export in place (tests only: the reader never writes).
func mutate(t testing.TB, path string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	// No fsync per statement: the file's contents are the same either way.
	for _, s := range append([]string{"PRAGMA synchronous = OFF"}, stmts...) {
		if _, err := db.Exec(s); err != nil {
			t.Fatal(err)
		}
	}
}

func TestGraphTraceHint(t *testing.T) {
	path, _ := writeSample(t, "")
	mutate(t, path, "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL",
		"CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER, end INTEGER, deviceId INTEGER, correlationId INTEGER, graphId INTEGER)",
		"INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (1, 2, 0, 3, 1)")
	_, err := Read(context.Background(), path, ReadOptions{})
	if !errors.Is(err, ErrNoKernels) || !strings.Contains(err.Error(), "--cuda-graph-trace=node") {
		t.Errorf("error %v should point at --cuda-graph-trace=node", err)
	}
}

func digest(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func TestReadOnlyFileIsNotModified(t *testing.T) {
	if runtime.GOOS == "windows" || os.Geteuid() == 0 {
		// root ignores file modes, so the read-only part cannot fail there; the directory
		// check below still runs.
		t.Log("running as root: the file mode does not stop writes, only the checks below do")
	}
	path, _ := writeSample(t, "")
	dir := filepath.Dir(path)
	if err := os.Chmod(path, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o555); err != nil { // no -journal/-shm could be created either
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	before := digest(t, path)
	st, _ := os.Stat(path)
	tr, err := Read(context.Background(), path, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.GPUOps) != 9 {
		t.Errorf("%d ops", len(tr.GPUOps))
	}
	if _, err := KernelSummary(context.Background(), path, Demangled); err != nil {
		t.Fatal(err)
	}
	if digest(t, path) != before {
		t.Error("reading modified the file")
	}
	st2, _ := os.Stat(path)
	if !st2.ModTime().Equal(st.ModTime()) {
		t.Error("reading touched the file's mtime")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("reading left files beside the export: %v", entries)
	}
}

func TestReadLockedDatabase(t *testing.T) {
	path, _ := writeSample(t, "")
	// Another connection holds an exclusive lock, as a writer in another process would.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), "BEGIN EXCLUSIVE"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), "UPDATE StringIds SET value = value"); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(context.Background(), "ROLLBACK")
	tr, err := Read(context.Background(), path, ReadOptions{})
	if err != nil {
		t.Fatalf("reading a locked export: %v", err)
	}
	if len(tr.GPUOps) != 9 {
		t.Errorf("%d ops", len(tr.GPUOps))
	}
}

func TestFutureSchemaWarns(t *testing.T) {
	path, _ := writeSample(t, "")
	mutate(t, path,
		"UPDATE META_DATA_EXPORT SET value = '3.40.0' WHERE name = 'EXPORT_SCHEMA_VERSION'",
		"ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL ADD COLUMN quantumEntanglement INTEGER",
		"CREATE TABLE CUPTI_ACTIVITY_KIND_SOMETHING_NEW (start INTEGER)")
	c, err := ReadCapture(context.Background(), path, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Kernels) != 5 || c.Schema != (Version{3, 40, 0}) {
		t.Errorf("%d kernels, schema %v", len(c.Kernels), c.Schema)
	}
	if len(c.Trace.Warnings) != 1 || !strings.Contains(c.Trace.Warnings[0], "newer than the newest this reader knows (3.28.1)") {
		t.Errorf("warnings %q", c.Trace.Warnings)
	}
}

func TestMissingOptionalTablesAndColumns(t *testing.T) {
	path, _ := writeSample(t, "2.9.1")
	mutate(t, path, "DROP TABLE NVTX_EVENTS", "DROP TABLE TARGET_INFO_GPU", "DROP TABLE PROCESSES",
		"DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME", "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN mangledName")
	c, err := ReadCapture(context.Background(), path, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr := c.Trace
	if len(tr.Annotations) != 0 || len(tr.Launches) != 0 {
		t.Errorf("ranges %d launches %d", len(tr.Annotations), len(tr.Launches))
	}
	if diff := fastDiff([]trace.Device{{ID: 0, Name: "GPU 0"}, {ID: 1, Name: "GPU 1"}}, tr.Devices); diff != "" {
		t.Errorf("devices derived from ops (-want +got):\n%s", diff)
	}
	if len(tr.Warnings) != 1 || !strings.Contains(tr.Warnings[0], "CUPTI_ACTIVITY_KIND_RUNTIME") {
		t.Errorf("warnings %q", tr.Warnings)
	}
	if tr.Processes[0].Name != "python3" { // from ThreadNames, the main thread's name
		t.Errorf("process %+v", tr.Processes)
	}
}

func TestReadCanceled(t *testing.T) {
	path, _ := writeSample(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Read(ctx, path, ReadOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
}

func TestPathWithURICharacters(t *testing.T) {
	path, _ := writeSample(t, "")
	odd := filepath.Join(filepath.Dir(path), "run #1 ?50%.sqlite")
	if err := os.Rename(path, odd); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(context.Background(), odd, ReadOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestLeanReadSizesOpsForMemops: the lean read sizes Trace.GPUOps for the kernels and the
// memory operations at once, so the memops that follow the kernels are not the append that
// copies every op into a slice 1.25 times as large (at 1M kernels that copy was the largest
// allocation of the triage).
func TestLeanReadSizesOpsForMemops(t *testing.T) {
	path, e := writeSample(t, "")
	for _, o := range []ReadOptions{{SummariseAPI: true, SkipKernelInfo: true}, {SummariseAPI: true, SkipKernelInfo: true, noParallel: true}} {
		c, err := ReadCapture(context.Background(), path, o)
		if err != nil {
			t.Fatal(err)
		}
		ops := c.Trace.GPUOps
		if want := len(e.Kernels) + len(e.Memops); len(ops) != want || cap(ops) != want {
			t.Errorf("%+v: %d ops in a slice of capacity %d, want %d in %d", o, len(ops), cap(ops), want, want)
		}
	}
}

// TestPreloadedStringsAreTheQueries: names looked up in a StringIds table read whole are what
// the single-row query gives, for values of every storage class, missing ids and repeated ids;
// a table with a non-integer id or a NULL value is not preloaded, and its lookups query.
func TestPreloadedStringsAreTheQueries(t *testing.T) {
	for name, tc := range map[string]struct {
		ddl     string
		rows    string
		preload bool
	}{
		"integer-key": {"CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)", "(1,'a'),(2,'bb'),(5,''),(9,'z')", true},
		"every-class": {"CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value)", "(1,'a'),(2,42),(3,x'6869'),(4,1.5),(8,-7)", true},
		"repeated-id": {"CREATE TABLE StringIds (id INT, value TEXT)", "(3,'first'),(1,'a'),(3,'second')", true},
		"text-id":     {"CREATE TABLE StringIds (id, value TEXT)", "(1,'a'),('2','b'),(3,'c')", false},
		"null-value":  {"CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value)", "(1,'a'),(2,NULL),(3,'c')", false},
		// Over the size bound (lowered below to less than the table's one leaf page).
		"too-large": {"CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)", "(1,'a'),(2,'b')", false},
	} {
		t.Run(name, func(t *testing.T) {
			if name == "too-large" {
				old := preloadStringsBytes
				preloadStringsBytes = 100
				t.Cleanup(func() { preloadStringsBytes = old })
			}
			path := filepath.Join(t.TempDir(), "s.sqlite")
			db, err := sql.Open("sqlite", path)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec(tc.ddl + "; INSERT INTO StringIds VALUES " + tc.rows); err != nil {
				t.Fatal(err)
			}
			db.Close()
			lookup := func(preload bool) (names []string, r *reader) {
				r, _, err := openReader(context.Background(), path, ReadOptions{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { r.db.Close() })
				if r.file, err = openSQLFile(path); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { r.file.Close() })
				if r.strStmt, err = r.db.Prepare(`SELECT value FROM StringIds WHERE id = ?`); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { r.strStmt.Close() })
				r.strTried = !preload
				for id := int64(0); id <= 10; id++ {
					n, err := r.name(id)
					if err != nil {
						names = append(names, "error")
						continue
					}
					names = append(names, r.t.Names.String(n))
				}
				return names, r
			}
			want, _ := lookup(false)
			got, r := lookup(true)
			if d := fastDiff(want, got); d != "" {
				t.Errorf("names (-queried +preloaded):\n%s", d)
			}
			if (r.strAll != nil) != tc.preload {
				t.Errorf("preloaded: %v, want %v", r.strAll != nil, tc.preload)
			}
		})
	}
}
