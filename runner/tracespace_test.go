package runner

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/exitcode"
)

const budgetPlan = `name = "b"
output_dir = "OUT"
[matrix]
model = ["Qwen/Qwen-Image"]
prompt = ["a fox"]
[profile]
profilers = ["none", "torch"]
num_profiled_timesteps = 10
max_trace_mb = 256
`

// A run whose torch cells' estimated traces exceed the free space is refused before anything
// is created; with room, or without a budget, it is not.
func TestCheckTraceSpace(t *testing.T) {
	out := filepath.Join(t.TempDir(), "runs", "not-yet")
	p := testPlan(t, budgetPlan)
	cells := p.Expand()
	need := uint64(256/plans.TraceMBPerStep*plans.TraceMBPerStep) << 20 // 4 capped steps
	var asked string
	opts := Options{freeSpace: func(dir string) (uint64, error) { asked = dir; return need - 1, nil }}
	opts.defaults()
	err := checkTraceSpace(cells, out, &opts)
	var ue *exitcode.UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "may write up to 256 MB of traces") || !strings.Contains(err.Error(), "nothing was run") {
		t.Fatalf("short of space: %v; want a usage error with the estimate", err)
	}
	if asked != filepath.Dir(filepath.Dir(out)) {
		t.Errorf("free space asked of %q, want the nearest existing ancestor %q", asked, filepath.Dir(filepath.Dir(out)))
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused run created %s", out)
	}
	opts.freeSpace = func(string) (uint64, error) { return need, nil }
	if err := checkTraceSpace(cells, out, &opts); err != nil {
		t.Errorf("with room for the estimate: %v", err)
	}
	noBudget := testPlan(t, strings.Replace(budgetPlan, "max_trace_mb = 256\n", "", 1))
	opts.freeSpace = func(string) (uint64, error) { return 0, nil }
	if err := checkTraceSpace(noBudget.Expand(), out, &opts); err != nil {
		t.Errorf("without max_trace_mb nothing is estimated: %v", err)
	}
}

// A torch cell's result records its traces' size per profiled step; over the budget it warns
// with the max_trace_mb that would have fitted.
func TestRecordTraceSize(t *testing.T) {
	c := testPlan(t, budgetPlan).Expand()[1] // torch, capped to 4 steps
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "traces"), 0o755); err != nil {
		t.Fatal(err)
	}
	// 4 steps of 128 MB each would be 512 MB; a sparse file has the size without the disk.
	f, err := os.Create(filepath.Join(dir, "traces", "x.trace.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(512 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	res := &cellResult{}
	recordTraceSize(cellRecord{CellRecord: rundir.CellRecord{Cell: c}, abs: dir}, res)
	want := rundir.TraceSize{MB: 512, Steps: 4, MBPerStep: 128, BudgetMB: 256, CappedFrom: 10}
	if res.Trace == nil || *res.Trace != want {
		t.Fatalf("trace = %+v, want %+v", res.Trace, want)
	}
	if len(res.Warnings) != 1 || res.Warnings[0].Code != "trace-budget" || !strings.Contains(res.Warnings[0].Message, "max_trace_mb = 128 would cap these cells at 2 steps") {
		t.Errorf("warnings = %+v; want one trace-budget warning naming max_trace_mb = 128", res.Warnings)
	}
	none := cellResult{}
	recordTraceSize(cellRecord{CellRecord: rundir.CellRecord{Cell: testPlan(t, budgetPlan).Expand()[0]}, abs: dir}, &none)
	if none.Trace != nil {
		t.Errorf("a none cell got a trace size: %+v", none.Trace)
	}
}
