package triage

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/kineto"
)

// realRankDir is two real ranks (0 and 1 of a 128-rank NCCL job) from HTA's test data; see
// testdata/real/hta-trace-filter/README.md. Neither name carries a rank that the name rules read.
const realRankDir = "testdata/real/hta-trace-filter"

// kinetoHeader is the runner's DiscoverOptions.Header (runner/analysis.HeaderReader).
func kinetoHeader(path string) (int, int, error) {
	h, err := kineto.ReadHeaderFile(context.Background(), path)
	return h.Rank, h.WorldSize, err
}

// independentKernelUS sums the durations of the GPU ops (kernel, gpu_memcpy and gpu_memset
// events: what Stage.KernelTimeUS counts) of a gzipped Kineto trace with encoding/json, per device (the kernel's pid, as Kineto writes it): the count the Ranks
// section must equal, computed without the reader under test.
func independentKernelUS(t *testing.T, path string) map[int]float64 {
	t.Helper()
	var doc struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	decodeGzipJSON(t, path, &doc)
	per := map[int]float64{}
	for _, e := range doc.TraceEvents {
		if cat := e["cat"]; (cat != "kernel" && cat != "gpu_memcpy" && cat != "gpu_memset") || e["ph"] != "X" {
			continue
		}
		pid, _ := e["pid"].(float64)
		dur, _ := e["dur"].(float64)
		per[int(pid)] += dur
	}
	return per
}

// copyAs copies the fixture's two ranks into a fresh directory under the given names.
func copyAs(t *testing.T, names [2]string) string {
	t.Helper()
	dir := t.TempDir()
	for i, n := range names {
		b, err := os.ReadFile(filepath.Join(realRankDir, []string{"sampled_rank-0.json.gz", "sampled_rank-1.json.gz"}[i]))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestRealRanksFromHeaders: a directory of two real ranks, named as PyTorch's
// tensorboard_trace_handler and HTA name them (the rank-N form the name rules do not read, and
// host_pid.ts with no rank at all), triages with a Ranks section of both ranks, the ranks
// coming from distributedInfo.rank, and each rank's kernel time equals an independent sum.
func TestRealRanksFromHeaders(t *testing.T) {
	want := [2]float64{}
	for i, n := range []string{"sampled_rank-0.json.gz", "sampled_rank-1.json.gz"} {
		per := independentKernelUS(t, filepath.Join(realRankDir, n))
		if len(per) != 1 {
			t.Fatalf("%s: kernels on %d devices; the test expects one", n, len(per))
		}
		for _, v := range per {
			want[i] = v
		}
	}
	for _, names := range [][2]string{
		{"rank-0.pt.trace.json.gz", "rank-1.pt.trace.json.gz"},
		{"hostA_1.1.pt.trace.json.gz", "hostA_2.1.pt.trace.json.gz"},
		// Swapped: the header, not the file order, says which rank a file is.
		{"hostA_2.1.pt.trace.json.gz", "hostA_1.1.pt.trace.json.gz"},
	} {
		dir := copyAs(t, names)
		in, err := Discover(dir, DiscoverOptions{Header: kinetoHeader})
		if err != nil {
			t.Fatalf("%v: %v", names, err)
		}
		if len(in.Files) != 1 || len(in.OtherRanks) != 1 || !in.Files[0].RankFromHeader {
			t.Fatalf("%v: files %+v, other ranks %+v; want rank 0 tabled and rank 1 compared, ranks from headers", names, in.Files, in.OtherRanks)
		}
		if got := filepath.Base(in.Files[0].Path); got != names[0] {
			t.Errorf("%v: tabled %s; want %s (distributedInfo.rank 0)", names, got, names[0])
		}
		r, err := Analyze(context.Background(), in, Options{Open: openKineto})
		if err != nil {
			t.Fatal(err)
		}
		if r.Ranks == nil || len(r.Ranks.Stages) != 1 || len(r.Ranks.Stages[0].Ranks) != 2 {
			t.Fatalf("%v: Ranks section %+v; want one stage of two ranks", names, r.Ranks)
		}
		for i, row := range r.Ranks.Stages[0].Ranks {
			if wantLabel := []string{"rank0", "rank1"}[i]; row.Rank != wantLabel {
				t.Errorf("%v: row %d is %q; want %q", names, i, row.Rank, wantLabel)
			}
			if math.Abs(row.KernelTimeUS-want[i]) > 1e-3*want[i]/100 {
				t.Errorf("%v: %s kernel time %.3f µs; independent sum %.3f µs", names, row.Rank, row.KernelTimeUS, want[i])
			}
		}
	}
}

// TestHeaderRanksRefuseConflicts: the header rank makes two files one job only when nothing
// contradicts it: the same rank twice, or different world sizes, are still refused.
func TestHeaderRanksRefuseConflicts(t *testing.T) {
	hdr := func(ranks map[string][2]int) func(string) (int, int, error) {
		return func(p string) (int, int, error) {
			v := ranks[filepath.Base(p)]
			return v[0], v[1], nil
		}
	}
	dir := t.TempDir()
	for _, n := range []string{"a.pt.trace.json", "b.pt.trace.json"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(`{"traceEvents": []}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name  string
		h     map[string][2]int
		ok    bool
		words string
	}{
		{"two ranks", map[string][2]int{"a.pt.trace.json": {0, 2}, "b.pt.trace.json": {1, 2}}, true, ""},
		{"one rank twice", map[string][2]int{"a.pt.trace.json": {1, 2}, "b.pt.trace.json": {1, 2}}, false, "rank rank1"},
		{"world sizes", map[string][2]int{"a.pt.trace.json": {0, 2}, "b.pt.trace.json": {1, 4}}, false, "world_size 2"},
		{"no headers", map[string][2]int{"a.pt.trace.json": {-1, -1}, "b.pt.trace.json": {-1, -1}}, false, "no rank"},
	} {
		in, err := Discover(dir, DiscoverOptions{Header: hdr(c.h)})
		if c.ok {
			if err != nil || len(in.Files)+len(in.OtherRanks) != 2 {
				t.Errorf("%s: %v, %d+%d files; want both ranks", c.name, err, len(in.Files), len(in.OtherRanks))
			}
			continue
		}
		var me *MixedInputsError
		if err == nil || !errors.As(err, &me) || !strings.Contains(err.Error(), c.words) {
			t.Errorf("%s: error %v; want a MixedInputsError saying %q", c.name, err, c.words)
		}
	}
}
