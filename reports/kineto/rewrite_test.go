package kineto

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test ./reports/kineto -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (run with -update if the change is intended)\n--- got ---\n%s", name, got)
	}
}

// gpuTrackOverlaps counts, per (pid, tid) track, GPU ops that start before the previous op of
// the track ended, using encoding/json and the oracle's exact nanoseconds.
func gpuTrackOverlaps(t *testing.T, doc []byte) (overlaps, gpuOps int) {
	t.Helper()
	var d struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("output is not valid JSON: %v", err)
	}
	type iv struct{ s, e int64 }
	tracks := map[string][]iv{}
	for _, e := range d.TraceEvents {
		cat, _ := e["cat"].(string)
		if e["ph"] != "X" || !isGPUCat([]byte(cat)) {
			continue
		}
		ts, _ := oracleNS(e["ts"].(json.Number))
		dur, _ := oracleNS(e["dur"].(json.Number))
		k, _ := json.Marshal([]any{e["pid"], e["tid"]})
		tracks[string(k)] = append(tracks[string(k)], iv{ts, ts + dur})
		gpuOps++
	}
	for _, ivs := range tracks {
		for i := range ivs {
			for j := range ivs {
				if i != j && ivs[j].s <= ivs[i].s && ivs[i].s < ivs[j].e && (ivs[j].s < ivs[i].s || j < i) {
					overlaps++
					break
				}
			}
		}
	}
	return overlaps, gpuOps
}

func TestFixGolden(t *testing.T) {
	in, err := os.ReadFile("testdata/overlap.json")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	st, err := Fix(context.Background(), bytes.NewReader(in), &out)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "overlap.fix.golden", out.Bytes())
	if ov, _ := gpuTrackOverlaps(t, in); ov == 0 {
		t.Fatal("test input has no overlap")
	}
	ov, n := gpuTrackOverlaps(t, out.Bytes())
	if ov != 0 || n != 9 {
		t.Errorf("after Fix: %d overlapping GPU ops of %d", ov, n)
	}
	// k2 and k4 overlap k1 (k4 also k2), the memset the memcpy, s2 s1: 4 moved, k3 touches k1
	// and stays. Stream 7 needs 2 extra lanes, "stream 3" one.
	if st.Moved != 4 || st.Lanes != 3 || st.GPUOps != 9 || st.Tracks != 2 {
		t.Errorf("stats %+v", st)
	}
	// Every input line that is not a moved GPU op is in the output byte for byte.
	for _, line := range strings.Split(string(in), "\n") {
		line = strings.TrimSuffix(strings.TrimSpace(line), ",")
		if !strings.HasPrefix(line, "{\"ph\"") && !strings.HasPrefix(line, "{\"name\"") {
			continue
		}
		moved := false
		for _, m := range []string{`"k2"`, `"k4"`, `"Memset (Device)"`, `"s2"`} {
			moved = moved || strings.Contains(line, m)
		}
		if !moved && !bytes.Contains(out.Bytes(), []byte(line)) {
			t.Errorf("event not copied verbatim: %s", line)
		}
	}
	// The reader agrees on what was in the input.
	tr := readBytes(t, out.Bytes())
	if len(tr.GPUOps) != 9 || tr.Meta["traceName"] != "overlap.json" {
		t.Errorf("fixed trace reads back with %d GPU ops, meta %v", len(tr.GPUOps), tr.Meta)
	}
}

func TestFixTruncatedAndGzip(t *testing.T) {
	in, _ := os.ReadFile("testdata/overlap.json")
	cut := bytes.Index(in, []byte(`"name": "late"`))
	var out bytes.Buffer
	st, err := Fix(context.Background(), bytes.NewReader(in[:cut]), &out)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(out.Bytes()) {
		t.Fatalf("output of a truncated input is not valid JSON:\n%s", out.Bytes())
	}
	if len(st.Warnings) == 0 || !strings.Contains(st.Warnings[0], "truncated") {
		t.Errorf("warnings %v", st.Warnings)
	}
	// Gzip input gives the same output as plain input.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(in)
	zw.Close()
	var a, b bytes.Buffer
	if _, err := Fix(context.Background(), bytes.NewReader(in), &a); err != nil {
		t.Fatal(err)
	}
	if _, err := Fix(context.Background(), &gz, &b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("gzip input fixed differently")
	}
	// A non-seekable input is spooled for the second pass and gives the same output.
	var c bytes.Buffer
	if _, err := Fix(context.Background(), onlyReader{bytes.NewReader(in)}, &c); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), c.Bytes()) {
		t.Error("spooled input fixed differently")
	}
	// FixFile writes gzip by suffix.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "in.json"), in, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := FixFile(context.Background(), filepath.Join(dir, "in.json"), filepath.Join(dir, "out.json.gz"), false); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(filepath.Join(dir, "out.json.gz"))
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("FixFile .gz output is not gzip: %v", err)
	}
	got, _ := io.ReadAll(zr)
	if !bytes.Equal(got, a.Bytes()) {
		t.Error("FixFile output differs from Fix")
	}
}

func TestFixRealTrace(t *testing.T) {
	p := fixture(t, fxDDP)
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out bytes.Buffer
	st, err := Fix(context.Background(), f, &out)
	if err != nil {
		t.Fatal(err)
	}
	data := decompressed(t, p)
	want, _ := oracle(data)
	ov, n := gpuTrackOverlaps(t, out.Bytes())
	if ov != 0 || n != want.Kernels+want.Memcpy+want.Memset || int(st.GPUOps) != n {
		t.Errorf("overlaps %d, GPU ops %d (oracle %d), stats %+v", ov, n, want.Kernels+want.Memcpy+want.Memset, st)
	}
	tr := readBytes(t, out.Bytes())
	if int(tr.Events) != want.Events+st.Lanes {
		t.Errorf("events %d, want %d + %d lanes", tr.Events, want.Events, st.Lanes)
	}
}

type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func TestSlimGolden(t *testing.T) {
	in, err := os.ReadFile("testdata/overlap.json")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	st, err := Slim(context.Background(), bytes.NewReader(in), &out, SlimOptions{Steps: 1})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "overlap.slim1.golden", out.Bytes())
	if st.WindowStart != 1000000 || st.WindowEnd != 1035000 || st.Steps != 1 || st.StepFamily != "ProfilerStep" {
		t.Errorf("stats %+v", st)
	}
	tr := readBytes(t, out.Bytes())
	for _, o := range tr.GPUOps {
		if o.End <= st.WindowStart || o.Start >= st.WindowEnd {
			t.Errorf("op %s outside the window kept", tr.Name(o.Name))
		}
	}
	if len(tr.GPUOps) != 6 || len(tr.Processes) == 0 || tr.Meta["traceName"] != "overlap.json" {
		t.Errorf("slim kept %d GPU ops, processes %v, meta %v", len(tr.GPUOps), tr.Processes, tr.Meta)
	}

	// A non-seekable input is spooled and gives the same output.
	var out2 bytes.Buffer
	if _, err := Slim(context.Background(), onlyReader{bytes.NewReader(in)}, &out2, SlimOptions{Steps: 1, TempDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), out2.Bytes()) {
		t.Error("spooled input slimmed differently")
	}

	// An explicit window relative to the first event (1000 µs): [40, 50) µs keeps the memcpy
	// and the memset only among GPU ops.
	var out3 bytes.Buffer
	st3, err := Slim(context.Background(), bytes.NewReader(in), &out3, SlimOptions{Window: [2]int64{40000, 50000}, Gzip: true})
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(&out3)
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := io.ReadAll(zr)
	tr3 := readBytes(t, plain)
	if len(tr3.GPUOps) != 2 || st3.WindowStart != 1040000 {
		t.Errorf("window kept %d GPU ops, stats %+v", len(tr3.GPUOps), st3)
	}

	// Errors the user can act on.
	if _, err := Slim(context.Background(), bytes.NewReader(in), io.Discard, SlimOptions{}); err == nil {
		t.Error("Slim without steps or window succeeded")
	}
	noSteps := bytes.ReplaceAll(in, []byte("ProfilerStep#"), []byte("Other#"))
	if _, err := Slim(context.Background(), bytes.NewReader(noSteps), io.Discard, SlimOptions{Steps: 2}); err == nil || !strings.Contains(err.Error(), "no step annotations") {
		t.Errorf("Slim on a trace without steps: %v", err)
	}
}

func TestSlimRealTraceSteps(t *testing.T) {
	p := fixture(t, fxCUDAGraph)
	var out bytes.Buffer
	st, err := SlimFileTo(t, p, &out, SlimOptions{Steps: 1})
	if err != nil {
		t.Fatal(err)
	}
	if st.Steps != 1 || st.Kept == 0 || st.Kept >= st.Events {
		t.Errorf("stats %+v", st)
	}
	if !json.Valid(out.Bytes()) {
		t.Fatal("slim output is not valid JSON")
	}
}

// SlimFileTo runs Slim on a file into a buffer.
func SlimFileTo(t *testing.T, path string, w io.Writer, opts SlimOptions) (SlimStats, error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return Slim(context.Background(), f, w, opts)
}
