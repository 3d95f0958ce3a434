package runner

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/exitcode"
)

func TestRunCellsRunsOnlyTheNamedCells(t *testing.T) {
	p := testPlan(t, twoCells)
	opts := simOptions(t)
	sum, err := RunCells(context.Background(), p, []string{"001-qwen-image-default-s0-none-r2", "001-qwen-image-default-s0-none-r2"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Cells) != 1 || sum.Cells[0].ID != "001-qwen-image-default-s0-none-r2" || sum.Cells[0].Verdict != "ok" {
		t.Fatalf("cells = %+v", sum.Cells)
	}
	ents, _ := os.ReadDir(filepath.Join(sum.RunDir, rundir.CellsDir))
	if len(ents) != 1 {
		t.Errorf("%d cell directories, want 1", len(ents))
	}
	// The cell keeps the ID, hence the argv, it has in the whole plan.
	if _, err := os.Stat(filepath.Join(sum.RunDir, rundir.CellsDir, "001-qwen-image-default-s0-none-r2", rundir.ResultFile)); err != nil {
		t.Error(err)
	}
}

func TestRunCellsUnknownCell(t *testing.T) {
	p := testPlan(t, twoCells)
	_, err := RunCells(context.Background(), p, []string{"009-nope"}, simOptions(t))
	var ue *exitcode.UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "the plan has no cell 009-nope; its cells are: 000-qwen-image-default-s0-none-r1, 001-qwen-image-default-s0-none-r2") {
		t.Fatalf("err = %v", err)
	}
}

func TestProbeEnvironmentCreatesNothing(t *testing.T) {
	p := testPlan(t, twoCells)
	opts := simOptions(t)
	m := ProbeEnvironment(context.Background(), p, opts)
	if !m.Simulated || m.Cells != 2 || m.Runner.Version == "" {
		t.Errorf("manifest = %+v", m)
	}
	if pr := m.Probes["sglang"]; !pr.Available || !strings.Contains(pr.Output, "sglang version") {
		t.Errorf("sglang probe = %+v", pr)
	}
	if ents, _ := os.ReadDir(opts.OutputDir); len(ents) != 0 {
		t.Errorf("ProbeEnvironment wrote %v", ents)
	}
}
