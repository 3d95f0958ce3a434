package slurm_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sglprof/runner/runner/slurm"
	"github.com/sglprof/runner/runner/slurm/slurmtest"
)

func TestScript(t *testing.T) {
	s := slurm.Script(slurm.Config{Partition: "gpu", Account: "perf", Time: "01:00:00", GPUsPerTask: 2, MaxParallel: 3,
		ExtraSbatch: []string{"--exclusive"}, Setup: []string{"module load cuda/12.4", "source /opt/venv/bin/activate"}},
		slurm.Array{Cells: []string{"000-a", "001-it's"}, Runner: []string{"/opt/bin/runner"}, ExecArgs: []string{"--simulate"},
			RunDir: "/shared/runs/x", Name: "qwen"})
	for _, want := range []string{
		"#SBATCH --array=0-1%3\n", "#SBATCH --partition=gpu\n", "#SBATCH --account=perf\n", "#SBATCH --time=01:00:00\n",
		"#SBATCH --gpus-per-task=2\n", "#SBATCH --exclusive\n", "#SBATCH --output=/shared/runs/x/slurm/task-%a.out\n",
		"cells=('000-a' '001-it'\\''s')\n", "module load cuda/12.4\nsource /opt/venv/bin/activate\n",
		"exec '/opt/bin/runner' exec-cell '--simulate' \"$rundir\" \"$cell\"\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("script lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "--qos") || strings.Contains(s, "--mem") {
		t.Errorf("unset keys written:\n%s", s)
	}
}

func TestOutcomes(t *testing.T) {
	for state, want := range map[string]struct {
		interrupted bool
		code        string
	}{
		"CANCELLED": {true, "slurm-cancelled"}, "PREEMPTED": {true, "slurm-preempted"}, "NODE_FAIL": {true, "slurm-node-failure"},
		"TIMEOUT": {false, "slurm-time-limit"}, "OUT_OF_MEMORY": {false, "slurm-out-of-memory"}, "FAILED": {false, "slurm-task-failed"},
		"COMPLETED": {false, "slurm-task-failed"},
	} {
		o := slurm.OutcomeOf(slurm.Task{Index: 4, State: state, Node: "gpu07"})
		if o.Interrupted != want.interrupted || o.Code != want.code || !strings.Contains(o.Message, "gpu07") {
			t.Errorf("%s: %+v, want %+v naming the node", state, o, want)
		}
	}
}

// writeFakeRunner puts a stand-in for the runner binary that an array task execs: it records
// its arguments in the run directory, then sleeps for the cell's time.
func writeFakeRunner(t *testing.T, dir string) string {
	p := filepath.Join(dir, "fake-runner")
	script := `#!/bin/bash
# args: exec-cell [flags] RUNDIR CELL
rundir="${@: -2:1}"; cell="${@: -1}"
echo "$@" > "$rundir/ran-$cell"
case "$cell" in *slow*) sleep 60 ;; *) sleep 0.2 ;; esac
`
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestArrayOnRealCluster(t *testing.T) {
	env := slurmtest.Start(t)
	c := slurm.Client{Env: env}
	ctx := context.Background()
	if err := c.Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, slurm.MarkerDir), 0o755); err != nil {
		t.Fatal(err)
	}
	cells := []string{"000-a", "001-b", "002-slow", "003-d"}
	script := slurm.Script(slurm.Config{MaxParallel: 2}, slurm.Array{Cells: cells, Runner: []string{writeFakeRunner(t, dir)},
		ExecArgs: []string{"--simulate"}, RunDir: dir, Name: "t"})
	path := filepath.Join(dir, "job.sbatch")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	id, err := c.Submit(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the slow task to run, then cancel it; the others end on their own.
	deadline := time.Now().Add(60 * time.Second)
	var tasks []slurm.Task
	cancelled := false
	for time.Now().Before(deadline) {
		tasks, err = c.Tasks(ctx, id, len(cells))
		if err != nil {
			t.Fatal(err)
		}
		// RUNNING in squeue can come before the batch script has started: cancel the slow task
		// once it has written its file, so what it did before the cancel is certain.
		_, started := os.Stat(filepath.Join(dir, "ran-"+cells[2]))
		if !cancelled && tasks[2].State == "RUNNING" && started == nil {
			if err := c.CancelTask(ctx, id, 2); err != nil {
				t.Fatal(err)
			}
			cancelled = true
		}
		if !slices.ContainsFunc(tasks, func(t slurm.Task) bool { return !t.Done() }) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	host, _ := os.Hostname()
	host, _, _ = strings.Cut(host, ".")
	for i, tk := range tasks {
		want := "COMPLETED"
		if i == 2 {
			want = "CANCELLED"
		}
		if tk.State != want || tk.Node != host {
			t.Errorf("task %d: %+v, want %s on %s", i, tk, want, host)
		}
		b, err := os.ReadFile(filepath.Join(dir, "ran-"+cells[i]))
		if err != nil || !strings.Contains(string(b), "exec-cell --simulate "+dir+" "+cells[i]) {
			t.Errorf("task %d ran %q (%v)", i, b, err)
		}
		if _, err := os.Stat(filepath.Join(dir, slurm.Marker(id, i))); err != nil {
			t.Errorf("task %d left no start marker: %v", i, err)
		}
	}
	if o := slurm.OutcomeOf(tasks[2]); !o.Interrupted {
		t.Errorf("a cancelled task's outcome %+v", o)
	}
}

func TestCheckFailsWithoutSlurm(t *testing.T) {
	c := slurm.Client{Env: []string{"PATH=" + t.TempDir()}}
	err := c.Check(context.Background())
	if err == nil || !strings.Contains(err.Error(), "sbatch") {
		t.Fatalf("Check without sbatch: %v, want an error naming sbatch", err)
	}
}
