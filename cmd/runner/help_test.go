package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/urfave/cli/v3"
)

// TestHelpGolden reads every command's help once: each is compared with its golden
// file in testdata/help (-update rewrites them), and no option line may show two defaults or
// a placeholder cut out of its usage sentence by urfave/cli's backquote rule.
func TestHelpGolden(t *testing.T) {
	app := newApp(stdio{})
	paths := [][]string{nil}
	var walk func(prefix []string, cmds []*cli.Command)
	walk = func(prefix []string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Hidden {
				continue
			}
			p := append(append([]string(nil), prefix...), c.Name)
			paths = append(paths, p)
			walk(p, c.Commands)
		}
	}
	walk(nil, app.Commands)
	twoDefaults := regexp.MustCompile(`\(default: [^)]*\).*\(default:`)
	for _, p := range paths {
		name := strings.Join(append([]string{"runner"}, p...), "_")
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := append(append([]string{"runner"}, p...), "--help")
			if code := run(args, stdio{in: strings.NewReader(""), out: &out, err: &errb}); code != 0 {
				t.Fatalf("%v: exit %d, stderr %s", args, code, errb.String())
			}
			got := out.String()
			for _, line := range strings.Split(got, "\n") {
				if twoDefaults.MatchString(line) {
					t.Errorf("two defaults: %s", line)
				}
				// A flag's placeholder is one word; a longer one is a sentence fragment that
				// urfave/cli took from backquotes in the usage (--simulate run --simulate).
				if f := strings.Fields(line); len(f) > 2 && strings.HasPrefix(f[0], "--") &&
					strings.HasPrefix(f[2], "-") && !strings.HasSuffix(f[1], ",") {
					t.Errorf("placeholder taken from usage text: %s", line)
				}
			}
			golden := filepath.Join("testdata", "help", name+".txt")
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test ./cmd/runner -run TestHelpGolden -update writes it)", err)
			}
			if got != string(want) {
				t.Errorf("help of %v differs from %s:\n%s", p, golden, got)
			}
		})
	}
}
