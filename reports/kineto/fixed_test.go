package kineto

import (
	"math"
	"math/big"
	"strings"
	"testing"
)

// FuzzParseMicrosNS compares the integer-only parser with exact rational arithmetic
// (math/big): for every number both accept, the nanoseconds are the microseconds times 1000
// rounded half away from zero, and the parser refuses exactly the values outside int64.
func FuzzParseMicrosNS(f *testing.F) {
	for _, s := range []string{"4909914216204.635", "1683564901548726", "-0.0005", "1.5e3", "2500e-3",
		"9223372036854775.807", "9223372036854775.808", "123456789012345678901234567890e-20",
		"0.00000000000000000000001e23", "99999999999999999999.5e-10", "1e-7", "+7", "0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 48 || strings.Trim(s, "0123456789.eE+-") != "" {
			return
		}
		if i := strings.IndexAny(s, "eE"); i >= 0 && len(strings.TrimLeft(s[i+1:], "+-")) > 4 {
			return // a huge exponent makes the oracle's rational enormous
		}
		got, ok := parseMicrosNS([]byte(s))
		r, rok := new(big.Rat).SetString(s)
		if !rok {
			if ok && !strings.HasSuffix(s, ".") && !strings.Contains(s, ".e") && !strings.Contains(s, ".E") {
				t.Fatalf("parseMicrosNS(%q) = %d, but it is no number", s, got)
			}
			return
		}
		r.Mul(r, big.NewRat(1000, 1))
		num := new(big.Int).Abs(r.Num())
		q, rem := new(big.Int).QuoRem(num, r.Denom(), new(big.Int))
		if rem.Mul(rem, big.NewInt(2)).Cmp(r.Denom()) >= 0 {
			q.Add(q, big.NewInt(1))
		}
		if !q.IsInt64() || q.Int64() == math.MinInt64 {
			if ok {
				t.Fatalf("parseMicrosNS(%q) = %d, want out of range", s, got)
			}
			return
		}
		want := q.Int64()
		if r.Sign() < 0 {
			want = -want
		}
		if !ok || got != want {
			t.Fatalf("parseMicrosNS(%q) = %d, %v; want %d", s, got, ok, want)
		}
	})
}

// BenchmarkParseMicrosNS parses the "ts" and "dur" shapes of a Kineto trace.
func BenchmarkParseMicrosNS(b *testing.B) {
	in := [][]byte{[]byte("4909914216204.635"), []byte("1683564901548726"), []byte("12.345"), []byte("3")}
	for b.Loop() {
		for _, x := range in {
			if _, ok := parseMicrosNS(x); !ok {
				b.Fatal(string(x))
			}
		}
	}
}
