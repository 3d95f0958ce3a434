package triage

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sglprof/runner/reports/trace"
)

// FuzzClassifyName fuzzes the trace file-name parser of Discover: it must never panic, and a
// parsed rank tuple must render back to something the SGLang pattern reads the same way.
func FuzzClassifyName(f *testing.F) {
	for _, s := range []string{"p-TP-0-DP-1-PP-2-EP-3-DECODE.trace.json.gz", "merged-x.trace.json.gz", "r-5_steps-global-rank3.trace.json.gz",
		"u-full_stages-global-rank0.trace.json.gz", "trace_rank12.json", "x_tp3_.pt.trace.json", "a.sqlite", "-TP-99999999999999999999.trace.json"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		in, ok := classifyName(name)
		if !ok {
			return
		}
		if in.Format != FormatKineto && in.Format != FormatNsys {
			t.Fatalf("format %q", in.Format)
		}
		if in.Rank.TP >= 0 && !in.Merged && reSGLang().MatchString(name) {
			again, _ := classifyName("x-" + in.Rank.String() + ".trace.json")
			if again.Rank != in.Rank {
				t.Fatalf("rank %+v renders as %q and parses back as %+v", in.Rank, in.Rank.String(), again.Rank)
			}
		}
	})
}

// FuzzCanonical: canonicalisation is idempotent and the classifier accepts anything.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{kAttn, kNCCL, kMemcpy, "void f(", ")(", "0x0x0xZ", "a  b\t(c)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c := Canonical(s)
		if c2 := Canonical(c); c2 != c && utf8.ValidString(s) {
			t.Fatalf("Canonical not idempotent: %q -> %q -> %q", s, c, c2)
		}
		if Classify(s) == "" {
			t.Fatal("empty category")
		}
		_ = baseName(c)
	})
}

// FuzzSiteName: frame names of any shape normalise without panicking.
func FuzzSiteName(f *testing.F) {
	for _, s := range []string{pyMM, pyModule, "<built-in method x>", "a.py(", "a.py(1", ".py():"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := siteName(s)
		_ = siteScore(n)
		if strings.Contains(s, ".py(") && strings.Contains(s, "):") && !strings.Contains(n, ".py:") && !strings.Contains(n, ".py(") {
			t.Fatalf("siteName(%q) = %q lost the file", s, n)
		}
	})
}

// FuzzParseCatalog and FuzzParseClassifier: user-supplied data files error, never panic.
func FuzzParseCatalog(f *testing.F) {
	f.Add(string(fusionsJSON[:200]))
	f.Add(`{"patterns":[{"name":"a","fused":["re:x("]}]}`)
	f.Add(`{"patterns":[{"name":"a","split":[{"any":["x"],"categories":["norm"]}]}]}`)
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCatalog([]byte(s))
		if err == nil {
			_ = c.Match([]KernelRow{row(kSilu, 1), row(kMul, 1)}, 10_000, "m", 2)
		}
	})
}

func FuzzParseClassifier(f *testing.F) {
	f.Add(classifierRules[:300])
	f.Add("a re:(\n")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseClassifier(s)
		if err == nil && c.Classify("x") == "" {
			t.Fatal("empty category")
		}
	})
}

// FuzzAnalyze builds a trace from fuzz bytes, with links that may point anywhere (as a buggy
// reader could produce), and checks that Analyze neither panics nor loses kernel time, and that
// a trace without annotations streamed (OpenStream) gives the report it gives held.
func FuzzAnalyze(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Add([]byte{0, 0, 0, 0, 255, 255, 255, 255, 7, 7, 7, 7, 1, 200, 3, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		b := newTB("fuzz.json")
		names := []string{kGEMM, kNCCL, kNorm, kMemcpy, "step[DECODE bs=1]", "DenoisingStage", pyMM, pyModule}
		for i := 0; i+8 <= len(data) && i < 800; i += 8 {
			d := data[i : i+8]
			start := int64(d[0])*100 + int64(d[1])
			end := start + int64(d[2])*10
			switch d[3] % 5 {
			case 0:
				b.frame(names[d[4]%8], start, end, int32(int8(d[5])))
			case 1:
				b.cpuop("aten::x", start, end, int32(int8(d[5])))
			case 2:
				l := b.launch("cudaGraphLaunch", start, end, d[4]%2 == 0)
				b.t.Launches[l].Frame = int32(int8(d[5]))
			case 3:
				b.annot(names[d[4]%8], start, end, d[5]%2 == 0)
			default:
				b.kernel(names[d[4]%4], int32(d[5]%2), int32(d[6]%3), start, end, int32(int8(d[7])), int32(int8(d[6])))
			}
		}
		r, err := Analyze(context.Background(), Inputs{Files: []Input{{Path: "fuzz.json", Rank: NoRank}}},
			Options{Open: opener(map[string]*trace.Trace{"fuzz.json": b.t})})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range r.Stages {
			var sum float64
			for _, k := range s.Kernels {
				sum += k.TotalUS
			}
			if sum != s.KernelTimeUS && (sum-s.KernelTimeUS > 1e-6 || s.KernelTimeUS-sum > 1e-6) {
				t.Fatalf("stage %s: rows %v us, stage %v us", s.Stage, sum, s.KernelTimeUS)
			}
		}
		for _, format := range []string{FormatText, FormatMarkdown, FormatJSON, FormatCSV} {
			if err := Render(io.Discard, r, format, 0); err != nil {
				t.Fatal(err)
			}
		}
		// Without annotations the trace can be streamed, with the same report.
		if len(b.t.Annotations) == 0 {
			s, err := Analyze(context.Background(), Inputs{Files: []Input{{Path: "fuzz.json", Rank: NoRank}}},
				Options{Open: opener(nil), OpenStream: func(context.Context, string) (*OpStream, error) { return streamOf(b.t, -1), nil }})
			if err != nil {
				t.Fatal(err)
			}
			if h, st := reportJSON(t, r), reportJSON(t, s); h != st {
				t.Fatalf("streamed report differs from the held one\nheld:\n%s\nstreamed:\n%s", h, st)
			}
		}
	})
}

// FuzzDiff: two triages as JSON of any shape (what ReadReportFile decodes from a cell's
// triage.json) diff and render without panicking, and every kernel of either side is in the
// diff once per stage.
func FuzzDiff(f *testing.F) {
	f.Add(`{"stages":[{"stage":"all","kernel_count":2,"kernel_time_us":3,"kernels":[{"name":"a_1","count":1,"total_us":1},{"name":"b","count":1,"total_us":2}],"fusions":[{"pattern":"p","status":"s"}]}]}`,
		`{"stages":[{"stage":"all","kernel_count":1,"kernel_time_us":1.5,"kernels":[{"name":"a_2","count":1,"total_us":1.5}]},{"stage":"x"}]}`)
	f.Add(`{"stages":[{"stage":"s","kernels":[{"name":"k","total_us":-1e308,"count":-3},{"name":"k","total_us":1e308}]}]}`, `{"stages":null}`)
	f.Add(`{}`, `{"stages":[{"stage":"s"},{"stage":"s"}]}`)
	f.Fuzz(func(t *testing.T, a, b string) {
		var base, cur Report
		if json.Unmarshal([]byte(a), &base) != nil || json.Unmarshal([]byte(b), &cur) != nil {
			return
		}
		d := Diff(&base, &cur)
		for _, format := range []string{FormatText, FormatMarkdown, FormatJSON, FormatCSV} {
			if err := RenderDiff(io.Discard, d, format, DefaultCutoff); err != nil {
				t.Fatal(err)
			}
		}
		for _, s := range d.Stages {
			seen := map[[2]string]int{}
			for _, k := range s.Kernels {
				bn := k.Name
				if k.BaseName != "" {
					bn = k.BaseName
				}
				if k.Status != DiffAdded {
					seen[[2]string{"b", bn}]++
				}
				if k.Status != DiffRemoved {
					seen[[2]string{"n", k.Name}]++
				}
			}
			for key, n := range seen {
				if n != 1 {
					t.Fatalf("stage %s: %s kernel %q listed %d times", s.Stage, key[0], key[1], n)
				}
			}
		}
		_ = NormalizeKernelName(a)
		_ = ShortKernelName(b)
	})
}
