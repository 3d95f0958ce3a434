package main

import (
	"io"
	"slices"
	"strings"
	"testing"
)

func TestPermuteArgs(t *testing.T) {
	app := newApp(stdio{in: strings.NewReader(""), out: io.Discard, err: io.Discard})
	cases := []struct{ in, want string }{
		{"runner triage t.json --format json", "runner triage --format json t.json"},
		{"runner triage --format json t.json", "runner triage --format json t.json"},
		{"runner triage t.json --format=json --cutoff 5", "runner triage --format=json --cutoff 5 t.json"},
		{"runner triage t.json --log-level debug", "runner --log-level debug triage t.json"},
		{"runner plan --log-level debug p.toml", "runner --log-level debug plan p.toml"},
		{"runner trace --log-level debug fix --log-format json a b", "runner --log-level debug --log-format json trace fix a b"},
		{"runner triage t.json --help", "runner triage --help"},
		{"runner trace fix a b --bogus", "runner trace fix --bogus a b"},
		{"runner triage -- -x.json --format json", "runner triage -- -x.json --format json"},
		{"runner triage a.json --cutoff 3 -- -x.json", "runner triage --cutoff 3 a.json -- -x.json"},
		{"runner run plan.toml --simulate --no-progress", "runner run --simulate --no-progress plan.toml"},
		{"runner help trace fix", "runner trace fix --help"},
		{"runner frob --x y", "runner frob --x y"},
		{"runner", "runner"},
		{"runner sim sglang generate --model-path m --prompt=-x", "runner sim sglang generate --model-path m --prompt=-x"},
	}
	for _, c := range cases {
		got := permuteArgs(app, strings.Fields(c.in))
		if want := strings.Fields(c.want); !slices.Equal(got, want) {
			t.Errorf("permuteArgs(%q)\n got %q\nwant %q", c.in, got, want)
		}
	}
}

func TestSuggestCommand(t *testing.T) {
	app := newApp(stdio{in: strings.NewReader(""), out: io.Discard, err: io.Discard})
	cases := map[string]string{
		"reprot": "report", "rnu": "run", "exp": "export", "trce": "trace",
		// Too far, too short, or the beginning of several names: no guess.
		"frob": "", "xyz": "", "qqqqqq": "", "q": "", "rep": "",
	}
	for name, want := range cases {
		if got := suggestCommand(app.Commands, name); got != want {
			t.Errorf("suggestCommand(%q) = %q, want %q", name, got, want)
		}
	}
}
