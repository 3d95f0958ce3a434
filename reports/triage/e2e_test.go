package triage

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/kineto"
	"github.com/sglprof/runner/reports/kineto/kinetogen"
	"github.com/sglprof/runner/reports/trace"
)

// genTrace writes a kinetogen trace, reads it back with the Kineto reader and links it: the
// whole pipeline the CLI runs, on a trace whose true totals the generator counted itself.
func genTrace(t testing.TB, cfg kinetogen.Config) (*trace.Trace, kinetogen.Stats, int) {
	t.Helper()
	var buf bytes.Buffer
	st, err := kinetogen.Write(&buf, cfg)
	if err != nil {
		t.Fatal(err)
	}
	n := buf.Len()
	tr, err := kineto.Read(context.Background(), &buf, "gen.trace.json", kineto.Options{})
	if err != nil {
		t.Fatal(err)
	}
	trace.Link(tr)
	return tr, st, n
}

func analyzeOne(t testing.TB, tr *trace.Trace, model string) *Report {
	t.Helper()
	r, err := Analyze(context.Background(), Inputs{Files: []Input{{Path: "gen.trace.json", Rank: NoRank}}, Model: model},
		Options{Open: func(context.Context, string) (*trace.Trace, error) { return tr, nil }})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestGeneratedDiffusionStages(t *testing.T) {
	tr, st, _ := genTrace(t, kinetogen.Config{Flavor: kinetogen.FlavorDiffusion, Steps: 3, Layers: 4, AllStages: true, WithStack: true, Seed: 1})
	r := analyzeOne(t, tr, "Qwen/Qwen-Image")
	got := map[string]bool{}
	var kernelNS float64
	for _, s := range r.Stages {
		got[s.Stage] = true
		for _, k := range s.Kernels {
			if !strings.HasPrefix(k.Name, "Memcpy") && !strings.HasPrefix(k.Name, "Memset") {
				kernelNS += k.TotalUS * 1000
			}
		}
	}
	for _, want := range []string{kinetogen.StageTextEncoding, kinetogen.StageDenoising, kinetogen.StageDecoding} {
		if !got[want] {
			t.Errorf("no %s stage from the annotations; stages %v", want, got)
		}
	}
	if int64(kernelNS+0.5) != st.KernelNS {
		t.Errorf("kernel time %.0f ns across stages, generator wrote %d ns", kernelNS, st.KernelNS)
	}
	den := findStage(t, r, kinetogen.StageDenoising)
	resolved := 0
	for _, k := range den.Kernels {
		if len(k.Locations) > 0 && k.Locations[0].Location != "unresolved" {
			resolved++
		}
	}
	if resolved == 0 {
		t.Error("no denoising kernel resolved to a Python site (WithStack trace)")
	}
}

func TestGeneratedLLMGraphAndComm(t *testing.T) {
	tr, _, _ := genTrace(t, kinetogen.Config{Flavor: kinetogen.FlavorLLM, Steps: 4, Layers: 4, CUDAGraph: true, CommStream: true, WithStack: true, Seed: 2})
	r := analyzeOne(t, tr, "Qwen/Qwen3-8B")
	var ext, dec *Stage
	for i := range r.Stages {
		switch r.Stages[i].Stage {
		case StageExtend:
			ext = &r.Stages[i]
		case StageDecode:
			dec = &r.Stages[i]
		}
	}
	if ext == nil || dec == nil {
		t.Fatalf("stages %+v: want extend and decode from step[...] annotations", r.Stages)
	}
	graph := false
	for _, k := range dec.Kernels {
		for _, l := range k.Locations {
			if strings.HasSuffix(l.CPUOp, "replay (graph)") {
				graph = true
			}
		}
	}
	if !graph {
		t.Error("decode kernels are not attributed to the graph replay")
	}
	if ext.Summary.MultiStreamNS == 0 && dec.Summary.MultiStreamNS == 0 {
		t.Error("comm stream never overlaps compute")
	}
}

// BenchmarkPipeline measures read + link + triage of an in-memory Kineto JSON trace, the path
// `runner triage` takes (without disk I/O), and reports MB/s of JSON.
func BenchmarkPipeline(b *testing.B) {
	for _, mb := range []int64{10, 100} {
		b.Run(fmt.Sprintf("%dMB", mb), func(b *testing.B) {
			var buf bytes.Buffer
			if _, err := kinetogen.Write(&buf, kinetogen.Config{Flavor: kinetogen.FlavorLLM, CommStream: true, WithStack: true, TargetBytes: mb << 20, Seed: 3}); err != nil {
				b.Fatal(err)
			}
			data := buf.Bytes()
			b.SetBytes(int64(len(data)))
			b.ResetTimer()
			var ops int
			for i := 0; i < b.N; i++ {
				tr, err := kineto.Read(context.Background(), bytes.NewReader(data), "gen.trace.json", kineto.Options{})
				if err != nil {
					b.Fatal(err)
				}
				trace.Link(tr)
				ops = len(tr.GPUOps)
				if _, err := Analyze(context.Background(), Inputs{Files: []Input{{Path: "gen", Rank: NoRank}}},
					Options{Open: func(context.Context, string) (*trace.Trace, error) { return tr, nil }}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(ops), "gpu-ops")
		})
	}
}

// Two-trace mode on generated traces: the graph-off mapping trace gives the decode kernels of
// the graph-on formal trace their Python sites.
func TestGeneratedMappingFormal(t *testing.T) {
	mt, _, _ := genTrace(t, kinetogen.Config{Flavor: kinetogen.FlavorLLM, Steps: 3, Layers: 3, WithStack: true, Seed: 5})
	ft, _, _ := genTrace(t, kinetogen.Config{Flavor: kinetogen.FlavorLLM, Steps: 3, Layers: 3, WithStack: true, CUDAGraph: true, Seed: 5})
	open := opener(map[string]*trace.Trace{"m.json": mt, "f.json": ft})
	r, err := Analyze(context.Background(), Inputs{Files: []Input{{Path: "f.json", Rank: NoRank}}},
		Options{Open: open, Mapping: &Inputs{Files: []Input{{Path: "m.json", Rank: NoRank}}}})
	if err != nil {
		t.Fatal(err)
	}
	dec := findStage(t, r, StageDecode)
	viaMapping, viaGraph := 0, 0
	for _, k := range dec.Kernels {
		if len(k.Locations) == 0 {
			continue
		}
		switch {
		case strings.HasSuffix(k.Locations[0].CPUOp, "(mapping)"):
			viaMapping++
		case strings.HasSuffix(k.Locations[0].CPUOp, "replay (graph)"):
			viaGraph++
		}
	}
	if viaMapping == 0 {
		t.Errorf("no decode kernel took its site from the mapping trace (%d still on the graph replay)", viaGraph)
	}
	if r.Mode != ModeMappingFormal {
		t.Errorf("mode %s", r.Mode)
	}
}
