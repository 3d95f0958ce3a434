package backends

import (
	"slices"
	"testing"
)

func TestFlagValue(t *testing.T) {
	argv := []string{"--tp-size", "2", "--x=1", "--bare", "--tp-size=4", "--last"}
	for _, tc := range []struct {
		names []string
		val   string
		ok    bool
	}{
		{[]string{"--tp-size"}, "4", true}, // the last one wins, as argparse
		{[]string{"--x"}, "1", true},
		{[]string{"--bare"}, "", true},
		{[]string{"--last"}, "", true},
		{[]string{"--none"}, "", false},
	} {
		if v, ok := FlagValue(argv, tc.names...); v != tc.val || ok != tc.ok {
			t.Errorf("FlagValue(%v) = %q, %v; want %q, %v", tc.names, v, ok, tc.val, tc.ok)
		}
	}
}

// TestFlagValueNegative: SGLang turns chunked prefill off with --chunked-prefill-size -1.
func TestFlagValueNegative(t *testing.T) {
	if v, ok := FlagValue([]string{"--chunked-prefill-size", "-1", "--x"}, "--chunked-prefill-size"); v != "-1" || !ok {
		t.Errorf("got %q, %v; want -1", v, ok)
	}
}

// FuzzFlagValue: any argv is read without a panic, and a flag found has a value that is one of
// argv's elements or a suffix of one.
func FuzzFlagValue(f *testing.F) {
	f.Add("--tp-size", "2", "--tp-size=3")
	f.Add("-tp", "", "=")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		argv := []string{a, b, c}
		v, ok := FlagValue(argv, a, "-tp", "--tp-size")
		if !ok || v == "" {
			return
		}
		if !slices.ContainsFunc(argv, func(s string) bool { return len(s) >= len(v) && s[len(s)-len(v):] == v }) {
			t.Errorf("value %q is in no element of %q", v, argv)
		}
	})
}
