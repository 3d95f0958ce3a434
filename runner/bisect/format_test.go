package bisect

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sglprof/runner/reports/compare"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the output:\n%s", path, got)
	}
}

// report is a bisection of the fake history of 16 commits with a step at 9 and commit 4
// broken, with fixed dates.
func report(t *testing.T, stepAt int) *Report {
	f := &fakeRepo{n: 16, stepAt: stepAt, step: 1.10, cv: 0.01, seed: 7, broken: map[int]bool{4: true}}
	commits := f.commits()
	for i := range commits {
		commits[i].Date = time.Date(2026, 1, 1+i, 12, 0, 0, 0, time.UTC)
	}
	res, err := Run(t.Context(), commits, Options{Repeats: 2, MaxRepeats: 4, Measure: f.measure, Judge: judge})
	if err != nil {
		t.Fatal(err)
	}
	return &Report{Result: res, Config: key, StepsDir: "out/plan/bisect/0123456789abcdef"}
}

func TestReportTextAndJSON(t *testing.T) {
	for name, stepAt := range map[string]int{"found": 9, "nostep": -1, "candidates": 5} {
		t.Run(name, func(t *testing.T) {
			rep := report(t, stepAt)
			var txt, js bytes.Buffer
			if err := rep.WriteText(&txt); err != nil {
				t.Fatal(err)
			}
			if err := rep.WriteJSON(&js); err != nil {
				t.Fatal(err)
			}
			golden(t, "report_"+name+".txt", txt.Bytes())
			golden(t, "report_"+name+".json", js.Bytes())
			switch name {
			case "found":
				if !strings.Contains(txt.String(), "first bad commit: "+commits16()[9].Hash) {
					t.Error("the text does not name commit 9")
				}
			case "nostep":
				if !strings.Contains(js.String(), `"first_bad": null`) || !strings.Contains(txt.String(), "endpoints do not differ") {
					t.Error("no step, yet a commit is named")
				}
			case "candidates":
				// Commit 4 (broken) sits right before the step at 5: no single commit.
				if !strings.Contains(txt.String(), "2 candidates") {
					t.Errorf("text:\n%s", txt.String())
				}
			}
		})
	}
}

func commits16() []Commit { return (&fakeRepo{n: 16}).commits() }

func TestTolerancePct(t *testing.T) {
	if got := TolerancePct(compare.Row{Limit: 5, Base: compare.Stat{Median: 100}}); got != 5 {
		t.Errorf("tolerance = %v%%, want 5%%", got)
	}
}

func FuzzParseLog(f *testing.F) {
	f.Add("abc\x002026-01-01T00:00:00+00:00\x00subject\n")
	f.Add("\x00\x00\n\n")
	f.Fuzz(func(t *testing.T, text string) {
		for _, c := range parseLog(text) {
			if c.Hash == "" || strings.Contains(c.Hash, "\x00") || strings.Contains(c.Subject, "\n") {
				t.Fatalf("parsed %+v from %q", c, text)
			}
		}
	})
}
