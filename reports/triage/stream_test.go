package triage

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/trace"
)

// streamOf serves t as an OpStream the way a streaming reader would: a trace without the ops,
// and the ops in (Start, End, index) order with their index as seq. swap, when >= 0, delivers
// the ops at sorted positions swap and swap+1 the wrong way round.
func streamOf(t *trace.Trace, swap int) *OpStream {
	bare := *t
	bare.GPUOps = nil
	return &OpStream{Trace: &bare, Each: func(ctx context.Context, fn func(*trace.GPUOp, int64, int64)) error {
		order := make([]int, len(t.GPUOps))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int {
			x, y := &t.GPUOps[a], &t.GPUOps[b]
			if c := cmp.Compare(x.Start, y.Start); c != 0 {
				return c
			}
			if c := cmp.Compare(x.End, y.End); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
		if swap >= 0 && swap+1 < len(order) {
			order[swap], order[swap+1] = order[swap+1], order[swap]
		}
		for _, i := range order {
			op := t.GPUOps[i] // a copy: the reader's buffer, not the caller's trace
			ls := int64(trace.NoID)
			if l := op.Launch; l >= 0 && int(l) < len(t.Launches) && !t.LaunchTimesDropped {
				ls = t.Launches[l].Start
			}
			fn(&op, int64(i), ls)
		}
		return ctx.Err()
	}}
}

// randomTrace is a trace with what changes the tables: several devices and streams, ops that
// overlap on one stream, touch, start together, last no time or end before they start, names
// that share a canonical name, graph and plain launches, and ops with and without Python sites.
func randomTrace(r *rand.Rand, n int) *trace.Trace {
	b := newTB(fmt.Sprintf("random-%d.json", n))
	names := []string{kGEMM, kAttn, kNorm, kSilu, kMul, kNCCL, kMemcpy,
		"void k<(void*)0x7f00aa>(int)", "void k<(void*)0x7f00bb>(int)"}
	pys := []string{pyMM, pyAttn, pyNorm, pyAct, pyAR}
	root := b.frame(pyRunner, 0, 1<<40, trace.NoID)
	var frames, cpuops []int32
	for i := range pys {
		f := b.frame(pys[i], 0, 1<<40, root)
		frames = append(frames, f)
		cpuops = append(cpuops, b.cpuop("aten::op", 10, 1<<39, f))
	}
	plain := b.launch("cudaLaunchKernel", 0, 1, false)
	graph := b.launch("cudaGraphLaunch", 0, 1, true)
	b.t.Launches[graph].Frame = frames[0]
	devs, streams := 1+r.IntN(2), 1+r.IntN(4)
	var at int64
	for range n {
		if r.IntN(4) > 0 {
			at += int64(r.IntN(3_000))
		}
		d := int64(r.IntN(20_000))
		switch r.IntN(20) {
		case 0:
			d = 0
		case 1:
			d = -int64(r.IntN(100))
		case 2, 3, 4, 5:
			d = 19_000 // equal longest durations: the first op in index order is the representative
		}
		launch, cpu := plain, int32(trace.NoID)
		switch r.IntN(4) {
		case 0:
			launch = graph
		case 1:
			cpu = cpuops[r.IntN(len(cpuops))]
		case 2:
			launch = trace.NoID
		}
		start := at
		if r.IntN(3) == 0 {
			start -= int64(r.IntN(5_000)) // the input's order is not time order
		}
		b.kernel(names[r.IntN(len(names))], int32(r.IntN(devs)), int32(7+r.IntN(streams)), start, start+d, launch, cpu)
	}
	return b.t
}

func reportJSON(t *testing.T, rep *Report) string {
	t.Helper()
	js, err := json.MarshalIndent(rep, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(js)
}

// TestStreamMatchesHeld: a streamed input gives the report of the same input held in memory,
// every table, verdict and total included.
func TestStreamMatchesHeld(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	for trial := range 300 {
		tr := randomTrace(r, 1+r.IntN(120))
		in := Inputs{Files: []Input{{Path: tr.Path, Rank: NoRank}}}
		if trial%7 == 0 {
			in.Files[0].Stage = "decode"
		}
		held, err := Analyze(context.Background(), in, Options{Open: opener(map[string]*trace.Trace{tr.Path: tr})})
		if err != nil {
			t.Fatal(err)
		}
		opened := 0
		streamed, err := Analyze(context.Background(), in, Options{
			Open: func(context.Context, string) (*trace.Trace, error) {
				opened++
				return tr, nil
			},
			OpenStream: func(context.Context, string) (*OpStream, error) { return streamOf(tr, -1), nil },
		})
		if err != nil {
			t.Fatal(err)
		}
		if opened != 0 {
			t.Fatalf("trial %d: the streamed input was read again with Open", trial)
		}
		if h, s := reportJSON(t, held), reportJSON(t, streamed); h != s {
			t.Fatalf("trial %d: streamed report differs from the held one\nheld:\n%s\nstreamed:\n%s", trial, h, s)
		}
	}
}

// TestStreamFallback: an input the stream cannot serve is read with Open, with the held
// report; other errors fail the triage.
func TestStreamFallback(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	tr := randomTrace(r, 200)
	in := Inputs{Files: []Input{{Path: tr.Path, Rank: NoRank}}}
	held, err := Analyze(context.Background(), in, Options{Open: opener(map[string]*trace.Trace{tr.Path: tr})})
	if err != nil {
		t.Fatal(err)
	}
	annotated := *streamOf(tr, -1)
	bare := *annotated.Trace
	bare.Annotations = []trace.Annotation{{Start: 0, End: 1 << 40, Name: tr.Names.InternString("DenoisingStage"), Device: trace.NoID}}
	annotated.Trace = &bare
	cases := []struct {
		name   string
		stream func() (*OpStream, error)
		opens  int    // Open calls expected
		err    string // Analyze error expected ("" for none)
	}{
		{"declined", func() (*OpStream, error) { return nil, fmt.Errorf("two processes: %w", ErrNotStreamable) }, 1, ""},
		{"nil stream", func() (*OpStream, error) { return nil, nil }, 1, ""},
		{"out of order", func() (*OpStream, error) { return streamOf(tr, 100), nil }, 1, ""},
		{"reader gives up mid-pass", func() (*OpStream, error) {
			s := streamOf(tr, -1)
			each := s.Each
			s.Each = func(ctx context.Context, fn func(*trace.GPUOp, int64, int64)) error {
				k := 0
				_ = each(ctx, func(op *trace.GPUOp, seq, ls int64) {
					if k++; k < 50 {
						fn(op, seq, ls)
					}
				})
				return fmt.Errorf("correlation window: %w", ErrNotStreamable)
			}
			return s, nil
		}, 1, ""},
		{"annotations need the held trace", func() (*OpStream, error) { return &annotated, nil }, 1, ""},
		{"open error", func() (*OpStream, error) { return nil, errors.New("disk on fire") }, 0, "disk on fire"},
		{"pass error", func() (*OpStream, error) {
			s := streamOf(tr, -1)
			s.Each = func(context.Context, func(*trace.GPUOp, int64, int64)) error { return errors.New("page 7 is damaged") }
			return s, nil
		}, 0, "page 7 is damaged"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opened, closed := 0, 0
			rep, err := Analyze(context.Background(), in, Options{
				Open: func(context.Context, string) (*trace.Trace, error) {
					opened++
					return tr, nil
				},
				OpenStream: func(context.Context, string) (*OpStream, error) {
					s, err := tc.stream()
					if s != nil {
						s.Close = func() error { closed++; return nil }
					}
					return s, err
				},
			})
			if want := 1; closed != want && tc.name != "declined" && tc.name != "nil stream" && tc.name != "open error" {
				t.Errorf("stream closed %d times, want %d", closed, want)
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if opened != tc.opens {
				t.Fatalf("Open called %d times, want %d", opened, tc.opens)
			}
			if h, s := reportJSON(t, held), reportJSON(t, rep); h != s {
				t.Fatalf("fallback report differs from the held one")
			}
		})
	}
}

// TestOnlineSweepMatchesBruteForce: the streaming sweep's totals and hidden times are the
// brute-force oracle's (the one the held sweep is checked against).
func TestOnlineSweepMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 4))
	for trial := range 1000 {
		n := 1 + r.IntN(25)
		streams := 1 + r.IntN(4)
		iv := make([]Interval, n)
		for i := range iv {
			s := int64(r.IntN(100))
			iv[i] = Interval{Start: s, End: s + int64(r.IntN(30)), Stream: int32(r.IntN(streams))}
		}
		order := make([]int, n)
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int {
			if c := cmp.Compare(iv[a].Start, iv[b].Start); c != 0 {
				return c
			}
			return cmp.Compare(iv[a].End, iv[b].End)
		})
		var w onlineSweep
		hidden := make([]int64, n)
		credit := func(i int32, ns int64) { hidden[i] += ns }
		states := map[int32]*streamState{}
		for _, i := range order {
			s := states[iv[i].Stream]
			if s == nil {
				s = &streamState{}
				states[iv[i].Stream] = s
			}
			w.add(s, iv[i].Start, iv[i].End, int32(i), credit)
		}
		w.finish(credit)
		h, busy, multi, peak := bruteOverlap(iv)
		if w.busy != busy || w.multi != multi || w.peak != peak {
			t.Fatalf("trial %d %v: online busy/multi/peak %d/%d/%d, oracle %d/%d/%d", trial, iv, w.busy, w.multi, w.peak, busy, multi, peak)
		}
		if !slices.Equal(hidden, h) {
			t.Fatalf("trial %d %v: online hidden %v, oracle %v", trial, iv, hidden, h)
		}
	}
}

// generated is an OpStream of n ops that are never held: names, streams and times follow
// from the op's number, as an export read page by page would deliver them.
func generated(n int) *OpStream {
	tr := trace.New("generated.sqlite", "nsys")
	names := []trace.NameID{tr.Names.InternString(kGEMM), tr.Names.InternString(kAttn), tr.Names.InternString(kNorm),
		tr.Names.InternString(kSilu), tr.Names.InternString(kNCCL)}
	tr.Launches = []trace.Launch{{Name: tr.Names.InternString("cudaLaunchKernel"), Frame: trace.NoID}}
	return &OpStream{Trace: tr, Each: func(ctx context.Context, fn func(*trace.GPUOp, int64, int64)) error {
		var op trace.GPUOp
		var main int64 = 1_000
		for i := range n {
			k := i % len(names)
			d := int64(1_000 + (i*7919)%20_000)
			op = trace.GPUOp{Name: names[k], Correlation: int64(i), ExternalID: trace.NoID, Stream: 7, Launch: 0, CPUOp: trace.NoID}
			if names[k] == names[4] {
				// in the gap before the next compute op, overlapping the ops after it
				op.Start, op.End, op.Stream = main-150, main-150+d, 24
			} else {
				op.Start, op.End = main, main+d
				main += d + 300
			}
			fn(&op, int64(i), trace.NoID)
		}
		return ctx.Err()
	}}
}

// allocated is the bytes Analyze allocates for a generated stream of n ops.
func allocated(t testing.TB, n int) uint64 {
	in := Inputs{Files: []Input{{Path: "generated.sqlite", Rank: NoRank}}}
	opts := Options{Open: func(context.Context, string) (*trace.Trace, error) { return nil, errors.New("not streamed") },
		OpenStream: func(context.Context, string) (*OpStream, error) { return generated(n), nil }}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rep, err := Analyze(context.Background(), in, opts)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Stages[0].KernelCount != n {
		t.Fatalf("%d ops analysed, want %d", rep.Stages[0].KernelCount, n)
	}
	return after.TotalAlloc - before.TotalAlloc
}

// TestStreamMemoryFlat: a streamed analysis allocates nothing per op — ten times the ops, the
// same bytes within a few kilobytes (map and heap growth, not per-op storage).
func TestStreamMemoryFlat(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates per memory access: allocation counts say nothing under -race")
	}
	// The fewest of three runs: TotalAlloc also counts what the runtime and the test framework
	// allocate meanwhile (tens of kilobytes now and then).
	least := func(n int) uint64 {
		return min(allocated(t, n), allocated(t, n), allocated(t, n))
	}
	small, large := least(20_000), least(200_000)
	if large > small+16<<10 {
		t.Fatalf("streaming 200000 ops allocated %d bytes, 20000 ops %d: %.2f bytes per extra op, want none",
			large, small, float64(large-small)/180_000)
	}
}

// BenchmarkAnalyzeStream is the streamed analysis's own cost per op (the reader's is in
// nsys's benchmarks).
func BenchmarkAnalyzeStream(b *testing.B) {
	const n = 1_000_000
	in := Inputs{Files: []Input{{Path: "generated.sqlite", Rank: NoRank}}}
	opts := Options{Open: func(context.Context, string) (*trace.Trace, error) { return nil, errors.New("not streamed") },
		OpenStream: func(context.Context, string) (*OpStream, error) { return generated(n), nil }}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Analyze(context.Background(), in, opts); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/op-streamed")
}

// TestDevTotals: the per-device sums are a plain map's, for devices beyond the 16 the scan
// remembers too, in any order.
func TestDevTotals(t *testing.T) {
	tot := devTotals{m: map[int32]*int64{}}
	want := map[int32]int64{}
	for i := range 2000 {
		d := int32((i * 7919) % 40)
		v := int64(i%13) - 3
		tot.add(d, v)
		want[d] += v
	}
	if len(tot.m) != len(want) {
		t.Fatalf("%d devices, want %d", len(tot.m), len(want))
	}
	for d, v := range want {
		if got := *tot.m[d]; got != v {
			t.Errorf("device %d: sum %d, want %d", d, got, v)
		}
	}
}
