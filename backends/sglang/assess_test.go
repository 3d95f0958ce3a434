package sglang

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
)

const goodDump = `{"timestamp":"2025-12-20T16:45:15.602292+00:00","request_id":"r","commit_hash":"N/A","tag":"cli_generate",
"total_duration_ms":1000.5,"steps":[{"name":"DenoisingStage","duration_ms":900}],
"denoise_steps_ms":[{"step":0,"duration_ms":450},{"step":1,"duration_ms":450}],"memory_checkpoints":{},
"meta":{"prompt":"p","model":"m"}}`

// gzipBytes returns a complete gzip stream of a small Kineto-shaped document.
func gzipBytes(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(`{"traceEvents":[` + strings.Repeat(`{"ph":"X","name":"k","ts":1,"dur":2},`, 2000) + `{}]}`)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// cellFixture is a cell directory as a successful torch-profiled run leaves it.
type cellFixture struct {
	dir, trace, dump, output string
}

func newCellDir(t *testing.T) cellFixture {
	t.Helper()
	dir := t.TempDir()
	f := cellFixture{
		dir:    dir,
		trace:  filepath.Join(dir, "traces", "3f1c2a4e-5_steps-global-rank0.trace.json.gz"),
		dump:   filepath.Join(dir, "perf.json"),
		output: filepath.Join(dir, "outputs", "A_Logo_20251220-164515_1a2b3c4d.png"),
	}
	for _, d := range []string{"traces", "outputs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, f.trace, gzipBytes(t))
	write(t, f.dump, []byte(goodDump))
	write(t, f.output, []byte("\x89PNG"))
	return f
}

func write(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func torchCell() plans.Cell {
	c := baseCell()
	c.Profiler = plans.ProfilerTorch
	return c
}

// okLog is the log of a successful torch run in cell dir f.
func okLog(f cellFixture) []string {
	return []string{
		`[12-20 16:44:00] server_args: {"backend": "sglang"}`,
		"[12-20 16:44:01] deep_gemm unavailable: CUDA_HOME not set. Falling back to default kernels.",
		"[12-20 16:44:10] Processing prompt 1/1: A Logo With Bold Large Text: SGL Diffusion",
		"  4%|▍         | 2/50 [00:01<00:30,  1.60it/s]\r  6%|▌         | 3/50 [00:01<00:29,  1.60it/s]",
		"[12-20 16:45:15] Saved profiler traces to: " + cyan + f.trace + reset,
		"[12-20 16:45:15] Pixel data generated successfully in " + green + "12.34" + reset + " seconds",
		"[12-20 16:45:16] Metrics dumped to: " + cyan + f.dump + reset,
	}
}

func assess(t *testing.T, c plans.Cell, dir string, exit rundir.Exit, lines ...string) backends.Assessment {
	t.Helper()
	b := New()
	w := b.NewWatcher(c)
	for i, l := range lines {
		w.Line(i+1, "stderr", l)
	}
	return b.Assess(c, dir, w, exit)
}

func codes(rs []rundir.Reason) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Code)
	}
	return out
}

func reason(t *testing.T, rs []rundir.Reason, code string) rundir.Reason {
	t.Helper()
	for _, r := range rs {
		if r.Code == code {
			return r
		}
	}
	t.Fatalf("no reason %q among %q", code, codes(rs))
	return rundir.Reason{}
}

func wantVerdict(t *testing.T, a backends.Assessment, verdict string, reasons, warnings []string) {
	t.Helper()
	if a.Verdict != verdict || strings.Join(codes(a.Reasons), ",") != strings.Join(reasons, ",") || strings.Join(codes(a.Warnings), ",") != strings.Join(warnings, ",") {
		t.Errorf("verdict %q reasons %q warnings %q; want %q %q %q\n%+v", a.Verdict, codes(a.Reasons), codes(a.Warnings), verdict, reasons, warnings, a)
	}
}

func TestAssessOK(t *testing.T) {
	f := newCellDir(t)
	a := assess(t, torchCell(), f.dir, rundir.Exit{}, okLog(f)...)
	wantVerdict(t, a, plans.VerdictOK, nil, nil)
	if len(a.Artifacts.Traces) != 1 || a.Artifacts.Traces[0] != f.trace {
		t.Errorf("traces %q", a.Artifacts.Traces)
	}
	if a.Artifacts.PerfDump != f.dump {
		t.Errorf("perf dump %q", a.Artifacts.PerfDump)
	}
	if len(a.Artifacts.Outputs) != 1 || a.Artifacts.Outputs[0] != f.output {
		t.Errorf("outputs %q", a.Artifacts.Outputs)
	}
}

func TestAssessOKWithoutLogLines(t *testing.T) {
	// No trace or metrics line (older build, or lines lost): the glob and the requested path
	// still find the artifacts.
	f := newCellDir(t)
	a := assess(t, torchCell(), f.dir, rundir.Exit{})
	wantVerdict(t, a, plans.VerdictOK, nil, nil)
	if len(a.Artifacts.Traces) != 1 || a.Artifacts.PerfDump != f.dump {
		t.Errorf("artifacts %+v", a.Artifacts)
	}
}

func TestAssessNoProfilerNeedsNoTrace(t *testing.T) {
	f := newCellDir(t)
	os.Remove(f.trace)
	a := assess(t, baseCell(), f.dir, rundir.Exit{}, "[12-20 16:45:16] Metrics dumped to: "+f.dump)
	wantVerdict(t, a, plans.VerdictOK, nil, nil)
}

func TestAssessFallback(t *testing.T) {
	f := newCellDir(t)
	lines := append([]string{
		"[12-20 16:44:01] Could not resolve native configuration for model '/models/qwen'. Falling back to diffusers backend.",
		"[12-20 16:44:30] Loaded diffusers pipeline: QwenImagePipeline",
	}, okLog(f)...)

	a := assess(t, torchCell(), f.dir, rundir.Exit{}, lines...)
	wantVerdict(t, a, plans.VerdictInvalid, []string{CodeFallback}, nil)
	r := reason(t, a.Reasons, CodeFallback)
	if len(r.Lines) != 2 || r.Lines[0].Line != 1 || r.Lines[1].Line != 2 || !strings.Contains(r.Lines[1].Text, "Loaded diffusers pipeline: QwenImagePipeline") {
		t.Errorf("quoted lines %+v", r.Lines)
	}
	for _, s := range []string{`"--backend", "sglang"`, "--model-id", `diffusers_fallback = "warn"`} {
		if !strings.Contains(r.Message, s) {
			t.Errorf("message %q lacks %q", r.Message, s)
		}
	}

	warn := torchCell()
	warn.Gate.DiffusersFallback = "warn"
	a = assess(t, warn, f.dir, rundir.Exit{}, lines...)
	wantVerdict(t, a, plans.VerdictOK, nil, []string{CodeFallback})
	if len(a.Warnings[0].Lines) != 2 {
		t.Errorf("warning lines %+v", a.Warnings[0].Lines)
	}
}

func TestAssessFallbackThatCrashedIsFailed(t *testing.T) {
	f := newCellDir(t)
	os.Remove(f.dump)
	a := assess(t, baseCell(), f.dir, rundir.Exit{Code: 1},
		"[12-20 16:44:30] Loaded diffusers pipeline: FluxPipeline",
		"AttributeError: 'NoneType' object has no attribute 'begin_request'")
	wantVerdict(t, a, plans.VerdictFailed, []string{CodeFallback, CodeExitStatus, CodePerfDumpMissing}, nil)
}

func TestAssessOOM(t *testing.T) {
	f := newCellDir(t)
	os.Remove(f.trace)
	os.Remove(f.dump)
	a := assess(t, torchCell(), f.dir, rundir.Exit{Code: 1},
		"[12-20 16:44:10] Processing prompt 1/1: p",
		"[12-20 16:44:20] Failed to generate output for prompt 1: CUDA out of memory. Tried to allocate 20.00 GiB",
		"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 79.11 GiB of which 1.06 GiB is free.",
		"[12-20 16:44:21] Rank 0 scheduler is dead. Please check if there are relevant logs.",
	)
	// The OOM explains the failed prompt and the dead worker, so they are not repeated.
	wantVerdict(t, a, plans.VerdictFailed, []string{CodeOOM, CodeExitStatus, CodeTraceMissing, CodePerfDumpMissing}, nil)
	r := reason(t, a.Reasons, CodeOOM)
	if len(r.Lines) != 2 || r.Lines[0].Line != 2 || r.Lines[1].Line != 3 {
		t.Errorf("OOM lines %+v", r.Lines)
	}
	if !strings.Contains(r.Message, "--dit-cpu-offload") || !strings.Contains(r.Message, "smaller resolution") {
		t.Errorf("OOM message %q", r.Message)
	}
	if m := reason(t, a.Reasons, CodeTraceMissing).Message; !strings.Contains(m, "the run failed before the profiler stopped") {
		t.Errorf("trace message %q", m)
	}
	if m := reason(t, a.Reasons, CodePerfDumpMissing).Message; !strings.Contains(m, "only after a successful generation") {
		t.Errorf("perf message %q", m)
	}
}

func TestAssessOOMWithExitZero(t *testing.T) {
	// sglang can report a failed prompt and still exit 0: the log decides.
	f := newCellDir(t)
	lines := append(okLog(f), "torch.OutOfMemoryError: CUDA out of memory.")
	a := assess(t, torchCell(), f.dir, rundir.Exit{}, lines...)
	wantVerdict(t, a, plans.VerdictFailed, []string{CodeOOM}, nil)
}

func TestAssessWorkerDeadAndGenerateFailed(t *testing.T) {
	f := newCellDir(t)
	a := assess(t, baseCell(), f.dir, rundir.Exit{},
		"[12-20 16:44:20] Failed to generate output for prompt 1: ValueError('bad')",
		"[12-20 16:44:21] Rank 0 scheduler is dead. Please check if there are relevant logs.")
	wantVerdict(t, a, plans.VerdictFailed, []string{CodeWorkerDead, CodeGenerateFailed}, nil)
}

func TestAssessUnrecognizedArguments(t *testing.T) {
	f := newCellDir(t)
	os.Remove(f.trace)
	os.Remove(f.dump)
	lines := []string{
		"usage: sglang generate [-h] [--model-path MODEL_PATH] ...",
	}
	for i := 0; i < 20; i++ {
		lines = append(lines, "   [--flag-"+string(rune('a'+i))+" X]")
	}
	lines = append(lines, "sglang generate: error: unrecognized arguments: --bogus-flag 3", "")
	a := assess(t, torchCell(), f.dir, rundir.Exit{Code: 2}, lines...)
	wantVerdict(t, a, plans.VerdictFailed, []string{CodeExitStatus, CodeTraceMissing, CodePerfDumpMissing}, nil)
	r := reason(t, a.Reasons, CodeExitStatus)
	if !strings.Contains(r.Message, "status 2") || !strings.Contains(r.Message, "unrecognized arguments: --bogus-flag 3") || !strings.Contains(r.Message, "extra_args") {
		t.Errorf("message %q", r.Message)
	}
	// The argparse line first, then the last lines without repeating it.
	if r.Lines[0].Line != 22 || len(r.Lines) != tailContext {
		t.Errorf("lines %+v", r.Lines)
	}
	if last := r.Lines[len(r.Lines)-1]; last.Line != 23 {
		t.Errorf("last quoted line %+v", last)
	}
}

func TestAssessExitWithoutLog(t *testing.T) {
	f := newCellDir(t)
	a := assess(t, torchCell(), f.dir, rundir.Exit{Code: 139})
	wantVerdict(t, a, plans.VerdictFailed, []string{CodeExitStatus}, nil)
	if r := a.Reasons[0]; !strings.Contains(r.Message, "status 139") || len(r.Lines) != 0 {
		t.Errorf("%+v", r)
	}
}

func TestAssessSignalAndStartError(t *testing.T) {
	f := newCellDir(t)
	a := assess(t, baseCell(), f.dir, rundir.Exit{Code: -1, Signal: "killed"}, "working")
	wantVerdict(t, a, plans.VerdictFailed, []string{CodeExitStatus}, nil)
	if m := a.Reasons[0].Message; !strings.Contains(m, `signal "killed"`) {
		t.Errorf("message %q", m)
	}

	a = assess(t, baseCell(), f.dir, rundir.Exit{Code: -1, StartErr: `exec: "sglang": executable file not found in $PATH`})
	wantVerdict(t, a, plans.VerdictFailed, []string{CodeExitStatus}, nil)
	if m := a.Reasons[0].Message; !strings.Contains(m, "could not be started") || !strings.Contains(m, `"sglang"`) {
		t.Errorf("message %q", m)
	}
}

func TestAssessTraceMissing(t *testing.T) {
	tests := []struct {
		name    string
		lines   []string
		want    string
		nLines  int
		logPath bool
	}{
		{"no line", []string{"[12-20 16:45:15] Pixel data generated successfully"}, "and sglang printed no trace line", 0, false},
		{"save failed", []string{"[12-20 16:45:15] Failed to save trace: [Errno 28] No space left on device"},
			"; sglang printed '[12-20 16:45:15] Failed to save trace: [Errno 28] No space left on device'", 1, false},
		{"printed but absent", nil, "but that file does not exist", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newCellDir(t)
			os.Remove(f.trace)
			lines := append([]string(nil), tt.lines...)
			if tt.logPath {
				lines = append(lines, "Saved profiler traces to: "+cyan+f.trace+reset)
			}
			a := assess(t, torchCell(), f.dir, rundir.Exit{}, lines...)
			wantVerdict(t, a, plans.VerdictFailed, []string{CodeTraceMissing}, nil)
			r := a.Reasons[0]
			if !strings.Contains(r.Message, "profiler dir "+filepath.Join(f.dir, "traces")) || !strings.Contains(r.Message, tt.want) {
				t.Errorf("message %q lacks %q", r.Message, tt.want)
			}
			if tt.logPath && !strings.Contains(r.Message, f.trace) {
				t.Errorf("message %q does not name %s", r.Message, f.trace)
			}
			if len(r.Lines) != tt.nLines {
				t.Errorf("lines %+v", r.Lines)
			}
			if len(a.Artifacts.Traces) != 0 {
				t.Errorf("traces %q", a.Artifacts.Traces)
			}
		})
	}
}

func TestAssessTraceUnusable(t *testing.T) {
	full := gzipBytes(t)
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"truncated", full[:len(full)/2], "truncated gzip stream"},
		{"missing trailer", full[:len(full)-4], "truncated gzip stream"},
		{"empty", nil, "empty file"},
		{"not gzip", []byte(`{"traceEvents":[]}`), "not a gzip file"},
		{"bad checksum", func() []byte {
			b := append([]byte(nil), full...)
			b[len(b)-8] ^= 0xff // CRC32 of the trailer
			return b
		}(), "corrupt gzip stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newCellDir(t)
			write(t, f.trace, tt.data)
			a := assess(t, torchCell(), f.dir, rundir.Exit{}, okLog(f)...)
			wantVerdict(t, a, plans.VerdictFailed, []string{CodeTraceTruncated}, nil)
			if m := a.Reasons[0].Message; !strings.Contains(m, f.trace) || !strings.Contains(m, tt.want) {
				t.Errorf("message %q lacks %q", m, tt.want)
			}
			// The file is still listed so that it can be inspected.
			if len(a.Artifacts.Traces) != 1 {
				t.Errorf("traces %q", a.Artifacts.Traces)
			}
		})
	}
}

func TestAssessMultiMemberGzipIsComplete(t *testing.T) {
	// Two concatenated gzip members are a valid stream (sglang warns "Multiple gzip headers
	// detected" about them); the trace is complete, the complaint becomes a warning.
	f := newCellDir(t)
	one := gzipBytes(t)
	write(t, f.trace, append(append([]byte(nil), one...), one...))
	lines := append(okLog(f), "[12-20 16:45:15] Multiple gzip headers detected")
	a := assess(t, torchCell(), f.dir, rundir.Exit{}, lines...)
	wantVerdict(t, a, plans.VerdictOK, nil, []string{CodeTraceSaveFailed})
}

func TestAssessTraceInOldestBuildsLogsDir(t *testing.T) {
	f := newCellDir(t)
	os.Remove(f.trace)
	old := filepath.Join(f.dir, "logs", "mocked_fake_id_for_offline_generate-global-rank0.trace.json.gz")
	write(t, old, gzipBytes(t))
	a := assess(t, torchCell(), f.dir, rundir.Exit{})
	wantVerdict(t, a, plans.VerdictOK, nil, nil)
	if len(a.Artifacts.Traces) != 1 || a.Artifacts.Traces[0] != old {
		t.Errorf("traces %q", a.Artifacts.Traces)
	}
}

func TestAssessTraceOutsideCell(t *testing.T) {
	f := newCellDir(t)
	os.Remove(f.trace)
	elsewhere := filepath.Join(t.TempDir(), "r-5_steps-global-rank0.trace.json.gz")
	write(t, elsewhere, gzipBytes(t))
	a := assess(t, torchCell(), f.dir, rundir.Exit{}, "Saving profiler traces to: "+elsewhere)
	wantVerdict(t, a, plans.VerdictOK, nil, []string{CodeTraceOutsideCell})
	if len(a.Artifacts.Traces) != 1 || a.Artifacts.Traces[0] != elsewhere {
		t.Errorf("traces %q", a.Artifacts.Traces)
	}
}

func TestAssessRelativeTracePath(t *testing.T) {
	f := newCellDir(t)
	a := assess(t, torchCell(), f.dir, rundir.Exit{}, "Saved profiler traces to: traces/"+filepath.Base(f.trace))
	wantVerdict(t, a, plans.VerdictOK, nil, nil)
	if len(a.Artifacts.Traces) != 1 {
		t.Errorf("traces %q (a relative path must not be listed twice)", a.Artifacts.Traces)
	}
}

func TestAssessPerfDump(t *testing.T) {
	t.Run("missing, not printed", func(t *testing.T) {
		f := newCellDir(t)
		os.Remove(f.dump)
		a := assess(t, torchCell(), f.dir, rundir.Exit{})
		wantVerdict(t, a, plans.VerdictFailed, []string{CodePerfDumpMissing}, nil)
		if m := a.Reasons[0].Message; !strings.Contains(m, f.dump) || !strings.Contains(m, "printed no 'Metrics dumped to:' line") {
			t.Errorf("message %q", m)
		}
		if a.Artifacts.PerfDump != "" {
			t.Errorf("perf dump %q", a.Artifacts.PerfDump)
		}
	})
	t.Run("missing, printed", func(t *testing.T) {
		f := newCellDir(t)
		os.Remove(f.dump)
		a := assess(t, torchCell(), f.dir, rundir.Exit{}, "[Performance] Metrics dumped to: /nowhere/perf.json")
		wantVerdict(t, a, plans.VerdictFailed, []string{CodePerfDumpMissing}, nil)
		if m := a.Reasons[0].Message; !strings.Contains(m, "printed 'Metrics dumped to: /nowhere/perf.json' but that file does not exist") {
			t.Errorf("message %q", m)
		}
	})
	t.Run("printed elsewhere and present", func(t *testing.T) {
		f := newCellDir(t)
		os.Remove(f.dump)
		other := filepath.Join(t.TempDir(), "p.json")
		write(t, other, []byte(goodDump))
		a := assess(t, torchCell(), f.dir, rundir.Exit{}, "Metrics dumped to: "+cyan+other+reset)
		wantVerdict(t, a, plans.VerdictOK, nil, nil)
		if a.Artifacts.PerfDump != other {
			t.Errorf("perf dump %q", a.Artifacts.PerfDump)
		}
	})
	t.Run("unreadable", func(t *testing.T) {
		f := newCellDir(t)
		write(t, f.dump, []byte(`{"total_duration_ms": 12, "steps": [`))
		a := assess(t, torchCell(), f.dir, rundir.Exit{})
		wantVerdict(t, a, plans.VerdictFailed, []string{CodePerfDumpMissing}, nil)
		if m := a.Reasons[0].Message; !strings.Contains(m, "unreadable") || !strings.Contains(m, f.dump) {
			t.Errorf("message %q", m)
		}
		if a.Artifacts.PerfDump != f.dump {
			t.Errorf("an unreadable dump is still listed: %q", a.Artifacts.PerfDump)
		}
	})
}

func TestAssessNsysDurationCut(t *testing.T) {
	f := newCellDir(t)
	os.Remove(f.trace)
	os.Remove(f.dump)
	c := baseCell()
	c.Profiler = plans.ProfilerNsys
	c.NSys.Duration = plans.Duration{Duration: 30 * time.Second}
	a := assess(t, c, f.dir, rundir.Exit{Code: 143}, "  40%|████      | 20/50")
	wantVerdict(t, a, plans.VerdictOK, nil, []string{CodeExitStatus, CodePerfDumpMissing})

	// Without a duration nsys lets the application finish, so the same exit is a failure, and
	// an OOM is a failure whatever nsys did.
	c.NSys.Duration = plans.Duration{}
	a = assess(t, c, f.dir, rundir.Exit{Code: 143})
	wantVerdict(t, a, plans.VerdictFailed, []string{CodeExitStatus, CodePerfDumpMissing}, nil)
	c.NSys.Duration = plans.Duration{Duration: 30 * time.Second}
	a = assess(t, c, f.dir, rundir.Exit{Code: 1}, "torch.OutOfMemoryError: CUDA out of memory.")
	wantVerdict(t, a, plans.VerdictFailed, []string{CodeOOM}, []string{CodeExitStatus, CodePerfDumpMissing})
}

// otherWatcher is a backends.Watcher that is not ours.
type otherWatcher struct{}

func (otherWatcher) Line(int, string, string) {}

func TestAssessForeignWatcher(t *testing.T) {
	f := newCellDir(t)
	for _, w := range []backends.Watcher{nil, otherWatcher{}, (*Watcher)(nil)} {
		a := New().Assess(torchCell(), f.dir, w, rundir.Exit{})
		wantVerdict(t, a, plans.VerdictOK, nil, nil)
	}
}

func TestCheckTraceMissingFile(t *testing.T) {
	if err := CheckTrace(filepath.Join(t.TempDir(), "x.trace.json.gz")); err == nil {
		t.Fatal("CheckTrace of a missing file succeeded")
	}
}
