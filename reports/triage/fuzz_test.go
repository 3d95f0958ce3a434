package triage

import (
	"strings"
	"testing"
	"unicode/utf8"
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
		if in.Rank.TP >= 0 && !in.Merged && reSGLang.MatchString(name) {
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
