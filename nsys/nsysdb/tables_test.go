package nsysdb

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/sglprof/runner/reports/render/table"
	"github.com/sglprof/runner/reports/trace"
)

func readSample(t *testing.T) *Capture {
	t.Helper()
	path, _ := writeSample(t, "")
	c, err := ReadCapture(context.Background(), path, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestScopes(t *testing.T) {
	c := readSample(t)
	tr := c.Trace
	scopes := Scopes(tr, nil)
	got := map[string]string{}
	for i, s := range scopes {
		name := "-"
		if s != trace.NoID {
			name = tr.Name(tr.Annotations[s].Name)
		}
		got[tr.Name(tr.GPUOps[i].Name)+"@"+fmtDur(tr.GPUOps[i].Start)] = name
	}
	want := map[string]string{
		// launched at 10 µs and 20 µs inside attention (2..400 µs) inside denoising_step_0
		"void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64>, false>(Flash_fwd_params)@30.000 µs":                                 "attention",
		"void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, at::native::FillFunctor<float>)@130.000 µs": "attention",
		"ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn@440.000 µs":                                                            "mlp", // graph launch at 420 µs
		"void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, at::native::FillFunctor<float>)@540.000 µs": "mlp", // same graph launch
		"[CUDA memcpy Host-to-Device]@510.000 µs": "mlp",
		"[CUDA memset]@520.000 µs":                "mlp",
		"void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64>, false>(Flash_fwd_params)@1.120 ms": "denoising_step_1",
		"[CUDA memcpy Device-to-Host]@1.220 ms":   "prefetch", // worker thread
		"[CUDA memcpy Device-to-Device]@1.310 ms": "prefetch",
	}
	if diff := fastDiff(want, got); diff != "" {
		t.Errorf("scopes (-want +got):\n%s", diff)
	}
	// Stage ranges only: the attention/mlp ranges no longer count.
	stages := StageScopes(tr, regexp.MustCompile(`^denoising_step_`))
	for i, s := range stages {
		op := tr.GPUOps[i]
		want := "denoising_step_0"
		if op.Start > 1_000_000 {
			want = "denoising_step_1"
		}
		if op.Start > 1_200_000 {
			if s != trace.NoID {
				t.Errorf("worker op %q got stage %q", tr.Name(op.Name), tr.Name(tr.Annotations[s].Name))
			}
			continue
		}
		if s == trace.NoID || tr.Name(tr.Annotations[s].Name) != want {
			t.Errorf("op at %d: stage %d, want %s", op.Start, s, want)
		}
	}
}

func TestScopesUnlinkedAndOutside(t *testing.T) {
	tr := trace.New("x", "nsys")
	a := tr.Names.InternString("r")
	tr.Annotations = []trace.Annotation{{Start: 100, End: 200, Name: a, PID: 1, TID: 1}}
	tr.Launches = []trace.Launch{{Start: 50, PID: 1, TID: 1}, {Start: 150, PID: 1, TID: 2}, {Start: 200, PID: 1, TID: 1}}
	tr.GPUOps = []trace.GPUOp{{Launch: 0}, {Launch: 1}, {Launch: 2}, {Launch: trace.NoID}}
	got := Scopes(tr, nil)
	// before the range; other thread; at the range end (inclusive); no launch.
	if diff := fastDiff([]int32{trace.NoID, trace.NoID, 0, trace.NoID}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestNVTXSummaryGPUTimeInside(t *testing.T) {
	c := readSample(t)
	rows := NVTXSummary(c)
	got := map[string]int64{}
	for _, r := range rows {
		got[r.Domain+":"+r.Range] = r.GPUTimeNS
	}
	want := map[string]int64{
		":denoising_step_0": 100_000 + 20_000 + 100_000 + 20_000 + 10_000 + 1_000, // everything launched on the main thread in 0..900 µs
		"sglang:attention":  120_000,
		"sglang:mlp":        120_000 + 10_000 + 1_000,
		":denoising_step_1": 60_000,
		":prefetch":         20_000 + 2_000,
	}
	if diff := fastDiff(want, got); diff != "" {
		t.Errorf("GPU time inside (-want +got):\n%s", diff)
	}
}

func TestMemoryAndAPISummary(t *testing.T) {
	c := readSample(t)
	mem := MemorySummary(c.Trace)
	if len(mem) != 4 || mem[0].Operation != "[CUDA memcpy Device-to-Host]" || mem[0].Bytes != 4<<20 || mem[0].TotalNS != 20_000 {
		t.Fatalf("memory rows %+v", mem)
	}
	if want := float64(4<<20) / 20_000; mem[0].GBps != want {
		t.Errorf("GB/s %v, want %v", mem[0].GBps, want)
	}
	api := APISummary(c.Trace, 3)
	if len(api) != 3 || api[0].Name != "cudaStreamSynchronize" || !api[0].Sync || api[0].TotalNS != 100_000 {
		t.Errorf("api rows %+v", api)
	}
	if api[1].Name != "cudaMemcpyAsync" || api[1].Calls != 3 || api[1].Sync {
		t.Errorf("second api row %+v", api[1])
	}
}

func TestStatsReports(t *testing.T) {
	c := readSample(t)
	kern := KernSum(c.Trace)
	// flash_fwd: 100 µs and 60 µs → total 160000, avg 80000, median 80000, sample stddev 28284.3.
	r := kern.Rows[0]
	if r.TotalNS != 160_000 || r.Instances != 2 || r.AvgNS != 80_000 || r.MedNS != 80_000 || r.StdDevNS != 28284.3 || r.MinNS != 60_000 || r.MaxNS != 100_000 {
		t.Errorf("kern row %+v", r)
	}
	var pct float64
	for _, r := range kern.Rows {
		pct += r.TimePct
	}
	if pct < 99.8 || pct > 100.2 {
		t.Errorf("percentages sum to %v", pct)
	}
	api := APISum(c)
	names := map[string]bool{}
	for _, r := range api.Rows {
		names[r.Name] = true
	}
	// nsys strips a four-digit _vNNNN only.
	for _, n := range []string{"cudaLaunchKernel", "cudaGraphLaunch_v10000", "cudaMemcpyAsync", "cuLaunchKernel"} {
		if !names[n] {
			t.Errorf("cuda_api_sum lacks %q: %v", n, names)
		}
	}
	nv := NVTXSum(c)
	labels := map[string]string{}
	for _, r := range nv.Rows {
		labels[r.Name] = r.Style
	}
	if labels[":denoising_step_0"] != "PushPop" || labels["sglang:attention"] != "PushPop" {
		t.Errorf("nvtx_sum labels %v", labels)
	}
}

// TestGoldenTables renders every table in every format for the sample export and the pipit
// fixture's nsys stats summaries.
func TestGoldenTables(t *testing.T) {
	c := readSample(t)
	var buf bytes.Buffer
	for _, f := range []table.Format{table.Text, table.Markdown, table.CSV} {
		if err := Summaries(c, 0).Render(&buf, f); err != nil {
			t.Fatal(err)
		}
		buf.WriteString("\n")
	}
	golden(t, "tables.golden", buf.Bytes())

	buf.Reset()
	for _, s := range Stats(c) {
		if err := table.Write(&buf, table.CSV, s.Table()); err != nil {
			t.Fatal(err)
		}
		buf.WriteString("\n")
		if err := table.Write(&buf, table.Text, s.Table()); err != nil {
			t.Fatal(err)
		}
		buf.WriteString("\n")
	}
	golden(t, "stats.golden", buf.Bytes())

	js, err := json.MarshalIndent(Summaries(c, 0), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "tables.json.golden", append(js, '\n'))
}

func TestGoldenPipitStats(t *testing.T) {
	c, err := ReadCapture(context.Background(), fixture(t, pipit), ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for _, s := range Stats(c) {
		if err := table.Write(&buf, table.CSV, s.Table()); err != nil {
			t.Fatal(err)
		}
		buf.WriteString("\n")
	}
	for _, tb := range []*table.Table{NVTXTable(NVTXSummary(c)), MemoryTable(MemorySummary(c.Trace)), APITable(APISummary(c.Trace, 10))} {
		if err := table.WriteText(&buf, tb); err != nil {
			t.Fatal(err)
		}
		buf.WriteString("\n")
	}
	golden(t, "pipit.golden", buf.Bytes())
	// Independent check of the fixture's kernel sums (sqlite3: SELECT count(*), sum(end-start)).
	k := KernSum(c.Trace).Rows
	if len(k) != 1 || k[0].Instances != 5 || k[0].TotalNS != 88_573_480 {
		t.Errorf("kern rows %+v", k)
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `go test ./nsys -update` to create it)", err)
	}
	if diff := fastDiff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-want +got); run `go test ./nsys -update` if the change is intended:\n%s", name, diff)
	}
}

func TestWindowCoverage(t *testing.T) {
	steps := []Step{{0, 100, 200}, {1, 200, 300}, {2, 300, 400}, {3, 400, 500}}
	cov := CoverWindow(steps, 250, 450)
	if diff := fastDiff([]int{2}, cov.Full); diff != "" {
		t.Errorf("full: %s", diff)
	}
	if diff := fastDiff([]int{1, 3}, cov.Partial); diff != "" {
		t.Errorf("partial: %s", diff)
	}
	if cov.Summary != "steps 1-3 of 4 captured (1 full, 2 partial)" || len(cov.Warnings) != 0 {
		t.Errorf("summary %q warnings %q", cov.Summary, cov.Warnings)
	}
	for _, w := range [][2]int64{{0, 90}, {600, 900}} {
		cov := CoverWindow(steps, w[0], w[1])
		if len(cov.Full)+len(cov.Partial) != 0 || len(cov.Warnings) != 1 || !regexp.MustCompile(`missed the denoising stage entirely`).MatchString(cov.Warnings[0]) {
			t.Errorf("window %v: %+v", w, cov)
		}
	}
}

func TestCoverFromNVTXAndTimings(t *testing.T) {
	c := readSample(t)
	cov := CoverFromNVTX(c, nil, 50)
	if cov.Summary != "steps 0-1 of 50 captured (2 full, 0 partial)" {
		t.Errorf("summary %q (full %v partial %v, window %d..%d)", cov.Summary, cov.Full, cov.Partial, cov.WindowStartNS, cov.WindowEndNS)
	}
	none := CoverFromNVTX(c, regexp.MustCompile(`^decode_step_(\d+)`), 0)
	if len(none.Warnings) != 1 || none.Summary != "no denoising step captured" {
		t.Errorf("%+v", none)
	}
	// The perf dump's steps in Unix time, all after the capture ended.
	base := c.SessionStartUnixNs
	late := []Step{{0, base + 10_000_000, base + 20_000_000}, {1, base + 20_000_000, base + 30_000_000}}
	cov, ok := CoverFromTimings(c, late)
	if !ok || len(cov.Warnings) != 1 || !regexp.MustCompile(`ran before the 2 steps`).MatchString(cov.Warnings[0]) {
		t.Errorf("%v %+v", ok, cov)
	}
}

func TestSpans(t *testing.T) {
	if got := spans([]int{1, 2, 3, 5, 7, 8}); got != "1-3,5,7-8" {
		t.Errorf("spans = %q", got)
	}
}

// TestKernelSummaryMatchesFullRead checks the streaming aggregate against the full model.
func TestKernelSummaryMatchesFullRead(t *testing.T) {
	path, _ := writeSample(t, "")
	for _, style := range []NameStyle{Demangled, Short, Mangled} {
		stats, err := KernelSummary(context.Background(), path, style)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := Read(context.Background(), path, ReadOptions{KernelNames: style})
		if err != nil {
			t.Fatal(err)
		}
		var want []KernelStat
		for _, r := range KernSum(tr).Rows {
			want = append(want, KernelStat{Name: r.Name, Count: r.Instances, TotalNS: r.TotalNS})
		}
		if diff := fastDiff(want, stats); diff != "" {
			t.Errorf("style %d (-full +streaming):\n%s", style, diff)
		}
	}
}

// Review of issue 17: the Sync column marked only *Synchronize and *Query; a synchronous
// cudaMemcpy or cudaMemset and cudaFree (which synchronises the device) were blank.
func TestSyncKind(t *testing.T) {
	cases := map[string]string{
		"cudaStreamSynchronize":       SyncExplicit,
		"cudaDeviceSynchronize_v3020": SyncExplicit,
		"cudaEventQuery_v3020":        SyncExplicit,
		"cudaMemcpy_v3020":            SyncImplicit,
		"cudaMemcpy2D_v3020":          SyncImplicit,
		"cuMemcpyDtoH_v2":             SyncImplicit,
		"cudaMemset_v3020":            SyncImplicit,
		"cuMemsetD32_v2":              SyncImplicit,
		"cudaFree_v2020":              SyncImplicit,
		"cuMemFree_v2":                SyncImplicit,
		"cudaMemcpyAsync_v3020":       "",
		"cudaMemcpyAsync_ptsz":        "",
		"cuMemcpyHtoDAsync_v2":        "",
		"cudaMemsetAsync":             "",
		"cudaFreeAsync":               "",
		"cudaFreeHost":                "",
		"cudaLaunchKernel_v7000":      "",
		"cudaMalloc_v3020":            "",
	}
	for name, want := range cases {
		if got := SyncKind(name); got != want {
			t.Errorf("SyncKind(%q) = %q, want %q", name, got, want)
		}
		if IsSyncAPI(name) != (want != "") {
			t.Errorf("IsSyncAPI(%q) = %v, want %v", name, IsSyncAPI(name), want != "")
		}
	}
	tb := APITable([]APICall{{Name: "cudaMemcpy_v3020", Calls: 1, Sync: true}, {Name: "cudaStreamSynchronize", Calls: 1, Sync: true}})
	if got := tb.Rows[0][len(tb.Rows[0])-1]; got != SyncImplicit {
		t.Errorf("API table marks cudaMemcpy %q, want %q", got, SyncImplicit)
	}
	if got := tb.Rows[1][len(tb.Rows[1])-1]; got != SyncExplicit {
		t.Errorf("API table marks cudaStreamSynchronize %q, want %q", got, SyncExplicit)
	}
}
