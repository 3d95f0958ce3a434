package sim

import (
	"context"
	"fmt"
	"io"
	"maps"
	"strings"
)

// Main runs the simulator named by args[0] (a backend kind, "sglang", "vllm" or "vllm-omni", or
// "nsys") with the rest of args, after adding the knobs of RUNNER_SIM_KNOBS_FILE to env. ok is
// false for an unknown name. It is the one dispatch behind `runner sim ...` and behind the
// test binaries that stand in for the runner binary under --simulate.
func Main(ctx context.Context, args []string, env map[string]string, stdout, stderr io.Writer) (code int, ok bool) {
	if len(args) == 0 {
		return 2, false
	}
	switch args[0] {
	case "sglang", "vllm", "vllm-omni", "nsys":
		env = maps.Clone(env) // the caller's map stays as it was
		if err := applyKnobsFile(env); err != nil {
			fmt.Fprintf(stderr, "runner sim %s: %v\n", args[0], err)
			return 2, true
		}
	}
	switch args[0] {
	case "sglang":
		return SGLang(ctx, args[1:], env, stdout, stderr), true
	case "vllm-omni":
		return vllmMain(ctx, args[1:], env, stdout, stderr), true
	case "vllm":
		return vllmLLMMain(ctx, args[1:], env, stdout, stderr), true
	case "nsys":
		return NSys(ctx, args[1:], env, stdout, stderr), true
	}
	return 2, false
}

// EnvMap turns a KEY=VALUE list (os.Environ) into the map the simulators take; a later
// duplicate wins, as it does for exec.
func EnvMap(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}
