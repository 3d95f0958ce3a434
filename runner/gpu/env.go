package gpu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/proc"
)

// Interpreter returns the Python interpreter that runs a backend command, or "" when the
// command is not Python-based as far as can be told: `python… -m sglang…` is its own
// interpreter, and a console script such as `/opt/venv/bin/sglang` has its interpreter beside
// it (`/opt/venv/bin/python`, else python3). A bare `sglang` found on env's PATH is resolved
// first, so the interpreter is the one of the environment that holds sglang.
func Interpreter(command []string, env []string) string {
	if len(command) == 0 {
		return ""
	}
	first := command[0]
	if isPython(filepath.Base(first)) {
		if p, err := proc.LookPath(first, env); err == nil {
			return p
		}
		return ""
	}
	p, err := proc.LookPath(first, env)
	if err != nil {
		return ""
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		// A venv's console script may be a symlink into another prefix; the script's own
		// directory is the venv, so try it before the target's.
		for _, dir := range []string{filepath.Dir(p), filepath.Dir(r)} {
			for _, name := range []string{"python", "python3"} {
				if c, err := proc.LookPath(filepath.Join(dir, name), nil); err == nil {
					return c
				}
			}
		}
	}
	return ""
}

func isPython(base string) bool {
	return base == "python" || strings.HasPrefix(base, "python3")
}

// CheckEnv runs `python -m sglang.check_env`, the report SGLang maintainers ask for in every
// bug, with a timeout. Its output is returned whole (a few KB) so the manifest and bundles can
// keep it; an error says why there is none (no sglang, a crash, the timeout).
func CheckEnv(ctx context.Context, python string, env []string, timeout time.Duration) (string, error) {
	_, out, err := runPython(ctx, python, env, timeout, CheckEnvArgv(python)[1:]...)
	if err != nil {
		return out, fmt.Errorf("%s -m sglang.check_env: %w", python, err)
	}
	return out, nil
}

// versionScript prints one JSON object; each import is guarded so a missing library leaves a
// gap instead of failing the whole probe. It never initialises CUDA.
const versionScript = `import json, sys
v = {"python": sys.version.split()[0]}
try:
    import torch
    v["torch"] = torch.__version__
    v["cuda_runtime"] = torch.version.cuda or ""
    try:
        v["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
    except Exception:
        pass
except Exception:
    pass
from importlib import metadata
for mod, key in (("triton", "triton"), ("flashinfer-python", "flashinfer"), ("flashinfer", "flashinfer"), ("sglang", "sglang")):
    if key in v:
        continue
    try:
        v[key] = metadata.version(mod)
    except Exception:
        pass
print(json.dumps(v))
`

// CheckEnvArgv is the command CheckEnv runs, exactly: what `runner replay` shows before it
// runs anything.
func CheckEnvArgv(python string) []string { return []string{python, "-m", "sglang.check_env"} }

// VersionsArgv is the command LibraryVersions runs, exactly (the script included).
func VersionsArgv(python string) []string { return []string{python, "-c", versionScript} }

// LibraryVersions asks the interpreter for torch, CUDA runtime, triton, flashinfer, NCCL and
// sglang versions.
func LibraryVersions(ctx context.Context, python string, env []string, timeout time.Duration) (rundir.GPUVersions, error) {
	var v rundir.GPUVersions
	out, all, err := runPython(ctx, python, env, timeout, VersionsArgv(python)[1:]...)
	if err != nil {
		return v, fmt.Errorf("%s: library versions: %w", python, err)
	}
	// The script's answer is the last line of its standard output; warnings on standard
	// error are not.
	lines := strings.Split(out, "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &v); err != nil {
		return v, fmt.Errorf("%s: library versions: unexpected output %q", python, clip(all))
	}
	return v, nil
}

// runPython runs the interpreter under runner/proc like every other child of the runner
// (proc.Probe): under the supervisor, so a check_env that starts workers, or a runner
// SIGKILLed during the probe, leaves no process behind, with a short stop ladder at timeout,
// and with its output bounded (proc.ProbeLimit; one that prints more is stopped). It returns
// the standard output, and all of the output (standard output, then standard error, at most
// 64 KiB) for the record.
func runPython(ctx context.Context, python string, env []string, timeout time.Duration, args ...string) (stdout, all string, err error) {
	if python == "" {
		return "", "", errors.New("no Python interpreter found beside the backend command")
	}
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	po, res := proc.Probe(ctx, proc.Spec{
		Argv: append([]string{python}, args...), Env: env, Timeout: timeout,
		InterruptGrace: time.Second, TerminateGrace: time.Second,
	}, 0, nil)
	stdout = strings.TrimSpace(string(po.Stdout))
	all = strings.TrimSpace(string(po.Stdout) + string(po.Stderr))
	if len(all) > 64<<10 {
		all = all[:64<<10] + "\n…(cut)"
	}
	switch {
	case res.TimedOut:
		return stdout, all, fmt.Errorf("timed out after %s", timeout)
	case res.StartErr != nil:
		return stdout, all, res.StartErr
	case res.Interrupted:
		return stdout, all, fmt.Errorf("interrupted: %w", ctx.Err())
	case po.Cut:
		return stdout, all, fmt.Errorf("printed more than %d MiB; stopped", proc.ProbeLimit>>20)
	case res.ExitCode != 0 || res.Signal != "":
		tail := all
		if len(tail) > 400 {
			tail = "…" + tail[len(tail)-400:]
		}
		how := fmt.Sprintf("exit status %d", res.ExitCode)
		if res.Signal != "" {
			how = "killed by " + res.Signal
		}
		return stdout, all, fmt.Errorf("%s: %s", how, tail)
	}
	return stdout, all, nil
}
