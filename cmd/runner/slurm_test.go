package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/slurm/slurmtest"
)

// slurmAvailable reports whether a test cluster can be started. Where CI requires the Slurm
// tests (slurmtest.RequireEnv=1) it is always true, so a missing Slurm fails the script
// (slurmcluster) instead of skipping it.
func slurmAvailable() bool {
	if os.Getenv(slurmtest.RequireEnv) == "1" {
		return true
	}
	for _, b := range []string{"sbatch", "slurmctld", "slurmd", "munged"} {
		if _, err := exec.LookPath(b); err != nil {
			return false
		}
	}
	return os.Geteuid() == 0
}

// slurmcluster starts a real one-node Slurm cluster (scripts/slurm-cluster.sh) under the
// script's work directory, sets SLURM_CONF for the rest of the script and stops the cluster,
// by pid, when the script ends.
func cmdSlurmCluster(ts *testscript.TestScript, neg bool, args []string) {
	script := filepath.Join(ts.Getenv("REPO"), "scripts", "slurm-cluster.sh")
	dir := ts.MkAbs("slurm-cluster")
	ts.Defer(func() {
		if out, err := exec.Command("bash", script, "stop", dir).CombinedOutput(); err != nil {
			ts.Logf("stop the test cluster: %v: %s", err, out)
		}
	})
	out, err := exec.Command("bash", script, "start", dir).CombinedOutput()
	if err != nil {
		ts.Fatalf("start the test cluster: %v: %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "SLURM_CONF="); ok {
			ts.Setenv("SLURM_CONF", v)
			return
		}
	}
	ts.Fatalf("the cluster script printed no SLURM_CONF: %s", out)
}

// slurmcancel RUN TASK cancels one task of the run's last job array (scancel JOB_TASK), as an
// administrator or a preemption would.
func cmdSlurmCancel(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: slurmcancel RUN TASK")
	}
	var m rundir.Manifest
	ts.Check(json.Unmarshal([]byte(ts.ReadFile(filepath.Join(args[0], rundir.ManifestFile))), &m))
	if len(m.Slurm) == 0 {
		ts.Fatalf("%s/manifest.json records no Slurm job", args[0])
	}
	cmd := exec.Command("scancel", m.Slurm[len(m.Slurm)-1].JobID+"_"+args[1])
	cmd.Env = append(os.Environ(), "SLURM_CONF="+ts.Getenv("SLURM_CONF"))
	if out, err := cmd.CombinedOutput(); err != nil {
		ts.Fatalf("scancel: %v: %s", err, out)
	}
}

// slurmsubmit VAR SBATCH_ARGS... submits a job that is not the runner's (sbatch --parsable
// SBATCH_ARGS, e.g. --wrap 'sleep 600') and sets VAR to its job id.
func cmdSlurmSubmit(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 {
		ts.Fatalf("usage: slurmsubmit VAR SBATCH_ARGS...")
	}
	cmd := exec.Command("sbatch", append([]string{"--parsable"}, args[1:]...)...)
	cmd.Env = append(os.Environ(), "SLURM_CONF="+ts.Getenv("SLURM_CONF"))
	cmd.Dir = ts.MkAbs(".")
	out, err := cmd.Output()
	if err != nil {
		ts.Fatalf("sbatch: %v: %s", err, out)
	}
	id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
	ts.Setenv(args[0], id)
}

// slurmsetjob RUN INDEX JOBID edits the run's manifest.json as someone else might: array INDEX
// now names job JOBID.
func cmdSlurmSetJob(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 3 {
		ts.Fatalf("usage: slurmsetjob RUN INDEX JOBID")
	}
	path := filepath.Join(ts.MkAbs(args[0]), rundir.ManifestFile)
	var m map[string]any
	ts.Check(json.Unmarshal([]byte(ts.ReadFile(path)), &m))
	arrays, _ := m["slurm"].([]any)
	i, err := strconv.Atoi(args[1])
	if err != nil || i < 0 || i >= len(arrays) {
		ts.Fatalf("slurmsetjob: %s records %d arrays, no array %s", path, len(arrays), args[1])
	}
	arrays[i].(map[string]any)["job_id"] = args[2]
	b, err := json.MarshalIndent(m, "", "  ")
	ts.Check(err)
	ts.Check(os.WriteFile(path, b, 0o600))
}

// samecells A B checks that two run directories hold the same cells with the same verdicts and
// the same files in each cell directory (names, not contents: timings differ; generated
// outputs are compared by extension, since sglang names them by time).
func cmdSameCells(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: samecells RUN_A RUN_B")
	}
	read := func(dir string) map[string]string {
		var s rundir.Summary
		ts.Check(json.Unmarshal([]byte(ts.ReadFile(filepath.Join(dir, rundir.SummaryJSON))), &s))
		out := map[string]string{}
		for _, c := range s.Cells {
			var files []string
			root := ts.MkAbs(filepath.Join(dir, rundir.CellsDir, c.ID))
			ts.Check(filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					rel, _ := filepath.Rel(root, p)
					if strings.HasPrefix(rel, "outputs/") {
						rel = "outputs/*" + filepath.Ext(rel) // generated images are named by time
					}
					files = append(files, rel)
				}
				return err
			}))
			slices.Sort(files)
			out[c.ID] = c.Verdict + " " + strings.Join(files, ",")
		}
		return out
	}
	a, b := read(args[0]), read(args[1])
	if len(a) != len(b) {
		ts.Fatalf("%d cells against %d", len(a), len(b))
	}
	for id, va := range a {
		if vb := b[id]; va != vb {
			ts.Fatalf("cell %s:\n  %s\n  %s", id, va, vb)
		}
	}
	ts.Logf("%d cells alike", len(a))
}
