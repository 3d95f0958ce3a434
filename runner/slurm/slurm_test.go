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
	s, err := slurm.Script(slurm.Config{Partition: "gpu", Account: "perf", Time: "01:00:00", GPUsPerTask: 2, MaxParallel: 3,
		ExtraSbatch: []string{"--exclusive", "--gres=gpu:2"}, Setup: []string{"module load cuda/12.4", "source /opt/venv/bin/activate"}},
		slurm.Array{Cells: []string{"000-a", "001-it's"}, Runner: []string{"/opt/bin/runner"}, ExecArgs: []string{"--simulate"},
			RunDir: "/shared/runs/x", Name: "runner-0123456789ab-1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"#SBATCH --job-name=\"runner-0123456789ab-1\"\n",
		"#SBATCH --array=0-1%3\n", "#SBATCH --partition=\"gpu\"\n", "#SBATCH --account=\"perf\"\n", "#SBATCH --time=\"01:00:00\"\n",
		"#SBATCH --gpus-per-task=2\n", "#SBATCH --exclusive\n", "#SBATCH --gres=\"gpu:2\"\n",
		"#SBATCH --output=\"/shared/runs/x/slurm/task-%A_%a.out\"\n",
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

// TestScriptQuotesDirectives: every value of an #SBATCH line is one argument as sbatch splits
// the line (quotes group, a backslash escapes, an unquoted '#' ends it), and the --output path
// keeps the run directory's '%' literal: a run directory with a space, quotes, '#' and %j, and
// a value that tries to add an option, come out as one argument each.
func TestScriptQuotesDirectives(t *testing.T) {
	dir := `/shared/a b'c"d #e %j`
	s, err := slurm.Script(slurm.Config{Time: "00:05:00 --chdir=/srv", ExtraSbatch: []string{`--comment=x" --chdir=/srv`}},
		slurm.Array{Cells: []string{"c"}, Runner: []string{"/r"}, RunDir: dir, Name: "n"})
	if err != nil {
		t.Fatal(err)
	}
	args := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		rest, ok := strings.CutPrefix(line, "#SBATCH")
		if !ok {
			continue
		}
		words := sbatchWords(t, rest)
		if len(words) != 1 {
			t.Fatalf("%q is %d arguments to sbatch: %q", line, len(words), words)
		}
		k, v, _ := strings.Cut(words[0], "=")
		args[k] = v
	}
	for k, want := range map[string]string{
		"--output":  `/shared/a b'c"d #e %%j/slurm/task-%A_%a.out`,
		"--time":    "00:05:00 --chdir=/srv",
		"--comment": `x" --chdir=/srv`,
	} {
		if args[k] != want {
			t.Errorf("%s = %q, want %q\n%s", k, args[k], want, s)
		}
	}
	if _, ok := args["--chdir"]; ok {
		t.Errorf("an option was smuggled in:\n%s", s)
	}
}

// sbatchWords splits an #SBATCH line's rest as sbatch does (src/sbatch/opt.c, _get_argument):
// whitespace separates, single or double quotes group, a backslash escapes the next character
// (inside quotes too), an unquoted '#' ends the line. An unmatched quote is sbatch's fatal error.
func sbatchWords(t *testing.T, line string) []string {
	var words []string
	var cur strings.Builder
	in, quote, escape, quoted := false, byte(0), false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case escape:
			escape = false
		case c == '\\':
			escape, in = true, true
			continue
		case quoted:
			if c == quote {
				quoted = false
				continue
			}
		case c == '"' || c == '\'':
			quoted, quote, in = true, c, true
			continue
		case c == '#':
			i = len(line)
			continue
		case c == ' ' || c == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
			continue
		}
		in = true
		cur.WriteByte(c)
	}
	if quoted {
		t.Fatalf("unmatched %c in %q", quote, line)
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// TestScriptRefuses: what no quoting makes safe is refused, not written: a line break (it ends
// the #SBATCH line), the words sbatch may take for a heterogeneous job's separator, and a
// backslash in the run directory (it turns off Slurm's %A/%a replacement in --output).
func TestScriptRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg slurm.Config
		dir string
	}{
		"newline in time":      {slurm.Config{Time: "01:00:00\n#SBATCH --chdir=/srv"}, "/r"},
		"hetjob in partition":  {slurm.Config{Partition: "a hetjob b"}, "/r"},
		"newline in extra":     {slurm.Config{ExtraSbatch: []string{"--comment=a\nb"}}, "/r"},
		"two options in extra": {slurm.Config{ExtraSbatch: []string{"--exclusive --chdir=/srv"}}, "/r"},
		"backslash in run dir": {slurm.Config{}, `/r\\x`},
		"newline in run dir":   {slurm.Config{}, "/r\nx"},
	} {
		if s, err := slurm.Script(tc.cfg, slurm.Array{Cells: []string{"c"}, Runner: []string{"/r"}, RunDir: tc.dir, Name: "n"}); err == nil {
			t.Errorf("%s: written:\n%s", name, s)
		}
	}
}

// TestJobNameCarriesTheRun: a run's job names are told apart from any other run's and from
// foreign names.
func TestJobNameCarriesTheRun(t *testing.T) {
	a, b := slurm.RunTag("/runs/p/A"), slurm.RunTag("/runs/p/B")
	if a == b || len(a) != 12 {
		t.Fatalf("tags %q %q", a, b)
	}
	if n := slurm.JobName(a, 3); !slurm.IsJobNameOf(a, n) || slurm.IsJobNameOf(b, n) {
		t.Errorf("%s: of a %v, of b %v", n, slurm.IsJobNameOf(a, n), slurm.IsJobNameOf(b, n))
	}
	for _, foreign := range []string{"", "runner-" + a, "runner-" + a + "-", "runner-" + a + "-1x", "x-runner-" + a + "-1", "sleep"} {
		if slurm.IsJobNameOf(a, foreign) {
			t.Errorf("%q taken for a job of run %s", foreign, a)
		}
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
	// A run directory with what an #SBATCH line or a Slurm filename pattern would read
	// differently unquoted: a space, both quotes, '#', and %j.
	dir := filepath.Join(t.TempDir(), `a b'c"d #e %j`)
	if err := os.MkdirAll(filepath.Join(dir, slurm.MarkerDir), 0o755); err != nil {
		t.Fatal(err)
	}
	cells := []string{"000-a", "001-b", "002-slow", "003-d"}
	tag := slurm.RunTag(dir)
	name := slurm.JobName(tag, 1)
	script, err := slurm.Script(slurm.Config{MaxParallel: 2, Time: "10:00"}, slurm.Array{Cells: cells, Runner: []string{writeFakeRunner(t, dir)},
		ExecArgs: []string{"--simulate"}, RunDir: dir, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "job.sbatch")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	since := time.Now()
	id, err := c.Submit(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	// The array is found by its name, for this user only.
	if jobs, err := c.FindJobs(ctx, name, os.Getuid(), since); err != nil || len(jobs) != 1 || jobs[0].ID != id || !jobs[0].Active {
		t.Errorf("FindJobs(%s) = %+v, %v; want job %s, active", name, jobs, err, id)
	}
	for _, other := range []struct {
		name string
		uid  int
	}{{name, os.Getuid() + 1}, {slurm.JobName(tag, 2), os.Getuid()}, {"job.sbatch", os.Getuid()}} {
		if jobs, err := c.FindJobs(ctx, other.name, other.uid, since); err != nil || len(jobs) != 0 {
			t.Errorf("FindJobs(%s, uid %d) = %+v, %v; want none", other.name, other.uid, jobs, err)
		}
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
		if _, err := os.Stat(filepath.Join(dir, slurm.TaskOutput(id, i))); err != nil {
			t.Errorf("task %d's output is not where the runner looks for it: %v", i, err)
		}
	}
	if jobs, err := c.FindJobs(ctx, name, os.Getuid(), since); err != nil || len(jobs) != 1 || jobs[0].ID != id || jobs[0].Active {
		t.Errorf("FindJobs(%s) after the end = %+v, %v; want job %s, not active", name, jobs, err, id)
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
