package nsys

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sglprof/runner/plans"
)

func TestWrap(t *testing.T) {
	app := []string{"sglang", "generate", "--model-path", "Qwen/Qwen-Image", "--prompt", "a \"quoted\" $(prompt)\nline two"}
	sec := func(d time.Duration) plans.Duration { return plans.Duration{Duration: d} }
	head := func(graph, trace string) []string {
		return []string{"nsys", "profile", "--trace-fork-before-exec=true", "--cuda-graph-trace=" + graph, "--force-overwrite=true", "--trace=" + trace}
	}
	cat := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	tail := cat([]string{"-o", "/c/nsys/report"}, app)
	tests := []struct {
		name string
		cmd  []string
		opts plans.NSys
		want []string
	}{
		{"defaults", []string{"nsys"}, plans.NSys{}, cat(head("node", "cuda,nvtx,osrt"), tail)},
		{"graph and trace list", []string{"nsys"}, plans.NSys{CudaGraphTrace: "graph", Trace: []string{"cuda", "nvtx", "osrt", "cudnn", "cublas"}},
			cat(head("graph", "cuda,nvtx,osrt,cudnn,cublas"), tail)},
		{"delay and duration", []string{"nsys"}, plans.NSys{CudaGraphTrace: "node", Delay: sec(10 * time.Second), Duration: sec(30 * time.Second)},
			cat(head("node", "cuda,nvtx,osrt"), []string{"--delay", "10", "--duration", "30"}, tail)},
		{"delay only", []string{"nsys"}, plans.NSys{Delay: sec(2 * time.Minute)},
			cat(head("node", "cuda,nvtx,osrt"), []string{"--delay", "120"}, tail)},
		{"duration only", []string{"nsys"}, plans.NSys{Duration: sec(45 * time.Second)},
			cat(head("node", "cuda,nvtx,osrt"), []string{"--duration", "45"}, tail)},
		{"fractions round up", []string{"nsys"}, plans.NSys{Delay: sec(1500 * time.Millisecond), Duration: sec(time.Millisecond)},
			cat(head("node", "cuda,nvtx,osrt"), []string{"--delay", "2", "--duration", "1"}, tail)},
		{"absolute nsys path with args", []string{"/opt/nvidia/nsight-systems/bin/nsys", "--quiet-wrapper"}, plans.NSys{},
			cat([]string{"/opt/nvidia/nsight-systems/bin/nsys", "--quiet-wrapper"}, head("node", "cuda,nvtx,osrt")[1:], tail)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Wrap(tt.cmd, tt.opts, "/c/nsys/report", app)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Wrap mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWrapDoesNotAliasInputs(t *testing.T) {
	cmd := make([]string, 1, 10)
	cmd[0] = "nsys"
	app := []string{"sglang", "generate"}
	got := Wrap(cmd, plans.NSys{}, "r", app)
	got[0] = "changed"
	got[len(got)-1] = "changed"
	if cmd[:cap(cmd)][1] != "" || app[1] != "generate" || cmd[0] != "nsys" {
		t.Error("Wrap wrote into its inputs")
	}
}

func TestWholeSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int64{0: 0, -time.Second: 0, 1: 1, time.Second: 1, time.Second + 1: 2, 1<<63 - 1: 9223372037} {
		if got := wholeSeconds(d); got != want {
			t.Errorf("wholeSeconds(%d) = %d, want %d", d, got, want)
		}
	}
}

func TestReportPaths(t *testing.T) {
	base := ReportBase("/runs/x/cells/000")
	if base != "/runs/x/cells/000/nsys/report" {
		t.Errorf("ReportBase = %q", base)
	}
	for _, in := range []string{base, base + ".nsys-rep"} {
		if got := ReportPath(in); got != base+".nsys-rep" {
			t.Errorf("ReportPath(%q) = %q", in, got)
		}
		if got := SQLitePath(in); got != base+".sqlite" {
			t.Errorf("SQLitePath(%q) = %q", in, got)
		}
	}
}

func TestPrepareReportDir(t *testing.T) {
	cell := t.TempDir()
	base, err := PrepareReportDir(cell)
	if err != nil {
		t.Fatal(err)
	}
	if base != filepath.Join(cell, "nsys", "report") {
		t.Errorf("base %q", base)
	}
	if st, err := os.Stat(filepath.Dir(base)); err != nil || !st.IsDir() {
		t.Errorf("nsys dir not created: %v", err)
	}

	blocked := t.TempDir()
	if err := os.WriteFile(filepath.Join(blocked, "nsys"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := PrepareReportDir(blocked); err == nil {
		t.Error("PrepareReportDir succeeded where nsys/ cannot be created")
	}
}

// TestWrapCaptureRange: a cudaProfilerApi capture range is passed with an explicit end (nsys's
// default end, stop-shutdown, would end the server when the window closes).
func TestWrapCaptureRange(t *testing.T) {
	got := strings.Join(Wrap([]string{"nsys"}, plans.NSys{CaptureRange: plans.CaptureRangeCudaAPI}, "/r", []string{"app"}), " ")
	if !strings.Contains(got, " --capture-range=cudaProfilerApi --capture-range-end=stop -o /r app") {
		t.Fatalf("argv %s", got)
	}
	got = strings.Join(Wrap([]string{"nsys"}, plans.NSys{CaptureRange: plans.CaptureRangeCudaAPI, CaptureRangeEnd: "repeat"}, "/r", []string{"app"}), " ")
	if !strings.Contains(got, "--capture-range-end=repeat") {
		t.Fatalf("argv %s", got)
	}
	if got := strings.Join(Wrap([]string{"nsys"}, plans.NSys{CaptureRange: plans.CaptureRangeNone}, "/r", nil), " "); strings.Contains(got, "capture-range") {
		t.Fatalf("argv %s", got)
	}
}

// A server under nsys --duration must outlive the window (nsys's default --kill is sigterm);
// a generate cell's argv keeps nsys's default.
func TestWrapServerKillNone(t *testing.T) {
	o := plans.NSys{}
	o.Duration.Duration = 5 * time.Second
	got := strings.Join(WrapServer([]string{"nsys"}, o, "/r", []string{"app"}), " ")
	if !strings.Contains(got, " --duration 5 --kill none -o /r app") {
		t.Fatalf("server argv %s", got)
	}
	if got := strings.Join(Wrap([]string{"nsys"}, o, "/r", []string{"app"}), " "); strings.Contains(got, "--kill") {
		t.Fatalf("generate argv %s", got)
	}
	if got := strings.Join(WrapServer([]string{"nsys"}, plans.NSys{}, "/r", []string{"app"}), " "); strings.Contains(got, "--kill") {
		t.Fatalf("server argv without duration %s", got)
	}
}
