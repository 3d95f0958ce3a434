package sglang

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sglprof/runner/reports/rundir"
)

const (
	cyan  = "\x1b[1;36m"
	green = "\x1b[92m"
	reset = "\x1b[0;0m"
)

func TestStripANSI(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"Saved profiler traces to: " + cyan + "/a/b.trace.json.gz" + reset, "Saved profiler traces to: /a/b.trace.json.gz"},
		{"in " + green + "3.21" + reset + " seconds", "in 3.21 seconds"},
		{"\x1b[2K\x1b[1Gprogress", "progress"},
		{"\x1b]0;title\x07after", "after"},
		{"\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"},
		{"trailing escape \x1b", "trailing escape "},
		{"unterminated \x1b[1;3", "unterminated "},
		{"\x1b(Bcharset", "charset"},
		{"café \x1b[31mrouge\x1b[0m", "café rouge"},
	}
	for _, tt := range tests {
		if got := StripANSI(tt.in); got != tt.want {
			t.Errorf("StripANSI(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func feed(w *Watcher, lines ...string) {
	for i, l := range lines {
		w.Line(i+1, "stderr", l)
	}
}

func TestWatcherFindings(t *testing.T) {
	tests := []struct {
		line string
		want Finding // "" = no finding
	}{
		// ref §A.7: the three fallback markers, as sglang prints them.
		{"[12-20 16:44:01] Could not resolve native configuration for model '/models/qwen'. Falling back to diffusers backend.", FindingFallback},
		{"[12-20 16:44:01] Falling back to diffusers backend", FindingFallback},
		{"[12-20 16:44:01] Using diffusers backend for model 'Qwen/Qwen-Image' (explicitly requested)", FindingFallback},
		{"[12-20 16:44:30] Loaded diffusers pipeline: " + cyan + "QwenImagePipeline" + reset, FindingFallback},
		// Lookalikes that are not a diffusers fallback.
		{"[12-20 16:44:01] deep_gemm unavailable: CUDA_HOME not set. Falling back to default kernels.", ""},
		{"[12-20 16:44:02] Failed with dtype=torch.bfloat16, falling back to float32: dtype unsupported", ""},
		{"[12-20 16:44:02] falling back to diffusers backend", ""}, // the markers are case-sensitive
		{"[12-20 16:44:02] Loading diffusers pipeline from /models/qwen", ""},
		{"[12-20 16:44:02] Using FlashAttention (FA3 for hopper, FA4 for blackwell) backend", ""},
		// OOM in its usual spellings.
		{"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB of which 1.06 GiB is free.", FindingOOM},
		{"RuntimeError: CUDA out of memory.", FindingOOM},
		{"OutOfMemoryError()", FindingOOM},
		// Trace save failures, new and old.
		{"[12-20 16:45:15] Failed to save trace: [Errno 28] No space left on device", FindingTraceSave},
		{"[12-20 16:45:15] Trace file may be corrupted: /x/y.trace.json.gz", FindingTraceSave},
		{"[12-20 16:45:15] Multiple gzip headers detected", FindingTraceSave},
		{"[12-20 16:45:15] Failed to export trace: RuntimeError('x')", FindingTraceSave},
		{"sglang generate: error: unrecognized arguments: --bogus 3", FindingUnrecognized},
		{"[12-20 16:46:00] Rank 0 scheduler is dead. Please check if there are relevant logs.", FindingWorkerDead},
		{"[12-20 16:46:00] Failed to generate output for prompt 1: boom", FindingGenerateFailed},
		{"[12-20 16:46:00] Pixel data generated successfully in " + green + "12.34" + reset + " seconds", ""},
	}
	all := []Finding{FindingFallback, FindingOOM, FindingTraceSave, FindingUnrecognized, FindingWorkerDead, FindingGenerateFailed}
	for _, tt := range tests {
		w := NewWatcher()
		w.Line(7, "stdout", tt.line)
		for _, f := range all {
			ev := w.Evidence(f)
			if f == tt.want {
				want := []rundir.Evidence{{Line: 7, Text: StripANSI(tt.line), Stream: "stdout"}}
				if diff := cmp.Diff(want, ev); diff != "" {
					t.Errorf("%q: evidence for %s (-want +got):\n%s", tt.line, f, diff)
				}
			} else if len(ev) > 0 {
				t.Errorf("%q: unexpected finding %s", tt.line, f)
			}
		}
	}
}

func TestWatcherPaths(t *testing.T) {
	w := NewWatcher()
	feed(w,
		"[12-20 16:45:15] Saved profiler traces to: "+cyan+"/sgl-workspace/sglang/logs/mocked_fake_id_for_offline_generate-5_steps-global-rank0.trace.json.gz"+reset,
		"[12-20 16:45:15] Saving profiler traces to: /old/build/abc-global-rank0.trace.json.gz   ",
		"[12-20 16:45:16] Metrics dumped to: "+cyan+"/runs/c/perf.json"+reset,
		"[Performance] Metrics dumped to: /runs/old/perf.json",
		// a repeat must not be listed twice
		"[12-20 16:45:17] Saved profiler traces to: "+cyan+"/sgl-workspace/sglang/logs/mocked_fake_id_for_offline_generate-5_steps-global-rank0.trace.json.gz"+reset,
		// a progress bar followed by the line on the same physical line
		" 98%|█████████▊| 49/50 [00:20<00:00, 2.4it/s]\r100%|██████████| 50/50\r[12-20 16:45:18] Saved profiler traces to: "+cyan+"/p/q.trace.json.gz"+reset+"\r",
		"[12-20 16:45:19] Saved profiler traces to: ", // no path: ignored
	)
	wantTraces := []string{
		"/sgl-workspace/sglang/logs/mocked_fake_id_for_offline_generate-5_steps-global-rank0.trace.json.gz",
		"/old/build/abc-global-rank0.trace.json.gz",
		"/p/q.trace.json.gz",
	}
	if diff := cmp.Diff(wantTraces, w.TracePaths()); diff != "" {
		t.Errorf("TracePaths (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"/runs/c/perf.json", "/runs/old/perf.json"}, w.MetricsPaths()); diff != "" {
		t.Errorf("MetricsPaths (-want +got):\n%s", diff)
	}
	if w.Lines() != 7 {
		t.Errorf("Lines = %d, want 7", w.Lines())
	}
}

func TestWatcherProgressFramesMatchIndividually(t *testing.T) {
	w := NewWatcher()
	w.Line(3, "stderr", "  2%|▏ | 1/50\r  4%|▍ | 2/50\rtorch.OutOfMemoryError: CUDA out of memory.\r")
	ev := w.Evidence(FindingOOM)
	if len(ev) != 1 || ev[0].Text != "torch.OutOfMemoryError: CUDA out of memory." || ev[0].Line != 3 {
		t.Errorf("evidence = %+v", ev)
	}
}

func TestWatcherBounds(t *testing.T) {
	w := NewWatcher()
	for i := 1; i <= 1000; i++ {
		w.Line(i, "stderr", fmt.Sprintf("line %d: torch.OutOfMemoryError: CUDA out of memory", i))
		w.Line(i, "stderr", fmt.Sprintf("Saved profiler traces to: /t/%d.trace.json.gz", i))
	}
	ev := w.Evidence(FindingOOM)
	if len(ev) != MaxEvidence || ev[0].Line != 1 || ev[MaxEvidence-1].Line != MaxEvidence {
		t.Errorf("evidence kept %d lines, first %+v", len(ev), ev[0])
	}
	if w.Count(FindingOOM) != 1000 {
		t.Errorf("Count = %d, want 1000", w.Count(FindingOOM))
	}
	if n := len(w.TracePaths()); n != MaxPaths {
		t.Errorf("kept %d trace paths, want %d", n, MaxPaths)
	}

	tail := w.Tail(TailLines + 10)
	if len(tail) != TailLines {
		t.Fatalf("Tail returned %d lines", len(tail))
	}
	if tail[len(tail)-1].Text != "Saved profiler traces to: /t/1000.trace.json.gz" || tail[0].Line != 981 {
		t.Errorf("tail first %+v last %+v", tail[0], tail[len(tail)-1])
	}
	if got := w.Tail(3); len(got) != 3 || got[2] != tail[len(tail)-1] {
		t.Errorf("Tail(3) = %+v", got)
	}
	if got := NewWatcher().Tail(5); got != nil {
		t.Errorf("empty watcher Tail = %+v", got)
	}

	long := "Falling back to diffusers backend " + strings.Repeat("é", 1<<20)
	w.Line(2000, "stdout", long)
	for _, e := range w.Evidence(FindingFallback) {
		if len(e.Text) > MaxLineBytes+len("…[truncated]") || !strings.HasSuffix(e.Text, "…[truncated]") {
			t.Errorf("long line stored with %d bytes", len(e.Text))
		}
		if !strings.HasPrefix(e.Text, "Falling back") || !utf8Valid(e.Text) {
			t.Error("clipped line is not a valid prefix")
		}
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

func TestWatcherMemoryFlat(t *testing.T) {
	// Memory must not grow with the log: feed many distinct matching lines and compare the
	// heap with a watcher that saw few.
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	w := NewWatcher()
	line := strings.Repeat("x", 10000)
	for i := 0; i < 200; i++ {
		w.Line(i, "stdout", line)
	}
	before := heap()
	for i := 0; i < 20000; i++ {
		w.Line(i, "stdout", fmt.Sprintf("%d Falling back to diffusers backend %s Metrics dumped to: /p/%d", i, line, i))
	}
	after := heap()
	// 20000 lines of 10 kB is 200 MB; the watcher may keep well under 1 MB of it.
	if after > before && after-before > 4<<20 {
		t.Errorf("heap grew by %d bytes over 200 MB of log", after-before)
	}
	runtime.KeepAlive(w)
}

func FuzzWatcher(f *testing.F) {
	f.Add("Saved profiler traces to: "+cyan+"/a.trace.json.gz"+reset, "Falling back to diffusers backend")
	f.Add("\x1b[", "\r\r\r")
	f.Add("Metrics dumped to: \x1b]8;;\x07", "torch.OutOfMemoryError: CUDA out of memory")
	f.Add(strings.Repeat("\x1b[1;36m", 100), "error: unrecognized arguments: --x")
	f.Fuzz(func(t *testing.T, a, b string) {
		w := NewWatcher()
		for i := 0; i < 100; i++ {
			w.Line(i, "stdout", a)
			w.Line(i, "stderr", b)
			w.Line(i, "stderr", a+"\r"+b)
		}
		if w.Lines() != 300 {
			t.Fatalf("Lines = %d", w.Lines())
		}
		for _, f := range []Finding{FindingFallback, FindingOOM, FindingTraceSave, FindingUnrecognized, FindingWorkerDead, FindingGenerateFailed} {
			ev := w.Evidence(f)
			if len(ev) > MaxEvidence {
				t.Fatalf("%s kept %d lines", f, len(ev))
			}
			for _, e := range ev {
				if len(e.Text) > MaxLineBytes+len("…[truncated]") || strings.IndexByte(e.Text, 0x1b) >= 0 {
					t.Fatalf("bad evidence %q", e.Text)
				}
			}
		}
		if len(w.TracePaths()) > MaxPaths || len(w.MetricsPaths()) > MaxPaths || len(w.Tail(1000)) > TailLines {
			t.Fatal("unbounded state")
		}
		if s := StripANSI(a); len(s) > len(a) || strings.IndexByte(s, 0x1b) >= 0 {
			t.Fatalf("StripANSI(%q) = %q", a, s)
		}
	})
}

// BenchmarkWatcherLine measures the per-line cost on the log path, for typical sglang lines
// (plain, coloured, progress frames) in the proportions of a real run: mostly progress.
func BenchmarkWatcherLine(b *testing.B) {
	lines := []string{
		" 42%|████▏     | 21/50 [00:08<00:11,  2.51it/s]",
		"[12-20 16:45:15] [DenoisingStage] finished in 20.1234 seconds",
		"[12-20 16:45:15] Pixel data generated successfully in " + green + "12.34" + reset + " seconds",
		" 44%|████▍     | 22/50 [00:08<00:11,  2.51it/s]",
		" 46%|████▌     | 23/50 [00:09<00:10,  2.51it/s]",
		"[12-20 16:45:16] Metrics dumped to: " + cyan + "/runs/x/cells/000/perf.json" + reset,
	}
	var bytes int64
	for _, l := range lines {
		bytes += int64(len(l))
	}
	w := NewWatcher()
	b.SetBytes(bytes / int64(len(lines)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w.Line(i, "stderr", lines[i%len(lines)])
	}
}

func TestAnchorsCoverNeedles(t *testing.T) {
	needles := append(append([]string(nil), tracePrefixes...), metricsPrefixes...)
	for _, p := range patterns {
		needles = append(needles, p.subs...)
	}
	for _, n := range needles {
		if !mayMatch(n) {
			t.Errorf("needle %q has no anchor pair: add one to anchors", n)
		}
	}
	for _, a := range anchors {
		if len(a) != 2 {
			t.Errorf("anchor %q is not a byte pair", a)
		}
	}
	// The point of the prefilter: typical lines skip the searches.
	for _, l := range []string{" 42%|████▏     | 21/50 [00:08<00:11,  2.51it/s]", "[12-20 16:45:15] [DenoisingStage] finished in 20.1234 seconds"} {
		if mayMatch(l) {
			t.Errorf("common line %q passes the prefilter", l)
		}
	}
}

// A selective process layer delivers the last lines after the process exited, behind a selected
// line among them; Tail still returns them in log order.
func TestTailInLogOrderAfterCatchUp(t *testing.T) {
	w := NewWatcher()
	w.Line(3, "output", "early: torch.OutOfMemoryError: CUDA out of memory")
	w.Line(10, "output", "Saved profiler traces to: /t/a.trace.json.gz")
	for _, no := range []int{8, 9, 11} {
		w.Line(no, "output", fmt.Sprintf("line %d", no))
	}
	var got []int
	for _, e := range w.Tail(4) {
		got = append(got, e.Line)
	}
	if want := []int{8, 9, 10, 11}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Tail(4) lines %v, want %v", got, want)
	}
	if n := len(w.Needles()); n < len(patterns)+len(tracePrefixes)+len(metricsPrefixes) {
		t.Errorf("Needles() has %d entries, fewer than the patterns and prefixes", n)
	}
	for _, p := range patterns {
		for _, s := range p.subs {
			if !slices.Contains(w.Needles(), s) {
				t.Errorf("Needles() lacks %q", s)
			}
		}
	}
}
