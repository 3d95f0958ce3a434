package trace

import (
	"cmp"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func hasWarning(tr *Trace, sub string) bool {
	for _, w := range tr.Warnings {
		if strings.Contains(w, sub) {
			return true
		}
	}
	return false
}

func TestLinkRules(t *testing.T) {
	tr := New("x", "test")
	n := tr.Names
	// Two nested CPU ops share External id 3; the launch sits in the inner one.
	tr.CPUOps = []CPUOp{
		{Start: 0, End: 100, ExternalID: 3, Name: n.InternString("outer"), PID: 1, TID: 1},
		{Start: 10, End: 50, ExternalID: 3, Name: n.InternString("inner"), PID: 1, TID: 1},
		{Start: 60, End: 90, ExternalID: 3, Name: n.InternString("later"), PID: 1, TID: 1},
	}
	tr.Launches = []Launch{{Start: 20, End: 25, Correlation: 9, ExternalID: 3, PID: 1, TID: 1}}
	tr.GPUOps = []GPUOp{
		{Start: 200, End: 210, Correlation: 9, ExternalID: NoID}, // falls back to the launch's id
		{Start: 210, End: 220, Correlation: 77, ExternalID: 3},   // no launch: innermost overall
	}
	// Frames without Python ids: parents by containment; one with a parent id naming an
	// unrecorded frame also falls back to containment.
	tr.Frames = []Frame{
		{Start: 0, End: 100, ID: NoID, ParentID: NoID, PID: 1, TID: 1},
		{Start: 5, End: 60, ID: NoID, ParentID: NoID, PID: 1, TID: 1},
		{Start: 15, End: 30, ID: 42, ParentID: 999, PID: 1, TID: 1},
		{Start: 15, End: 30, ID: 43, ParentID: NoID, PID: 1, TID: 2}, // other thread
	}
	tr.Flows = []Flow{{TS: 200, ID: 8}} // disagrees with correlation 9
	Link(tr)
	if got := tr.GPUOps[0].CPUOp; got != 1 {
		t.Errorf("op 0 CPU op = %d, want 1 (innermost op enclosing the launch)", got)
	}
	if got := tr.GPUOps[1].CPUOp; got != 2 {
		t.Errorf("op 1 CPU op = %d, want 2 (innermost of all without a launch)", got)
	}
	if tr.GPUOps[1].Launch != NoID {
		t.Error("op with unknown correlation got a launch")
	}
	wantParent := []int32{NoID, 0, 1, NoID}
	for i, w := range wantParent {
		if tr.Frames[i].Parent != w {
			t.Errorf("frame %d parent %d, want %d", i, tr.Frames[i].Parent, w)
		}
	}
	if tr.Launches[0].Frame != 2 {
		t.Errorf("launch frame %d, want 2", tr.Launches[0].Frame)
	}
	if st := tr.Stack(2); len(st) != 3 || st[0] != 2 || st[2] != 0 {
		t.Errorf("stack %v", st)
	}
	if !hasWarning(tr, "flows disagree") {
		t.Errorf("no flow disagreement warning: %v", tr.Warnings)
	}

	// A cyclic parent chain (corrupt ids) must not hang Stack.
	tr.Frames[0].Parent, tr.Frames[1].Parent = 1, 0
	if st := tr.Stack(0); len(st) != 2 {
		t.Errorf("cyclic stack %v", st)
	}
}

func TestLinkWithoutCPUData(t *testing.T) {
	// What an nsys export gives: GPU ops and launches only.
	tr := New("x.sqlite", "nsys")
	tr.Launches = []Launch{{Start: 0, End: 5, Correlation: 1, ExternalID: NoID, Graph: true}}
	tr.GPUOps = []GPUOp{{Start: 10, End: 20, Correlation: 1, ExternalID: NoID}, {Start: 20, End: 30, Correlation: 1, ExternalID: NoID}}
	Link(tr)
	for i := range tr.GPUOps {
		if tr.GPUOps[i].Launch != 0 || tr.GPUOps[i].CPUOp != NoID || tr.OpFrame(i) != NoID || !tr.IsGraphReplay(i) {
			t.Errorf("op %d: %+v frame %d", i, tr.GPUOps[i], tr.OpFrame(i))
		}
	}
	if tr.Launches[0].Frame != NoID {
		t.Error("launch frame set without frames")
	}
}

func TestOpsByStreamAndKernelTime(t *testing.T) {
	tr := New("x", "test")
	tr.GPUOps = []GPUOp{
		{Start: 30, End: 40, Device: 0, Stream: 7, Kind: OpKernel},
		{Start: 10, End: 20, Device: 0, Stream: 7, Kind: OpKernel},
		{Start: 10, End: 15, Device: 0, Stream: 7, Kind: OpMemcpy},
		{Start: 5, End: 6, Device: 1, Stream: 7, Kind: OpKernel},
	}
	by := tr.OpsByStream()
	if got := by[StreamKey{0, 7}]; len(got) != 3 || got[0] != 2 || got[1] != 1 || got[2] != 0 {
		t.Errorf("stream 0/7 order %v, want [2 1 0] (start, then end)", got)
	}
	if got := tr.OpsByStream(OpKernel)[StreamKey{0, 7}]; len(got) != 2 {
		t.Errorf("kernels only: %v", got)
	}
	if n, ns := tr.KernelTime(NoID); n != 3 || ns != 21 {
		t.Errorf("all devices: %d kernels %d ns", n, ns)
	}
	if n, ns := tr.KernelTime(1); n != 1 || ns != 1 {
		t.Errorf("device 1: %d kernels %d ns", n, ns)
	}
}

func TestNames(t *testing.T) {
	n := NewNames()
	a := n.Intern([]byte("aten::mm"))
	if b := n.InternString("aten::mm"); b != a || n.String(a) != "aten::mm" || n.String(999) != "" || n.Len() != 2 {
		t.Errorf("interning: %d %d %q", a, b, n.String(a))
	}
	if id, ok := n.Lookup(""); !ok || id != 0 {
		t.Error("empty string is not id 0")
	}
}

// TestLinkParallelEqualsSequential: on a trace large enough for the concurrent frame sweep,
// Link gives exactly what the three rules give one after the other.
func TestLinkParallelEqualsSequential(t *testing.T) {
	build := func() *Trace {
		r := rand.New(rand.NewPCG(1, 2))
		tr := New("x", "test")
		name := tr.Names.InternString("f")
		n := parallelLinkMin
		for i := 0; i < n; i++ {
			s := int64(i) * 100
			tid := int32(r.IntN(3))
			tr.Frames = append(tr.Frames, Frame{Start: s, End: s + int64(r.IntN(400)), ID: int64(i), ParentID: int64(r.IntN(i + 1)), Name: name, PID: 1, TID: tid})
			tr.CPUOps = append(tr.CPUOps, CPUOp{Start: s + 5, End: s + 50, ExternalID: int64(r.IntN(n)), Name: name, PID: 1, TID: tid})
			tr.Launches = append(tr.Launches, Launch{Start: s + 10, End: s + 20, Correlation: int64(i), ExternalID: int64(r.IntN(n)), Name: name, PID: 1, TID: tid})
			tr.GPUOps = append(tr.GPUOps, GPUOp{Start: s + 1000, End: s + 1050, Correlation: int64(r.IntN(n + 100)), ExternalID: int64(r.IntN(2*n)) - 1, Name: name})
			tr.Flows = append(tr.Flows, Flow{TS: s + 1000, ID: int64(r.IntN(n))})
		}
		return tr
	}
	a, b := build(), build()
	Link(a)
	linkLaunches(b)
	linkCPUOps(b)
	linkFrames(b)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("concurrent Link differs from the sequential rules")
	}
	framed := 0
	for i := range a.CPUOps {
		if a.CPUOps[i].Frame != NoID {
			framed++
		}
	}
	if framed == 0 || len(a.Warnings) != 2 {
		// Both warnings (unlinked ops, then flows that disagree): their order is checked.
		t.Errorf("test trace too tame: %d CPU ops framed, warnings %v", framed, a.Warnings)
	}
}

// TestLaunchIndexDenseEqualsMap checks that the dense correlation table answers every lookup
// as the map does (first launch wins, NoID skipped, misses), also for ids at the ends of int64
// where c-lo overflows, and that ids spread too wide take the map.
func TestLaunchIndexDenseEqualsMap(t *testing.T) {
	const maxI, minI = int64(^uint64(0) >> 1), -int64(^uint64(0)>>1) - 1
	cases := map[string][]int64{
		"dense":      {5, 6, 7, 5, NoID, 9, 12, 6},
		"negative":   {-7, -3, -2, -7, 0, 3},
		"wide":       {1, 1 << 40, 3, 1},
		"ends":       {maxI, minI, 0, maxI},
		"near-max":   {maxI - 3, maxI, maxI - 1},
		"near-min":   {minI, minI + 2, minI + 1, minI},
		"only-no-id": {NoID, NoID},
		"none":       {},
		"one":        {42},
	}
	probes := []int64{maxI, minI, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, -1, -2, -3, -7, -8, 42, 1 << 40, maxI - 1, maxI - 3, minI + 1, minI + 2}
	for name, corrs := range cases {
		ls := make([]Launch, len(corrs))
		want := map[int64]int32{}
		for i, c := range corrs {
			ls[i].Correlation = c
			if _, ok := want[c]; !ok && c != NoID {
				want[c] = int32(i)
			}
		}
		x := launchIndex(ls)
		if name == "wide" || name == "ends" {
			if x.m == nil {
				t.Errorf("%s: ids spread over %v took the dense table", name, corrs)
			}
		} else if len(corrs) > 0 && name != "only-no-id" && x.m != nil {
			t.Errorf("%s: ids %v took the map, not the dense table", name, corrs)
		}
		for _, c := range append(probes, corrs...) {
			w, ok := want[c]
			if !ok {
				w = NoID
			}
			if got := x.find(c); got != w {
				t.Errorf("%s: find(%d) = %d, want %d", name, c, got, w)
			}
		}
	}
}

// linkFramesBySort is linkFrames as it was before the per-thread runs: every sweep record
// sorted at once by the order spelled out below, then the same per-record step and parent
// pass. TestLinkFramesEqualsFullSort compares the two orders' results.
func linkFramesBySort(t *Trace) {
	for i := range t.CPUOps {
		t.CPUOps[i].Frame = NoID
	}
	for i := range t.Frames {
		t.Frames[i].Parent = NoID
	}
	for i := range t.Launches {
		t.Launches[i].Frame = NoID
	}
	if len(t.Frames) == 0 {
		return
	}
	items := make([]sweepItem, 0, len(t.Frames)+len(t.CPUOps)+len(t.Launches))
	AdviseHuge(items)
	for i := range t.Frames {
		f := &t.Frames[i]
		items = append(items, sweepItem{f.Start, f.End, f.PID, f.TID, 0, int32(i)})
	}
	for i := range t.CPUOps {
		c := &t.CPUOps[i]
		items = append(items, sweepItem{c.Start, c.End, c.PID, c.TID, 1, int32(i)})
	}
	for i := range t.Launches {
		l := &t.Launches[i]
		items = append(items, sweepItem{l.Start, l.End, l.PID, l.TID, 2, int32(i)})
	}
	// Per thread, by start; at equal starts frames come first, longer (outer) frames before
	// shorter ones, so a frame starting with its op still encloses it.
	slices.SortFunc(items, func(a, b sweepItem) int {
		if c := cmp.Compare(a.pid, b.pid); c != 0 {
			return c
		}
		if c := cmp.Compare(a.tid, b.tid); c != 0 {
			return c
		}
		if c := cmp.Compare(a.start, b.start); c != 0 {
			return c
		}
		if c := cmp.Compare(a.kind, b.kind); c != 0 {
			return c
		}
		if c := cmp.Compare(b.end, a.end); c != 0 {
			return c
		}
		return cmp.Compare(a.idx, b.idx)
	})
	containing := make([]int32, len(t.Frames)) // time-containment parent of each frame
	var stack []int32
	var curPID, curTID int32
	for n, it := range items {
		if n == 0 || it.pid != curPID || it.tid != curTID {
			stack = stack[:0]
			curPID, curTID = it.pid, it.tid
		}
		stack = t.sweepStep(stack, containing, it)
	}
	t.frameParents(containing)
}

// TestLinkFramesEqualsFullSort: the sweep over per-thread runs merged as it goes links every
// frame, CPU op and launch exactly as the sweep over one fully sorted array does, on records
// in time order and out of it, with equal starts and ends, several pids (negative too) and
// threads interleaved.
func TestLinkFramesEqualsFullSort(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		build := func() *Trace {
			r := rand.New(rand.NewPCG(seed, 9))
			tr := New("x", "test")
			name := tr.Names.InternString("f")
			n := 50 + r.IntN(400)
			ordered := seed%3 != 0 // in time order per thread, or shuffled
			thread := func() (int32, int32) { return int32(r.IntN(3)) - 1, int32(r.IntN(4)) - 2 }
			ts := func(i int) int64 {
				if ordered {
					return int64(i/2) * 10 // pairs of equal starts
				}
				return int64(r.IntN(n)) * 10
			}
			for i := 0; i < n; i++ {
				pid, tid := thread()
				s := ts(i)
				tr.Frames = append(tr.Frames, Frame{Start: s, End: s + int64(r.IntN(6))*10, ID: int64(i), ParentID: int64(r.IntN(n+5)) - 2, Name: name, PID: pid, TID: tid})
				pid, tid = thread()
				s = ts(i)
				tr.CPUOps = append(tr.CPUOps, CPUOp{Start: s, End: s + int64(r.IntN(3))*10, Name: name, PID: pid, TID: tid})
				pid, tid = thread()
				s = ts(i)
				tr.Launches = append(tr.Launches, Launch{Start: s, End: s + 5, Name: name, PID: pid, TID: tid})
			}
			return tr
		}
		a, b := build(), build()
		linkFrames(a)
		linkFramesBySort(b)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d: the per-thread sweep differs from the fully sorted one", seed)
		}
		framed := 0
		for i := range a.CPUOps {
			if a.CPUOps[i].Frame != NoID {
				framed++
			}
		}
		if framed == 0 {
			t.Errorf("seed %d: no CPU op framed: test trace too tame", seed)
		}
	}
}

// linkCPUOpsBySort is linkCPUOps as it was before its searches started at the last answer:
// the CPU ops sorted by (External id, Start) every time and each id searched from scratch.
func linkCPUOpsBySort(t *Trace) {
	for i := range t.GPUOps {
		t.GPUOps[i].CPUOp = NoID
	}
	var idx []int32
	for i := range t.CPUOps {
		if t.CPUOps[i].ExternalID != NoID {
			idx = append(idx, int32(i))
		}
	}
	slices.SortFunc(idx, func(a, b int32) int {
		x, y := &t.CPUOps[a], &t.CPUOps[b]
		if c := cmp.Compare(x.ExternalID, y.ExternalID); c != 0 {
			return c
		}
		return cmp.Compare(x.Start, y.Start)
	})
	find := func(ext, at int64, hasAt bool) int32 {
		lo, _ := slices.BinarySearchFunc(idx, ext, func(i int32, e int64) int { return cmp.Compare(t.CPUOps[i].ExternalID, e) })
		hi := lo
		for hi < len(idx) && t.CPUOps[idx[hi]].ExternalID == ext {
			hi++
		}
		if hi == lo {
			return NoID
		}
		return pickCPUOp(t, idx[lo:hi], at, hasAt)
	}
	assignCPUOps(t, find)
}

// TestLinkCPUOpsEqualsFullSort compares linkCPUOps with the sort-and-search reference on
// CPU ops in id order (the sort skipped) and shuffled, with repeated ids, equal starts and
// ids no CPU op has.
func TestLinkCPUOpsEqualsFullSort(t *testing.T) {
	for seed := uint64(1); seed <= 30; seed++ {
		build := func() *Trace {
			r := rand.New(rand.NewPCG(seed, 5))
			tr := New("x", "test")
			n := 20 + r.IntN(300)
			ordered := seed%3 != 0
			for i := 0; i < n; i++ {
				ext := int64(i / 2)
				if !ordered {
					ext = int64(r.IntN(n / 2))
				}
				if r.IntN(10) == 0 {
					ext = NoID
				}
				s := int64(r.IntN(4)) * 10
				if ordered {
					s += int64(i) * 10
				}
				tr.CPUOps = append(tr.CPUOps, CPUOp{Start: s, End: s + int64(r.IntN(3))*10, ExternalID: ext})
				tr.Launches = append(tr.Launches, Launch{Start: s + 5, End: s + 6, Correlation: int64(i), ExternalID: int64(r.IntN(n)) - 1})
				tr.GPUOps = append(tr.GPUOps, GPUOp{Correlation: int64(r.IntN(2 * n)), ExternalID: int64(r.IntN(n)) - 2})
			}
			linkLaunchIDs(tr)
			return tr
		}
		a, b := build(), build()
		linkCPUOps(a)
		linkCPUOpsBySort(b)
		if !reflect.DeepEqual(a.GPUOps, b.GPUOps) {
			t.Fatalf("seed %d: linkCPUOps differs from the sort-and-search reference", seed)
		}
		linked := 0
		for i := range a.GPUOps {
			if a.GPUOps[i].CPUOp != NoID {
				linked++
			}
		}
		if linked == 0 || linked == len(a.GPUOps) {
			t.Errorf("seed %d: %d of %d GPU ops linked: test trace too tame", seed, linked, len(a.GPUOps))
		}
	}
}
