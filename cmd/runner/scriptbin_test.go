package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// scriptRunner is the outcome of building the scripts' runner, once per test binary.
var scriptRunner struct {
	once sync.Once
	err  error
}

// buildScriptRunner builds the runner as a user installs it (`CGO_ENABLED=0 go build`, with
// -race instead when this test binary has the race detector) into the directory testscript.Main
// put first on PATH, beside this test binary's fake sglang and nsys, so that `runner` in a
// script is the real program.
//
// The scripts used to run this test binary as runner. Every `runner` they start, and every
// supervisor, simulator and probe that runner starts in turn, is a new process of whatever
// binary runner is, several thousand in all, and a test binary starts about 10 ms slower than
// the runner (it links testscript and the tests, and it is dynamically linked): about a tenth of
// the package's CPU (docs/performance.md, "CI duration"). Building costs about 2.5 s once;
// testscript.Main removes the directory when the tests end.
func buildScriptRunner(t *testing.T) {
	t.Helper()
	scriptRunner.once.Do(func() { scriptRunner.err = buildRunnerInto(commandDir()) })
	if scriptRunner.err != nil {
		t.Fatalf("building the runner for the scripts: %v", scriptRunner.err)
	}
}

// commandDir is the directory of testscript.Main's commands: the first on PATH, holding sglang.
func commandDir() string {
	dir := filepath.SplitList(os.Getenv("PATH"))[0]
	if _, err := os.Stat(filepath.Join(dir, "sglang")); err != nil {
		return ""
	}
	return dir
}

func buildRunnerInto(dir string) error {
	if dir == "" {
		return fmt.Errorf("testscript's command directory is not first on PATH (TestMain runs testscript.Main)")
	}
	gotool, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("%w (go test puts its own go first on PATH; run the tests with go test)", err)
	}
	args := []string{"build", "-o", filepath.Join(dir, "runner")}
	env := os.Environ()
	if raceEnabled {
		args = append(args, "-race")
	} else {
		env = append(env, "CGO_ENABLED=0")
	}
	cmd := exec.Command(gotool, append(args, ".")...)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %v: %w\n%s", args, err, out)
	}
	return nil
}
