package triage

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/kineto"
	"github.com/sglprof/runner/reports/trace"
)

// fixture returns the path of a shared fixture or skips: the fixtures live beside the checkout
// (../shared/fixtures from the repository root) and are absent on a fresh clone.
func fixture(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join("..", "..", "..", "shared", "fixtures", name)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("fixture %s not found (%v); it lives in ../shared/fixtures beside the checkout", name, err)
	}
	return p
}

// openKineto is what the CLI passes as Options.Open for Kineto inputs.
func openKineto(ctx context.Context, path string) (*trace.Trace, error) {
	t, err := kineto.ReadFile(ctx, path, kineto.Options{})
	if err != nil {
		return nil, err
	}
	trace.Link(t)
	return t, nil
}

func analyzeFixture(t *testing.T, name string) *Report {
	t.Helper()
	p := fixture(t, name)
	in, err := Discover(p, DiscoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Analyze(context.Background(), in, Options{Open: openKineto})
	if err != nil {
		t.Fatal(err)
	}
	if testing.Verbose() {
		var b bytes.Buffer
		_ = Render(&b, r, FormatText, DefaultCutoff)
		t.Log("\n" + b.String())
	}
	return r
}

// MI300X SGLang decode window: 555 kernels totalling 9,765.437 µs on device 9 (independent sum
// in PROVENANCE.md); one hipGraphLaunch replays 544 of them.
func TestFixtureMI300XDecode(t *testing.T) {
	r := analyzeFixture(t, "tracelens-mi300x-sglang-qwen3-8b-decode-hipgraph.json.gz")
	if r.Inputs[0].Device != 9 {
		t.Errorf("analysed device %d, want 9", r.Inputs[0].Device)
	}
	var kernels int
	var kernelUS float64
	var dec *Stage
	for i := range r.Stages {
		if r.Stages[i].Stage == StageDecode {
			dec = &r.Stages[i]
		}
		for _, k := range r.Stages[i].Kernels {
			if !strings.HasPrefix(k.Name, "Memcpy") && !strings.HasPrefix(k.Name, "Memset") {
				kernels += k.Count
				kernelUS += k.TotalUS
			}
		}
	}
	if kernels != 555 || math.Abs(kernelUS-9765.437) > 1e-6 {
		t.Errorf("kernels = %d totalling %.3f us, want 555 totalling 9765.437 us", kernels, kernelUS)
	}
	if dec == nil {
		t.Fatalf("no decode stage from the step[DECODE bs=32] annotation; stages: %+v", r.Stages)
	}
	var graph int
	for _, k := range dec.Kernels {
		for _, l := range k.Locations {
			if strings.Contains(l.CPUOp, "hipGraphLaunch replay (graph)") {
				graph += k.Count
				break
			}
		}
	}
	if graph < 500 {
		t.Errorf("only %d decode kernels attributed to the hipGraphLaunch replay, want the 544 replayed ones", graph)
	}
}

// A100 DDP: NCCL all-reduce on stream 40 overlaps the compute stream.
func TestFixtureA100DDPOverlap(t *testing.T) {
	r := analyzeFixture(t, "hta-a100-ddp-nccl-rank0.json.gz")
	s := r.Stages[0]
	if s.Summary.Streams < 2 || s.Summary.MultiStreamNS == 0 {
		t.Fatalf("overlap totals %+v: want 2+ streams with overlapping time", s.Summary)
	}
	var ar *OverlapRow
	for i := range s.Overlap {
		if strings.Contains(s.Overlap[i].Kernel, "AllReduce") {
			ar = &s.Overlap[i]
		}
	}
	if ar == nil {
		t.Fatalf("no NCCL all-reduce row in the overlap table: %+v", s.Overlap)
	}
	if ar.Category != CatCommunication || ar.HiddenPct <= 0 {
		t.Errorf("all-reduce row %+v: want communication with hidden time > 0", *ar)
	}
}

// CUDA-graph fixture: replayed kernels are attributed to their cudaGraphLaunch.
func TestFixtureCUDAGraph(t *testing.T) {
	r := analyzeFixture(t, "hta-a100-cudagraph-multistream-rank0.json.gz")
	var graphOps int
	for _, s := range r.Stages {
		for _, k := range s.Kernels {
			for _, l := range k.Locations {
				if l.CPUOp == "cudaGraphLaunch replay (graph)" {
					graphOps++
				}
			}
		}
	}
	if graphOps == 0 {
		t.Error("no kernel row attributed to a cudaGraphLaunch replay")
	}
}
