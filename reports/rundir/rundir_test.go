package rundir

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestCreateNeverReuses(t *testing.T) {
	out := t.TempDir()
	now := time.Date(2026, 11, 21, 18, 0, 0, 0, time.UTC)
	seen := map[string]bool{}
	for range 20 {
		d, err := Create(out, "p", now)
		if err != nil {
			t.Fatal(err)
		}
		if seen[d] {
			t.Fatalf("run directory %s handed out twice", d)
		}
		seen[d] = true
		if !strings.HasPrefix(filepath.Base(d), "20261121T180000Z-") {
			t.Errorf("run directory name %s lacks the UTC time", d)
		}
	}
}

func TestWriteFileAtomicLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "result.json")
	if err := WriteFileAtomic(p, []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(p, []byte("two")); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("directory holds %d entries, want only result.json", len(ents))
	}
	if b, _ := os.ReadFile(p); string(b) != "two" {
		t.Errorf("content %q, want two", b)
	}
	if err := WriteFileAtomic(filepath.Join(dir, "missing", "x"), nil); err == nil {
		t.Error("writing into a missing directory succeeded")
	}
}

// TestReadersRoundTrip writes each file of a run directory and reads it back with its reader.
func TestReadersRoundTrip(t *testing.T) {
	dir := t.TempDir()
	cell := CellDir(dir, "000-a")
	srv := filepath.Join(dir, ServersDir, "1")
	for _, d := range []string{cell, srv} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Date(2026, 11, 21, 18, 0, 0, 0, time.UTC)
	launch := Launch{Argv: []string{"sglang", "generate"}, Env: map[string]string{"A": "1"}, Dir: cell}
	res := &CellResult{ID: "000-a", Key: "a", Verdict: "failed", Start: start, End: start.Add(time.Second),
		Reasons: []Reason{{Code: "cuda-oom", Message: "out of memory", Lines: []Evidence{{Line: 3, Text: "OOM"}}}},
		Exit:    Exit{Code: 1}, Timings: Timings{WallNS: 1e9, Stages: []StageTime{{Name: "DenoisingStage", NS: 5}}},
		Artifacts: []Artifact{{Path: LogFile, Kind: "log", Bytes: 4}}, TopKernels: []KernelShare{{Name: "gemm", SharePct: 50}},
		Serve: &ServeResult{Server: "servers/1", Load: &LoadSummary{Count: 2}, Profile: &ProfileWindow{Kind: "start-stop"}}}
	cells := &Cells{Cells: []CellRecord{{Dir: filepath.Join(CellsDir, "000-a"), Launch: launch, NSys: &NSysFiles{Report: "nsys/report"}}}}
	cells.Cells[0].Cell.ID = "000-a"
	man := &Manifest{Plan: "p", Start: start, GPUs: []GPUInfo{{Name: "H100"}}, Probes: map[string]Probe{"nvcc": {Command: []string{"nvcc"}}}, Env: map[string]string{}}
	sum := &Summary{Plan: "p", RunDir: dir, Cells: []SummaryRow{{ID: "000-a", Verdict: VerdictNotRun}}, Counts: map[string]int{VerdictNotRun: 1}}
	server := &ServerRecord{N: 1, Kind: "sglang", Argv: launch.Argv, Start: start, End: start, Cells: []string{"000-a"}}
	writes := []struct {
		path string
		v    any
	}{
		{filepath.Join(cell, ResultFile), res}, {filepath.Join(cell, CommandFile), launch},
		{filepath.Join(dir, CellsFile), cells}, {filepath.Join(dir, ManifestFile), man},
		{filepath.Join(dir, SummaryJSON), sum}, {filepath.Join(srv, ServerFile), server},
	}
	for _, w := range writes {
		if err := WriteJSON(w.path, w.v, nil); err != nil {
			t.Fatal(err)
		}
	}
	check := func(name string, got, want any, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s read back differs (-want +got):\n%s", name, d)
		}
	}
	r, err := ReadResult(cell)
	check(ResultFile, r, res, err)
	l, err := ReadCommand(cell)
	check(CommandFile, l, &launch, err)
	c, err := ReadCells(dir)
	check(CellsFile, c, cells, err)
	m, err := ReadManifest(dir)
	check(ManifestFile, m, man, err)
	s, err := ReadSummary(dir)
	check(SummaryJSON, s, sum, err)
	sr, err := ReadServer(srv)
	check(ServerFile, sr, server, err)
}

func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadResult(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing result.json: err = %v, want fs.ErrNotExist", err)
	}
	p := filepath.Join(dir, ManifestFile)
	if err := os.WriteFile(p, []byte(`{"plan": `), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ReadManifest(dir)
	if err == nil || !strings.Contains(err.Error(), p+" is not valid JSON") {
		t.Errorf("invalid manifest.json: err = %v, want one naming the file", err)
	}
}

// TestWriteJSONEncodingAndRedact: indented, no HTML escaping, and the redaction sees the
// encoded file.
func TestWriteJSONEncodingAndRedact(t *testing.T) {
	p := filepath.Join(t.TempDir(), CommandFile)
	l := Launch{Argv: []string{"run", "--token", "secret-value"}, Env: map[string]string{"X": "<redacted>"}}
	redact := func(b []byte) []byte { return []byte(strings.ReplaceAll(string(b), "secret-value", "<redacted>")) }
	if err := WriteJSON(p, l, redact); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	want := "{\n  \"argv\": [\n    \"run\",\n    \"--token\",\n    \"<redacted>\"\n  ],\n  \"env\": {\n    \"X\": \"<redacted>\"\n  },\n  \"dir\": \"\"\n}\n"
	if string(b) != want {
		t.Errorf("command.json =\n%s\nwant\n%s", b, want)
	}
	if err := WriteJSON(p, func() {}, nil); err == nil {
		t.Error("encoding a func succeeded")
	}
}

// FuzzDecodeResult: any bytes decode to a result or an error, never a panic, and a decoded
// result survives the run directory's encoding and a decode unchanged.
func FuzzDecodeResult(f *testing.F) {
	f.Add([]byte(`{"id":"000-a","verdict":"ok","timings":{"wall_ns":1},"serve":{"server":"servers/1","load":{"count":1}}}`))
	f.Add([]byte(`{"reasons":[{"code":"x","lines":[{"line":1,"text":"t"}]}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var r CellResult
		if DecodeJSON(ResultFile, data, &r) != nil {
			return
		}
		b, err := encodeJSON(ResultFile, &r)
		if err != nil {
			return // e.g. a time outside RFC 3339's years
		}
		var got CellResult
		if err := DecodeJSON(ResultFile, b, &got); err != nil {
			t.Fatalf("decoding an encoded result: %v\n%s", err, b)
		}
		if d := cmp.Diff(&r, &got, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("round trip differs:\n%s", d)
		}
	})
}

// A FIFO where a run directory's file belongs is refused, naming it, without blocking.
func TestReadFileRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{CellsFile, PlanFile} {
		if err := syscall.Mkfifo(filepath.Join(dir, name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ReadCells(dir); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), CellsFile+" is not a regular file (a FIFO)") {
		t.Errorf("ReadCells on a FIFO: %v", err)
	}
	if _, raw, err := ReadPlan(dir); !errors.Is(err, ErrNotRegular) || raw != nil {
		t.Errorf("ReadPlan on a FIFO: %v (raw %q)", err, raw)
	}
	if _, err := ReadFile(dir); !errors.Is(err, ErrNotRegular) {
		t.Errorf("ReadFile on a directory: %v", err)
	}
}
