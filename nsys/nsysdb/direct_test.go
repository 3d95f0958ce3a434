package nsysdb

import (
	"math"
	"testing"

	"github.com/sglprof/runner/reports/trace"
)

// TestCorrIndexHostileIDs: GPU ops whose correlation ids lie at both ends of int64 (an edited
// or hostile export) take the map instead of a flat table whose size overflowed (it panicked
// with a negative length), and ids of calls far outside the table are simply not wanted.
func TestCorrIndexHostileIDs(t *testing.T) {
	ops := []trace.GPUOp{{Correlation: math.MinInt64 + 2}, {Correlation: math.MaxInt64}, {Correlation: trace.NoID}}
	x := newCorrIndex(ops)
	if x.dense != nil {
		t.Fatalf("a flat table of %d slots for ids at both ends of int64", len(x.dense))
	}
	x.add(math.MaxInt64, 7)
	if !x.wanted(math.MaxInt64) || x.wanted(0) || x.first(math.MaxInt64) != 7 || x.first(0) != trace.NoID {
		t.Errorf("wanted(max) %v, wanted(0) %v, first(max) %d, first(0) %d", x.wanted(math.MaxInt64), x.wanted(0), x.first(math.MaxInt64), x.first(0))
	}
	// A dense table, asked about ids whose distance from its first id overflows.
	d := newCorrIndex([]trace.GPUOp{{Correlation: -5}, {Correlation: -3}})
	if d.dense == nil {
		t.Fatal("two close ids should take the flat table")
	}
	for _, c := range []int64{math.MaxInt64, math.MinInt64, -6, -2} {
		if d.wanted(c) || d.first(c) != trace.NoID {
			t.Errorf("id %d wanted or found in a table of -5..-3", c)
		}
		d.add(c, 1) // must not panic
		if w, _ := d.claim(c, 1, 0); w {
			t.Errorf("id %d claimed", c)
		}
	}
	if !d.wanted(-3) || d.wanted(-4) {
		t.Errorf("wanted(-3) %v, wanted(-4) %v", d.wanted(-3), d.wanted(-4))
	}
}
