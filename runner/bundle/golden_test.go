package bundle

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// goldenRun is a small run directory kept in testdata: a diffusers fallback and an ok cell on
// two H100s, with a comparison against a baseline and secrets in the plan, the manifest and a
// log.
const goldenRun = "testdata/run/20260101T000000Z-abc123"

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./runner/bundle -update to create it)", err)
	}
	if d := cmp.Diff(string(want), got); d != "" {
		t.Errorf("%s differs (-want +got; go test ./runner/bundle -update rewrites it):\n%s", name, d)
	}
}

func TestReadmeGolden(t *testing.T) {
	out := filepath.Join(t.TempDir(), "golden-20260101T000000Z-abc123.bundle.tar.gz")
	now := func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }
	if _, err := Create(context.Background(), goldenRun, Options{Output: out, Now: now, RunnerVersion: "VERSION"}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := t.TempDir()
	if _, err := Extract(f, dir, ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	for golden, name := range map[string]string{"readme.golden": ReadmeFile, "bundle_json.golden": MetadataFile} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		checkGolden(t, golden, string(got))
	}
}

func TestIssueGolden(t *testing.T) {
	body, err := Issue(goldenRun, IssueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "issue.golden", body)
}
