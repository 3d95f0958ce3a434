package main

import (
	"strings"
	"testing"
)

// TestCompletionOffersHelpOnce: each command's completion words and fish lines offer --help
// once, as a global flag, although urfave/cli v3 adds a --help of its own to every command.
func TestCompletionOffersHelpOnce(t *testing.T) {
	for _, shell := range []string{"bash", "fish"} {
		var out, errb strings.Builder
		if code := run([]string{"runner", "completion", shell}, stdio{in: strings.NewReader(""), out: &out, err: &errb}); code != 0 {
			t.Fatalf("completion %s: exit %d, stderr %s", shell, code, errb.String())
		}
		lines := strings.Split(out.String(), "\n")
		switch shell {
		case "bash":
			for _, l := range lines {
				if strings.HasPrefix(l, `    "run") words=`) {
					if n := strings.Count(l+" ", " --help "); n != 1 {
						t.Errorf("bash: --help %d times in %s", n, l)
					}
				}
			}
		case "fish":
			n := 0
			for _, l := range lines {
				if strings.Contains(l, " -l help ") {
					n++
				}
			}
			if n != 1 {
				t.Errorf("fish: %d lines complete --help, want the global one", n)
			}
		}
	}
}
