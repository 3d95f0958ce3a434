package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sglprof/runner/nsys/nsysgen"
)

// syntheticReport is a report the size of a simulated 50-step image cell's (tens of thousands
// of kernels and runtime calls, a few thousand NVTX ranges), with extreme values mixed in.
func syntheticReport(kernels int) *nsysReport {
	r := rand.New(rand.NewPCG(1, 2))
	names := []string{"void flash::FlashAttnFwdSm90<...>(...)", "sm90_xmma_gemm_bf16bf16_bf16f32", "rms_norm_kernel", "élément ünïcode", ""}
	rep := &nsysReport{Magic: reportMagic, NSysVersion: NSysVersion, Command: []string{"sglang", "generate", "--prompt=a \"cat\"\n"},
		Options: map[string]string{"--trace": "cuda,nvtx", "--delay": "10"}, SessionStartNS: 1_700_000_000_000_000_000,
		WindowStartNS: 5, WindowEndNS: 1 << 40, AppExitCode: 137, AppSignal: "SIGKILL", CaptureEnd: "stop", Interrupted: true,
		GPUs: []nsysgen.GPU{{ID: 0, Name: "NVIDIA H100 80GB HBM3"}}, Processes: []nsysgen.Process{{PID: 4242, Name: "python3"}}}
	t := int64(1_700_000_000_000_000_000)
	for i := 0; i < kernels; i++ {
		t += r.Int64N(50_000)
		n := names[r.IntN(len(names))]
		rep.Kernels = append(rep.Kernels, nsysgen.Kernel{Start: t, End: t + r.Int64N(1e6), Device: int32(i % 8), Stream: 7, Correlation: int64(i),
			Name: n, Short: n[:min(len(n), 8)], GridX: r.Int32(), GridY: 1, GridZ: -1, BlockX: 128, BlockY: 1, BlockZ: 1, PID: 4242, TID: int32(i % 3)})
		rep.Runtime = append(rep.Runtime, nsysgen.Runtime{Start: t - 3000, End: t - 1000, PID: 4242, TID: 4243, Correlation: int64(i), Name: "cudaLaunchKernel_v7000", Driver: i%50 == 0})
		if i%20 == 0 {
			rep.Memops = append(rep.Memops, nsysgen.Memop{Start: t, End: t + 10, Device: 0, Stream: 7, Correlation: int64(i), Bytes: 1 << 40, CopyKind: 8, Memset: i%40 == 0, PID: 4242})
			rep.NVTX = append(rep.NVTX, nsysgen.NVTX{Start: t, End: t + 5000, PID: 4242, TID: 4243, Text: fmt.Sprint("step ", i/20), Domain: "sglang"})
		}
	}
	rep.Kernels = append(rep.Kernels, nsysgen.Kernel{Start: -1 << 63, End: 1<<63 - 1, Device: -1 << 31, GridX: 1<<31 - 1})
	return rep
}

// A report reads back as it was written, every field of every record.
func TestReportRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for _, rep := range []*nsysReport{syntheticReport(3000), {Magic: reportMagic, NSysVersion: NSysVersion}} {
		path := filepath.Join(dir, "r.nsys-rep")
		if err := writeReport(path, rep); err != nil {
			t.Fatal(err)
		}
		got, err := readReport(path)
		if err != nil {
			t.Fatal(err)
		}
		want := *rep
		want.Format = reportFormat
		if !reflect.DeepEqual(*got, want) {
			t.Fatalf("read back %d kernels, %d runtime, %d memops, %d nvtx; not what was written (%d, %d, %d, %d)",
				len(got.Kernels), len(got.Runtime), len(got.Memops), len(got.NVTX), len(want.Kernels), len(want.Runtime), len(want.Memops), len(want.NVTX))
		}
	}
}

// A format 1 report (one JSON document, written by earlier versions) still reads; a truncated
// format 2 one, or one with bytes after its last list, does not.
func TestReportFormats(t *testing.T) {
	rep := syntheticReport(50)
	old := *rep
	old.Format = 1
	var js bytes.Buffer
	if err := json.NewEncoder(&js).Encode(&old); err != nil {
		t.Fatal(err)
	}
	got, err := decodeReport(&js)
	if err != nil || !reflect.DeepEqual(*got, old) {
		t.Fatalf("format 1: %v", err)
	}
	var b bytes.Buffer
	if err := encodeReport(&b, rep); err != nil {
		t.Fatal(err)
	}
	whole := b.Bytes()
	if _, err := decodeReport(bytes.NewReader(whole)); err != nil {
		t.Fatal(err)
	}
	for _, cut := range []int{1, 2, 10, len(whole) / 2, len(whole) - 1} {
		if _, err := decodeReport(bytes.NewReader(whole[:len(whole)-cut])); err == nil {
			t.Errorf("a report missing its last %d bytes was read", cut)
		}
	}
	if _, err := decodeReport(bytes.NewReader(append(whole[:len(whole):len(whole)], 0))); err == nil {
		t.Error("a report with a byte after its last list was read")
	}
	future := bytes.Replace(whole, []byte(`"format":2`), []byte(`"format":3`), 1)
	if _, err := decodeReport(bytes.NewReader(future)); err == nil || !strings.Contains(err.Error(), "format 3") {
		t.Errorf("format 3: %v", err)
	}
}

// FuzzDecodeReport: any input is refused or read without a panic, and what is read writes and
// reads back the same.
func FuzzDecodeReport(f *testing.F) {
	var b bytes.Buffer
	if err := encodeReport(&b, syntheticReport(5)); err != nil {
		f.Fatal(err)
	}
	f.Add(b.Bytes())
	f.Add([]byte(`{"magic":"sglprof-sim-nsys-report","format":1,"kernels":[{"Start":1,"End":2,"Name":"k"}]}`))
	f.Add([]byte("{\"magic\":\"sglprof-sim-nsys-report\",\"format\":2}\n\x01\x01k\x01\x02\x04\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rep, err := decodeReport(bytes.NewReader(data))
		if err != nil {
			return
		}
		var again bytes.Buffer
		if err := encodeReport(&again, rep); err != nil {
			t.Fatal(err)
		}
		back, err := decodeReport(&again)
		if err != nil {
			t.Fatalf("a report read from the input does not read back: %v", err)
		}
		if !reflect.DeepEqual(norm(back), norm(rep)) {
			t.Fatal("a report read from the input reads back different")
		}
	})
}

// norm makes empty record lists nil, as a round trip through format 2 gives them.
func norm(r *nsysReport) nsysReport {
	c := *r
	c.Format = reportFormat
	if len(c.Kernels) == 0 {
		c.Kernels = nil
	}
	if len(c.Runtime) == 0 {
		c.Runtime = nil
	}
	if len(c.Memops) == 0 {
		c.Memops = nil
	}
	if len(c.NVTX) == 0 {
		c.NVTX = nil
	}
	return c
}

// BenchmarkReport writes and reads the report of a 20,000-kernel capture, as `nsys profile` and
// `nsys export` of a simulated 50-step image cell do.
func BenchmarkReport(b *testing.B) {
	rep := syntheticReport(20000)
	path := filepath.Join(b.TempDir(), "r.nsys-rep")
	b.Run("write", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if err := writeReport(path, rep); err != nil {
				b.Fatal(err)
			}
		}
	})
	st, _ := os.Stat(path)
	b.Run("read", func(b *testing.B) {
		b.SetBytes(st.Size())
		for i := 0; i < b.N; i++ {
			if _, err := readReport(path); err != nil {
				b.Fatal(err)
			}
		}
	})
}
