package kineto

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	kgzip "github.com/klauspost/compress/gzip"

	"github.com/sglprof/runner/reports/trace"
)

const (
	fxMI300X    = "tracelens-mi300x-sglang-qwen3-8b-decode-hipgraph.json.gz"
	fxDDP       = "hta-a100-ddp-nccl-rank0.json.gz"
	fxCUDAGraph = "hta-a100-cudagraph-multistream-rank0.json.gz"
)

func readBytes(t testing.TB, data []byte) *trace.Trace {
	t.Helper()
	tr, err := Read(context.Background(), bytes.NewReader(data), "test.json", Options{})
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return tr
}

func countKind(tr *trace.Trace, k trace.OpKind) int {
	n := 0
	for i := range tr.GPUOps {
		if tr.GPUOps[i].Kind == k {
			n++
		}
	}
	return n
}

func hasWarning(tr *trace.Trace, sub string) bool {
	for _, w := range tr.Warnings {
		if strings.Contains(w, sub) {
			return true
		}
	}
	return false
}

// compareWithOracle checks the reader's record counts against the encoding/json oracle.
func compareWithOracle(t *testing.T, tr *trace.Trace, data []byte) oracleCounts {
	t.Helper()
	want, ok := oracle(data)
	if !ok {
		t.Fatal("oracle could not decode the fixture")
	}
	n, ns := tr.KernelTime(trace.NoID)
	got := oracleCounts{Kernels: n, KernelNS: ns, Memcpy: countKind(tr, trace.OpMemcpy), Memset: countKind(tr, trace.OpMemset),
		Runtime: len(tr.Launches), CPUOps: len(tr.CPUOps), Frames: len(tr.Frames), Annotations: len(tr.Annotations), Events: int(tr.Events)}
	type pair struct {
		name      string
		got, want int64
	}
	for _, p := range []pair{
		{"kernels", int64(got.Kernels), int64(want.Kernels)},
		{"kernel ns", got.KernelNS, want.KernelNS},
		{"memcpy", int64(got.Memcpy), int64(want.Memcpy)},
		{"memset", int64(got.Memset), int64(want.Memset)},
		{"runtime", int64(got.Runtime), int64(want.Runtime)},
		{"cpu ops", int64(got.CPUOps), int64(want.CPUOps)},
		{"frames", int64(got.Frames), int64(want.Frames)},
		{"annotations", int64(got.Annotations), int64(want.Annotations)},
		{"events", int64(got.Events), int64(want.Events)},
	} {
		if p.got != p.want {
			t.Errorf("%s: reader %d, encoding/json oracle %d", p.name, p.got, p.want)
		}
	}
	for dev, wns := range want.KernelNSByDevice {
		if gn, gns := tr.KernelTime(int32(dev)); gns != wns || gn != want.KernelsByDevice[dev] {
			t.Errorf("device %d: reader %d kernels %d ns, oracle %d kernels %d ns", dev, gn, gns, want.KernelsByDevice[dev], wns)
		}
	}
	return want
}

func TestMI300XDecodeWindow(t *testing.T) {
	p := fixture(t, fxMI300X)
	tr, err := ReadFile(context.Background(), p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The figure PROVENANCE.md gives, computed independently of this code.
	if n, ns := tr.KernelTime(9); n != 555 || ns != 9765437 {
		t.Errorf("device 9: %d kernels, %d ns; want 555 kernels, 9765437 ns", n, ns)
	}
	if n, _ := tr.KernelTime(0); n != 0 {
		t.Errorf("device 0 has %d kernels; the MI300X trace puts its GPU at pid/device 9", n)
	}
	compareWithOracle(t, tr, decompressed(t, p))
	if tr.BaseNS != 1775078550000000000 {
		t.Errorf("BaseNS = %d", tr.BaseNS)
	}
	if tr.Meta["distributedInfo.rank"] != "0" || tr.Meta["distributedInfo.world_size"] != "1" || tr.Meta["schemaVersion"] != "1" {
		t.Errorf("meta = %v", tr.Meta)
	}
	if len(tr.Devices) != 1 || tr.Devices[0].Name != "AMD Instinct MI300X" {
		t.Errorf("devices = %v", tr.Devices)
	}

	// The HIP graph: one hipGraphLaunch replays 544 kernels, all attributed to it and to the
	// Python site around the replay call.
	trace.Link(tr)
	perLaunch := map[int32]int{}
	for i := range tr.GPUOps {
		if tr.IsGraphReplay(i) {
			perLaunch[tr.GPUOps[i].Launch]++
		}
	}
	if len(perLaunch) != 1 {
		t.Fatalf("graph launches with replayed ops: %v, want exactly one", perLaunch)
	}
	for li, n := range perLaunch {
		l := tr.Launches[li]
		if got := tr.Name(l.Name); got != "hipGraphLaunch" || n < 544 {
			t.Errorf("graph launch %q replays %d ops; want hipGraphLaunch with at least 544", got, n)
		}
		if l.Frame == trace.NoID {
			t.Fatal("the hipGraphLaunch call has no enclosing Python frame (trace was recorded with_stack)")
		}
		st := tr.Stack(l.Frame)
		if len(st) < 3 {
			t.Fatalf("replay site stack too short: %d frames", len(st))
		}
		for i := 1; i < len(st); i++ {
			in, out := tr.Frames[st[i-1]], tr.Frames[st[i]]
			if in.Start < out.Start || in.End > out.End {
				t.Errorf("stack frame %q is not inside its parent %q", tr.Name(in.Name), tr.Name(out.Name))
			}
		}
	}
}

func TestDDPNCCLOverlapsCompute(t *testing.T) {
	p := fixture(t, fxDDP)
	tr, err := ReadFile(context.Background(), p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	compareWithOracle(t, tr, decompressed(t, p))
	trace.Link(tr)
	byStream := tr.OpsByStream(trace.OpKernel)
	ncclStreams := map[trace.StreamKey]bool{}
	for k, ids := range byStream {
		for _, i := range ids {
			if strings.Contains(strings.ToLower(tr.Name(tr.GPUOps[i].Name)), "nccl") {
				ncclStreams[k] = true
			}
		}
	}
	if len(ncclStreams) == 0 {
		t.Fatal("no NCCL kernels found")
	}
	var overlapNS int64
	for k, ids := range byStream {
		if !ncclStreams[k] {
			continue
		}
		for ok, oids := range byStream {
			if ok == k || ok.Device != k.Device || ncclStreams[ok] {
				continue
			}
			for _, a := range ids {
				x := tr.GPUOps[a]
				if !strings.Contains(strings.ToLower(tr.Name(x.Name)), "nccl") {
					continue
				}
				for _, b := range oids {
					y := tr.GPUOps[b]
					if lo, hi := max(x.Start, y.Start), min(x.End, y.End); hi > lo {
						overlapNS += hi - lo
					}
				}
			}
		}
	}
	if overlapNS <= 0 {
		t.Fatalf("NCCL kernels never overlap compute on another stream; streams %v", ncclStreams)
	}
	t.Logf("NCCL/compute overlap: %d ns on streams %v", overlapNS, ncclStreams)
	// Almost every GPU op of a pristine trace links to its launch.
	linked := 0
	for i := range tr.GPUOps {
		if tr.GPUOps[i].Launch != trace.NoID {
			linked++
		}
	}
	if linked < len(tr.GPUOps)*9/10 {
		t.Errorf("only %d of %d GPU ops linked to a launch", linked, len(tr.GPUOps))
	}
	withOp := 0
	for i := range tr.GPUOps {
		if c := tr.GPUOps[i].CPUOp; c != trace.NoID {
			withOp++
			cop := tr.CPUOps[c]
			l := tr.Launches[tr.GPUOps[i].Launch]
			if l.Start < cop.Start || l.Start > cop.End {
				t.Errorf("op %d: launch at %d is outside its CPU op %q [%d,%d]", i, l.Start, tr.Name(cop.Name), cop.Start, cop.End)
				break
			}
		}
	}
	if withOp == 0 {
		t.Error("no GPU op linked to a CPU op")
	}
}

func TestCUDAGraphReplays(t *testing.T) {
	p := fixture(t, fxCUDAGraph)
	tr, err := ReadFile(context.Background(), p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	data := decompressed(t, p)
	compareWithOracle(t, tr, data)
	trace.Link(tr)
	graphLaunches := 0
	for _, l := range tr.Launches {
		if l.Graph {
			graphLaunches++
			if tr.Name(l.Name) != "cudaGraphLaunch" {
				t.Errorf("Graph set on %q", tr.Name(l.Name))
			}
		}
	}
	if graphLaunches != 70 {
		t.Errorf("%d cudaGraphLaunch calls, PROVENANCE says 70", graphLaunches)
	}
	perLaunch := map[int32]int{}
	for i := range tr.GPUOps {
		if tr.IsGraphReplay(i) {
			perLaunch[tr.GPUOps[i].Launch]++
			if tr.GPUOps[i].Correlation != tr.Launches[tr.GPUOps[i].Launch].Correlation {
				t.Fatal("replayed op linked to a launch with another correlation")
			}
		}
	}
	maxOps := 0
	for _, n := range perLaunch {
		maxOps = max(maxOps, n)
	}
	if len(perLaunch) == 0 || maxOps < 2 {
		t.Fatalf("graph launches with ops: %d, most ops per launch %d; want many ops per launch", len(perLaunch), maxOps)
	}
	if maxOps != 20 {
		t.Errorf("most GPU ops per graph launch = %d, PROVENANCE says up to 20", maxOps)
	}
	// Old format: integer absolute-epoch microseconds, no baseTimeNanoseconds, parsed exactly.
	if tr.BaseNS != 0 {
		t.Errorf("BaseNS = %d for a trace without baseTimeNanoseconds", tr.BaseNS)
	}
	first := -1
	for i, a := range tr.Annotations {
		if tr.Name(a.Name) == "ProfilerStep#550" {
			first = i
		}
	}
	if first < 0 {
		t.Fatal("ProfilerStep#550 not found")
	}
	if a := tr.Annotations[first]; a.Start != 1683564901548726000 || a.End-a.Start != 209748000 {
		t.Errorf("ProfilerStep#550 = [%d, %d], want start 1683564901548726000 dur 209748000", a.Start, a.End)
	}
	if len(tr.Devices) != 8 {
		t.Errorf("devices %d", len(tr.Devices))
	}
}

// TestFixedPoint covers the decimal parser on Kineto's shapes and JSON's number grammar.
func TestFixedPoint(t *testing.T) {
	cases := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"1", 1000, true},
		{"4909914216204.635", 4909914216204635, true},
		{"1683564901548726", 1683564901548726000, true},
		{"0.001", 1, true},
		{"0.0004", 0, true},
		{"0.0005", 1, true},
		{"-0.0005", -1, true},
		{"-5.25", -5250, true},
		{"1.5e3", 1500000, true},
		{"1.5E+3", 1500000, true},
		{"2500e-3", 2500, true},
		{"1e-3", 1, true},
		{"1e-7", 0, true},
		{"12.345678", 12346, true},
		{"9223372036854775.807", 9223372036854775807, true},
		{"9223372036854775.808", 0, false},
		{"1e400", 0, false},
		{"", 0, false},
		{"-", 0, false},
		{".", 0, false},
		{"1.", 1000, true},
		{"1e", 0, false},
		{"abc", 0, false},
		{"1.2.3", 0, false},
		{"123456789012345678901234567890e-20", 1234567890123, true},
		{"0.00000000000000000000001e23", 1000, true},
	}
	for _, c := range cases {
		got, ok := parseMicrosNS([]byte(c.in))
		if ok != c.ok || ok && got != c.want {
			t.Errorf("parseMicrosNS(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
		if c.ok {
			var n json.Number = json.Number(c.in)
			if c.in == "1." {
				continue // not a JSON number, accepted leniently
			}
			if w, ok := oracleNS(n); !ok || w != c.want {
				t.Errorf("oracle disagrees on %q: %d %v", c.in, w, ok)
			}
		}
	}
}

const smallTrace = `{
  "schemaVersion": 1,
  "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}],
  "baseTimeNanoseconds": 1700000000000000000,
  "traceEvents": [
  {"ph": "X", "cat": "python_function", "name": "model.py(10): forward", "pid": 100, "tid": 100, "ts": 0.000, "dur": 100.000, "args": {"Python id": 1, "Python parent id": 0}},
  {"ph": "X", "cat": "python_function", "name": "layer.py(20): attn", "pid": 100, "tid": 100, "ts": 10.000, "dur": 50.000, "args": {"Python id": 2, "Python parent id": 1}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 100, "tid": 100, "ts": 20.000, "dur": 10.000, "args": {"External id": 7}},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 100, "ts": 21.000, "dur": 2.000, "args": {"External id": 7, "correlation": 50}},
  {"ph": "s", "id": 50, "pid": 100, "tid": 100, "ts": 21.000, "cat": "ac2g", "name": "ac2g"},
  {"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7, "ts": 30.000, "dur": 5.500, "args": {"External id": 7, "device": 0, "stream": 7, "correlation": 50}},
  {"ph": "f", "id": 50, "pid": 0, "tid": 7, "ts": 30.000, "cat": "ac2g", "name": "ac2g", "bp": "e"},
  {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0, "tid": 7, "ts": 36.000, "dur": 1.000, "args": {"device": 0, "stream": 7, "correlation": 51, "bytes": 4096}},
  {"name": "process_name", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {"name": "python3"}},
  {"name": "process_labels", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}}
  ],
  "traceName": "small.json"
}
`

func TestSmallTraceAndLink(t *testing.T) {
	tr := readBytes(t, []byte(smallTrace))
	if len(tr.GPUOps) != 2 || len(tr.Launches) != 1 || len(tr.CPUOps) != 1 || len(tr.Frames) != 2 || len(tr.Flows) != 2 {
		t.Fatalf("records: %d ops %d launches %d cpu %d frames %d flows", len(tr.GPUOps), len(tr.Launches), len(tr.CPUOps), len(tr.Frames), len(tr.Flows))
	}
	k := tr.GPUOps[0]
	if k.Start != 30000 || k.End != 35500 || k.Stream != 7 || k.Device != 0 || k.Correlation != 50 || k.ExternalID != 7 {
		t.Errorf("kernel = %+v", k)
	}
	if m := tr.GPUOps[1]; m.Kind != trace.OpMemcpy || m.Bytes != 4096 {
		t.Errorf("memcpy = %+v", m)
	}
	if tr.Meta["traceName"] != "small.json" || tr.BaseNS != 1700000000000000000 {
		t.Errorf("meta %v base %d", tr.Meta, tr.BaseNS)
	}
	if len(tr.Processes) != 1 || tr.Processes[0].Name != "python3" || tr.Processes[0].Label != "GPU 0" {
		t.Errorf("processes %+v", tr.Processes)
	}
	trace.Link(tr)
	if tr.GPUOps[0].Launch != 0 || tr.GPUOps[0].CPUOp != 0 {
		t.Errorf("kernel links: launch %d cpu op %d", tr.GPUOps[0].Launch, tr.GPUOps[0].CPUOp)
	}
	if tr.GPUOps[1].Launch != trace.NoID {
		t.Error("memcpy without a launch got one")
	}
	if tr.CPUOps[0].Frame != 1 || tr.Launches[0].Frame != 1 {
		t.Errorf("cpu op frame %d launch frame %d, want 1 (attn)", tr.CPUOps[0].Frame, tr.Launches[0].Frame)
	}
	if st := tr.Stack(tr.OpFrame(0)); len(st) != 2 || st[0] != 1 || st[1] != 0 {
		t.Errorf("stack = %v, want [1 0]", st)
	}
	if hasWarning(tr, "flows disagree") {
		t.Error("flows agree in this trace")
	}
}

func TestStringPIDsAndMergedTraces(t *testing.T) {
	doc := `{"traceEvents": [
{"ph":"X","cat":"kernel","name":"k","pid":"[TP01-DP00] 9","tid":"stream 3","ts":1,"dur":2,"args":{"stream":3,"correlation":5}},
{"ph":"X","cat":"kernel","name":"k2","pid":"[TP00] 4","tid":3,"ts":1,"dur":2,"args":{"correlation":6}},
{"ph":"X","cat":"Trace","name":"PyTorch Profiler (0)","pid":"Spans","tid":"PyTorch Profiler","ts":0,"dur":10},
{"ph":"i","s":"g","name":"Record Window End","pid":"","tid":"","ts":12},
{"name":"process_name","ph":"M","pid":"[TP01-DP00] 9","tid":0,"args":{"name":"sglang::scheduler"}}
]}`
	tr := readBytes(t, []byte(doc))
	if len(tr.GPUOps) != 2 {
		t.Fatalf("ops %d", len(tr.GPUOps))
	}
	if tr.GPUOps[0].Device != 9 || tr.GPUOps[0].Stream != 3 {
		t.Errorf("op0 device %d stream %d", tr.GPUOps[0].Device, tr.GPUOps[0].Stream)
	}
	if tr.GPUOps[1].Device != 4 || tr.GPUOps[1].Stream != 3 {
		t.Errorf("op1 device %d stream %d", tr.GPUOps[1].Device, tr.GPUOps[1].Stream)
	}
	ranks := map[string]int32{}
	for _, p := range tr.Processes {
		ranks[p.Label] = p.Rank
		if p.Label == "[TP01-DP00]" && p.Name != "sglang::scheduler" {
			t.Errorf("process name %q", p.Name)
		}
	}
	if ranks["[TP01-DP00]"] != 1 || ranks["[TP00]"] != 0 {
		t.Errorf("processes %+v", tr.Processes)
	}
}

func TestMetadataAfterEventsAndKeyOrder(t *testing.T) {
	doc := `{"traceEvents":[{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":5.5,"dur":1}],
"distributedInfo":{"rank":3,"world_size":8},"baseTimeNanoseconds":123,"schemaVersion":1,
"deviceProperties":[{"id":0,"name":"GPU"}],"traceName":"t"}`
	tr := readBytes(t, []byte(doc))
	if len(tr.GPUOps) != 1 || tr.BaseNS != 123 || tr.Meta["distributedInfo.rank"] != "3" || len(tr.Devices) != 1 || tr.Meta["traceName"] != "t" {
		t.Fatalf("ops %d base %d meta %v devices %v", len(tr.GPUOps), tr.BaseNS, tr.Meta, tr.Devices)
	}
	if tr.GPUOps[0].Start != 5500 {
		t.Errorf("start %d", tr.GPUOps[0].Start)
	}
	if len(tr.Warnings) != 0 {
		t.Errorf("warnings %v", tr.Warnings)
	}
}

func TestBareArrayExponentsNegativeTID(t *testing.T) {
	doc := ` [
{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":-1,"ts":1.5e3,"dur":25E-1,"args":{"stream":4294967295}},
{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":-1,"ts":2000,"dur":1}
]`
	tr := readBytes(t, []byte(doc))
	if len(tr.GPUOps) != 2 {
		t.Fatalf("ops %d warnings %v", len(tr.GPUOps), tr.Warnings)
	}
	if o := tr.GPUOps[0]; o.Start != 1500000 || o.End != 1502500 || o.Stream != -1 {
		t.Errorf("op0 %+v", o)
	}
	if o := tr.GPUOps[1]; o.Stream != -1 {
		t.Errorf("op1 stream %d (tid -1)", o.Stream)
	}
}

func TestBadDurations(t *testing.T) {
	doc := `{"traceEvents":[
{"ph":"X","cat":"kernel","name":"ok","pid":0,"tid":7,"ts":1,"dur":1},
{"ph":"X","cat":"kernel","name":"neg","pid":0,"tid":7,"ts":1,"dur":-3},
{"ph":"X","cat":"kernel","name":"overflow","pid":0,"tid":7,"ts":1,"dur":18446744073709551},
{"ph":"X","cat":"kernel","name":"nan","pid":0,"tid":7,"ts":"x","dur":1}
]}`
	tr := readBytes(t, []byte(doc))
	if len(tr.GPUOps) != 1 {
		t.Fatalf("ops %d", len(tr.GPUOps))
	}
	for _, w := range []string{"negative durations", "over 7 days", "not a number"} {
		if !hasWarning(tr, w) {
			t.Errorf("missing warning %q in %v", w, tr.Warnings)
		}
	}
}

func TestInvalidUTF8AndUnescapedQuotes(t *testing.T) {
	// Compact layout, an even number of stray quotes: the element parses badly and is skipped.
	doc := "{\"traceEvents\":[\n" +
		`{"ph":"X","cat":"kernel","name":"good","pid":0,"tid":7,"ts":1,"dur":1},` + "\n" +
		"{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"bad\xff\xfe\",\"pid\":0,\"tid\":7,\"ts\":2,\"dur\":1},\n" +
		`{"ph":"X","cat":"kernel","name":"say "hi" there","pid":0,"tid":7,"ts":3,"dur":1},` + "\n" +
		`{"ph":"X","cat":"kernel","name":"good2","pid":0,"tid":7,"ts":4,"dur":1}` + "\n]}"
	tr := readBytes(t, []byte(doc))
	if len(tr.GPUOps) != 2 || tr.Name(tr.GPUOps[1].Name) != "good2" {
		t.Fatalf("ops %d warnings %v", len(tr.GPUOps), tr.Warnings)
	}
	badOff := strings.Index(doc, "\xff")
	if !hasWarning(tr, "invalid UTF-8 at byte "+strconv.Itoa(badOff)) {
		t.Errorf("no UTF-8 warning naming byte %d: %v", badOff, tr.Warnings)
	}
	quoteOff := strings.Index(doc, `{"ph":"X","cat":"kernel","name":"say`)
	if !hasWarning(tr, "event at byte "+strconv.Itoa(quoteOff)+" is not valid JSON") {
		t.Errorf("no unescaped-quote warning naming byte %d: %v", quoteOff, tr.Warnings)
	}

	// Kineto's pretty layout with an odd number of stray quotes: the string structure is lost
	// until a newline; the reader skips to the next event block.
	pretty := "{\n  \"traceEvents\": [\n" +
		"  {\n    \"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"a\", \"pid\": 0, \"tid\": 7,\n    \"ts\": 1.000, \"dur\": 1.000\n  },\n" +
		"  {\n    \"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"b \"quoted {x\", \"pid\": 0, \"tid\": 7,\n    \"ts\": 2.000, \"dur\": 1.000\n  },\n" +
		"  {\n    \"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"c\", \"pid\": 0, \"tid\": 7,\n    \"ts\": 3.000, \"dur\": 1.000\n  }\n" +
		"  ]\n}\n"
	tr = readBytes(t, []byte(pretty))
	names := []string{}
	for _, o := range tr.GPUOps {
		names = append(names, tr.Name(o.Name))
	}
	if strings.Join(names, ",") != "a,c" {
		t.Errorf("kernels %v, want a,c; warnings %v", names, tr.Warnings)
	}
	if !hasWarning(tr, "lost its string structure") {
		t.Errorf("no quote warning: %v", tr.Warnings)
	}
}

// TestEveryPrefix cuts a small trace at every byte: each prefix reads without error or panic,
// the number of kernels never decreases as the prefix grows, and every cut inside the document
// is reported as truncation.
func TestEveryPrefix(t *testing.T) {
	full := []byte(smallTrace)
	prev := 0
	for i := 0; i <= len(full); i++ {
		tr, err := Read(context.Background(), bytes.NewReader(full[:i]), "cut.json", Options{})
		if err != nil {
			// Only prefixes that hold no event yet may be rejected outright.
			if i > strings.Index(smallTrace, `{"ph"`) && i > 0 && prev > 0 {
				t.Fatalf("prefix %d: %v", i, err)
			}
			continue
		}
		n := len(tr.GPUOps) + len(tr.CPUOps) + len(tr.Frames) + len(tr.Launches)
		if n < prev {
			t.Fatalf("prefix %d: %d records, fewer than the %d of a shorter prefix", i, n, prev)
		}
		prev = n
		complete := i >= strings.LastIndex(smallTrace, "}")+1
		if !complete && !hasWarning(tr, "truncated") {
			t.Fatalf("prefix %d: no truncation warning: %v", i, tr.Warnings)
		}
		if complete && hasWarning(tr, "truncated") {
			t.Fatalf("complete document reported truncated")
		}
	}
	if prev != 6 {
		t.Errorf("full trace gave %d records, want 6", prev)
	}
}

func TestGzipCutShort(t *testing.T) {
	var buf bytes.Buffer
	zw := kgzip.NewWriter(&buf)
	var doc strings.Builder
	doc.WriteString(`{"traceEvents":[`)
	for i := 0; i < 5000; i++ {
		if i > 0 {
			doc.WriteString(",\n")
		}
		doc.WriteString(`{"ph":"X","cat":"kernel","name":"k` + strconv.Itoa(i%37) + `","pid":0,"tid":7,"ts":` + strconv.Itoa(i*10) + `,"dur":5}`)
	}
	doc.WriteString("]}")
	zw.Write([]byte(doc.String()))
	zw.Close()
	gz := buf.Bytes()
	whole := readBytes(t, gz)
	if len(whole.GPUOps) != 5000 || len(whole.Warnings) != 0 {
		t.Fatalf("whole: %d ops, warnings %v", len(whole.GPUOps), whole.Warnings)
	}
	for _, cut := range []int{len(gz) - 4, len(gz) - 9, len(gz) / 2, len(gz) / 5} {
		tr := readBytes(t, gz[:cut])
		if len(tr.GPUOps) >= 5000 && cut < len(gz)-16 {
			t.Errorf("cut %d: %d ops from a cut stream", cut, len(tr.GPUOps))
		}
		if !hasWarning(tr, "byte ") {
			t.Errorf("cut %d: no warning naming a byte offset: %v", cut, tr.Warnings)
		}
		if cut <= len(gz)/2 && len(tr.GPUOps) == 0 {
			t.Errorf("cut %d: nothing kept", cut)
		}
	}
}

func TestNotATrace(t *testing.T) {
	for _, in := range []string{"", "hello", "42"} {
		if _, err := Read(context.Background(), strings.NewReader(in), "x", Options{}); err == nil {
			t.Errorf("Read(%q) succeeded", in)
		}
	}
	if _, err := ReadFile(context.Background(), "/nonexistent/trace.json", Options{}); err == nil {
		t.Error("ReadFile of a missing file succeeded")
	}
	tr := readBytes(t, []byte(`{"schemaVersion":1}`))
	if !hasWarning(tr, "no traceEvents") {
		t.Errorf("warnings %v", tr.Warnings)
	}
}

func TestSkipOptions(t *testing.T) {
	tr, err := Read(context.Background(), strings.NewReader(smallTrace), "x", Options{SkipFrames: true, SkipCPUOps: true, SkipFlows: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Frames) != 0 || len(tr.CPUOps) != 0 || len(tr.Flows) != 0 || len(tr.GPUOps) != 2 {
		t.Errorf("frames %d cpu %d flows %d ops %d", len(tr.Frames), len(tr.CPUOps), len(tr.Flows), len(tr.GPUOps))
	}
}

func TestContextCancel(t *testing.T) {
	var doc strings.Builder
	doc.WriteString("[")
	for i := 0; i < 10000; i++ {
		doc.WriteString(`{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1,"dur":1},`)
	}
	doc.WriteString("]")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Read(ctx, strings.NewReader(doc.String()), "x", Options{}); err == nil {
		t.Error("cancelled read succeeded")
	}
}

// TestSequentialEqualsPipelined: the two-goroutine pipeline and the sequential path build
// identical traces, warnings included, on a real trace and on a damaged one.
func TestSequentialEqualsPipelined(t *testing.T) {
	inputs := map[string][]byte{"small-cut": []byte(smallTrace[:len(smallTrace)/2])}
	if p := filepath.Join(fixtureDir(), fxDDP); fileExists(p) {
		raw, _ := os.ReadFile(p)
		inputs["ddp.gz"] = raw
		inputs["ddp.gz-cut"] = raw[:len(raw)*2/3]
	}
	for name, data := range inputs {
		a, err1 := Read(context.Background(), bytes.NewReader(data), name, Options{Sequential: true})
		b, err2 := Read(context.Background(), bytes.NewReader(data), name, Options{Pipeline: true})
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: %v / %v", name, err1, err2)
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: sequential and pipelined reads differ (events %d/%d, warnings %v / %v)", name, a.Events, b.Events, a.Warnings, b.Warnings)
		}
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func TestDanglingFlows(t *testing.T) {
	doc := `[
{"ph":"s","id":1,"pid":1,"tid":1,"ts":1,"cat":"ac2g","name":"ac2g"},
{"ph":"s","id":3,"pid":1,"tid":1,"ts":1,"cat":"ac2g","name":"ac2g"},
{"ph":"f","id":3,"pid":0,"tid":7,"ts":2,"cat":"ac2g","name":"ac2g","bp":"e"},
{"ph":"f","id":2,"pid":1,"tid":1,"ts":1,"cat":"ac2g","name":"ac2g","bp":"e"},
{"ph":"f","id":9,"pid":1,"tid":1,"ts":1,"cat":"fwdbwd","name":"fwdbwd","bp":"e"}
]`
	tr := readBytes(t, []byte(doc))
	if len(tr.Flows) != 4 {
		t.Errorf("%d ac2g flows kept, want 4 (fwdbwd is not a launch flow)", len(tr.Flows))
	}
	if tr.Meta["kineto.flow_starts_without_finish"] != "1" || tr.Meta["kineto.flow_finishes_without_start"] != "1" {
		t.Errorf("meta %v", tr.Meta)
	}
	if !hasWarning(tr, "1 flow starts (launches) have no finish") {
		t.Errorf("warnings %v", tr.Warnings)
	}
	ok := readBytes(t, []byte(smallTrace))
	if len(ok.Warnings) != 0 {
		t.Errorf("warnings on a clean trace: %v", ok.Warnings)
	}
	// PyTorch 2.11 draws flows from waits and synchronisations whose GPU side is not
	// recorded: those are not lost records; a launch's flow without a finish still is.
	waits := readBytes(t, []byte(`[
{"ph":"X","cat":"cuda_runtime","name":"cudaStreamWaitEvent","pid":1,"tid":1,"ts":1,"dur":1,"args":{"correlation":4}},
{"ph":"X","cat":"cuda_runtime","name":"cudaDeviceSynchronize","pid":1,"tid":1,"ts":3,"dur":1,"args":{"correlation":5}},
{"ph":"X","cat":"cuda_runtime","name":"cudaDeviceSynchronize","pid":2,"tid":2,"ts":3,"dur":1,"args":{"correlation":5}},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":5,"dur":1,"args":{"correlation":6}},
{"ph":"s","id":4,"pid":1,"tid":1,"ts":1,"cat":"ac2g","name":"ac2g"},
{"ph":"s","id":5,"pid":1,"tid":1,"ts":3,"cat":"ac2g","name":"ac2g"},
{"ph":"s","id":6,"pid":1,"tid":1,"ts":5,"cat":"ac2g","name":"ac2g"}
]`))
	if waits.Meta["kineto.flow_starts_without_finish"] != "1" || !hasWarning(waits, "1 flow starts (launches) have no finish") {
		t.Errorf("waits and a lost launch: meta %v, warnings %v; want the launch alone counted", waits.Meta, waits.Warnings)
	}
}
