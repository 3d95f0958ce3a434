package runner

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/exitcode"
)

const torchCell = `name = "partial"
[backend]
extra_args = ["--backend", "sglang"]
[matrix]
model = ["Qwen/Qwen-Image"]
prompt = ["a cat"]
num_inference_steps = [4]
[profile]
profilers = ["torch"]
`

// An attempt killed with the runner (SIGKILL: no result.json) leaves its partial files in the
// cell directory: an empty trace, the start of a log. The rerun starts from an empty cell
// directory, so the empty trace is not judged as the rerun's; the old files are kept under
// interrupted/<id>-<n>/.
func TestResumeSetsAsidePartialAttempt(t *testing.T) {
	p := testPlan(t, torchCell)
	opts := simOptions(t)
	sum, err := Run(context.Background(), p, opts)
	if err != nil || sum.ExitCode != exitcode.OK {
		t.Fatalf("run: %v, %+v", err, sum)
	}
	id := sum.Cells[0].ID
	cell := filepath.Join(sum.RunDir, rundir.CellsDir, id)
	// What a SIGKILL just after the profiler created its file leaves: no result.json, an empty
	// trace beside nothing else, a log cut short and no perf dump.
	for _, f := range []string{rundir.ResultFile, rundir.PerfFile} {
		if err := os.Remove(filepath.Join(cell, f)); err != nil {
			t.Fatal(err)
		}
	}
	old, _ := filepath.Glob(filepath.Join(cell, "traces", "*"))
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	empty := filepath.Join("traces", "1700000000.0-TP-0.trace.json.gz")
	if err := os.WriteFile(filepath.Join(cell, empty), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cell, rundir.LogFile), []byte("killed attempt\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	sum2, err := Resume(context.Background(), sum.RunDir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if sum2.Counts[plans.VerdictOK] != 1 || sum2.ExitCode != exitcode.OK {
		t.Fatalf("resume: exit %d, cells %+v; want the rerun ok", sum2.ExitCode, sum2.Cells)
	}
	if _, err := os.Stat(filepath.Join(cell, empty)); err == nil {
		t.Errorf("the killed attempt's empty trace is still in the cell directory")
	}
	kept := filepath.Join(sum.RunDir, "interrupted", id+"-1")
	if st, err := os.Stat(filepath.Join(kept, empty)); err != nil || st.Size() != 0 {
		t.Errorf("the killed attempt's trace was not kept under interrupted/: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(kept, rundir.LogFile)); err != nil || string(b) != "killed attempt\n" {
		t.Errorf("the killed attempt's log was not kept: %q, %v", b, err)
	}
	r, err := rundir.ReadResult(cell)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range r.Artifacts {
		if filepath.Base(a.Path) == filepath.Base(empty) {
			t.Errorf("the rerun's result lists the old attempt's trace %s", a.Path)
		}
	}
}
