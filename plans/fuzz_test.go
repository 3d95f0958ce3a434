package plans

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse checks that no input makes Parse panic, that a rejection is always a *Error with
// messages, and that an accepted plan expands to cells with unique ids, the same on every read.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("examples/*.toml")
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, c := range append(append(badCases, serveBadCases...), llmBadCases...) {
		f.Add([]byte(c.src))
	}
	for _, file := range []string{"testdata/full-serve.toml"} {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(llmMin + "[load]\napi = \"completions\"\nconcurrency = 8\n[compare]\nalpha = 0.01\n[compare.tolerances]\nrequest_latency = \"5% or 20ms\"\nthroughput = \"5%\"\n[bundle]\nredact = ['tok-[0-9]+']\n"))
	f.Add([]byte(serveMin + "restart = \"per-cell\"\nport = 31000\n[profile]\nprofilers = [\"torch\", \"nsys\"]\nstart_step = 2\n[load]\napi = \"videos\"\n[compare]\ntolerances = { peak_memory = \"1% or 1GiB\", e2e = \"15% or 1s\" }\n"))
	f.Add([]byte(minimal))
	f.Add([]byte(minimal + "[backend]\nenv = { a.b = 1, \"\" = \"x\" }\n[[matrix.x]]\ny = 1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("fuzz.toml", data)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) || len(pe.Problems) == 0 {
				t.Fatalf("rejection without problems: %T %v", err, err)
			}
			for _, pr := range pe.Problems {
				if pr.Msg == "" || pr.Line < 0 || pr.Col < 0 {
					t.Fatalf("bad problem %+v", pr)
				}
			}
			if p != nil {
				t.Fatal("plan returned with an error")
			}
			return
		}
		cells := p.Expand()
		if len(cells) == 0 || len(cells) > MaxCells {
			t.Fatalf("accepted plan expands to %d cells", len(cells))
		}
		seen := map[string]bool{}
		for i, c := range cells {
			_, rest, _ := strings.Cut(c.ID, "-")
			if seen[rest] || c.Index != i || c.Key == "" || strings.ContainsAny(c.ID, "/\\\x00 ") {
				t.Fatalf("cell %d: id %q not unique or not a file name (key %q)", i, c.ID, c.Key)
			}
			seen[rest] = true
		}
		again, err := Parse("fuzz.toml", data)
		if err != nil {
			t.Fatalf("second parse fails: %v", err)
		}
		for i, c := range again.Expand() {
			if c.ID != cells[i].ID || c.Key != cells[i].Key {
				t.Fatalf("ids change between reads: %q vs %q", c.ID, cells[i].ID)
			}
		}
	})
}
