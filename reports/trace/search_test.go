package trace

import (
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// TestSearchNearEqualsSearch compares SearchNear with sort.Search for every hint, including
// hints outside [0, n], on sorted arrays with runs of equal values.
func TestSearchNearEqualsSearch(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for n := 0; n < 70; n++ {
		xs := make([]int, n)
		for i := range xs {
			xs[i] = r.IntN(n/2 + 1)
		}
		slices.Sort(xs)
		for v := -1; v <= n/2+1; v++ {
			f := func(i int) bool { return xs[i] >= v }
			want := sort.Search(n, f)
			for hint := -2; hint <= n+2; hint++ {
				if got := SearchNear(n, hint, f); got != want {
					t.Fatalf("n %d, value %d, hint %d: %d, want %d (%v)", n, v, hint, got, want, xs)
				}
			}
		}
	}
}

// BenchmarkSearchNear: queries in increasing order over a sorted array, each started at the
// previous answer, against sort.Search from scratch.
func BenchmarkSearchNear(b *testing.B) {
	xs := make([]int64, 1<<17)
	for i := range xs {
		xs[i] = int64(i) * 10
	}
	b.Run("near", func(b *testing.B) {
		for b.Loop() {
			k := 0
			for q := int64(0); q < int64(len(xs))*10; q += 7 {
				k = SearchNear(len(xs), k, func(i int) bool { return xs[i] >= q })
			}
		}
	})
	b.Run("search", func(b *testing.B) {
		for b.Loop() {
			for q := int64(0); q < int64(len(xs))*10; q += 7 {
				sort.Search(len(xs), func(i int) bool { return xs[i] >= q })
			}
		}
	})
}
