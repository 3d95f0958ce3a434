package triage

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/trace"
)

// analyzeVariant triages a variant of the golden trace (Analyze, as the CLI does).
func analyzeVariant(t *testing.T, v goldenVariant) *Report {
	t.Helper()
	tr := goldenTraceWith(v)
	in := Inputs{Files: []Input{{Path: tr.Path, Format: FormatKineto, Rank: NoRank}}, Model: "Qwen/Qwen3-8B", TPSize: 2}
	r, err := Analyze(context.Background(), in, Options{Open: opener(map[string]*trace.Trace{tr.Path: tr})})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// diffPair is the base and new triage of the diff tests: the new run's attention is 30 %
// slower, its extend multiply is gone (so the split SiLU + mul fusion row goes), and a Triton
// kernel was renumbered between the builds (_3 to _7) and takes 6 µs instead of 4.
func diffPair(t *testing.T) (base, cur *Report) {
	base = analyzeVariant(t, goldenVariant{extra: "triton_poi_fused_add_3"})
	cur = analyzeVariant(t, goldenVariant{attnScale: 1.3, dropMul: true, extra: "triton_poi_fused_add_7", extraNS: 6_000})
	return base, cur
}

func findDiff(t *testing.T, s *StageDiff, prefix string) *KernelDiff {
	t.Helper()
	for i := range s.Kernels {
		if strings.HasPrefix(s.Kernels[i].Name, prefix) {
			return &s.Kernels[i]
		}
	}
	t.Fatalf("stage %s of the diff has no kernel %q", s.Stage, prefix)
	return nil
}

func TestDiffGolden(t *testing.T) {
	base, cur := diffPair(t)
	cur.Diff = Diff(base, cur)
	for _, f := range []string{FormatText, FormatMarkdown, FormatJSON, FormatCSV} {
		t.Run(f, func(t *testing.T) {
			var buf bytes.Buffer
			if err := Render(&buf, cur, f, DefaultCutoff); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join("testdata", "diff."+f+".golden")
			if *update {
				if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(p)
			if err != nil {
				t.Fatalf("%v (run go test ./reports/triage -run TestDiffGolden -update to create it)", err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("%s output differs from %s (rerun with -update after checking the diff):\n%s", f, p, buf.String())
			}
		})
	}
}

// The diff explains the change it was built from: attention +30 % with the same launches,
// the multiply removed, the renumbered Triton kernel matched by its normalised name, the
// GEMMs unchanged, and the fusion row that lost its multiply listed.
func TestDiffExplainsChange(t *testing.T) {
	base, cur := diffPair(t)
	d := Diff(base, cur)
	if len(d.Warnings) != 0 {
		t.Errorf("warnings on complete triages: %v", d.Warnings)
	}
	ext := d.Stage(StageExtend)
	if ext == nil {
		t.Fatalf("no extend stage in %+v", d.Stages)
	}
	att := findDiff(t, ext, "void cutlass::device_kernel<flash::")
	if p, _ := att.DeltaPct(); att.Status != DiffChanged || att.BaseCount != att.NewCount || p < 29.9 || p > 30.1 {
		t.Errorf("attention: %+v (%.2f %%), want changed by +30 %% with equal launches", att, p)
	}
	if &ext.Kernels[0] != att {
		t.Errorf("first row %q, want attention (largest |delta|)", ext.Kernels[0].Name)
	}
	mul := findDiff(t, ext, "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor")
	if mul.Status != DiffRemoved || mul.NewCount != 0 || mul.BaseCount != 2 || mul.Match != "" {
		t.Errorf("multiply: %+v, want removed with 2 base launches", mul)
	}
	tri := findDiff(t, ext, "triton_poi_fused_add_")
	if tri.Name != "triton_poi_fused_add_7" || tri.BaseName != "triton_poi_fused_add_3" || tri.Match != MatchNormalized || tri.Status != DiffChanged || tri.DeltaUS != 4 {
		t.Errorf("renumbered Triton kernel: %+v, want new _7 matched to base _3 by normalised name, +4 µs", tri)
	}
	gemm := findDiff(t, ext, kGEMM)
	if gemm.Status != DiffSame || gemm.Match != MatchExact || gemm.DeltaUS != 0 {
		t.Errorf("GEMM: %+v, want the same", gemm)
	}
	if len(ext.Fusions) != 1 || ext.Fusions[0].BaseStatus == "" || ext.Fusions[0].NewStatus != "" {
		t.Errorf("fusion changes %+v, want the split SiLU+mul row gone", ext.Fusions)
	}
	if p, ok := ext.ExplainedPct(ext.Kernels[:3]); !ok || p < 99.999 || p > 100.001 {
		t.Errorf("attention, multiply and Triton kernel explain %.3f %% of the stage's change, want 100", p)
	}
	dec := d.Stage(StageDecode)
	if dec == nil || findDiff(t, dec, "void cutlass::device_kernel<flash::").Status != DiffChanged {
		t.Errorf("decode attention not changed: %+v", dec)
	}
}

// The JSON contract: every kernel of either side exactly once per stage, a known status, and
// kernel totals that add up to the two triages' stage totals (integer nanoseconds).
func TestDiffContract(t *testing.T) {
	base, cur := diffPair(t)
	d := Diff(base, cur)
	cur.Diff = d
	var buf bytes.Buffer
	if err := Render(&buf, cur, FormatJSON, DefaultCutoff); err != nil {
		t.Fatal(err)
	}
	var out struct {
		Stages []json.RawMessage `json:"stages"`
		Diff   struct {
			Stages []struct {
				Stage            string  `json:"stage"`
				BaseKernelTimeUS float64 `json:"base_kernel_time_us"`
				NewKernelTimeUS  float64 `json:"new_kernel_time_us"`
				Kernels          []struct {
					Name        string   `json:"name"`
					BaseName    string   `json:"base_name"`
					Category    string   `json:"category"`
					BaseTotalUS float64  `json:"base_total_us"`
					NewTotalUS  float64  `json:"new_total_us"`
					BaseCount   *int     `json:"base_count"`
					NewCount    *int     `json:"new_count"`
					DeltaUS     *float64 `json:"delta_us"`
					Status      string   `json:"status"`
				} `json:"kernels"`
			} `json:"stages"`
		} `json:"diff"`
	}
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Stages) == 0 {
		t.Errorf("the new triage's own stages are missing beside the diff")
	}
	for _, s := range out.Diff.Stages {
		bs, ns := findStage(t, base, s.Stage), findStage(t, cur, s.Stage)
		seenB, seenN := map[string]int{}, map[string]int{}
		var bsum, nsum int64
		for _, k := range s.Kernels {
			if !slices.Contains([]string{DiffChanged, DiffAdded, DiffRemoved, DiffSame}, k.Status) || k.BaseCount == nil || k.NewCount == nil || k.DeltaUS == nil || k.Category == "" {
				t.Errorf("stage %s kernel %q: incomplete row %+v", s.Stage, k.Name, k)
			}
			bname := k.Name
			if k.BaseName != "" {
				bname = k.BaseName
			}
			if k.Status != DiffAdded {
				seenB[bname]++
			}
			if k.Status != DiffRemoved {
				seenN[k.Name]++
			}
			bsum += nsOf(k.BaseTotalUS, 0)
			nsum += nsOf(k.NewTotalUS, 0)
		}
		for side, st := range map[string]*Stage{"base": bs, "new": ns} {
			seen := seenB
			if side == "new" {
				seen = seenN
			}
			for _, k := range st.Kernels {
				if seen[k.Name] != 1 {
					t.Errorf("stage %s: %s kernel %q appears %d times in the diff, want once", s.Stage, side, k.Name, seen[k.Name])
				}
			}
			if len(seen) != len(st.Kernels) {
				t.Errorf("stage %s: the diff has %d %s kernels, the triage %d", s.Stage, len(seen), side, len(st.Kernels))
			}
		}
		if bsum != nsOf(bs.KernelTimeUS, 0) || nsum != nsOf(ns.KernelTimeUS, 0) {
			t.Errorf("stage %s: kernel totals %d / %d ns, triage totals %d / %d ns", s.Stage, bsum, nsum, nsOf(bs.KernelTimeUS, 0), nsOf(ns.KernelTimeUS, 0))
		}
		if s.BaseKernelTimeUS != bs.KernelTimeUS || s.NewKernelTimeUS != ns.KernelTimeUS {
			t.Errorf("stage %s: stage totals %v / %v, triage %v / %v", s.Stage, s.BaseKernelTimeUS, s.NewKernelTimeUS, bs.KernelTimeUS, ns.KernelTimeUS)
		}
	}
}

// A triage read back from its JSON (no nanosecond fields) diffs the same as the one in memory,
// and one written with a cutoff is flagged as incomplete.
func TestDiffFromJSON(t *testing.T) {
	base, cur := diffPair(t)
	read := func(r *Report, cutoff float64) *Report {
		var b bytes.Buffer
		if err := Render(&b, r, FormatJSON, cutoff); err != nil {
			t.Fatal(err)
		}
		var out Report
		if err := json.Unmarshal(b.Bytes(), &out); err != nil {
			t.Fatal(err)
		}
		return &out
	}
	want, _ := json.Marshal(Diff(base, cur))
	got, _ := json.Marshal(Diff(read(base, 0), read(cur, 0)))
	if !bytes.Equal(got, want) {
		t.Errorf("diff of the JSON round trip differs:\n got %s\nwant %s", got, want)
	}
	if !read(cur, 0).Complete() {
		t.Errorf("a triage rendered without cutoff reads as incomplete")
	}
	cut := read(cur, 20)
	if cut.Complete() {
		t.Errorf("a triage rendered with a 20 %% cutoff reads as complete")
	}
	if d := Diff(read(base, 0), cut); len(d.Warnings) == 0 || !strings.Contains(d.Warnings[0], "cutoff") {
		t.Errorf("warnings %q, want the cutoff named", d.Warnings)
	}
}

// Normalised matching pairs only one kernel with one: two renumbered Triton kernels on each
// side stay added and removed rather than be paired by a guess.
func TestDiffNormalizedOneToOne(t *testing.T) {
	st := func(names ...string) *Report {
		s := Stage{Stage: StageAll}
		for i, n := range names {
			s.Kernels = append(s.Kernels, KernelRow{Name: n, Category: "elementwise", TotalUS: float64(10 + i), Count: 1})
			s.KernelCount++
			s.KernelTimeUS += float64(10 + i)
		}
		return &Report{Stages: []Stage{s}}
	}
	d := Diff(st("triton_poi_fused_1", "triton_poi_fused_2", "k<float>"), st("triton_poi_fused_3", "triton_poi_fused_4", "k<half>"))
	var got []string
	for _, k := range d.Stages[0].Kernels {
		got = append(got, k.Name+":"+k.Status+":"+k.Match)
	}
	slices.Sort(got)
	want := []string{"k<half>:same:normalized", "triton_poi_fused_1:removed:", "triton_poi_fused_2:removed:", "triton_poi_fused_3:added:", "triton_poi_fused_4:added:"}
	if !slices.Equal(got, want) {
		t.Errorf("rows %q, want %q", got, want)
	}
}

func TestNormalizeKernelName(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"void flash::FlashAttnFwdSm90<128, true>(Params)", "flash::FlashAttnFwdSm90"},
		{"triton_poi_fused_add_mul_12", "triton_poi_fused_add_mul"},
		{"triton_red_fused_0_1", "triton_red_fused"},
		{"cutlass_kernel_3f2a9c81d0_sm90", "cutlass_kernel_#_sm90"},
		{"fmha_cutlassF_deadbeef12", "fmha_cutlassF_#"},
		{"nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT", "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT"},
		{"kernel_abcdefab", "kernel_abcdefab"}, // no digit: a word, not a hash
		{"Memcpy DtoD (Device -> Device)", "Memcpy DtoD"},
		{"void k<a<b>, c>", "k"},
		{"unbalanced<x", "unbalanced<x"},
	} {
		if got := NormalizeKernelName(c.in); got != c.want {
			t.Errorf("NormalizeKernelName(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestShortKernelName(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"void flash::FlashAttnFwdSm90<…> >", "FlashAttnFwdSm90"},
		{kAttn, "device_kernel"},
		{"nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT", "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT"},
		{"Memcpy DtoD (Device -> Device)", "Memcpy DtoD"},
		{"<odd>", "<odd>"},
	} {
		if got := ShortKernelName(c.in); got != c.want {
			t.Errorf("ShortKernelName(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
