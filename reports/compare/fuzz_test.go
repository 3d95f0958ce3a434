package compare

import (
	"math"
	"testing"
)

// FuzzParseTolerance: any text either parses into a finite, non-negative tolerance whose
// Text is the trimmed input, or is an error; never a panic.
func FuzzParseTolerance(f *testing.F) {
	for _, s := range []string{"10%", "10% or 120ms", "2% or 256MB", " 50 % or 1s ", "x", "%", "1e400%", "10% or -1ms", "10% or 5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tol, err := ParseTolerance(s)
		if err != nil {
			return
		}
		if tol.Rel < 0 || math.IsNaN(tol.Rel) || math.IsInf(tol.Rel, 0) || tol.Abs < 0 || math.IsNaN(tol.Abs) {
			t.Fatalf("%q parsed into %+v", s, tol)
		}
		if l := tol.Limit(1e9); l < 0 || math.IsNaN(l) {
			t.Fatalf("%q: limit %v", s, l)
		}
	})
}
