package runner

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/envfacts"

	"github.com/sglprof/runner/reports/compare"
)

// manifestFor finds the manifest.json of a compared side: a run directory, a cell directory
// (cells/<id> of a run) or a file inside one (a perf dump). ok is false when there is none.
func manifestFor(path string) (*rundir.Manifest, bool) {
	dir := path
	if st, err := os.Stat(path); err == nil && !st.IsDir() {
		dir = filepath.Dir(path)
	}
	for range 4 {
		if m, err := rundir.ReadManifest(dir); err == nil {
			return m, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return nil, false
}

// applyEnvDiff adds the env diff of the two sides to res when both have a manifest. Runs
// whose clock states differ (one locked, one floating) get no regression called, unless
// ignore (--ignore-env): a floating clock moves every timing by itself.
func applyEnvDiff(res *compare.Result, basePath, curPath string, ignore bool) {
	bm, ok1 := manifestFor(basePath)
	cm, ok2 := manifestFor(curPath)
	if !ok1 || !ok2 {
		return
	}
	res.Env = &compare.EnvDiff{Checked: true, Changes: envfacts.DiffEnv(bm, cm)}
	b, c := envfacts.ClockState(bm), envfacts.ClockState(cm)
	if b == "" || c == "" || b == c {
		return
	}
	if ignore {
		res.Env.ClocksDiffer = fmt.Sprintf("GPU clocks were %s in base and %s in new; regressions are called anyway (--ignore-env)", b, c)
		return
	}
	why := fmt.Sprintf("GPU clocks were %s in base and %s in new", b, c)
	res.Env.ClocksDiffer = why + "; no regression is called between runs measured under different clock states: lock the clocks for both (nvidia-smi -lgc), or pass --ignore-env"
	res.HoldRegressions(why)
}
