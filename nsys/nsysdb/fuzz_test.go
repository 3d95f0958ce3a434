package nsysdb

import (
	"strings"
	"testing"
)

// SQLite files are parsed by SQLite itself; what this package parses is the text inside them:
// schema versions, API names, NVTX labels and global ids. Those helpers are fuzzed here.

func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"2.9.1", "3.28.1", "3.13", " 3.13.2 ", "", "3", "3.x.1", "1.2.3.4", "999999.0.0", "-1.2", "3..1", "0x3.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseVersion(s)
		if err != nil {
			return
		}
		// A parsed version prints and parses back to itself, and is never negative.
		w, err := ParseVersion(v.String())
		if err != nil || w != v {
			t.Fatalf("%q → %v → %q → %v, %v", s, v, v.String(), w, err)
		}
		if v.Major < 0 || v.Minor < 0 || v.Micro < 0 {
			t.Fatalf("negative part in %v", v)
		}
		if v.Less(v) {
			t.Fatalf("%v < itself", v)
		}
	})
}

func FuzzAPIName(f *testing.F) {
	for _, s := range []string{"cudaLaunchKernel_v7000", "cudaGraphLaunch_v10000", "cudaLaunchKernel_ptsz_v7000", "cuInit", "_v1", "_v", "x_v12", "cudaMalloc", "", "cu", "cuda"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		stripped := StripAPIVersion(s)
		if !strings.HasPrefix(s, stripped) {
			t.Fatalf("StripAPIVersion(%q) = %q is not a prefix", s, stripped)
		}
		if stripped == "" && s != "" {
			t.Fatalf("StripAPIVersion(%q) emptied the name", s)
		}
		st := statsAPIName(s)
		if !strings.HasPrefix(s, st) || (st != s && len(s)-len(st) != 6) {
			t.Fatalf("statsAPIName(%q) = %q", s, st)
		}
		if IsDriverAPI(s) && strings.HasPrefix(s, "cuda") {
			t.Fatalf("%q is both runtime and driver", s)
		}
		if IsGraphLaunch(s) != IsGraphLaunch(stripped) && strings.HasPrefix(stripped, "cu") {
			t.Fatalf("graph flag changes with the version suffix for %q", s)
		}
	})
}

func FuzzNVTXLabel(f *testing.F) {
	f.Add("forward", true, "", false, "sglang")
	f.Add("", false, "denoising_step_3", true, "")
	f.Add("a:b", true, "c", true, "d:e")
	f.Fuzz(func(t *testing.T, text string, hasText bool, reg string, hasReg bool, domain string) {
		got := nvtxText(text, hasText, reg, hasReg)
		switch {
		case hasReg && got != reg:
			t.Fatalf("registered string not preferred: %q", got)
		case !hasReg && hasText && got != text:
			t.Fatalf("inline text lost: %q", got)
		case !hasReg && !hasText && got != "":
			t.Fatalf("text from nowhere: %q", got)
		}
		label := RangeLabel(domain, got)
		if !strings.HasPrefix(label, domain+":") || !strings.HasSuffix(label, got) || len(label) != len(domain)+1+len(got) {
			t.Fatalf("RangeLabel(%q, %q) = %q", domain, got, label)
		}
		if steps := DenoiseStepPattern().FindStringSubmatch(got); steps != nil && len(steps) != 2 {
			t.Fatalf("pattern groups %v", steps)
		}
	})
}

func FuzzSplitGlobalID(f *testing.F) {
	f.Add(int64(310028055214088))
	f.Add(int64(302119224788637))
	f.Add(int64(-1))
	f.Add(int64(0))
	f.Fuzz(func(t *testing.T, g int64) {
		vm, pid, tid := SplitGlobalID(g)
		if pid < 0 || pid > 0xFFFFFF || tid < 0 || tid > 0xFFFFFF {
			t.Fatalf("%d → pid %d tid %d out of range", g, pid, tid)
		}
		if g >= 0 && int64(vm)<<48|int64(pid)<<24|int64(tid) != g {
			t.Fatalf("%d does not re-encode from vm %d pid %d tid %d", g, vm, pid, tid)
		}
	})
}
