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
		{"runner trace help fix", "runner trace fix --help"},
		{"runner trace h slim", "runner trace slim --help"},
		{"runner trace help", "runner trace --help"},
		{"runner run help", "runner run --help"},
		{"runner triage --format json h", "runner triage --format json --help"},
		{"runner triage t.json help", "runner triage t.json help"},
		{"runner triage -- help", "runner triage -- help"},
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

// TestFlagValueError: a flag value that does not parse is one usage line that names the flag,
// the value and the reason once (urfave/cli v3 quotes strconv's whole error, which repeats the
// value).
func TestFlagValueError(t *testing.T) {
	cases := map[string]string{
		"runner triage --rank x t.json":                      `runner: invalid value "x" for flag -rank: invalid syntax (see runner triage --help)`,
		"runner triage t.json --cutoff 1,5":                  `runner: invalid value "1,5" for flag -cutoff: invalid syntax (see runner triage --help)`,
		"runner trace slim --steps 99999999999999999999 a b": `runner: invalid value "99999999999999999999" for flag -steps: value out of range (see runner trace slim --help)`,
	}
	for in, want := range cases {
		var out, errb strings.Builder
		if code := run(strings.Fields(in), stdio{in: strings.NewReader(""), out: &out, err: &errb}); code != 2 {
			t.Errorf("%s: exit %d, want 2", in, code)
		}
		if got := strings.TrimSuffix(errb.String(), "\n"); got != want {
			t.Errorf("%s:\n got %s\nwant %s", in, got, want)
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
