package proc

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// naiveIndex is the specification: the leftmost position at which any
// non-empty needle occurs.
func naiveIndex(text string, list []string) int {
	best := -1
	for _, p := range list {
		if p == "" {
			continue
		}
		if i := strings.Index(text, p); i >= 0 && (best < 0 || i < best) {
			best = i
		}
	}
	return best
}

// gateNeedles are sglang's log-gate markers (backends/sglang), the needle
// set the runner passes as Spec.Select.
var gateNeedles = []string{
	"Falling back to diffusers backend", "Using diffusers backend", "Loaded diffusers pipeline",
	"CUDA out of memory", "OutOfMemoryError", "Failed to save trace:", "Trace file may be corrupted:",
	"Failed to export trace:", "Multiple gzip headers detected", "error: unrecognized arguments:",
	"scheduler is dead", "Failed to generate output", "Saved profiler traces to:",
	"Saving profiler traces to:", "Metrics dumped to:",
}

func TestNeedlesMatchesNaive(t *testing.T) {
	sets := [][]string{
		gateNeedles,
		{"abc"},
		{"ab", "x"}, // short needles only
		{"aaa", "aab", "ba"},
		{"needle", "", "dle", "e"},
		{strings.Repeat("z", 300), "zzz"}, // a window longer than the largest shift
	}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := "ab zdlexF\n"
	for si, set := range sets {
		n := newNeedles(set)
		for trial := 0; trial < 3000; trial++ {
			var b strings.Builder
			for b.Len() < rng.IntN(700) {
				if rng.IntN(40) == 0 {
					b.WriteString(set[rng.IntN(len(set))])
				} else {
					b.WriteByte(alphabet[rng.IntN(len(alphabet))])
				}
			}
			text := b.String()
			if got, want := n.index([]byte(text)), naiveIndex(text, set); got != want {
				t.Fatalf("set %d: index(%q) = %d, want %d", si, text, got, want)
			}
		}
	}
}

func TestNeedlesOnLog(t *testing.T) {
	n := newNeedles(gateNeedles)
	log := strings.Repeat("[2026-11-21 18:10:00.123] [INFO] Denoising step 12/50 took 93.12 ms, peak mem 31.2 GB (rank 0)\n", 3000)
	if i := n.index([]byte(log)); i != -1 {
		t.Fatalf("found a needle at %d in a log without one", i)
	}
	for _, at := range []int{0, 1, len(log) / 2, len(log) - 40} {
		text := log[:at] + "torch.OutOfMemoryError: CUDA out of memory" + log[at:]
		if got, want := n.index([]byte(text)), at+len("torch."); got != want {
			t.Errorf("marker inserted at %d: index = %d, want %d", at, got, want)
		}
	}
	if newNeedles(nil) != nil || newNeedles([]string{""}) != nil {
		t.Error("an empty needle set should compile to nil")
	}
}

func FuzzNeedles(f *testing.F) {
	f.Add("Saved profiler traces to: /x", "traces to", "xyz")
	f.Add("aaaaab", "aab", "b")
	f.Add("", "", "")
	f.Fuzz(func(t *testing.T, text, a, b string) {
		set := []string{a, b, "CUDA out of memory"}
		n := newNeedles(set)
		if got, want := n.index([]byte(text)), naiveIndex(text, set); got != want {
			t.Fatalf("index(%q, %q) = %d, want %d", text, set, got, want)
		}
	})
}

func BenchmarkNeedles(b *testing.B) {
	n := newNeedles(gateNeedles)
	chunk := []byte(strings.Repeat("[2026-11-21 18:10:00.123] [INFO] Denoising step 12/50 took 93.12 ms, peak mem 31.2 GB (rank 0)\n", 2600))
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		if n.index(chunk) >= 0 {
			b.Fatal("unexpected match")
		}
	}
}
