package sim

import (
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sglprof/runner/backends/simclock"
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

// llmWindowFiles runs one /generate in an LLM /start_profile window with body (output_dir
// added) and returns the names written and the server log.
func llmWindowFiles(t *testing.T, env map[string]string, body map[string]any) ([]string, string) {
	t.Helper()
	s := startServe(t, env, "serve", "--model-type", "llm", "--model-path", "m")
	s.waitHealth(t)
	dir := t.TempDir()
	body["output_dir"] = dir
	if code, b := postJSON(t, s.base+"/start_profile", body); code != 200 {
		t.Fatalf("start %d %s", code, b)
	}
	postJSON(t, s.base+"/generate", map[string]any{"text": "hi", "sampling_params": map[string]any{"max_new_tokens": 4}})
	if code, b := postJSON(t, s.base+"/stop_profile", nil); code != 200 {
		t.Fatalf("stop %d %s", code, b)
	}
	var names []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names, s.log.String()
}

func countSuffix(names []string, suffix string) int {
	n := 0
	for _, x := range names {
		if strings.HasSuffix(x, suffix) {
			n++
		}
	}
	return n
}

// TestLLMProfileStagesNeedsProfileV2: the default scheduler profiler never reads
// profile_stages, so profile_by_stage with ["decode"] still writes the -EXTEND trace; only
// SGLANG_PROFILE_V2's stage-based manager limits the stages (its suffix is the stage name).
func TestLLMProfileStagesNeedsProfileV2(t *testing.T) {
	body := func() map[string]any {
		return map[string]any{"profile_by_stage": true, "profile_stages": []string{"decode"}}
	}
	names, log := llmWindowFiles(t, baseEnv(t), body())
	if countSuffix(names, "-TP-0-EXTEND.trace.json.gz") != 1 || countSuffix(names, "-TP-0-DECODE.trace.json.gz") != 1 {
		t.Fatalf("default profiler with profile_stages [decode]: %v; upstream writes both stages\n%s", names, log)
	}
	names, log = llmWindowFiles(t, baseEnv(t, "SGLANG_PROFILE_V2", "1"), body())
	if len(names) != 1 || countSuffix(names, "-TP-0-decode.trace.json.gz") != 1 {
		t.Fatalf("SGLANG_PROFILE_V2 with profile_stages [decode]: %v\n%s", names, log)
	}
}

// TestLLMMergeWithPrefixFails: ProfileMerger globs "<profile_id>*.trace.json.gz", so with a
// profile_prefix the per-rank files are not found, the merge fails (logged, no merged file)
// and the window's traces stay; without a prefix the merged file is written.
func TestLLMMergeWithPrefixFails(t *testing.T) {
	names, log := llmWindowFiles(t, baseEnv(t), map[string]any{"merge_profiles": true, "profile_prefix": "cell"})
	if countSuffix(names, ".trace.json.gz") != 1 || strings.HasPrefix(names[0], "merged-") || !strings.HasPrefix(names[0], "cell-") ||
		!strings.Contains(log, "Failed to merge profiles: No trace files found for profile_id: ") || !strings.Contains(log, " Merge failed: No trace files found") {
		t.Fatalf("merge with a prefix: %v\n%s", names, log)
	}
	names, log = llmWindowFiles(t, baseEnv(t), map[string]any{"merge_profiles": true})
	if len(names) != 2 || !strings.HasPrefix(names[1], "merged-") || !strings.Contains(log, "Profile merge completed: ") {
		t.Fatalf("merge without a prefix: %v\n%s", names, log)
	}
}

// TestLLMMemorySnapshotName: the MEM snapshot is str(time.time()) + "-TP-<r>-memory" + the
// stage suffix + ".pickle" (no prefix, not the profile id); with profile_by_stage each stage's
// stop dumps one, "-memory-EXTEND.pickle" and "-memory-DECODE.pickle".
func TestLLMMemorySnapshotName(t *testing.T) {
	names, _ := llmWindowFiles(t, baseEnv(t), map[string]any{"activities": []string{"GPU", "MEM"}, "profile_prefix": "cell", "profile_by_stage": true})
	var pickles []string
	for _, n := range names {
		if strings.HasSuffix(n, ".pickle") {
			pickles = append(pickles, n)
			if strings.HasPrefix(n, "cell-") {
				t.Errorf("memory snapshot %s carries the prefix", n)
			}
		}
	}
	if len(pickles) != 2 || countSuffix(pickles, "-TP-0-memory-EXTEND.pickle") != 1 || countSuffix(pickles, "-TP-0-memory-DECODE.pickle") != 1 {
		t.Fatalf("memory snapshots %v", pickles)
	}
}

// TestVLLMOmniSessionIgnoresPrefix: vLLM-Omni's /start_profile body (ProfileRequest) has only
// stages, so a profile_prefix is dropped; the diffusion worker names its session
// <YYYYMMDD-HHMMSS>_diffusion_rank<r>_<unix>/ with trace_rank<r>.json(.gz) in it.
func TestVLLMOmniSessionIgnoresPrefix(t *testing.T) {
	t.Chdir(t.TempDir())
	dir := t.TempDir()
	port := freeTestPort(t)
	ctx, cancel := context.WithCancel(context.Background())
	log := &lockedBuf{}
	rc := make(chan int, 1)
	env := map[string]string{simclock.EnvTimeScale: "0"}
	go func() {
		rc <- vllmMain(ctx, []string{"serve", "Qwen/Qwen-Image", "--omni", "--port", strconv.Itoa(port),
			"--profiler-config", `{"profiler":"torch","torch_profiler_dir":"` + dir + `","torch_profiler_use_gzip":false}`}, env, io.Discard, log)
	}()
	t.Cleanup(func() { cancel(); <-rc })
	s := &simServer{base: "http://127.0.0.1:" + strconv.Itoa(port), log: log}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if r, err := http.Get(s.base + "/health"); err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready:\n%s", log.String())
		}
	}
	if code, b := postJSON(t, s.base+"/start_profile", map[string]any{"profile_prefix": "cellA"}); code != 200 {
		t.Fatalf("start %d %s", code, b)
	}
	if code, b := postJSON(t, s.base+"/v1/images/generations", map[string]any{"prompt": "a cat", "size": "256x256", "num_inference_steps": 2}); code != 200 {
		t.Fatalf("image %d %s", code, b)
	}
	if code, b := postJSON(t, s.base+"/stop_profile", nil); code != 200 {
		t.Fatalf("stop %d %s", code, b)
	}
	m, _ := filepath.Glob(filepath.Join(dir, "*", "trace_rank0.json"))
	if len(m) != 1 || !regexp.MustCompile(`^[0-9]{8}-[0-9]{6}_diffusion_rank0_[0-9]+$`).MatchString(filepath.Base(filepath.Dir(m[0]))) {
		t.Fatalf("session traces %v (want <ts>_diffusion_rank0_<unix>/trace_rank0.json); log:\n%s", m, log.String())
	}
}

// TestVideoJobCancelled: with the video-cancelled failure mode a video job ends in the status
// "cancelled" and stays there (it never completes), which a poller must treat as final.
func TestVideoJobCancelled(t *testing.T) {
	s := startServe(t, baseEnv(t, EnvFail, "video-cancelled"), "serve", "--model-path", "Wan-AI/Wan2.1-T2V-1.3B-Diffusers")
	s.waitHealth(t)
	code, b := postJSON(t, s.base+"/v1/videos", map[string]any{"prompt": "a cat", "size": "256x256", "num_inference_steps": 2})
	if code != 200 {
		t.Fatalf("create %d %s", code, b)
	}
	id := regexp.MustCompile(`"id":"([^"]+)"`).FindSubmatch(b)
	if id == nil {
		t.Fatalf("no id in %s", b)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		r, err := http.Get(s.base + "/v1/videos/" + string(id[1]))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if strings.Contains(string(body), `"status":"cancelled"`) {
			return
		}
		if strings.Contains(string(body), `"status":"completed"`) || time.Now().After(deadline) {
			t.Fatalf("job %s", body)
		}
	}
}

// TestProfilerDirAloneProfilesNothing: SGLANG_DIFFUSION_TORCH_PROFILER_DIR is only where a
// profiler writes (profiler.py's log directory, read when a profiler is built for a request
// with --profile or a /start_profile window); set alone it starts no profiler, so an
// unprofiled cell's timing pass runs without one although the runner sets it on every cell.
func TestProfilerDirAloneProfilesNothing(t *testing.T) {
	dir := t.TempDir()
	r, _ := runGen(t, baseEnv(t, "SGLANG_DIFFUSION_TORCH_PROFILER_DIR", dir))
	if r.rc != 0 {
		t.Fatalf("exit %d\n%s", r.rc, r.all())
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*")); len(m) != 0 || strings.Contains(r.all(), "Profiling request") {
		t.Fatalf("a run without --profile profiled: %v\n%s", m, r.all())
	}
}

// TestNoEndProfileRoute: both upstream servers route /start_profile and /stop_profile and have
// no /end_profile (a name some guides use), which FastAPI answers with 404 like any unknown
// route; the simulators answer the same, so a runner that called /end_profile would fail here
// as it would against sglang.
func TestNoEndProfileRoute(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--model-path", "Qwen/Qwen-Image"},
		{"serve", "--model-type", "llm", "--model-path", "m"},
	} {
		s := startServe(t, baseEnv(t), args...)
		s.waitHealth(t)
		if code, b := postJSON(t, s.base+"/end_profile", nil); code != http.StatusNotFound {
			t.Errorf("%v: /end_profile = %d %s, want 404 as upstream's FastAPI app answers", args, code, b)
		}
		if code, b := postJSON(t, s.base+"/start_profile", map[string]any{"output_dir": t.TempDir()}); code != 200 {
			t.Errorf("%v: /start_profile = %d %s", args, code, b)
		}
		if code, b := postJSON(t, s.base+"/stop_profile", nil); code != 200 {
			t.Errorf("%v: /stop_profile = %d %s", args, code, b)
		}
	}
}
