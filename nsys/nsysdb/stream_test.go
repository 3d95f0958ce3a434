package nsysdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/sglprof/runner/nsys/nsysgen"
	"github.com/sglprof/runner/reports/trace"
)

// streamCase describes a generated export for the streaming tests. Correlation ids are
// numbered in call order, as CUPTI does.
type streamCase struct {
	version          string
	n                int // launch iterations
	devices, streams int
	memops           bool // copies and memsets, some replayed by graphs
	graphs           bool // every 40th launch a graph replaying three kernels
	driver           bool // driver launches, and runtime calls followed by a driver call with their id
	// shuffle reverses the kernel table in blocks of this many rows (0 keeps start order).
	shuffle int
	// lateCall moves the launch call of the kernel of iteration n/2 to the end of the runtime
	// table.
	lateCall bool
	// behind gives the kernel of iteration 3n/4 the correlation id of iteration 0's launch.
	behind bool
	pids   int // processes (0 means 1); every pid after the first repeats the first one's ids
	// interleave writes the runtime table in call start order, the processes' calls in turn,
	// rather than one process after another.
	interleave bool
}

var streamKernelNames = []string{
	"void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64>, false>(Flash_fwd_params)",
	"ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn",
	"void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, at::native::FillFunctor<float>)",
	"ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
	"void rms_norm_kernel<c10::BFloat16>(c10::BFloat16*, c10::BFloat16 const*, float, int)",
}

// writeStreamExport writes sc's export and returns its path.
func writeStreamExport(t testing.TB, sc streamCase) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "stream.sqlite")
	w, err := nsysgen.Create(path, sc.version)
	if err != nil {
		t.Fatal(err)
	}
	devices, streams, pids := max(sc.devices, 1), max(sc.streams, 1), max(sc.pids, 1)
	for d := 0; d < devices; d++ {
		if d != 1 { // device 1 has no TARGET_INFO_GPU row: its name comes from its ops
			w.AddGPU(nsysgen.GPU{ID: int32(d), Name: fmt.Sprintf("NVIDIA H100 #%d", d)})
		}
	}
	var kernels []nsysgen.Kernel
	var calls []nsysgen.Runtime
	var memops []nsysgen.Memop
	for p := 0; p < pids; p++ {
		pid := int32(4242 + p)
		w.AddProcess(nsysgen.Process{PID: pid, Name: fmt.Sprintf("python3 rank %d", p)})
		corr := int64(100)
		next := func() int64 { corr++; return corr }
		tm := int64(10_000_000) + int64(p)*3
		// Two kernels launched before the capture started: ids below every call's.
		for i := range 2 {
			kernels = append(kernels, nsysgen.Kernel{Start: tm - 9_000 + int64(i)*1_000, End: tm - 8_500 + int64(i)*1_000, Stream: 7,
				Correlation: int64(50 + i), Name: streamKernelNames[i], PID: pid, TID: pid})
		}
		var late *nsysgen.Runtime
		firstLaunch := int64(0)
		for i := 0; i < sc.n; i++ {
			tid := pid
			if i%5 == 4 {
				tid = pid + 1
			}
			dev, stream := int32(i%devices), int32(7+(i/3)%streams)
			name := streamKernelNames[(i*7)%len(streamKernelNames)]
			dur := int64(1_000 + (i*7919)%20_000)
			c := next()
			if i == 0 {
				firstLaunch = c
			}
			kstart := tm + 4_000 + int64(i%3)*500
			switch {
			case sc.graphs && i%40 == 0:
				calls = append(calls, nsysgen.Runtime{Start: tm, End: tm + 3_000, PID: pid, TID: tid, Correlation: c, Name: "cudaGraphLaunch_v10000"})
				for g := range 3 {
					kernels = append(kernels, nsysgen.Kernel{Start: kstart + int64(g)*dur, End: kstart + int64(g+1)*dur, Device: dev, Stream: stream,
						Correlation: c, Name: streamKernelNames[g], GridX: 64, BlockX: 128, PID: pid, TID: tid})
				}
				if sc.memops {
					memops = append(memops, nsysgen.Memop{Start: kstart + 3*dur, End: kstart + 3*dur + 700, Device: dev, Stream: stream,
						Correlation: c, Bytes: 4096, Memset: true, PID: pid})
				}
				tm += 3 * dur
				continue
			case sc.driver && i%13 == 0:
				calls = append(calls, nsysgen.Runtime{Start: tm, End: tm + 2_000, PID: pid, TID: tid, Correlation: c, Name: "cuLaunchKernel", Driver: true})
			default:
				call := nsysgen.Runtime{Start: tm, End: tm + 3_000 + int64(i%4)*100, PID: pid, TID: tid, Correlation: c, Name: "cudaLaunchKernel_v7000"}
				switch {
				case sc.lateCall && i == sc.n/2:
					late = &call
				case i%50 == 25:
					// The call is missing (a launch the profiler lost): the kernel has no launch.
				default:
					calls = append(calls, call)
				}
				if sc.driver && i%17 == 0 {
					// The driver call the runtime call made, with the same id (ReadCapture
					// links the first call).
					calls = append(calls, nsysgen.Runtime{Start: tm + 100, End: tm + 2_900, PID: pid, TID: tid, Correlation: c, Name: "cuLaunchKernel", Driver: true})
				}
			}
			k := nsysgen.Kernel{Start: kstart, End: kstart + dur, Device: dev, Stream: stream, Correlation: c,
				Name: name, GridX: int32(1 + i%200), BlockX: 256, PID: pid, TID: tid}
			if sc.behind && i == 3*sc.n/4 {
				k.Correlation = firstLaunch
			}
			kernels = append(kernels, k)
			if i%31 == 0 {
				// A twin on another stream with the same start and end: seq breaks the tie.
				k.Stream += int32(streams)
				kernels = append(kernels, k)
			}
			calls = append(calls, nsysgen.Runtime{Start: tm + 3_500, End: tm + 3_800, PID: pid, TID: tid, Correlation: next(), Name: "cudaEventRecord_v3020"})
			if sc.memops && i%7 == 0 {
				mc := next()
				calls = append(calls, nsysgen.Runtime{Start: tm + 3_900, End: tm + 4_200, PID: pid, TID: tid, Correlation: mc, Name: "cudaMemcpyAsync_v3020"})
				m := nsysgen.Memop{Start: kstart + dur, End: kstart + dur + 2_000, Device: dev, Stream: stream, Correlation: mc,
					Bytes: int64(i+1) << 12, CopyKind: nsysgen.CopyHtoD, PID: pid}
				if i%14 == 0 {
					m.CopyKind = nsysgen.CopyDtoH
				}
				if i%21 == 0 {
					// Same start and end as the kernel before it: the kernel (lower seq) goes first.
					m.Start, m.End = kstart, kstart+dur
				}
				memops = append(memops, m)
				if sc.driver {
					// The driver call the copy made, with the copy's id: the copy keeps the first.
					calls = append(calls, nsysgen.Runtime{Start: tm + 3_950, End: tm + 4_150, PID: pid, TID: tid, Correlation: mc, Name: "cuMemcpyHtoDAsync_v2", Driver: true})
				}
			}
			if sc.memops && i%11 == 5 {
				mc := next()
				calls = append(calls, nsysgen.Runtime{Start: tm + 4_300, End: tm + 4_400, PID: pid, TID: tid, Correlation: mc, Name: "cudaMemsetAsync_v3020"})
				memops = append(memops, nsysgen.Memop{Start: kstart + dur + 2_500, End: kstart + dur + 2_600, Device: dev, Stream: stream,
					Correlation: mc, Bytes: 512, Memset: true, PID: pid})
			}
			if i%16 == 0 {
				calls = append(calls, nsysgen.Runtime{Start: tm + 4_500, End: tm + 9_000, PID: pid, TID: tid, Correlation: next(), Name: "cudaStreamSynchronize_v3020"})
			}
			tm += 5_000
		}
		if late != nil {
			calls = append(calls, *late)
		}
	}
	// The kernel table in start order, then disturbed as asked.
	slices.SortStableFunc(kernels, func(a, b nsysgen.Kernel) int {
		if a.Start != b.Start {
			return int(a.Start - b.Start)
		}
		return int(a.End - b.End)
	})
	if d := sc.shuffle; d > 1 {
		for i := 0; i < len(kernels); i += d {
			slices.Reverse(kernels[i:min(i+d, len(kernels))])
		}
	}
	if sc.interleave {
		slices.SortStableFunc(calls, func(a, b nsysgen.Runtime) int { return int(a.Start - b.Start) })
	}
	for _, c := range calls {
		w.AddRuntime(c)
	}
	for _, k := range kernels {
		w.AddKernel(k)
	}
	for _, m := range memops {
		w.AddMemop(m)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// streamedOp is a delivered op as the tests compare it: launches and names by their text.
type streamedOp struct {
	Seq    int64
	Op     trace.GPUOp
	Name   string
	Launch string
	// LS is the launch call's start as Each hands it over (-1 where the oracle has no call);
	// describeOp leaves it 0.
	LS int64
	// Scope is the op's NVTX scope as EachScoped hands it over, as "domain:name" ("" for
	// none); describeOp leaves it "".
	Scope string
}

func launchKey(t *trace.Trace, li int32) string {
	if li == trace.NoID {
		return ""
	}
	l := t.Launches[li]
	return fmt.Sprintf("%s graph=%v", t.Name(l.Name), l.Graph)
}

func describeOp(t *trace.Trace, op trace.GPUOp, seq int64) streamedOp {
	s := streamedOp{Seq: seq, Op: op, Name: t.Name(op.Name), Launch: launchKey(t, op.Launch)}
	s.Op.Name, s.Op.Launch = 0, 0
	return s
}

// streamAll opens path for streaming (with limits when not nil) and collects what Each
// delivers.
func streamAll(t *testing.T, path string, opts ReadOptions, limits *streamLimits) (*Capture, []streamedOp, error) {
	t.Helper()
	s, err := OpenStream(context.Background(), path, opts)
	if err != nil {
		return nil, nil, err
	}
	defer s.Close()
	if limits != nil {
		s.limits = *limits
	}
	var ops []streamedOp
	err = s.EachScoped(context.Background(), func(op *trace.GPUOp, seq, ls int64, scope int32) {
		d := describeOp(s.Capture.Trace, *op, seq)
		d.LS = ls
		if scope != trace.NoID {
			name, domain := s.Capture.RangeKey(scope)
			d.Scope = domain + ":" + s.Capture.Trace.Name(name)
		}
		ops = append(ops, d)
	})
	return s.Capture, ops, err
}

var leanOptions = ReadOptions{SummariseAPI: true, SkipKernelInfo: true, OneLaunchPerName: true}

// checkStreamMatchesRead is the equivalence oracle: the ops Each delivers, with their seq,
// are ReadCapture's (lean options) sorted by (Start, End, index), launches compared by name
// and graph flag, and the capture's tables equal ReadCapture's.
func checkStreamMatchesRead(t *testing.T, path string, opts ReadOptions, limits *streamLimits) {
	t.Helper()
	checkStream(t, path, opts, limits, false)
}

// checkStream is checkStreamMatchesRead; mayRefuse accepts ErrNotStreamable from the stream.
func checkStream(t *testing.T, path string, opts ReadOptions, limits *streamLimits, mayRefuse bool) {
	t.Helper()
	ctx := context.Background()
	held, err := ReadCapture(ctx, path, opts)
	if err != nil {
		t.Fatal(err)
	}
	c, got, err := streamAll(t, path, opts, limits)
	if mayRefuse && errors.Is(err, ErrNotStreamable) {
		return
	}
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	ht := held.Trace
	// Every launching call kept, for each op's launch call start.
	fullOpts := opts
	fullOpts.OneLaunchPerName = false
	full, err := ReadCapture(ctx, path, fullOpts)
	if err != nil {
		t.Fatal(err)
	}
	ft := full.Trace
	multi := ht.Meta["correlation_ids"] != ""
	idx := make([]int, len(ht.GPUOps))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		x, y := &ht.GPUOps[a], &ht.GPUOps[b]
		if x.Start != y.Start {
			return int(x.Start - y.Start)
		}
		return int(x.End - y.End)
	})
	want := make([]streamedOp, len(idx))
	scopes := Scopes(ft, nil) // from every launching call's time and thread
	for k, i := range idx {
		want[k] = describeOp(ht, ht.GPUOps[i], int64(i))
		want[k].LS = trace.NoID
		if l := ft.GPUOps[i].Launch; l != trace.NoID {
			want[k].LS = ft.Launches[l].Start
		}
		if a := scopes[i]; a != trace.NoID {
			want[k].Scope = full.Ranges[a].Domain + ":" + ft.Name(ft.Annotations[a].Name)
		}
		if c := &want[k].Op.Correlation; multi && *c != trace.NoID {
			*c &= 0xFFFFFFFF // the stream delivers kernels' ids as stored (Each says why)
		}
	}
	if d := fastDiff(want, got); d != "" {
		t.Errorf("delivered ops (-ReadCapture sorted +stream):\n%s", d)
	}
	if held.OneLaunchPerName {
		// The held read's launch starts, per op, are the full read's as well.
		if len(held.LaunchStarts) != len(ht.GPUOps) {
			t.Fatalf("held LaunchStarts: %d for %d ops", len(held.LaunchStarts), len(ht.GPUOps))
		}
		for i := range ht.GPUOps {
			w := int64(trace.NoID)
			if l := ft.GPUOps[i].Launch; l != trace.NoID {
				w = ft.Launches[l].Start
			}
			if held.LaunchStarts[i] != w {
				t.Fatalf("held LaunchStarts[%d] = %d, want %d", i, held.LaunchStarts[i], w)
			}
		}
	}
	st := c.Trace
	kN := len(ht.GPUOps) - len(held.Memops)
	// The memory ops the capture holds: ReadCapture's, indexed from 0, launches included.
	var wantMem, gotMem []streamedOp
	for i, m := range held.Memops {
		wantMem = append(wantMem, describeOp(ht, ht.GPUOps[m.Op], int64(i)))
		m.Op -= int32(kN)
		if m != c.Memops[i] {
			t.Errorf("memop info %d: %+v, ReadCapture %+v", i, c.Memops[i], m)
		}
	}
	for i, m := range c.Memops {
		gotMem = append(gotMem, describeOp(st, st.GPUOps[m.Op], int64(i)))
	}
	if d := fastDiff(wantMem, gotMem); d != "" {
		t.Errorf("capture memops (-ReadCapture +stream):\n%s", d)
	}
	type stat struct {
		Name                  string
		Calls                 int
		TotalNS, MinNS, MaxNS int64
	}
	stats := func(c *Capture) []stat {
		var out []stat
		for _, s := range c.APIStats {
			out = append(out, stat{c.Trace.Name(s.Name), s.Calls, s.TotalNS, s.MinNS, s.MaxNS})
		}
		return out
	}
	if d := fastDiff(stats(held), stats(c)); d != "" {
		t.Errorf("API stats (-ReadCapture +stream):\n%s", d)
	}
	raw := func(c *Capture) map[string]string {
		out := map[string]string{}
		for k, v := range c.APIRaw {
			out[c.Trace.Name(k)] = v
		}
		return out
	}
	if d := fastDiff(raw(held), raw(c)); d != "" {
		t.Errorf("API raw names (-ReadCapture +stream):\n%s", d)
	}
	if d := fastDiff(Summaries(held, 0), Summaries(c, 0)); d != "" {
		t.Errorf("tables (-ReadCapture +stream):\n%s", d)
	}
	for _, x := range []struct {
		what      string
		want, got any
	}{
		{"APICalls", held.APICalls, c.APICalls},
		{"NVTXEvents", held.NVTXEvents, c.NVTXEvents},
		{"Devices", ht.Devices, st.Devices},
		{"Processes", ht.Processes, st.Processes},
		{"Threads", held.Threads, c.Threads},
		{"Warnings", ht.Warnings, st.Warnings},
		{"Meta", ht.Meta, st.Meta},
		{"Events", ht.Events, st.Events},
		{"Window", [2]int64{held.WindowStart, held.WindowEnd}, [2]int64{c.WindowStart, c.WindowEnd}},
		{"Session", held.SessionStartUnixNs, c.SessionStartUnixNs},
		{"Schema", [2]string{held.SchemaText, held.ProductVersion}, [2]string{c.SchemaText, c.ProductVersion}},
		{"Tables", held.Tables, c.Tables},
	} {
		if d := fastDiff(x.want, x.got); d != "" {
			t.Errorf("%s (-ReadCapture +stream):\n%s", x.what, d)
		}
	}
	// One launch per name, graph flag and driver flag; Driver parallel to Launches.
	type key struct {
		name          trace.NameID
		graph, driver bool
	}
	seen := map[key]bool{}
	if len(c.Driver) != len(st.Launches) {
		t.Errorf("%d driver flags for %d launches", len(c.Driver), len(st.Launches))
	}
	for i, l := range st.Launches {
		k := key{l.Name, l.Graph, i < len(c.Driver) && c.Driver[i]}
		if seen[k] {
			t.Errorf("two launches of %q graph=%v", st.Name(l.Name), l.Graph)
		}
		seen[k] = true
	}
	if len(st.GPUOps) != len(held.Memops) || len(c.Kernels) != 0 {
		t.Errorf("the capture holds %d ops (want the %d memory ops), %d kernel infos", len(st.GPUOps), len(held.Memops), len(c.Kernels))
	}
	// The stream holds the ranges opts.KeepRange keeps (none without it), with their domains.
	anns := func(t *trace.Trace) []string {
		var out []string
		for _, a := range t.Annotations {
			if t == ht && (opts.KeepRange == nil || !opts.KeepRange(t.Name(a.Name))) {
				continue
			}
			out = append(out, fmt.Sprintf("%s %d-%d %d/%d gpu=%v dev=%d", t.Name(a.Name), a.Start, a.End, a.PID, a.TID, a.GPU, a.Device))
		}
		return out
	}
	if d := fastDiff(anns(ht), anns(st)); d != "" {
		t.Errorf("NVTX ranges (-ReadCapture +stream):\n%s", d)
	}
	var keptRanges []RangeInfo
	for i, a := range ht.Annotations {
		if opts.KeepRange != nil && opts.KeepRange(ht.Name(a.Name)) {
			keptRanges = append(keptRanges, held.Ranges[i])
		}
	}
	if d := fastDiff(keptRanges, c.Ranges, cmpopts.EquateEmpty()); d != "" {
		t.Errorf("NVTX range domains (-ReadCapture +stream):\n%s", d)
	}
}

// TestStreamMatchesRead: for generated exports of every schema, with and without memory ops,
// graphs, driver calls, several devices and streams, kernels slightly out of start order, and
// each kernel name style, the stream delivers ReadCapture's ops in time order.
func TestStreamMatchesRead(t *testing.T) {
	cases := map[string]streamCase{
		"plain-3.28":        {version: "3.28.1", n: 300},
		"all-3.28":          {version: "3.28.1", n: 600, devices: 3, streams: 3, memops: true, graphs: true, driver: true},
		"all-3.13":          {version: "3.13.2", n: 400, devices: 2, streams: 2, memops: true, graphs: true, driver: true},
		"all-2.9":           {version: "2.9.1", n: 400, devices: 2, streams: 4, memops: true, graphs: true, driver: true},
		"shuffled":          {version: "3.28.1", n: 500, devices: 2, streams: 3, memops: true, graphs: true, driver: true, shuffle: 7},
		"graphs-no-memops":  {version: "3.28.1", n: 500, streams: 2, graphs: true},
		"memops-no-graphs":  {version: "3.28.1", n: 500, streams: 2, memops: true},
		"one-stream-driver": {version: "3.28.1", n: 300, driver: true},
		// Processes that repeat each other's correlation ids, the second's calls all after
		// the first's in the runtime table: one join per process.
		"two-processes":   {version: "3.28.1", n: 200, pids: 2},
		"three-processes": {version: "3.28.1", n: 300, devices: 2, streams: 2, memops: true, graphs: true, driver: true, pids: 3},
	}
	for name, sc := range cases {
		path := writeStreamExport(t, sc)
		for _, style := range []NameStyle{Demangled, Short, Mangled} {
			t.Run(fmt.Sprint(name, "/", style), func(t *testing.T) {
				o := leanOptions
				o.KernelNames = style
				checkStreamMatchesRead(t, path, o, nil)
			})
		}
	}
}

// TestStreamSmallWindows runs the equivalence with windows far smaller than the exports, so
// that every ring slot is reused, the reorder window delivers while the scan goes on, and the
// join pulls many batches.
func TestStreamSmallWindows(t *testing.T) {
	lim := streamLimits{reorder: 16, ring: 256, back: 100, slack: 8, batch: 5, outliers: 64, judged: 4, joins: 64, kbatch: 3}
	for name, sc := range map[string]streamCase{
		"all":      {version: "3.28.1", n: 800, devices: 2, streams: 3, memops: true, graphs: true, driver: true},
		"shuffled": {version: "3.28.1", n: 800, devices: 2, streams: 3, memops: true, graphs: true, driver: true, shuffle: 5},
		"two-pids": {version: "3.28.1", n: 40, devices: 2, streams: 3, memops: true, graphs: true, driver: true, pids: 2},
	} {
		path := writeStreamExport(t, sc)
		// The kernel table decoded on its own goroutine (where two CPUs may be used) and
		// on the consumer's.
		for _, oneGoroutine := range []bool{false, true} {
			t.Run(fmt.Sprint(name, "/one-goroutine=", oneGoroutine), func(t *testing.T) {
				o := leanOptions
				o.noParallel = oneGoroutine
				checkStreamMatchesRead(t, path, o, &lim)
			})
		}
	}
}

// TestStreamSecondIDSequence: the exports of the other tests give copies ids after every
// kernel's (a second id sequence in the runtime table); those calls are held as outliers and
// the stream still matches.
func TestStreamSecondIDSequence(t *testing.T) {
	path := largeExportNVTX(t, 3000, 1, false)
	checkStreamMatchesRead(t, path, leanOptions, nil)
	// A ring smaller than the gap between the sequences: the copies' calls are outliers.
	lim := defaultLimits()
	lim.ring, lim.back = 1024, 512
	checkStreamMatchesRead(t, path, leanOptions, &lim)
	// Several processes, their calls interleaved in time in the runtime table.
	checkStreamMatchesRead(t, largeExportNVTX(t, 2000, 2, false), leanOptions, nil)
	// One call per hand-over: every kernel misses before its call comes, also those whose
	// near higher ids are the copies' (handed over long before).
	lim = defaultLimits()
	lim.batch = 1
	checkStreamMatchesRead(t, path, leanOptions, &lim)
	lim.ring, lim.back = 1024, 512
	// With room for fewer outliers than there are such calls, the pass gives up.
	lim.outliers = 100
	_, _, err := streamAll(t, path, leanOptions, &lim)
	if !errors.Is(err, ErrNotStreamable) || !strings.Contains(err.Error(), "above the kernels'") {
		t.Errorf("err = %v, want ErrNotStreamable about ids above the kernels'", err)
	}
}

// wantNotStreamable checks err is ErrNotStreamable with a reason containing why.
func wantNotStreamable(t *testing.T, err error, why string) {
	t.Helper()
	if !errors.Is(err, ErrNotStreamable) {
		t.Fatalf("err = %v, want ErrNotStreamable", err)
	}
	if !strings.Contains(err.Error(), why) {
		t.Errorf("err = %v, want the reason to mention %q", err, why)
	}
}

// TestStreamNotStreamable: each way an export can break the stream's contract is reported as
// ErrNotStreamable, up front where it can be known, else from Each; ReadCapture still reads
// every one of these exports.
func TestStreamNotStreamable(t *testing.T) {
	small := streamLimits{reorder: 8, ring: 256, back: 100, slack: 8, batch: 16, outliers: 64, judged: 64, joins: 64, kbatch: 4}
	// Decoded kernel rows handed over four at a time: the pass stops while the decoding
	// goroutine has hand-overs queued, and must stop it.
	smallBatches := defaultLimits()
	smallBatches.kbatch = 4
	twoJoins := defaultLimits()
	twoJoins.joins = 2
	// A join that tolerates the disorder, so that the reorder window is what gives up.
	smallReorder := streamLimits{reorder: 8, ring: 4096, back: 2000, slack: 1024, batch: 16, outliers: 64, judged: 64, joins: 64, kbatch: 4}
	rowGap := writeStreamExport(t, streamCase{version: "3.28.1", n: 200})
	mutate(t, rowGap, "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid = 17")
	realStart := writeStreamExport(t, streamCase{version: "3.28.1", n: 200})
	mutate(t, realStart, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + 0.5 WHERE rowid = 150")
	// A rowid gap just before a value the direct reader refuses, in one hand-over of decoded
	// rows: the gap, met first on one goroutine, is what the pass reports.
	gapThenReal := writeStreamExport(t, streamCase{version: "3.28.1", n: 200})
	mutate(t, gapThenReal, "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid = 146",
		"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + 0.5 WHERE rowid = 148")
	realName := writeStreamExport(t, streamCase{version: "3.28.1", n: 200})
	mutate(t, realName, "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = 1.5 WHERE rowid = 400")
	for _, tc := range []struct {
		name   string
		path   string
		limits *streamLimits
		open   bool // refused by OpenStream (else by Each)
		why    string
		// unreadable: a value SQLite's conversion to an integer refuses too, so ReadCapture
		// fails on this export as well.
		unreadable bool
	}{
		// Each range ends where the next starts, at a call: the call is inside two ranges
		// that do not nest.
		{"nvtx-not-nested", largeExport(t, 500, 1), nil, false, "overlap without nesting", false},
		{"more-processes-than-joins", writeStreamExport(t, streamCase{version: "3.28.1", n: 100, pids: 3}), &twoJoins, false, "more than 2 processes", false},
		{"too-far-out-of-order", writeStreamExport(t, streamCase{version: "3.28.1", n: 300, shuffle: 40}), &smallReorder, false, "reorder window", false},
		{"id-far-behind", writeStreamExport(t, streamCase{version: "3.28.1", n: 300, behind: true}), &small, false, "out of the join window", false},
		{"call-after-its-kernel", writeStreamExport(t, streamCase{version: "3.28.1", n: 300, lateCall: true}), &small, false, "delivered without a launch", false},
		{"rowid-gap", rowGap, nil, false, "rowid", false},
		{"rowid-gap-small-batches", rowGap, &smallBatches, false, "rowid", false},
		{"real-in-kernel-table", realStart, nil, false, "not an integer", true},
		{"real-in-kernel-table-small-batches", realStart, &smallBatches, false, "not an integer", true},
		{"gap-then-real-small-batches", gapThenReal, &smallBatches, false, "rowid 147 where 146", true},
		{"gap-then-real", gapThenReal, nil, false, "rowid 147 where 146", true},
		{"real-in-runtime-table", realName, nil, false, "not an integer", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := OpenStream(context.Background(), tc.path, leanOptions)
			if tc.open {
				wantNotStreamable(t, err, tc.why)
			} else {
				if err != nil {
					t.Fatalf("OpenStream: %v", err)
				}
				if tc.limits != nil {
					s.limits = *tc.limits
				}
				err = s.Each(context.Background(), func(*trace.GPUOp, int64, int64) {})
				wantNotStreamable(t, err, tc.why)
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			}
			if _, err := ReadCapture(context.Background(), tc.path, leanOptions); (err != nil) != tc.unreadable {
				t.Errorf("ReadCapture of the same export: %v", err)
			}
		})
	}
	// The same out-of-order and late-call exports stream with the default windows.
	for _, sc := range []streamCase{{version: "3.28.1", n: 300, shuffle: 40}, {version: "3.28.1", n: 300, lateCall: true}} {
		checkStreamMatchesRead(t, writeStreamExport(t, sc), leanOptions, nil)
	}
}

// TestStreamDirectReaderDeclines: a journal beside the export (a writer was active) means only
// SQLite may read it, and the stream is refused up front.
func TestStreamDirectReaderDeclines(t *testing.T) {
	path := writeStreamExport(t, streamCase{version: "3.28.1", n: 50})
	if err := os.WriteFile(path+"-journal", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := OpenStream(context.Background(), path, leanOptions)
	wantNotStreamable(t, err, "direct file reader")
}

// TestStreamPipitFixture: the real export, with its NVTX ranges, streams as ReadCapture reads
// it: each op's scope is Scopes', each range's GPU time gpuTimeInside's.
func TestStreamPipitFixture(t *testing.T) {
	path := fixture(t, pipit)
	checkStreamMatchesRead(t, path, leanOptions, nil)
	c, err := ReadCapture(context.Background(), path, leanOptions)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Trace.Annotations) == 0 {
		t.Fatal("the fixture has no NVTX range any more: this test checks nothing")
	}
}

// TestStreamNVTXScopes: nested NVTX ranges (layers inside steps, on one of the two threads
// that launch, a range touching the next one between calls, ranges of a second process)
// stream: every op's scope is Scopes' on the held trace and the NVTX table (GPU time inside
// each range) is NVTXSummary's, with the default windows and with small ones.
func TestStreamNVTXScopes(t *testing.T) {
	for _, pids := range []int{1, 2} {
		path := largeExportNVTX(t, 1000, pids, true)
		// The layers no longer touch at a call, and steps hold five of them each.
		mutate(t, path, `UPDATE NVTX_EVENTS SET "end" = "end" - 1 WHERE "end" IS NOT NULL`,
			`INSERT INTO NVTX_EVENTS (start, "end", eventType, text, globalTid, domainId) SELECT start - 1, start - 1 + 5*25*8000, 59, 'step', globalTid, 0 FROM NVTX_EVENTS WHERE "end" IS NOT NULL AND rowid % 5 = 1`)
		checkStreamMatchesRead(t, path, leanOptions, nil)
		keep := leanOptions
		keep.KeepRange = func(label string) bool { return label == "step" } // held as annotations too
		checkStreamMatchesRead(t, path, keep, nil)
		// The filter is asked once per distinct label, not once per range.
		asked := map[string]int{}
		keep.KeepRange = func(label string) bool { asked[label]++; return label == "step" }
		s, err := OpenStream(context.Background(), path, keep)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		if len(asked) < 2 {
			t.Fatalf("KeepRange asked about %v: the export does not repeat names", asked)
		}
		for label, n := range asked {
			if n != 1 {
				t.Errorf("KeepRange asked about %q %d times, want once", label, n)
			}
		}
		lim := defaultLimits()
		lim.batch = 1 // a kernel asks for its call before the scan hands it over
		checkStreamMatchesRead(t, path, leanOptions, &lim)
		c, _, err := streamAll(t, path, leanOptions, nil)
		if err != nil {
			t.Fatal(err)
		}
		var inside int64
		for _, g := range c.nvtx.inside {
			inside += g
		}
		if len(c.nvtx.ranges) < 40 || inside == 0 {
			t.Fatalf("%d ranges, %d ns inside them: the export does not exercise the scopes", len(c.nvtx.ranges), inside)
		}
	}
}

// TestStreamNVTXLimits: an export with more NVTX ranges than a pass holds, or ranges nested
// deeper than its stack, is refused, and ReadCapture reads it.
func TestStreamNVTXLimits(t *testing.T) {
	path := largeExportNVTX(t, 1000, 1, true)
	mutate(t, path, `UPDATE NVTX_EVENTS SET "end" = "end" - 1 WHERE "end" IS NOT NULL`)
	lim := defaultLimits()
	lim.ranges = 10
	_, err := openStream(context.Background(), path, leanOptions, lim)
	wantNotStreamable(t, err, "more than 10 NVTX ranges")
	// Every range inside the one before: 40 deep.
	mutate(t, path, `UPDATE NVTX_EVENTS SET "end" = 100000000 - rowid WHERE "end" IS NOT NULL`)
	s, err := OpenStream(context.Background(), path, leanOptions)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.limits.depth = 8
	err = s.Each(context.Background(), func(*trace.GPUOp, int64, int64) {})
	wantNotStreamable(t, err, "more than 8 NVTX ranges nested")
	checkStreamMatchesRead(t, path, leanOptions, nil) // with the default depth it streams
}

// TestStreamPipitWithoutNVTX: the real export with its NVTX table dropped streams as
// ReadCapture reads it (runtime calls that repeat their correlation id under a second name,
// copies, a schema 2.9.1 layout).
func TestStreamPipitWithoutNVTX(t *testing.T) {
	src := fixture(t, pipit)
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "pipit.sqlite")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	mutate(t, path, "DROP TABLE NVTX_EVENTS")
	checkStreamMatchesRead(t, path, leanOptions, nil)
}

// TestStreamReadErrors: inputs ReadCapture refuses are refused by OpenStream with the same
// error.
func TestStreamReadErrors(t *testing.T) {
	dir := t.TempDir()
	notDB := filepath.Join(dir, "report.nsys-rep")
	if err := os.WriteFile(notDB, []byte("not a database at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	noKernels := filepath.Join(dir, "nokernels.sqlite")
	if err := nsysgen.Write(noKernels, nsysgen.Export{Runtime: []nsysgen.Runtime{{Start: 1, End: 2, PID: 1, TID: 1, Correlation: 1, Name: "cudaMalloc_v3020"}}}); err != nil {
		t.Fatal(err)
	}
	empty := writeStreamExport(t, streamCase{version: "3.28.1", n: 10})
	mutate(t, empty, "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
	for _, path := range []string{notDB, noKernels, empty, filepath.Join(dir, "missing.sqlite")} {
		_, want := ReadCapture(context.Background(), path, leanOptions)
		_, got := OpenStream(context.Background(), path, leanOptions)
		if want == nil || got == nil || want.Error() != got.Error() {
			t.Errorf("%s: OpenStream error %v, ReadCapture's %v", filepath.Base(path), got, want)
		}
		if errors.Is(got, ErrNotStreamable) {
			t.Errorf("%s: %v is not a reason to read the export again", filepath.Base(path), got)
		}
	}
	// With AllowNoKernels ReadCapture reads such an export, so the stream hands it over.
	o := leanOptions
	o.AllowNoKernels = true
	_, err := OpenStream(context.Background(), noKernels, o)
	if !errors.Is(err, ErrNotStreamable) || !errors.Is(err, ErrNoKernels) {
		t.Errorf("AllowNoKernels: err = %v, want ErrNotStreamable and ErrNoKernels", err)
	}
}

// TestStreamNoRuntimeTable: without a runtime table every op has no launch, as in ReadCapture.
func TestStreamNoRuntimeTable(t *testing.T) {
	path := writeStreamExport(t, streamCase{version: "3.28.1", n: 100, memops: true})
	mutate(t, path, "DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME")
	checkStreamMatchesRead(t, path, leanOptions, nil)
}

// TestStreamWindowFromEvents: without ANALYSIS_DETAILS the window spans the events, the
// streamed kernels included (and no launch kept once per name counts as a call at time 0).
func TestStreamWindowFromEvents(t *testing.T) {
	path := writeStreamExport(t, streamCase{version: "3.28.1", n: 200, memops: true, driver: true})
	mutate(t, path, "DROP TABLE ANALYSIS_DETAILS")
	checkStreamMatchesRead(t, path, leanOptions, nil)
	c, err := ReadCapture(context.Background(), path, leanOptions)
	if err != nil {
		t.Fatal(err)
	}
	// The first event is a kernel launched before the capture (10 ms - 9 µs).
	if c.WindowStart != 9_991_000 || c.WindowEnd <= c.WindowStart {
		t.Errorf("window %d..%d", c.WindowStart, c.WindowEnd)
	}
}

// TestStreamEachOnceAndCanceled: a second Each is refused; a cancelled context ends the pass
// with the context's error, the runtime scan stopped.
func TestStreamEachOnceAndCanceled(t *testing.T) {
	path := writeStreamExport(t, streamCase{version: "3.28.1", n: 3000, memops: true})
	s, err := OpenStream(context.Background(), path, leanOptions)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	err = s.Each(ctx, func(*trace.GPUOp, int64, int64) {
		if n++; n == 10 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("canceled pass: err = %v", err)
	}
	if err := s.Each(context.Background(), func(*trace.GPUOp, int64, int64) {}); err == nil || errors.Is(err, ErrNotStreamable) {
		t.Errorf("second Each: err = %v, want a plain error", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestStreamIDGap: a kernel without a launch call right before the runtime ids jump further
// than the join ring reaches (calls far ahead of the kernels) is judged once enough of those
// calls have come, instead of holding them all.
func TestStreamIDGap(t *testing.T) {
	var e nsysgen.Export
	tm := int64(1_000_000)
	add := func(id int64, withCall bool) {
		if withCall {
			e.Runtime = append(e.Runtime, nsysgen.Runtime{Start: tm, End: tm + 500, PID: 7, TID: 7, Correlation: id, Name: "cudaLaunchKernel_v7000"})
		}
		e.Kernels = append(e.Kernels, nsysgen.Kernel{Start: tm + 1_000, End: tm + 2_000, Stream: 7, Correlation: id, Name: "k", PID: 7})
		tm += 3_000
	}
	for id := int64(101); id <= 200; id++ {
		add(id, id != 200)
	}
	for id := int64(10_000); id < 10_300; id++ {
		add(id, true)
	}
	path := filepath.Join(t.TempDir(), "gap.sqlite")
	if err := nsysgen.Write(path, e); err != nil {
		t.Fatal(err)
	}
	lim := streamLimits{reorder: 4, ring: 256, back: 100, slack: 8, batch: 3, outliers: 64, judged: 4, joins: 64}
	checkStreamMatchesRead(t, path, leanOptions, &lim)
}

// fuzzStreamExport turns data into a small export whose kernel table is out of start order
// and whose runtime table is out of id order by what data says: launches (some lost, some
// repeated under a driver name, some graphs replaying several kernels and a memset), copies,
// synchronisations, swapped calls and kernels reusing an older id.
func fuzzStreamExport(data []byte) nsysgen.Export {
	e := nsysgen.Export{Version: "3.28.1", GPUs: []nsysgen.GPU{{ID: 0, Name: "GPU 0"}}}
	names := []string{"cudaLaunchKernel_v7000", "cuLaunchKernel", "cudaGraphLaunch_v10000", "cudaLaunchKernel"}
	id, tm := int64(10), int64(1_000_000)
	call := func(id int64, name string) {
		e.Runtime = append(e.Runtime, nsysgen.Runtime{Start: tm, End: tm + 100, PID: 9, TID: 9, Correlation: id, Name: name, Driver: IsDriverAPI(name)})
	}
	kernel := func(id int64, b, c, d byte) {
		e.Kernels = append(e.Kernels, nsysgen.Kernel{Start: tm + int64(d%16)*200, End: tm + int64(d%16)*200 + int64(c%4)*300,
			Device: int32(d % 2), Stream: int32(b % 3), Correlation: id, Name: streamKernelNames[int(b)%len(streamKernelNames)], PID: 9})
	}
	for i := 0; i+3 < len(data) && i < 4*300; i += 4 {
		a, b, c, d := data[i], data[i+1], data[i+2], data[i+3]
		switch a % 8 {
		case 0, 1, 2, 3:
			id += 1 + int64(b%3)
			name := names[c%4]
			if c%11 != 0 {
				call(id, name)
			}
			if c%7 == 0 {
				call(id, "cuLaunchKernelEx")
			}
			n := 1
			if IsGraphLaunch(name) {
				n += int(d % 3)
				if c%2 == 0 {
					e.Memops = append(e.Memops, nsysgen.Memop{Start: tm + 50, End: tm + 90, Stream: int32(b % 3), Correlation: id, Bytes: 64, Memset: true, PID: 9})
				}
			}
			for range n {
				kernel(id, b, c, d)
				d += 3
			}
		case 4:
			id++
			call(id, "cudaMemcpyAsync_v3020")
			e.Memops = append(e.Memops, nsysgen.Memop{Start: tm + int64(d%16)*150, End: tm + int64(d%16)*150 + int64(c%3)*100, Stream: int32(b % 3),
				Correlation: id, Bytes: int64(b) << 8, CopyKind: int32(1 + c%3), PID: 9})
		case 5:
			id++
			call(id, "cudaStreamSynchronize_v3020")
		case 6:
			if n := len(e.Runtime); n >= 2 {
				e.Runtime[n-1], e.Runtime[n-2] = e.Runtime[n-2], e.Runtime[n-1]
			}
		case 7:
			kernel(max(1, id-int64(b)), b, c, d)
		}
		tm += 500
	}
	if len(e.Kernels) == 0 {
		kernel(1, 0, 1, 0)
	}
	if len(data) > 0 && data[0]&0x80 != 0 {
		// A second process with the same correlation ids, 7 ns later: each table interleaves
		// the two processes' rows by start, each process's rows in their own order.
		e.Runtime = mergeByStart(e.Runtime, func(r nsysgen.Runtime) nsysgen.Runtime {
			r.PID, r.TID, r.Start, r.End = 10, 10, r.Start+7, r.End+7
			return r
		},
			func(r nsysgen.Runtime) int64 { return r.Start })
		e.Kernels = mergeByStart(e.Kernels, func(k nsysgen.Kernel) nsysgen.Kernel { k.PID, k.Start, k.End = 10, k.Start+7, k.End+7; return k },
			func(k nsysgen.Kernel) int64 { return k.Start })
		e.Memops = mergeByStart(e.Memops, func(m nsysgen.Memop) nsysgen.Memop { m.PID, m.Start, m.End = 10, m.Start+7, m.End+7; return m },
			func(m nsysgen.Memop) int64 { return m.Start })
	}
	if len(data) > 0 && data[0]&0x40 != 0 {
		// NVTX ranges: one around everything, then ranges the bytes place (nested, touching or
		// crossing; bounds on the calls' 500 ns grid or between), on the launching thread of
		// each process, some in a named domain.
		pids := []int32{9}
		if data[0]&0x80 != 0 {
			pids = append(pids, 10)
		}
		for _, pid := range pids {
			outer := nsysgen.NVTX{Start: 0, End: tm + 1_000, PID: pid, TID: pid, Text: "DenoisingStage"}
			var inner []nsysgen.NVTX
			for i := 1; i+2 < len(data) && i < 3*40; i += 3 {
				start := 1_000_000 + int64(data[i])*250
				n := nsysgen.NVTX{Start: start, End: start + int64(data[i+1]%64)*250 + int64(data[i+2]%2)*100, PID: pid, TID: pid,
					Text: []string{"denoising_step_1", "layers.0", "layers.1", "attn"}[data[i+2]%4]}
				if data[i+2]&0x10 != 0 {
					n.Domain = "sgl"
				}
				inner = append(inner, n)
				outer.End = max(outer.End, n.End+1)
			}
			e.NVTX = append(append(e.NVTX, outer), inner...)
		}
	}
	return e
}

// mergeByStart interleaves rows with the rows second makes of them, by start, keeping the
// order of each sequence (which need not be sorted).
func mergeByStart[T any](rows []T, second func(T) T, start func(T) int64) []T {
	out := make([]T, 0, 2*len(rows))
	i, j := 0, 0
	for i < len(rows) || j < len(rows) {
		if j == len(rows) || i < len(rows) && start(rows[i]) <= start(second(rows[j])) {
			out = append(out, rows[i])
			i++
		} else {
			out = append(out, second(rows[j]))
			j++
		}
	}
	return out
}

// FuzzStream: for any export fuzzStreamExport makes, the stream with the default windows
// delivers ReadCapture's ops (the export is far smaller than every window), and with the
// small windows data picks it delivers them too or says ErrNotStreamable, never anything else.
func FuzzStream(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 1, 2, 3, 4, 4, 5, 6, 7, 5, 0, 0, 0}, byte(4), byte(2))
	f.Add([]byte{2, 0, 2, 2, 2, 1, 0, 1, 6, 0, 0, 0, 0, 0, 1, 9, 7, 3, 1, 1, 3, 2, 22, 15, 4, 1, 2, 3}, byte(1), byte(0))
	f.Add([]byte("a graph, a copy and a lost launch: 0123456789abcdefghijklmnop"), byte(3), byte(1))
	f.Add([]byte{0x80, 1, 2, 3, 1, 2, 3, 4, 4, 5, 6, 7, 5, 0, 0, 0, 2, 0, 2, 2, 6, 0, 0, 0}, byte(4), byte(2))                                                                                             // two processes
	f.Add([]byte{0x40, 0x12, 0x2, 0x5, 0x13, 0xd, 0x11, 0x13, 0x12, 0x14, 0x8, 0x11, 0x2, 0xe, 0x8, 0x3, 0x7, 0x5, 0x2, 0x9, 0xf, 0x14, 0x4, 0xd, 0x6, 0x4, 0x6, 0x7, 0xc, 0xe, 0x17}, byte(4), byte(2))   // nested NVTX ranges
	f.Add([]byte{0xc0, 0xc, 0x5, 0xb, 0x16, 0x6, 0x1, 0xb, 0x4, 0x8, 0xd, 0x11, 0x6, 0xf, 0x1, 0x10, 0x17, 0x0, 0x6, 0x11, 0x8, 0x3, 0x6, 0x1, 0xe, 0x17, 0x12, 0x16, 0x14, 0x14, 0x11}, byte(2), byte(1)) // and two processes
	f.Add([]byte{0x40, 0, 40, 0, 2, 8, 1, 3, 2, 2, 0, 1, 22, 12, 4, 17, 4, 6, 1, 1, 3, 5, 5, 7, 6, 0, 0, 0}, byte(4), byte(2))                                                                             // ranges that cross at a call
	f.Fuzz(func(t *testing.T, data []byte, reorder, ring byte) {
		path := filepath.Join(t.TempDir(), "fuzz.sqlite")
		if err := nsysgen.Write(path, fuzzStreamExport(data)); err != nil {
			t.Fatal(err)
		}
		// Ranges the bytes place may overlap without nesting around a call: such an export
		// is refused (it is then read whole).
		checkStream(t, path, leanOptions, nil, len(data) > 0 && data[0]&0x40 != 0)
		size := 16 << (ring % 4)
		lim := streamLimits{reorder: 1 + int(reorder%32), ring: size, back: int64(size / 2), slack: 1 + int64(ring%8),
			batch: 1 + int(reorder%7), outliers: 4, judged: 2, joins: 64}
		checkStream(t, path, leanOptions, &lim, true)
	})
}

// TestStreamNVTXWithoutRanges: NVTX marks and ranges still open at the end of the capture are
// not ranges: such an export streams, its NVTX events counted as ReadCapture counts them.
func TestStreamNVTXWithoutRanges(t *testing.T) {
	path := largeExportNVTX(t, 500, 1, true)
	mutate(t, path, "UPDATE NVTX_EVENTS SET eventType = 34 WHERE rowid % 2 = 0", "UPDATE NVTX_EVENTS SET \"end\" = NULL WHERE rowid % 2 = 1")
	checkStreamMatchesRead(t, path, leanOptions, nil)
	c, err := ReadCapture(context.Background(), path, leanOptions)
	if err != nil {
		t.Fatal(err)
	}
	if c.NVTXEvents == 0 || len(c.Trace.Annotations) != 0 {
		t.Errorf("%d NVTX events, %d ranges: the test export should have events and no range", c.NVTXEvents, len(c.Trace.Annotations))
	}
}

// TestStreamNullAndOddIDs: kernels and copies without a correlation id, or with -1 (NoID as
// stored), have no launch, as in ReadCapture, even when a call carries -1.
func TestStreamNullAndOddIDs(t *testing.T) {
	path := writeStreamExport(t, streamCase{version: "3.28.1", n: 400, memops: true, graphs: true, driver: true})
	mutate(t, path,
		"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = NULL WHERE rowid % 7 = 0",
		"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = -1 WHERE rowid % 11 = 0",
		"UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET correlationId = NULL WHERE rowid % 3 = 0",
		"UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = -1 WHERE rowid = 3",
		"UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = NULL WHERE rowid % 5 = 0")
	checkStreamMatchesRead(t, path, leanOptions, nil)
	lim := streamLimits{reorder: 16, ring: 256, back: 100, slack: 8, batch: 5, outliers: 64, judged: 4, joins: 64}
	checkStreamMatchesRead(t, path, leanOptions, &lim)
}

// TestStreamNVTXOddValues: the NVTX table of a streamed export, read ahead on a goroutine of its
// own (more rows than one hand-over) or on one, converts an integer or a blob text as
// database/sql does, and a value the direct reader refuses, found after rows were taken, sends
// the table through SQLite, those rows dropped: the stream still matches ReadCapture.
func TestStreamNVTXOddValues(t *testing.T) {
	defer func(n int) { nvtxBatch = n }(nvtxBatch)
	nvtxBatch = 16
	path := largeExportNVTX(t, 1000, 1, true)
	mutate(t, path, `UPDATE NVTX_EVENTS SET "end" = "end" - 1 WHERE "end" IS NOT NULL`, // nested, not touching
		"UPDATE NVTX_EVENTS SET text = 42 WHERE rowid = 1", "UPDATE NVTX_EVENTS SET text = CAST('blob' AS BLOB) WHERE rowid = 4")
	for _, real := range []bool{false, true} {
		if real {
			// A blob in an integer column: the direct reader refuses it, SQLite reads "0" as 0.
			mutate(t, path, fmt.Sprintf("UPDATE NVTX_EVENTS SET domainId = CAST('0' AS BLOB) WHERE rowid = %d", nvtxBatch+10))
		}
		for _, oneGoroutine := range []bool{false, true} {
			o := leanOptions
			o.noParallel = oneGoroutine
			checkStreamMatchesRead(t, path, o, nil)
		}
	}
}

// TestRuntimeBatchesReusedOldestFirst: the runtime scan fills the hand-over the consumer
// released longest ago, not the one it has just read (rtBatches), so a batch comes round again
// only after most of the pool went by; and the pool is all the pass uses.
func TestRuntimeBatchesReusedOldestFirst(t *testing.T) {
	path := writeStreamExport(t, streamCase{version: "3.28.1", n: 600, devices: 2, streams: 2})
	s, err := OpenStream(context.Background(), path, leanOptions)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.limits.batch = 4 // hundreds of hand-overs
	last := map[*rtBatch]int{}
	n, minGap := 0, math.MaxInt
	s.onBatch = func(b *rtBatch) {
		if i, ok := last[b]; ok {
			minGap = min(minGap, n-i)
		}
		last[b] = n
		n++
	}
	if err := s.Each(context.Background(), func(*trace.GPUOp, int64, int64) {}); err != nil {
		t.Fatal(err)
	}
	if n < 4*rtBatches {
		t.Fatalf("%d hand-overs; the test wants the pool to come round several times", n)
	}
	// At most four queued, one read and one filled are out of the pool at a time.
	if minGap < rtBatches-6 {
		t.Errorf("a batch came back after %d hand-overs, want at least %d", minGap, rtBatches-6)
	}
	if len(last) > rtBatches {
		t.Errorf("%d batches used, want the pool's %d", len(last), rtBatches)
	}
}

// TestRuntimeBatchRunsNameEachCallsProcess: a hand-over's process runs (rtBatch.runs) give
// every call the process of its runtime table row, with calls of three processes in turn
// split across small batches, and a run starts only where the process changes.
func TestRuntimeBatchRunsNameEachCallsProcess(t *testing.T) {
	path := writeStreamExport(t, streamCase{version: "3.28.1", n: 40, pids: 3, interleave: true})
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query("SELECT correlationId, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId IS NOT NULL ORDER BY rowid")
	if err != nil {
		t.Fatal(err)
	}
	type idPID struct {
		id  int64
		pid int32
	}
	var want []idPID
	for rows.Next() {
		var id, gtid int64
		if err := rows.Scan(&id, &gtid); err != nil {
			t.Fatal(err)
		}
		_, pid, _ := SplitGlobalID(gtid)
		want = append(want, idPID{id, pid})
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	s, err := OpenStream(context.Background(), path, leanOptions)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.limits.batch = 5
	var got []idPID
	multi := 0
	s.onBatch = func(b *rtBatch) {
		if len(b.runs) > 1 {
			multi++
		}
		for i, run := range b.runs {
			end := len(b.calls)
			if i+1 < len(b.runs) {
				end = int(b.runs[i+1].at)
			}
			if i > 0 && b.runs[i-1].pid == run.pid {
				t.Errorf("runs %d and %d of a batch are both of process %d", i-1, i, run.pid)
			}
			if int(run.at) >= end {
				t.Errorf("run %d of a batch is empty (at %d, end %d)", i, run.at, end)
			}
			for _, c := range b.calls[run.at:end] {
				got = append(got, idPID{c.id, run.pid})
			}
		}
	}
	if err := s.Each(context.Background(), func(*trace.GPUOp, int64, int64) {}); err != nil {
		t.Fatal(err)
	}
	if multi == 0 {
		t.Fatal("no hand-over held calls of two processes; the test wants them interleaved")
	}
	if !slices.Equal(got, want) {
		t.Errorf("calls as handed over (id, process):\n%v\nwant the runtime table's:\n%v", got, want)
	}
	// The consumer takes each run into its process's join: the pass is the held read.
	lim := defaultLimits()
	lim.batch = 5
	checkStreamMatchesRead(t, path, leanOptions, &lim)
}
