package kineto

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/klauspost/compress/gzip"

	"github.com/sglprof/runner/reports/kineto/kinetogen"
	"github.com/sglprof/runner/reports/trace"
)

// TestGeneratedTraces compares the reader with the generator's own counts (the generator counts
// while writing, it never parses its output).
func TestGeneratedTraces(t *testing.T) {
	for _, cfg := range []kinetogen.Config{
		{Flavor: kinetogen.FlavorDiffusion, Steps: 2, Layers: 4, WithStack: true, AllStages: true},
		{Flavor: kinetogen.FlavorDiffusion, Steps: 3, Layers: 3, CommStream: true},
		{Flavor: kinetogen.FlavorLLM, Steps: 3, Layers: 4, CUDAGraph: true, WithStack: true, CommStream: true, Rank: 1},
		{Flavor: kinetogen.FlavorLLM, Steps: 2, Layers: 2},
	} {
		name := fmt.Sprintf("%s/comm=%v/graph=%v/stack=%v", cfg.Flavor, cfg.CommStream, cfg.CUDAGraph, cfg.WithStack)
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			st, err := kinetogen.Write(&buf, cfg)
			if err != nil {
				t.Fatal(err)
			}
			tr := readBytes(t, buf.Bytes())
			n, ns := tr.KernelTime(trace.NoID)
			if int64(n) != st.Kernels || ns != st.KernelNS || tr.Events != st.Events || int64(countKind(tr, trace.OpMemcpy)) != st.Memcpys {
				t.Errorf("reader: %d kernels %d ns %d events %d memcpys; generator: %d kernels %d ns %d events %d memcpys",
					n, ns, tr.Events, countKind(tr, trace.OpMemcpy), st.Kernels, st.KernelNS, st.Events, st.Memcpys)
			}
			byName := map[string]int64{}
			for _, o := range tr.GPUOps {
				if o.Kind == trace.OpKernel {
					byName[tr.Name(o.Name)] += o.Dur()
				}
			}
			for k, v := range st.KernelNSByName {
				if byName[k] != v {
					t.Errorf("kernel %q: reader %d ns, generator %d ns", k, byName[k], v)
				}
			}
			if len(tr.Warnings) != 0 {
				t.Errorf("warnings on a generated trace: %v", tr.Warnings)
			}
			trace.Link(tr)
			linked, graph := 0, 0
			for i := range tr.GPUOps {
				if tr.GPUOps[i].Launch != trace.NoID {
					linked++
				}
				if tr.IsGraphReplay(i) {
					graph++
				}
			}
			if linked != len(tr.GPUOps) {
				t.Errorf("%d of %d GPU ops linked to a launch", linked, len(tr.GPUOps))
			}
			if cfg.CUDAGraph && graph == 0 {
				t.Error("no graph replays in a CUDAGraph trace")
			}
			if cfg.WithStack {
				framed := 0
				for i := range tr.GPUOps {
					if tr.OpFrame(i) != trace.NoID {
						framed++
					}
				}
				if framed < len(tr.GPUOps)/2 {
					t.Errorf("only %d of %d GPU ops have a Python frame", framed, len(tr.GPUOps))
				}
			}
		})
	}
}

// benchTrace generates a trace of about size bytes once per process.
var benchCache = map[string][]byte{}

func benchTrace(b *testing.B, size int64, gz bool) []byte {
	key := fmt.Sprint(size, gz)
	if d, ok := benchCache[key]; ok {
		return d
	}
	var buf bytes.Buffer
	var w io.Writer = &buf
	var zw *gzip.Writer
	if gz {
		zw, _ = gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
		w = zw
	}
	if _, err := kinetogen.Write(w, kinetogen.Config{Flavor: kinetogen.FlavorLLM, CommStream: true, WithStack: true, TargetBytes: size, Seed: 1}); err != nil {
		b.Fatal(err)
	}
	if zw != nil {
		zw.Close()
	}
	benchCache[key] = buf.Bytes()
	return buf.Bytes()
}

func uncompressedLen(b *testing.B, data []byte) int64 {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return int64(len(data))
	}
	n, _ := io.Copy(io.Discard, zr)
	return n
}

// BenchmarkRead measures the reader in MB/s of uncompressed JSON and allocations per event.
func BenchmarkRead(b *testing.B) {
	for _, c := range []struct {
		name string
		gz   bool
		opts Options
	}{
		{"json", false, Options{}},
		{"json.gz", true, Options{}},
		{"json/skip-frames-cpuops", false, Options{SkipFrames: true, SkipCPUOps: true, SkipFlows: true}},
		{"json/pipeline", false, Options{Pipeline: true}},
		{"json/sequential", false, Options{Sequential: true}},
		{"json/sequential-fastjson", false, Options{Sequential: true, noFast: true}},
		{"json.gz/sequential", true, Options{Sequential: true}},
	} {
		b.Run(c.name, func(b *testing.B) {
			data := benchTrace(b, 32<<20, c.gz)
			b.SetBytes(uncompressedLen(b, data))
			b.ReportAllocs()
			var events int64
			for b.Loop() {
				tr, err := Read(context.Background(), bytes.NewReader(data), "bench", c.opts)
				if err != nil {
					b.Fatal(err)
				}
				events = tr.Events
			}
			var ms = testing.AllocsPerRun(1, func() {
				Read(context.Background(), bytes.NewReader(data), "bench", c.opts)
			})
			b.ReportMetric(ms/float64(events), "allocs/event")
		})
	}
}

// BenchmarkGunzip is the floor for .json.gz input: decompression alone.
func BenchmarkGunzip(b *testing.B) {
	data := benchTrace(b, 32<<20, true)
	b.SetBytes(uncompressedLen(b, data))
	for b.Loop() {
		zr, _ := gzip.NewReader(bytes.NewReader(data))
		io.Copy(io.Discard, zr)
	}
}

// BenchmarkLink measures linking on a generated trace with Python frames.
func BenchmarkLink(b *testing.B) {
	data := benchTrace(b, 32<<20, false)
	tr, err := Read(context.Background(), bytes.NewReader(data), "bench", Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		trace.Link(tr)
	}
}
