package supervisor

import (
	"strings"
	"testing"
)

func TestParseStat(t *testing.T) {
	const rest = " 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 "
	cases := []struct {
		in   string
		want Stat
		ok   bool
	}{
		{"123 (sleep) S 1 120 120" + rest + "845141 1000 200", Stat{'S', 1, 120, 845141}, true},
		{"7 (a) (b) c) Z 5 99 99" + rest + "42 0 0", Stat{'Z', 5, 99, 42}, true},
		{"7 (no close paren S 1 2", Stat{}, false},
		{"7 (x) S 1 120 120 0", Stat{}, false},
		{"7 (x) S one 120 120" + rest + "1 0 0", Stat{}, false},
		{"", Stat{}, false},
	}
	for _, tc := range cases {
		got, ok := ParseStat([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseStat(%q) = %+v %v, want %+v %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzParseStat: any /proc/<pid>/stat text parses or is refused, without a
// panic, and a parsed state is the first field after the last ')'.
func FuzzParseStat(f *testing.F) {
	f.Add("123 (sleep) S 1 120 120 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 845141 1000 200")
	f.Add("7 (a) (b) c) Z 5 99 99")
	f.Fuzz(func(t *testing.T, in string) {
		st, ok := ParseStat([]byte(in))
		if ok && st.State != strings.Fields(in[strings.LastIndexByte(in, ')')+1:])[0][0] {
			t.Fatalf("state %q not the first field after the last ')' in %q", st.State, in)
		}
	})
}
