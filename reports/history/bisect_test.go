package history

import (
	"path/filepath"
	"testing"
	"time"
)

func TestBisectStepsAreCachedPerFingerprintAndCommit(t *testing.T) {
	ctx := t.Context()
	db, err := Open(ctx, filepath.Join(t.TempDir(), FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	at := time.Unix(100, 0)
	steps := []BisectStep{
		{Fingerprint: "f1", Commit: "aaa", Batch: 1, Time: at, Plan: "p", RunDir: "d2", Repeats: 2, Outcome: StepMeasured},
		{Fingerprint: "f1", Commit: "aaa", Batch: 0, Time: at, Plan: "p", RunDir: "d1", Repeats: 3, Outcome: StepMeasured},
		{Fingerprint: "f1", Commit: "aaa", Batch: 0, Time: at, Plan: "p", RunDir: "other", Repeats: 9, Outcome: StepMeasured},
		{Fingerprint: "f2", Commit: "aaa", Batch: 0, Time: at, Plan: "p", Outcome: StepSkipped, Reason: "install failed"},
	}
	for _, s := range steps {
		if err := db.AppendBisectStep(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	got, err := db.BisectSteps(ctx, "f1", "aaa")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].RunDir != "d1" || got[0].Repeats != 3 || got[1].RunDir != "d2" {
		t.Fatalf("steps of f1 = %+v, want d1 (3 repeats, the first record of batch 0) then d2", got)
	}
	got, _ = db.BisectSteps(ctx, "f2", "aaa")
	if len(got) != 1 || got[0].Outcome != StepSkipped || got[0].Reason != "install failed" {
		t.Fatalf("steps of f2 = %+v, want the one skipped step", got)
	}
	if n, _ := db.CountRuns(ctx); n != 0 {
		t.Errorf("bisection steps counted as %d runs: they must stay out of the rolling median", n)
	}
}
