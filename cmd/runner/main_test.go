package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/sglprof/runner/backends/sim"
	"github.com/sglprof/runner/reports/rundir"
)

var update = flag.Bool("update", false, "rewrite testscript files with the actual output")

// TestMain makes the test binary act as the fake `sglang` and `nsys` programs (the simulators)
// when a script runs it under those names; the scripts' `runner` is the real one
// (buildScriptRunner).
//
// As many scripts compute at once as go test's default parallelism (GOMAXPROCS) allows; scripts
// that mostly wait on a real Slurm cluster run beside them (scriptSlots).
func TestMain(m *testing.M) {
	testscript.Main(slotsM{m}, map[string]func(){
		"sglang": func() {
			os.Exit(sim.SGLang(context.Background(), os.Args[1:], sim.EnvMap(os.Environ()), os.Stdout, os.Stderr))
		},
		"nsys": func() {
			os.Exit(sim.NSys(context.Background(), os.Args[1:], sim.EnvMap(os.Environ()), os.Stdout, os.Stderr))
		},
	})
}

// scriptSlots holds one token per script computing now. The scripts used to run at four times
// GOMAXPROCS, because they mostly wait on the processes they start; but those processes are CPU
// on a small machine, and the whole suite took less time without the extra scripts at once
// (docs/performance.md, "CI duration"). A script whose first command is `waits` takes no
// token: it spends its time on a real cluster's scheduler, which starts jobs on a one-second
// tick, and would otherwise hold one of the two slots of a 2-core machine for half a minute
// while using a few seconds of CPU.
var scriptSlots chan struct{}

// slotsM sizes scriptSlots before the tests run. Without -parallel, the testing package's limit
// is lifted so that waiting scripts start beside the computing ones, and scriptSlots keeps the
// computing ones at GOMAXPROCS; an explicit -parallel N is kept as the limit of both.
type slotsM struct{ m *testing.M }

func (s slotsM) Run() int {
	flag.Parse()
	n := runtime.GOMAXPROCS(0)
	explicit := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "test.parallel" {
			explicit = true
			if v, err := strconv.Atoi(f.Value.String()); err == nil && v > 0 {
				n = v
			}
		}
	})
	if !explicit {
		if err := flag.Set("test.parallel", "1024"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	scriptSlots = make(chan struct{}, n)
	return s.m.Run()
}

// scriptDir holds the scripts TestScripts runs.
const scriptDir = "testdata/script"

// waitsKey marks, in a script's Env.Values, a script whose first command is `waits`.
type waitsKey struct{}

// takeScriptSlot waits for a token of scriptSlots and gives it back when the script ends,
// unless the script's first command is `waits`.
func takeScriptSlot(env *testscript.Env) error {
	t, ok := env.T().(interface{ Name() string })
	if !ok {
		return fmt.Errorf("testscript's T has no Name method")
	}
	b, err := os.ReadFile(filepath.Join(scriptDir, path.Base(t.Name())+".txtar"))
	if err != nil {
		return err
	}
	if scriptWaits(string(b)) {
		env.Values[waitsKey{}] = true
		return nil
	}
	scriptSlots <- struct{}{}
	env.Defer(func() { <-scriptSlots })
	return nil
}

// scriptWaits reports whether a script's first command (after blank and comment lines) is
// `waits`.
func scriptWaits(script string) bool {
	for _, line := range strings.Split(script, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		return line == "waits" || strings.HasPrefix(line, "waits ")
	}
	return false
}

// waits REASON...: a no-op marking a script that mostly waits on something outside this
// machine's CPU (takeScriptSlot reads it before the script starts). Only a first command counts.
func cmdWaits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: waits REASON...")
	}
	if ts.Value(waitsKey{}) != true {
		ts.Fatalf("waits must be the script's first command: later, the script already holds a slot")
	}
}

func TestScripts(t *testing.T) {
	buildScriptRunner(t)
	testscript.Run(t, testscript.Params{
		Dir:                 scriptDir,
		RequireExplicitExec: true,
		UpdateScripts:       *update,
		Setup: func(env *testscript.Env) error {
			if err := takeScriptSlot(env); err != nil {
				return err
			}
			root, err := filepath.Abs("../..")
			if err != nil {
				return err
			}
			// Scripts share the machine's cores with each other and with other packages' tests,
			// and each mostly waits on the processes it started: with one P each, those Go
			// processes do not spin looking for work or poll their blocked system calls as often.
			// With buildScriptRunner, this package's tests take about a fifth less CPU and time
			// (docs/performance.md, "CI duration"). The readers' parallel paths are covered by
			// their own packages' tests.
			env.Setenv("GOMAXPROCS", "1")
			env.Setenv("REPO", root)
			env.Setenv("FIXTURES", fixturesDir())
			// Simulated cells take a few milliseconds instead of minutes.
			env.Setenv("RUNNER_SIM_TIME_SCALE", "0")
			// Every process the scripts start inherits this tag, so noprocs can find leftovers.
			env.Setenv("RUNNER_TEST_TAG", env.WorkDir)
			env.Setenv("CI", "true")
			// The directory of runner, sglang and nsys, for scripts that build a PATH without
			// some of them.
			env.Setenv("ORIGPATH", env.Getenv("PATH"))
			env.Setenv("BIN", filepath.SplitList(env.Getenv("PATH"))[0])
			return nil
		},
		// [fixtures] holds when the real GPU traces of ../shared/fixtures are beside the checkout.
		// [slurm] holds when a test Slurm cluster can be started here (slurm-wlm, munge, root).
		// [root] holds when the tests run as root (mknod of a device in the work directory).
		Condition: func(cond string) (bool, error) {
			switch cond {
			case "root":
				return os.Geteuid() == 0, nil
			case "fixtures":
				_, err := os.Stat(fixturesDir())
				return err == nil, nil
			case "slurm":
				return slurmAvailable(), nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"waits":      cmdWaits,
			"exitcode":   cmdExitCode,
			"rundir":     cmdRunDir,
			"verdict":    cmdVerdict,
			"globn":      cmdGlobN,
			"waitfor":    cmdWaitFor,
			"noprocs":    cmdNoProcs,
			"fiforeader": cmdFIFOReader,
			// Stopping a command midway and FIFOs a runner must refuse (signal_cmds_test.go).
			"fifowatch": cmdFIFOWatch, "fifoopened": cmdFIFOOpened, "killwhen": cmdKillWhen, "lockdb": cmdLockDB,
			// Slurm executor scripts (slurm_test.go).
			"slurmcluster": cmdSlurmCluster,
			"slurmcancel":  cmdSlurmCancel,
			"slurmsubmit":  cmdSlurmSubmit,
			"slurmsetjob":  cmdSlurmSetJob,
			"samecells":    cmdSameCells,
			"jsonhas":      cmdJSONHas,
			"portfree":     cmdPortFree, "freeport": cmdFreePort, // serve scripts (serve_cmds_test.go)
			"foreign": cmdForeign, "supervisor": cmdSupervisor, // resume scripts (resume_cmds_test.go)
			"kernelshift": cmdKernelShift, // kernel diff scripts (triage_diff_test.go)
		},
	})
}

// exitcode N PROG ARGS...: run PROG (like exec) and require exit status N. Its output is
// kept for stdout/stderr assertions.
func cmdExitCode(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exitcode N PROG ARGS...")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exitcode: %v", err)
	}
	err = ts.Exec(args[1], args[2:]...)
	got := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		got = ee.ExitCode()
	case err != nil:
		ts.Fatalf("exitcode: %v", err)
	}
	if got != want {
		ts.Logf("stdout:\n%s\nstderr:\n%s", ts.ReadFile("stdout"), ts.ReadFile("stderr"))
		ts.Fatalf("exit status %d, want %d", got, want)
	}
}

// rundir VAR PARENT: set VAR to the only run directory under PARENT (runs/<plan>).
func cmdRunDir(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: rundir VAR PARENT")
	}
	dirs, _ := filepath.Glob(filepath.Join(ts.MkAbs(args[1]), "*"))
	if len(dirs) != 1 {
		ts.Fatalf("rundir: want exactly one run directory under %s, found %d: %v", args[1], len(dirs), dirs)
	}
	ts.Setenv(args[0], dirs[0])
}

// verdict RUNDIR CELLGLOB VERDICT: every cell matching CELLGLOB has that verdict in result.json.
func cmdVerdict(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 3 {
		ts.Fatalf("usage: verdict RUNDIR CELLGLOB VERDICT")
	}
	cells, _ := filepath.Glob(filepath.Join(ts.MkAbs(args[0]), rundir.CellsDir, args[1]))
	if len(cells) == 0 {
		ts.Fatalf("verdict: no cell matches %s", args[1])
	}
	for _, c := range cells {
		r, err := rundir.ReadResult(c)
		if err != nil {
			ts.Fatalf("verdict: %v", err)
		}
		if (r.Verdict == args[2]) == neg {
			ts.Fatalf("verdict: %s is %q (want %s%q)", filepath.Base(c), r.Verdict, map[bool]string{true: "not ", false: ""}[neg], args[2])
		}
	}
}

// globn N PATTERN: exactly N files match PATTERN ("+N" means at least N).
func cmdGlobN(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: globn N PATTERN")
	}
	atLeast := strings.HasPrefix(args[0], "+")
	n, err := strconv.Atoi(strings.TrimPrefix(args[0], "+"))
	if err != nil {
		ts.Fatalf("globn: %v", err)
	}
	m, _ := filepath.Glob(ts.MkAbs(args[1]))
	if (atLeast && len(m) < n) || (!atLeast && len(m) != n) {
		ts.Fatalf("globn: %d files match %s, want %s", len(m), args[1], args[0])
	}
}

// waitfor GLOB REGEXP: wait up to 60s until a file matching GLOB contains REGEXP.
func cmdWaitFor(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: waitfor GLOB REGEXP")
	}
	re := regexp.MustCompile(args[1])
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		m, _ := filepath.Glob(ts.MkAbs(args[0]))
		for _, f := range m {
			if data, err := os.ReadFile(f); err == nil && re.Match(data) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	ts.Fatalf("waitfor: nothing matching %s contains %q after 60s", args[0], args[1])
}

// fiforeader FIFO: wait up to 60s until a process has FIFO open for reading (a runner stuck
// on it: past its signal setup), then hold FIFO open for writing, writing nothing, until the
// script ends, so the reader stays blocked in its read. It is how a script knows the moment
// to send Ctrl-C without a sleep. An open for writing with O_NONBLOCK fails with ENXIO until
// a reader is there; a reader blocked in open counts.
func cmdFIFOReader(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: fiforeader FIFO")
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		fd, err := syscall.Open(ts.MkAbs(args[0]), syscall.O_WRONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
		if err == nil {
			ts.Defer(func() { syscall.Close(fd) })
			return
		}
		if !errors.Is(err, syscall.ENXIO) || time.Now().After(deadline) {
			ts.Fatalf("fiforeader: %s: %v", args[0], err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// noprocs: no process started by this script is still alive (each inherits RUNNER_TEST_TAG).
func cmdNoProcs(ts *testscript.TestScript, neg bool, args []string) {
	tag := []byte("RUNNER_TEST_TAG=" + ts.Getenv("RUNNER_TEST_TAG") + "\x00")
	var left []string
	// A killed process group may take a moment to be reaped by init.
	for range 50 {
		left = left[:0]
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
			if err != nil || !bytes.Contains(env, tag) {
				continue
			}
			if st, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); bytes.Contains(st, []byte(") Z ")) {
				continue // a zombie is dead, only not reaped yet
			}
			cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			left = append(left, fmt.Sprintf("%d %s", pid, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
		}
		if len(left) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	ts.Fatalf("processes left behind:\n%s", strings.Join(left, "\n"))
}

// jsonhas FILE REGEXP: the JSON file, re-encoded one key per line, matches REGEXP. It makes
// assertions on nested JSON readable without a jq dependency.
func cmdJSONHas(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: jsonhas FILE REGEXP")
	}
	data, err := os.ReadFile(ts.MkAbs(args[0]))
	if err != nil {
		ts.Fatalf("jsonhas: %v", err)
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		ts.Fatalf("jsonhas: %s: %v", args[0], err)
	}
	var lines []string
	flatten("", v, &lines)
	re := regexp.MustCompile(args[1])
	found := false
	sc := bufio.NewScanner(strings.NewReader(strings.Join(lines, "\n")))
	for sc.Scan() {
		if re.MatchString(sc.Text()) {
			found = true
			break
		}
	}
	if found == neg {
		ts.Fatalf("jsonhas: %s %s %q", args[0], map[bool]string{true: "matches", false: "does not match"}[neg], args[1])
	}
}

// flatten writes one "path = value" line per JSON leaf, e.g. cells.0.verdict = "ok".
func flatten(prefix string, v any, out *[]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			flatten(join(prefix, k), e, out)
		}
	case []any:
		for i, e := range x {
			flatten(join(prefix, strconv.Itoa(i)), e, out)
		}
	default:
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(x)
		*out = append(*out, prefix+" = "+strings.TrimSuffix(b.String(), "\n"))
	}
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

// fixturesDir is ../shared/fixtures beside the repository (absent on a user's fresh clone).
func fixturesDir() string {
	d, _ := filepath.Abs(filepath.Join("..", "..", "..", "shared", "fixtures"))
	return d
}

// Only a first command of `waits` frees a script from the slots; comments and blank lines
// before it do not count, and a later one, or a command that merely starts with the letters,
// does not.
func TestScriptWaits(t *testing.T) {
	for script, want := range map[string]bool{
		"waits on a real cluster\nslurmcluster\n":              true,
		"# about it\n\n  waits on Slurm\n[!slurm] skip 'no'\n": true,
		"waits\n": true,
		"[!slurm] skip 'no'\nwaits on a cluster\n": false,
		"waitsfor x\n":      false,
		"# only comments\n": false,
		"":                  false,
	} {
		if got := scriptWaits(script); got != want {
			t.Errorf("scriptWaits(%q) = %v, want %v", script, got, want)
		}
	}
}
