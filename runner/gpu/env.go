package gpu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
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
		if p, err := LookPath(first, env); err == nil {
			return p
		}
		return ""
	}
	p, err := LookPath(first, env)
	if err != nil {
		return ""
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		// A venv's console script may be a symlink into another prefix; the script's own
		// directory is the venv, so try it before the target's.
		for _, dir := range []string{filepath.Dir(p), filepath.Dir(r)} {
			for _, name := range []string{"python", "python3"} {
				if c := filepath.Join(dir, name); isExecutable(c) {
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
	out, err := runPython(ctx, python, env, timeout, "-m", "sglang.check_env")
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

// LibraryVersions asks the interpreter for torch, CUDA runtime, triton, flashinfer, NCCL and
// sglang versions.
func LibraryVersions(ctx context.Context, python string, env []string, timeout time.Duration) (Versions, error) {
	var v Versions
	out, err := runPython(ctx, python, env, timeout, "-c", versionScript)
	if err != nil {
		return v, fmt.Errorf("%s: library versions: %w", python, err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &v); err != nil {
		return v, fmt.Errorf("%s: library versions: unexpected output %q", python, clip(out))
	}
	return v, nil
}

func runPython(ctx context.Context, python string, env []string, timeout time.Duration, args ...string) (string, error) {
	if python == "" {
		return "", errors.New("no Python interpreter found beside the backend command")
	}
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Env = env
	cmd.WaitDelay = time.Second
	b, err := cmd.CombinedOutput()
	out := strings.TrimSpace(string(b))
	if len(out) > 64<<10 {
		out = out[:64<<10] + "\n…(cut)"
	}
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return out, fmt.Errorf("timed out after %s", timeout)
	case err != nil:
		tail := out
		if len(tail) > 400 {
			tail = "…" + tail[len(tail)-400:]
		}
		return out, fmt.Errorf("%v: %s", err, tail)
	}
	return out, nil
}
