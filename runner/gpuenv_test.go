package runner

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sglprof/runner/reports/compare"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/envfacts"
	"github.com/sglprof/runner/runner/exitcode"
	"github.com/sglprof/runner/runner/gpu"
)

// fakeVenv makes a directory with an `sglang` console script and a `python` beside it, first
// on opts' PATH. checkEnv is the body of `python -m sglang.check_env` (shell); versions the
// JSON the library probe prints.
func fakeVenv(t *testing.T, opts *Options, checkEnv, versions string) string {
	t.Helper()
	dir := t.TempDir()
	py := "#!/bin/sh\ncase \"$1 $2\" in\n\"-m sglang.check_env\") " + checkEnv + " ;;\n\"-c \"*) echo '" + versions + "' ;;\nesac\n"
	for name, body := range map[string]string{"python": py, "sglang": "#!/bin/sh\nexit 0\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	opts.Env = append(opts.Env, "PATH="+dir+":"+envValue(opts.Env, "PATH"))
	return dir
}

const torchVersions = `{"python": "3.11.9", "torch": "2.5.1+cu124", "cuda_runtime": "12.4", "nccl": "2.21.5", "triton": "3.1.0", "flashinfer": "0.2.0", "sglang": "0.4.6"}`

// The manifest holds check_env's output (redacted) when the interpreter has sglang, the
// library versions, and says why not otherwise.
func TestManifestCheckEnv(t *testing.T) {
	opts := simOptions(t)
	newSMI(t, &opts, nil, false)
	dir := fakeVenv(t, &opts, `echo "Python: 3.11.9"; echo "PyTorch: 2.5.1+cu124"; echo "sglang: 0.4.6"; echo "token hf_abcdefghijklmnopqrstuvwxyz0123"`, torchVersions)
	_, _, man := runGPUPlan(t, "", opts)
	e := man.GPUEnv
	if e.Interpreter != filepath.Join(dir, "python") || !strings.Contains(e.CheckEnv, "PyTorch: 2.5.1+cu124") || e.CheckEnvError != "" {
		t.Errorf("check_env: interpreter %q, output %q, error %q", e.Interpreter, e.CheckEnv, e.CheckEnvError)
	}
	if strings.Contains(e.CheckEnv, "hf_abcdef") {
		t.Errorf("a token printed by check_env reached the manifest: %q", e.CheckEnv)
	}
	if e.Versions.Torch != "2.5.1+cu124" || e.Versions.NCCL != "2.21.5" || e.Versions.FlashInfer != "0.2.0" {
		t.Errorf("versions %+v", e.Versions)
	}

	// An interpreter without sglang: the error says so, the run goes on.
	opts = simOptions(t)
	fakeVenv(t, &opts, `echo "No module named sglang" >&2; exit 1`, `{"python": "3.12.1"}`)
	sum, _, man := runGPUPlan(t, "", opts)
	if sum.ExitCode != exitcode.OK || !strings.Contains(man.GPUEnv.CheckEnvError, "No module named sglang") || man.GPUEnv.Versions.Python != "3.12.1" {
		t.Errorf("no sglang: exit %d, gpu_env %+v", sum.ExitCode, man.GPUEnv)
	}

	// A check_env that hangs is cut at the timeout.
	opts = simOptions(t)
	opts.CheckEnvTimeout = 300 * time.Millisecond
	fakeVenv(t, &opts, `sleep 30`, `{}`)
	sum, _, man = runGPUPlan(t, "", opts)
	if sum.ExitCode != exitcode.OK || !strings.Contains(man.GPUEnv.CheckEnvError, "timed out after 300ms") {
		t.Errorf("hang: exit %d, gpu_env %+v", sum.ExitCode, man.GPUEnv)
	}

	// No Python beside the backend command: the manifest says why there is no check_env.
	opts = simOptions(t)
	opts.Env = append(opts.Env, "PATH="+t.TempDir())
	_, _, man = runGPUPlan(t, "", opts)
	if !strings.Contains(man.GPUEnv.InterpreterNote, `backend.command "sglang" is not Python-based`) || man.GPUEnv.CheckEnv != "" {
		t.Errorf("no interpreter: gpu_env %+v", man.GPUEnv)
	}
}

func manifestWith(torch, driver string, locked bool) *rundir.Manifest {
	return &rundir.Manifest{
		GPUs:   []rundir.GPUInfo{{Name: "NVIDIA H100 80GB HBM3", Driver: driver}},
		Env:    map[string]string{"CUDA_VISIBLE_DEVICES": "0"},
		GPUEnv: &rundir.GPUEnv{ClocksLocked: &locked, Interpreter: "/venv/bin/python", Versions: gpuVersions(torch)},
	}
}

func TestDiffEnv(t *testing.T) {
	a, b := manifestWith("2.5.1", "550.54.15", true), manifestWith("2.6.0", "560.28.03", true)
	b.Env["NCCL_ALGO"] = "Ring"
	got := map[string]compare.EnvChange{}
	for _, c := range envfacts.DiffEnv(a, b) {
		got[c.Name] = c
	}
	if c := got["torch"]; c.Base != "2.5.1" || c.New != "2.6.0" {
		t.Errorf("torch change %+v", c)
	}
	if c := got["Driver"]; c.Base != "550.54.15" || c.New != "560.28.03" {
		t.Errorf("driver change %+v", c)
	}
	if c := got["$NCCL_ALGO"]; c.Base != "(unset)" || c.New != "Ring" {
		t.Errorf("variable change %+v", c)
	}
	if len(got) != 3 {
		t.Errorf("changes %+v, want torch, Driver and $NCCL_ALGO only", got)
	}
	if d := envfacts.DiffEnv(a, a); len(d) != 0 {
		t.Errorf("a run differs from itself: %+v", d)
	}
}

// Runs whose clock states differ get no regression called, unless --ignore-env.
func TestApplyEnvDiffHoldsRegressionsOnClockChange(t *testing.T) {
	dir := t.TempDir()
	base, cur := filepath.Join(dir, "base"), filepath.Join(dir, "cur")
	for p, m := range map[string]*rundir.Manifest{base: manifestWith("2.5.1", "550", true), cur: manifestWith("2.5.1", "550", false)} {
		if err := os.MkdirAll(filepath.Join(p, rundir.CellsDir, "c1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := rundir.WriteJSON(filepath.Join(p, rundir.ManifestFile), m, nil); err != nil {
			t.Fatal(err)
		}
	}
	mk := func() *compare.Result {
		r := &compare.Result{Rows: []compare.Row{{Config: "c", Metric: "e2e", Status: compare.StatusRegression}}}
		r.Count()
		return r
	}
	res := mk()
	applyEnvDiff(res, base, filepath.Join(cur, rundir.CellsDir, "c1"), false)
	if res.Regressed() || res.Rows[0].Status != compare.StatusEnvDiffers || !strings.Contains(res.Env.ClocksDiffer, "locked in base and not locked in new") {
		t.Errorf("clock change: regressed %v, row %+v, env %+v", res.Regressed(), res.Rows[0], res.Env)
	}
	if len(res.Env.Changes) != 1 || res.Env.Changes[0].Name != "GPU clocks" {
		t.Errorf("env diff %+v, want the clock state only", res.Env.Changes)
	}
	var out strings.Builder
	if err := compare.WriteText(&out, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"env diff (1;", "GPU clocks: locked → not locked", "--ignore-env", "env-differs"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text output lacks %q:\n%s", want, out.String())
		}
	}
	res = mk()
	applyEnvDiff(res, base, cur, true)
	if !res.Regressed() {
		t.Error("--ignore-env: the regression was held anyway")
	}
	// A side without a manifest (a perf dump elsewhere): nothing is checked.
	res = mk()
	applyEnvDiff(res, t.TempDir(), cur, false)
	if res.Env != nil || !res.Regressed() {
		t.Errorf("no manifest: env %+v", res.Env)
	}
}

func TestCaptureGPUEnvContext(t *testing.T) {
	opts := simOptions(t)
	opts.defaults()
	newSMI(t, &opts, nil, false)
	e := captureGPUEnv(context.Background(), nil, &opts)
	if e.ClocksLocked == nil || len(e.Devices) != 2 || e.Interpreter != "" {
		t.Errorf("no cells: %+v", e)
	}
}

func gpuVersions(torch string) rundir.GPUVersions {
	return rundir.GPUVersions{Python: "3.11.9", Torch: torch, CUDA: "12.4"}
}

// The environment probes follow the backend's EnvProbes: a vLLM-Omni plan
// asks the Python beside vllm (its default command) for the library versions and runs no
// check_env, in the manifest and in the list `runner replay` shows alike; an sglang plan
// asks backend.command's Python, check_env included.
func TestEnvProbesFollowTheBackend(t *testing.T) {
	opts := simOptions(t)
	opts.defaults()
	newSMI(t, &opts, nil, false)
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	py := "#!/bin/sh\necho \"$1 $2\" >> " + calls + "\ncase \"$1\" in -c) echo '{\"python\": \"3.12.1\"}' ;; esac\n"
	for name, body := range map[string]string{"python": py, "vllm": "#!/bin/sh\nexit 0\n", "sglang": "#!/bin/sh\nexit 0\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	opts.Env = append(opts.Env, "PATH="+dir+":"+envValue(opts.Env, "PATH"))
	pyPath := filepath.Join(dir, "python")
	has := func(cmds [][]string, want []string) bool {
		return slices.ContainsFunc(cmds, func(c []string) bool { return slices.Equal(c, want) })
	}

	vllm := testPlan(t, `name = "v"
[backend]
kind = "vllm-omni"
mode = "serve"
[matrix]
model = ["Qwen/Qwen-Image"]
prompt = ["a cat"]
`)
	cmds := ProbeCommands(vllm, opts)
	if !has(cmds, gpu.VersionsArgv(pyPath)) || has(cmds, gpu.CheckEnvArgv(pyPath)) {
		t.Errorf("vllm-omni: probes %q", cmds)
	}
	e := captureGPUEnv(context.Background(), vllm.Expand(), &opts)
	if e.Interpreter != pyPath || e.CheckEnv != "" || e.CheckEnvError != "" || e.Versions.Python != "3.12.1" {
		t.Errorf("vllm-omni: gpu_env %+v", e)
	}
	if got, _ := os.ReadFile(calls); strings.Contains(string(got), "sglang.check_env") {
		t.Errorf("vllm-omni ran check_env:\n%s", got)
	}
	// Its version is vLLM's (`vllm --version`, here the simulator's), under the backend's name:
	// never `sglang version` recorded as "sglang".
	if !has(cmds, []string{opts.Exe, "sim", "vllm-omni", "--version"}) || slices.ContainsFunc(cmds, func(c []string) bool { return slices.Contains(c, "sglang") }) {
		t.Errorf("vllm-omni: version probe in %q", cmds)
	}
	man := captureManifest(context.Background(), vllm, "", vllm.Expand(), &opts, opts.Now())
	if pr, ok := man.Probes["vllm-omni"]; !ok || !pr.Available || !strings.Contains(pr.Output, "0.11.0+sim") {
		t.Errorf("vllm-omni: version probe %+v", man.Probes)
	}
	if _, ok := man.Probes["sglang"]; ok {
		t.Errorf("vllm-omni: the manifest probed sglang: %+v", man.Probes["sglang"])
	}
	if facts := envfacts.EnvFacts(man); !slices.ContainsFunc(facts, func(f envfacts.EnvFact) bool { return f.Name == "vllm" && f.Value == "0.11.0+sim" }) {
		t.Errorf("vllm-omni: env facts %+v", facts)
	}

	sgl := testPlan(t, twoCells)
	cmds = ProbeCommands(sgl, opts)
	if !has(cmds, gpu.VersionsArgv(pyPath)) || !has(cmds, gpu.CheckEnvArgv(pyPath)) {
		t.Errorf("sglang: probes %q", cmds)
	}
	e = captureGPUEnv(context.Background(), sgl.Expand(), &opts)
	if got, _ := os.ReadFile(calls); e.Interpreter != pyPath || !strings.Contains(string(got), "-m sglang.check_env") {
		t.Errorf("sglang: gpu_env %+v, calls:\n%s", e, got)
	}
}

// The manifest's GPU line from a real nvidia-smi (one H100, driver 580; runner/gpu's testdata).
func TestManifestRealNvidiaSMI(t *testing.T) {
	out, err := os.ReadFile("gpu/testdata/h100-driver580/manifest.csv")
	if err != nil {
		t.Fatal(err)
	}
	got := parseNvidiaSMI(string(out))
	want := []rundir.GPUInfo{{Name: "NVIDIA H100 80GB HBM3", Driver: "580.159.04", MemoryMiB: "81559 MiB",
		SMClock: "1980 MHz", MaxSMClock: "1980 MHz", PowerLimit: "700.00 W"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}
