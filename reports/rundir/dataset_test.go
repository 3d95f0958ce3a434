package rundir

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The run directory's plan.toml keeps a relative dataset_path as written; ReadPlan reads the
// file cells.json recorded, wherever the run directory is and whatever the working directory.
// Fingerprint and Changed tell whether that file is still the one the run read.
func TestReadPlanUsesRecordedDataset(t *testing.T) {
	a := t.TempDir()
	sample, err := os.ReadFile(filepath.Join("..", "..", "testdata", "sharegpt-sample.json"))
	if err != nil {
		t.Fatal(err)
	}
	ds := filepath.Join(a, "ds1.json")
	if err := os.WriteFile(ds, sample, 0o644); err != nil {
		t.Fatal(err)
	}
	run := t.TempDir()
	plan := "name = \"t\"\n[matrix]\nmodel = [\"m\"]\nprompt = [\"hi\"]\ninput_len = [16]\n[backend]\nmode = \"serve\"\n" +
		"[load]\ndataset = \"sharegpt\"\ndataset_path = \"ds1.json\"\n"
	if err := os.WriteFile(filepath.Join(run, PlanFile), []byte(plan), 0o600); err != nil {
		t.Fatal(err)
	}
	rec, err := Fingerprint(context.Background(), ds)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Path != ds || rec.Bytes != int64(len(sample)) || len(rec.SHA256) != 64 {
		t.Fatalf("fingerprint %+v", rec)
	}
	if err := WriteJSON(filepath.Join(run, CellsFile), Cells{Dataset: rec}, nil); err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	p, _, err := ReadPlan(run)
	if err != nil {
		t.Fatalf("ReadPlan: %v", err)
	}
	if p.Load.DatasetPath != ds {
		t.Errorf("dataset_path = %q, want the recorded %q", p.Load.DatasetPath, ds)
	}

	if why := rec.Changed(context.Background()); why != "" {
		t.Errorf("unchanged file reported changed: %s", why)
	}
	// Same size, other content; then another size; then gone.
	edited := []byte(strings.Replace(string(sample), "water", "WATER", 1))
	if err := os.WriteFile(ds, edited, 0o644); err != nil {
		t.Fatal(err)
	}
	if why := rec.Changed(context.Background()); !strings.Contains(why, "other content") {
		t.Errorf("same size, other content: %q", why)
	}
	if err := os.WriteFile(ds, append(edited, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	if why := rec.Changed(context.Background()); !strings.Contains(why, "bytes, it was") {
		t.Errorf("other size: %q", why)
	}
	os.Remove(ds)
	if why := rec.Changed(context.Background()); !strings.Contains(why, "no such file") {
		t.Errorf("gone: %q", why)
	}
	// With the file gone, the plan error says it was the run's file.
	if _, _, err := ReadPlan(run); err == nil || !strings.Contains(err.Error(), ds) || !strings.Contains(err.Error(), "the file the run read its dataset from") {
		t.Errorf("ReadPlan with the recorded file gone: %v", err)
	}
}
