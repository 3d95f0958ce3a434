// Package slurmtest starts a real one-node Slurm cluster for tests (scripts/slurm-cluster.sh:
// Debian's slurm-wlm and munge, a generated slurm.conf, state under the test's temp dir) and
// stops it again by pid when the test ends.
package slurmtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// RequireEnv, when set to 1, turns a missing Slurm into a failure instead of a skip: CI sets it
// after installing slurm-wlm and munge, so the Slurm tests cannot be skipped there unnoticed.
const RequireEnv = "RUNNER_REQUIRE_SLURM"

// Start starts the cluster and returns the environment (os.Environ plus SLURM_CONF) under which
// sbatch, squeue and the rest reach it. It skips the test when the Slurm daemons are absent or
// the test is not root, unless RequireEnv is 1.
func Start(t testing.TB) []string {
	t.Helper()
	for _, b := range []string{"sbatch", "slurmctld", "slurmd", "munged"} {
		if _, err := exec.LookPath(b); err != nil {
			skipOrFail(t, b+" is not installed (apt-get install slurm-wlm munge)")
		}
	}
	if os.Geteuid() != 0 {
		skipOrFail(t, "the test cluster's slurmd must run as root")
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "..", "scripts", "slurm-cluster.sh")
	dir := t.TempDir()
	out, err := exec.Command("bash", script, "start", dir).CombinedOutput()
	t.Cleanup(func() {
		if out, err := exec.Command("bash", script, "stop", dir).CombinedOutput(); err != nil {
			t.Errorf("stop the test cluster: %v: %s", err, out)
		}
	})
	if err != nil {
		t.Fatalf("start the test cluster: %v: %s", err, out)
	}
	conf := ""
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "SLURM_CONF="); ok {
			conf = v
		}
	}
	if conf == "" {
		t.Fatalf("the cluster script printed no SLURM_CONF: %s", out)
	}
	return append(os.Environ(), "SLURM_CONF="+conf)
}

func skipOrFail(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s, and %s=1 requires the Slurm tests to run", why, RequireEnv)
	}
	t.Skip("no test Slurm cluster: " + why)
}
