package analysis

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/csv"
	"errors"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sglprof/runner/nsys/nsysdb"
	"github.com/sglprof/runner/nsys/nsysgen"
	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/reports/trace"
	"github.com/sglprof/runner/reports/triage"
)

// wireExport is a small diffusion-like export: two denoising steps on the main thread, each
// with named-domain attention and mlp ranges inside, one kernel launched in each inner range.
func wireExport(t *testing.T, kernels bool) string {
	t.Helper()
	const pid, tid = 7, 7
	e := nsysgen.Export{
		Version:            "3.11.1",
		SessionStartUnixNs: 1_700_000_000_000_000_000,
		GPUs:               []nsysgen.GPU{{ID: 0, Name: "NVIDIA H100 80GB HBM3"}},
		Processes:          []nsysgen.Process{{PID: pid, Name: "python3"}},
		NVTX: []nsysgen.NVTX{
			{Start: 1_000, End: 500_000, PID: pid, TID: tid, Text: "denoising_step_0"},
			{Start: 2_000, End: 200_000, PID: pid, TID: tid, Text: "attention", Domain: "sglang"},
			{Start: 210_000, End: 400_000, PID: pid, TID: tid, Text: "mlp", Domain: "sglang"},
			{Start: 501_000, End: 1_000_000, PID: pid, TID: tid, Text: "denoising_step_1"},
			{Start: 502_000, End: 700_000, PID: pid, TID: tid, Text: "attention", Domain: "sglang"},
		},
	}
	if kernels {
		e.Runtime = []nsysgen.Runtime{
			{Start: 10_000, End: 15_000, PID: pid, TID: tid, Correlation: 1, Name: "cudaLaunchKernel_v7000"},
			{Start: 220_000, End: 225_000, PID: pid, TID: tid, Correlation: 2, Name: "cudaLaunchKernel_v7000"},
			{Start: 510_000, End: 515_000, PID: pid, TID: tid, Correlation: 3, Name: "cudaLaunchKernel_v7000"},
			{Start: 800_000, End: 900_000, PID: pid, TID: tid, Correlation: 4, Name: "cudaStreamSynchronize_v3020"},
		}
		e.Kernels = []nsysgen.Kernel{
			{Start: 20_000, End: 120_000, Device: 0, Stream: 7, Correlation: 1, Name: "void flash::FlashAttnFwdSm90<int>(int)", PID: pid, TID: tid},
			{Start: 230_000, End: 300_000, Device: 0, Stream: 7, Correlation: 2, Name: "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT", PID: pid, TID: tid},
			{Start: 520_000, End: 620_000, Device: 0, Stream: 7, Correlation: 3, Name: "void flash::FlashAttnFwdSm90<int>(int)", PID: pid, TID: tid},
		}
	}
	path := filepath.Join(t.TempDir(), "report.sqlite")
	if err := nsysgen.Write(path, e); err != nil {
		t.Fatal(err)
	}
	return path
}

func locationsOf(rep *triage.Report, kernel string) []string {
	var out []string
	for _, st := range rep.Stages {
		for _, k := range st.Kernels {
			if strings.Contains(k.Name, kernel) {
				for _, l := range k.Locations {
					out = append(out, l.Location)
				}
			}
		}
	}
	return out
}

func TestTriageNsysTablesAndScopes(t *testing.T) {
	path := wireExport(t, true)
	rep, err := TriageNsys(context.Background(), path, triage.DiscoverOptions{}, triage.Options{}, NsysOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Default stages: denoising_step_N ranges make the DenoisingStage, as for torch traces.
	if len(rep.Stages) != 1 || rep.Stages[0].Stage != "DenoisingStage" {
		t.Fatalf("stages = %+v, want one DenoisingStage", rep.Stages)
	}
	// Kernel scope: the innermost NVTX range around the launch, domain-qualified.
	if got := locationsOf(rep, "FlashAttnFwdSm90"); !slices.Equal(got, []string{"nvtx: sglang:attention"}) {
		t.Errorf("flash locations = %v, want [nvtx: sglang:attention]", got)
	}
	if got := locationsOf(rep, "nvjet"); !slices.Equal(got, []string{"nvtx: sglang:mlp"}) {
		t.Errorf("gemm locations = %v, want [nvtx: sglang:mlp]", got)
	}
	nv, ok := rep.NVTX.(nvtxSection)
	if !ok || len(nv) != 4 { // attention, mlp, denoising_step_0, denoising_step_1
		t.Fatalf("NVTX = %#v, want 4 ranges", rep.NVTX)
	}
	api, ok := rep.API.(apiSection)
	if !ok || len(api) != 2 || api[0].Name != "cudaStreamSynchronize" || !api[0].Sync {
		t.Errorf("API = %+v, want cudaStreamSynchronize (sync) first", rep.API)
	}
	if mem, ok := rep.MemoryOps.(memorySection); !ok || len(mem) != 0 || mem == nil {
		t.Errorf("MemoryOps = %#v, want an empty, non-nil table", rep.MemoryOps)
	}
	var b bytes.Buffer
	if err := triage.Render(&b, rep, "text", 0); err != nil {
		t.Fatal(err)
	}
	// The Sync column is explained in the legend, with both of its values (issue 17 review).
	for _, want := range []string{"== Kernel Table ==", "NVTX ranges", "Memory operations", "CUDA API calls", "nvtx: sglang:attention",
		"- Sync (CUDA API calls): " + nsysdb.SyncExplicit + " = ", nsysdb.SyncImplicit + " = "} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text output lacks %q", want)
		}
	}
	// CSV stays one long-form table with the triage's header width.
	b.Reset()
	if err := triage.Render(&b, rep, "csv", 0); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatalf("csv: %v", err)
	}
	tables := map[string]int{}
	for _, r := range rows[1:] {
		tables[r[0]]++
	}
	if tables["kernel"] == 0 || tables["nvtx"] != 4 || tables["api"] != 2 || tables["memory_op"] != 0 {
		t.Errorf("csv rows per table = %v", tables)
	}
	b.Reset()
	if err := triage.Render(&b, rep, "json", 0); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"nvtx": [`, `"memory_ops": []`, `"api": [`} {
		if !strings.Contains(b.String(), key) {
			t.Errorf("JSON lacks %s", key)
		}
	}
}

func TestTriageNsysStageRegex(t *testing.T) {
	path := wireExport(t, true)
	rep, err := TriageNsys(context.Background(), path, triage.DiscoverOptions{}, triage.Options{}, NsysOptions{StageRE: regexp.MustCompile(`^denoising_step_\d+$`)})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range rep.Stages {
		got = append(got, st.Stage)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"denoising_step_0", "denoising_step_1"}) {
		t.Fatalf("stages = %v, want denoising_step_0 and denoising_step_1", got)
	}
	rep, err = TriageNsys(context.Background(), path, triage.DiscoverOptions{}, triage.Options{}, NsysOptions{StageRE: regexp.MustCompile(`^mlp$`)})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, st := range rep.Stages {
		counts[st.Stage] = st.KernelCount
	}
	if counts["mlp"] != 1 || counts[triage.StageUnannotated] != 2 {
		t.Fatalf("stage op counts = %v, want mlp 1 and unannotated 2", counts)
	}
}

func TestTriageNsysBadInputs(t *testing.T) {
	ctx := context.Background()
	// An SQLite database that is not an nsys export.
	other := filepath.Join(t.TempDir(), "other.sqlite")
	db, err := sql.Open("sqlite", other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE t(x); INSERT INTO t VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := TriagePath(ctx, other, triage.DiscoverOptions{}, triage.Options{}); !errors.Is(err, nsysdb.ErrNotExport) {
		t.Errorf("non-export: err = %v, want ErrNotExport", err)
	}
	// An export without kernels fails for `runner triage` ...
	empty := wireExport(t, false)
	if _, err := TriagePath(ctx, empty, triage.DiscoverOptions{}, triage.Options{}); !errors.Is(err, nsysdb.ErrNoKernels) {
		t.Errorf("no kernels: err = %v, want ErrNoKernels", err)
	}
	// ... while a run cell gets an empty report whose warnings say why and which steps the
	// window still saw (the NVTX ranges were captured).
	rep, err := TriageNsys(ctx, empty, triage.DiscoverOptions{}, triage.Options{}, NsysOptions{AllowNoKernels: true, Window: true, NVTXTraced: true, TotalSteps: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Stages) != 0 || len(rep.Warnings) == 0 || rep.Warnings[0] != WindowPrefix+"steps 0-1 of 2 captured (0 full, 2 partial)" {
		t.Fatalf("stages %d, warnings %q", len(rep.Stages), rep.Warnings)
	}
	if !strings.Contains(strings.Join(rep.Warnings, "\n"), "no CUDA kernels") {
		t.Errorf("warnings do not say the export has no kernels: %q", rep.Warnings)
	}
}

func TestWindowCoverage(t *testing.T) {
	c := &nsysdb.Capture{Trace: trace.New("x", "nsys"), SessionStartUnixNs: 1_000_000_000_000, WindowStart: 10_000, WindowEnd: 50_000}
	steps := []nsysdb.Step{
		{Index: 0, Start: 1_000_000_000_000, End: 1_000_000_020_000},
		{Index: 1, Start: 1_000_000_020_000, End: 1_000_000_040_000},
		{Index: 2, Start: 1_000_000_040_000, End: 1_000_000_060_000},
	}
	// Without NVTX the perf-dump timings place the window.
	cov := windowCoverage(c, NsysOptions{StepTimings: steps, TotalSteps: 3})
	if cov == nil || cov.Source != "timings" || !slices.Equal(cov.Full, []int{1}) || !slices.Equal(cov.Partial, []int{0, 2}) || cov.Missed() {
		t.Fatalf("timings coverage = %+v", cov)
	}
	// With NVTX traced, no step range in the capture means no step captured.
	cov = windowCoverage(c, NsysOptions{NVTXTraced: true, StepTimings: steps, TotalSteps: 3})
	if cov == nil || cov.Source != "nvtx" || !cov.Missed() || !strings.Contains(cov.Warnings[0], "missed the denoising stage entirely") {
		t.Fatalf("nvtx coverage = %+v", cov)
	}
	// Neither NVTX nor timings: nothing to say.
	if cov := windowCoverage(c, NsysOptions{}); cov != nil {
		t.Fatalf("coverage without sources = %+v, want nil", cov)
	}
}

func TestStepTimings(t *testing.T) {
	d := &perf.Dump{
		Timestamp: "2026-01-01T00:00:10.000000+00:00",
		Total:     10 * time.Second,
		Stages: []perf.Stage{
			{Name: "TextEncodingStage", Dur: time.Second},
			{Name: "DenoisingStage", Dur: 8 * time.Second},
			{Name: "DecodingStage", Dur: time.Second},
		},
		DenoiseSteps: []time.Duration{3 * time.Second, 5 * time.Second},
	}
	steps := StepTimings(d)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	want := []nsysdb.Step{
		{Index: 0, Start: t0 + 1e9, End: t0 + 4e9},
		{Index: 1, Start: t0 + 4e9, End: t0 + 9e9},
	}
	if !slices.Equal(steps, want) {
		t.Fatalf("StepTimings = %+v, want %+v", steps, want)
	}
	d.Timestamp = "yesterday"
	if StepTimings(d) != nil {
		t.Error("StepTimings with an unreadable timestamp should be nil")
	}
}

func TestFoldNumbers(t *testing.T) {
	for in, want := range map[string]string{
		"denoising_step_12":      "denoising_step_N",
		"model.layers.31.attn":   "model.layers.N.attn",
		"DenoisingStage":         "DenoisingStage",
		"transformer_blocks.0.1": "transformer_blocks.N.N",
	} {
		if got := foldNumbers(in); got != want {
			t.Errorf("foldNumbers(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestCompactLaunchesKeepsTheReport: the triage of an nsys export is the same whether or not
// the session replaces the launches by one per call name (compactLaunches), for an export
// without NVTX ranges, for one with ranges and --nvtx-stage, and for one whose ranges define
// the stages by the torch-trace rules (denoising_step_N, looked up at launch time); and it does
// replace them.
func TestCompactLaunchesKeepsTheReport(t *testing.T) {
	const pid = 9
	export := func(nvtx bool) string {
		e := nsysgen.Export{Version: "3.28.1", GPUs: []nsysgen.GPU{{ID: 0, Name: "H100"}}}
		names := []string{"void flash::FlashAttnFwdSm90<int>(int)", "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT",
			"void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, at::native::FillFunctor<float>)",
			"ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"}
		for i := range 400 {
			t0 := int64(i) * 10_000
			api := "cudaLaunchKernel_v7000"
			if i%40 == 0 {
				api = "cudaGraphLaunch_v10000"
			}
			e.Runtime = append(e.Runtime, nsysgen.Runtime{Start: t0, End: t0 + 2_000, PID: pid, TID: pid, Correlation: int64(i + 1), Name: api})
			e.Kernels = append(e.Kernels, nsysgen.Kernel{Start: t0 + 3_000, End: t0 + 3_000 + int64(1_000+i*37%9_000), Stream: int32(7 + i%3),
				Correlation: int64(i + 1), Name: names[i%len(names)], PID: pid, TID: pid})
			// Ranges cover the first 30 launches of every 50: the other kernels are outside every
			// stage, and every third range is a DecodingStage, so a wrong launch time moves
			// kernels between three stages.
			if nvtx && i%50 == 0 {
				text := "denoising_step_" + string(rune('0'+i/50))
				if i%150 == 100 {
					text = "DecodingStage"
				}
				e.NVTX = append(e.NVTX, nsysgen.NVTX{Start: t0, End: t0 + 30*10_000 - 1, PID: pid, TID: pid, Text: text})
			}
		}
		path := filepath.Join(t.TempDir(), "report.sqlite")
		if err := nsysgen.Write(path, e); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, tc := range []struct {
		name string
		nvtx bool
		re   *regexp.Regexp
	}{{"no-nvtx", false, nil}, {"nvtx-stage", true, regexp.MustCompile(`^(denoising_step_\d|DecodingStage)$`)}, {"nvtx-default-stages", true, nil}} {
		t.Run(tc.name, func(t *testing.T) {
			path := export(tc.nvtx)
			render := func(compact bool) string {
				rep, err := TriageNsys(context.Background(), path, triage.DiscoverOptions{}, triage.Options{}, NsysOptions{StageRE: tc.re, noCompact: !compact})
				if err != nil {
					t.Fatal(err)
				}
				var b bytes.Buffer
				if err := triage.Render(&b, rep, triage.FormatJSON, 0); err != nil {
					t.Fatal(err)
				}
				return b.String()
			}
			full, compact := render(false), render(true)
			if full != compact {
				t.Errorf("the report changes with compacted launches:\n%s\n----\n%s", full, compact)
			}
			if !strings.Contains(full, "cudaGraphLaunch") || (tc.nvtx && !strings.Contains(full, "denoising_step_1")) {
				t.Errorf("the export does not exercise graph launches or stages:\n%s", full)
			}
			if tc.name == "nvtx-default-stages" && (!strings.Contains(full, `"stage": "DenoisingStage"`) || !strings.Contains(full, `"stage": "DecodingStage"`) || !strings.Contains(full, `"stage": "unannotated"`)) {
				t.Errorf("no DenoisingStage stage from the denoising_step_N ranges:\n%s", full[:min(len(full), 2000)])
			}
			s := newSession(NsysOptions{StageRE: tc.re}, nil)
			tr, err := s.open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			if len(tr.Launches) != 2 {
				t.Errorf("%d launches after compaction, want one per call name (2)", len(tr.Launches))
			}
		})
	}
}
