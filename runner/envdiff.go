package runner

import (
	"fmt"
	"github.com/sglprof/runner/reports/rundir"
	"os"
	"path/filepath"
	"sort"

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

// DiffEnv lists what differs between the environments of two runs: the facts of EnvFacts
// (GPU, driver, CUDA, torch, triton, flashinfer, NCCL, sglang, clock state, ...) and the
// variables that matter (the manifests' env, already redacted), sorted facts first.
func DiffEnv(base, cur *rundir.Manifest) []compare.EnvChange {
	var out []compare.EnvChange
	cf := map[string]string{}
	for _, f := range EnvFacts(cur) {
		cf[f.Name] = f.Value
	}
	for _, f := range EnvFacts(base) {
		if v, ok := cf[f.Name]; !ok {
			out = append(out, compare.EnvChange{Name: f.Name, Base: f.Value, New: "(not probed)"})
		} else if v != f.Value {
			out = append(out, compare.EnvChange{Name: f.Name, Base: f.Value, New: v})
		}
	}
	names := map[string]bool{}
	for k := range base.Env {
		names[k] = true
	}
	for k := range cur.Env {
		names[k] = true
	}
	keys := make([]string, 0, len(names))
	for k := range names {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b, inB := base.Env[k]
		c, inC := cur.Env[k]
		if !inB {
			b = "(unset)"
		}
		if !inC {
			c = "(unset)"
		}
		if b != c {
			out = append(out, compare.EnvChange{Name: "$" + k, Base: b, New: c})
		}
	}
	return out
}

// clockState is the "GPU clocks" fact of a manifest: ClockStateLocked, ClockStateFloating or
// "" when unknown.
func clockState(m *rundir.Manifest) string {
	if m.GPUEnv == nil || m.GPUEnv.ClocksLocked == nil {
		return ""
	}
	if *m.GPUEnv.ClocksLocked {
		return ClockStateLocked
	}
	return ClockStateFloating
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
	res.Env = &compare.EnvDiff{Checked: true, Changes: DiffEnv(bm, cm)}
	b, c := clockState(bm), clockState(cm)
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
