package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// scriptBinDir holds the binaries the scripts run; TestMain removes it when the tests end.
var scriptBinDir struct {
	once sync.Once
	dir  string
	err  error
}

// scriptBin builds the runner as a user builds it (`go build`, without cgo unless the race
// detector needs it) once per test binary, and returns a directory holding it as runner beside
// links to this test binary as sglang and nsys (the fake programs of TestMain).
//
// The scripts used to run this test binary as runner. Every `runner` they start, and every
// supervisor, simulator and probe that runner starts in turn, is a new process of whatever
// binary runner is, several thousand in all, and a test binary starts about 10 ms slower than
// the runner (it links testscript and the tests, and it is dynamically linked): about a tenth of
// the package's CPU (docs/performance.md, "CI duration"). Building costs about 2.5 s once.
func scriptBin(t *testing.T) string {
	t.Helper()
	scriptBinDir.once.Do(func() {
		scriptBinDir.dir, scriptBinDir.err = buildScriptBin()
	})
	if scriptBinDir.err != nil {
		t.Fatalf("building the runner for the scripts: %v", scriptBinDir.err)
	}
	return scriptBinDir.dir
}

func buildScriptBin() (string, error) {
	gotool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("%w (go test puts its own go first on PATH; run the tests with go test)", err)
	}
	testBin, err := os.Executable()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "runner-scripts-bin")
	if err != nil {
		return "", err
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
		os.RemoveAll(dir)
		return "", fmt.Errorf("go %v: %w\n%s", args, err, out)
	}
	for _, name := range []string{"sglang", "nsys"} {
		if err := os.Symlink(testBin, filepath.Join(dir, name)); err != nil {
			os.RemoveAll(dir)
			return "", err
		}
	}
	return dir, nil
}

// removeScriptBin removes what scriptBin built, if it built anything.
func removeScriptBin() {
	if scriptBinDir.dir != "" {
		os.RemoveAll(scriptBinDir.dir)
	}
}
