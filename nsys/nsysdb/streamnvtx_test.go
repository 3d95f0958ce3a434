package nsysdb

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"unsafe"

	"github.com/sglprof/runner/reports/trace"
)

// TestNVTXScopeBetweenStarts: scope's answer for calls between two range starts (taken from
// the lane's remembered bounds without reading the ranges) is the innermost range around the
// call, at range starts and ends (inclusive bounds), with calls repeating a time and calls
// out of start order in between, on random nested ranges of one thread.
func TestNVTXScopeBetweenStarts(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 17))
	fast := 0
	for trial := range 300 {
		var rs [][2]int64
		var gen func(lo, hi int64, depth int)
		gen = func(lo, hi int64, depth int) {
			for at := lo; ; {
				s := at + rng.Int64N(4)
				e := s + rng.Int64N(40)
				if e > hi {
					return
				}
				rs = append(rs, [2]int64{s, e})
				if depth < 3 {
					gen(s, e, depth+1)
				}
				at = e + 1 + rng.Int64N(3) // siblings never touch (a call there would be in both)
			}
		}
		gen(0, 400, 0)
		n := newNVTXIndex()
		for _, r := range rs {
			n.add(r[0], r[1], 0, 1, 2, domainKey{})
		}
		n.finish(nil)
		n.startPass(64)
		// want is the innermost range around at: the latest start, the shorter on equal
		// starts (Scopes' order), as an index into rs (add keeps the order).
		want := func(at int64) int32 {
			best := int32(trace.NoID)
			for i, r := range rs {
				if r[0] <= at && at <= r[1] {
					if best == trace.NoID || r[0] > rs[best][0] || (r[0] == rs[best][0] && r[1] < rs[best][1]) {
						best = int32(i)
					}
				}
			}
			return best
		}
		at := int64(-2)
		for at < 410 {
			call := at
			switch x := rng.IntN(10); {
			case x < 3: // same time again
			case x == 3 && at > 10: // out of start order
				call = at - 1 - rng.Int64N(10)
			default:
				at += 1 + rng.Int64N(3)
				call = at
			}
			ln := n.lane(nvtxThread{1, 2})
			if ln.seen && call >= ln.last && call <= ln.fastHi {
				fast++
			}
			got, err := n.scope(1, 2, call)
			if err != nil {
				t.Fatalf("trial %d, call at %d: %v", trial, call, err)
			}
			// Two ranges with the same bounds are the same answer.
			if w := want(call); got != w && (got == trace.NoID || w == trace.NoID || rs[got] != rs[w]) {
				t.Fatalf("trial %d, call at %d (latest %d): scope %d, want %d; ranges %v", trial, call, at, got, w, rs)
			}
		}
	}
	if fast < 1000 {
		t.Fatalf("%d calls between range starts: the test does not exercise them", fast)
	}
}

// TestInternText: a text met again is the string made the first time (no copy per row), a
// new one is its bytes, and the map stops growing at maxInternedTexts.
func TestInternText(t *testing.T) {
	texts := map[string]string{}
	buf := []byte("layers.7")
	a := internText(texts, buf)
	buf[7] = '8'
	b := internText(texts, buf)
	buf[7] = '7'
	c := internText(texts, buf)
	if a != "layers.7" || b != "layers.8" || c != "layers.7" {
		t.Fatalf("got %q, %q, %q", a, b, c)
	}
	if unsafe.StringData(a) != unsafe.StringData(c) {
		t.Error("a repeated text was copied into a new string")
	}
	for i := range 2 * maxInternedTexts {
		if got, want := internText(texts, []byte(strconv.Itoa(i))), strconv.Itoa(i); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	if len(texts) != maxInternedTexts {
		t.Errorf("%d texts held, want at most %d", len(texts), maxInternedTexts)
	}
}
