package sim

import (
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readGz returns the decompressed content of a gzip file.
func readGz(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// diffusionWindowTrace runs one image request in a /start_profile window with body and
// returns rank 0's trace and the server log.
func diffusionWindowTrace(t *testing.T, env map[string]string, body map[string]any) (string, string) {
	t.Helper()
	s := startServe(t, env, "serve", "--model-path", "Qwen/Qwen-Image")
	s.waitHealth(t)
	out := t.TempDir()
	body["output_dir"] = out
	if code, b := postJSON(t, s.base+"/start_profile", body); code != 200 {
		t.Fatalf("start = %d %s", code, b)
	}
	if code, b := postJSON(t, s.base+"/v1/images/generations", map[string]any{"prompt": "a cat", "size": "256x256", "num_inference_steps": 2}); code != 200 {
		t.Fatalf("image = %d %s", code, b)
	}
	if code, b := postJSON(t, s.base+"/stop_profile", nil); code != 200 {
		t.Fatalf("stop = %d %s", code, b)
	}
	m, _ := filepath.Glob(filepath.Join(out, "*-full_stages-global-rank0.trace.json.gz"))
	if len(m) != 1 {
		t.Fatalf("traces %v; log:\n%s", m, s.log.String())
	}
	return readGz(t, m[0]), s.log.String()
}

// TestDiffusionWindowStackFollowsEnvironment: the diffusion server's start_profile computes
// with_stack = obj.with_stack or envs.SGLANG_PROFILE_WITH_STACK.get() (record_shapes alike),
// both variables defaulting to true, so "with_stack": false in the body still records stacks;
// only the server's environment turns them off.
func TestDiffusionWindowStackFollowsEnvironment(t *testing.T) {
	off := map[string]any{"with_stack": false, "record_shapes": false}
	trace, log := diffusionWindowTrace(t, baseEnv(t), off)
	if !strings.Contains(trace, "python_function") || !strings.Contains(log, "with_stack=true record_shapes=true") {
		t.Fatalf("with_stack=false in the body turned stacks off; upstream ignores it. log:\n%s", log)
	}
	trace, log = diffusionWindowTrace(t, baseEnv(t, "SGLANG_PROFILE_WITH_STACK", "false", "SGLANG_PROFILE_RECORD_SHAPES", "0"), off)
	if strings.Contains(trace, "python_function") || !strings.Contains(log, "with_stack=false record_shapes=false") {
		t.Fatalf("the environment did not turn stacks off. log:\n%s", log)
	}
	// The body's true wins over the environment's false ("or").
	_, log = diffusionWindowTrace(t, baseEnv(t, "SGLANG_PROFILE_WITH_STACK", "false"), map[string]any{"with_stack": true})
	if !strings.Contains(log, "with_stack=true") {
		t.Fatalf("with_stack=true in the body lost to the environment. log:\n%s", log)
	}
}
