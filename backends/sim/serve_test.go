package sim

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sglprof/runner/backends/simclock"
)

// lockedBuf is a goroutine-safe log sink.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type simServer struct {
	base   string
	port   int
	log    *lockedBuf
	cancel context.CancelFunc
	rc     chan int
}

func freeTestPort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return p
}

// startServe runs the simulated server in-process until the test ends.
func startServe(t *testing.T, env map[string]string, args ...string) *simServer {
	t.Helper()
	port := freeTestPort(t)
	ctx, cancel := context.WithCancel(context.Background())
	s := &simServer{base: "http://127.0.0.1:" + strconv.Itoa(port), port: port, log: &lockedBuf{}, cancel: cancel, rc: make(chan int, 1)}
	args = append(args, "--port", strconv.Itoa(port))
	go func() { s.rc <- SGLang(ctx, args, env, io.Discard, s.log) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.rc:
		case <-time.After(10 * time.Second):
			t.Error("server did not stop")
		}
	})
	return s
}

// waitLog waits until the server's log holds want.
func (s *simServer) waitLog(t *testing.T, want string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(s.log.String(), want); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the server's log:\n%s", want, s.log.String())
		}
	}
}

// waitHealth polls /health and returns the statuses seen until the first 200.
func (s *simServer) waitHealth(t *testing.T) []int {
	t.Helper()
	var seen []int
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(s.base + "/health")
		if err == nil {
			resp.Body.Close()
			if len(seen) == 0 || seen[len(seen)-1] != resp.StatusCode {
				seen = append(seen, resp.StatusCode)
			}
			if resp.StatusCode == 200 {
				return seen
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("server never healthy; log:\n%s", s.log.String())
	return nil
}

func postJSON(t *testing.T, url string, body any) (int, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, rb
}

func getBody(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, rb
}

func TestServeDiffusionEndpoints(t *testing.T) {
	env := baseEnv(t)
	traces := env["SGLANG_DIFFUSION_TORCH_PROFILER_DIR"]
	s := startServe(t, env, "serve", "--model-path", "Qwen/Qwen-Image")
	s.waitHealth(t)
	if code, b := getBody(t, s.base+"/health"); code != 200 || !strings.Contains(string(b), `"status":"ok"`) {
		t.Fatalf("/health = %d %s", code, b)
	}
	if _, b := getBody(t, s.base+"/v1/models"); !strings.Contains(string(b), `"id":"Qwen/Qwen-Image"`) {
		t.Fatalf("/v1/models = %s", b)
	}
	if _, b := getBody(t, s.base+"/v1/model_info"); !strings.Contains(string(b), `"model_path":"Qwen/Qwen-Image"`) {
		t.Fatalf("/v1/model_info = %s", b)
	}
	code, b := postJSON(t, s.base+"/v1/images/generations", map[string]any{"prompt": "a cat", "size": "512x512", "num_inference_steps": 6, "profile": true, "num_profiled_timesteps": 2, "n": 2})
	var img struct {
		ID             string           `json:"id"`
		Data           []map[string]any `json:"data"`
		InferenceTimeS float64          `json:"inference_time_s"`
		PeakMemoryMB   float64          `json:"peak_memory_mb"`
	}
	if err := json.Unmarshal(b, &img); err != nil || code != 200 || len(img.Data) != 2 || img.InferenceTimeS <= 0 || img.PeakMemoryMB <= 0 {
		t.Fatalf("images = %d %s", code, b)
	}
	// The images API ignores the per-request profiling fields, as upstream's
	// ImageGenerationsRequest and image handler do: no trace.
	if m, _ := filepath.Glob(filepath.Join(traces, "*.trace.json.gz")); len(m) != 0 || strings.Contains(s.log.String(), "Saved profiler traces") {
		t.Fatalf("an image request's profile field produced traces %v; log:\n%s", m, s.log.String())
	}
	// Validation: missing prompt 422, bad size 400.
	if code, _ := postJSON(t, s.base+"/v1/images/generations", map[string]any{"size": "1x1"}); code != 422 {
		t.Fatalf("missing prompt = %d", code)
	}
	if code, b := postJSON(t, s.base+"/v1/images/generations", map[string]any{"prompt": "p", "size": "big"}); code != 400 || !strings.Contains(string(b), "Invalid size format") {
		t.Fatalf("bad size = %d %s", code, b)
	}
	// Videos: an async job polled until completed.
	code, b = postJSON(t, s.base+"/v1/videos", map[string]any{"prompt": "a wave", "num_inference_steps": 2, "profile": true, "num_profiled_timesteps": 1, "profile_all_stages": true})
	var job struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	if json.Unmarshal(b, &job); code != 200 || job.ID == "" || job.Status != "queued" {
		t.Fatalf("videos = %d %s", code, b)
	}
	deadline := time.Now().Add(5 * time.Second)
	for job.Status != "completed" && time.Now().Before(deadline) {
		_, b = getBody(t, s.base+"/v1/videos/"+job.ID)
		json.Unmarshal(b, &job)
	}
	if job.Status != "completed" || !strings.Contains(string(b), "inference_time_s") {
		t.Fatalf("video job = %s", b)
	}
	// The videos API ignores them too: video_api.py forwards only perf_dump_path (failed
	// before: the simulator profiled the video and wrote a trace).
	if m, _ := filepath.Glob(filepath.Join(traces, "*.trace.json.gz")); len(m) != 0 || strings.Contains(s.log.String(), "Saved profiler traces") {
		t.Fatalf("a video request's profile field produced traces %v; log:\n%s", m, s.log.String())
	}
	if code, _ := getBody(t, s.base+"/v1/videos/nope"); code != 404 {
		t.Fatalf("unknown video = %d", code)
	}
}

func TestServeDiffusionRejectsSamplingFlags(t *testing.T) {
	r := sglang(t, baseEnv(t), "serve", "--model-path", "Qwen/Qwen-Image", "--seed", "1", "--num-inference-steps", "4")
	if r.rc != 1 || !strings.Contains(r.stderr, "sglang serve: error: unrecognized arguments: --seed 1 --num-inference-steps 4") {
		t.Fatalf("rc %d stderr %s", r.rc, r.stderr)
	}
}

// TestServeDiffusionProfileWindow: the diffusion server's /start_profile and /stop_profile
// (http_server.py) profile whatever runs between them, image requests included, and every
// rank exports <profile_id>-full_stages-global-rank<r>.trace.json.gz into output_dir.
func TestServeDiffusionProfileWindow(t *testing.T) {
	s := startServe(t, baseEnv(t), "serve", "--model-path", "Qwen/Qwen-Image", "--num-gpus", "2")
	s.waitHealth(t)
	if code, b := postJSON(t, s.base+"/stop_profile", nil); code != 400 || !strings.Contains(string(b), "Profiling is not in progress. Call /start_profile first.") {
		t.Fatalf("stop without start = %d %s", code, b)
	}
	out := t.TempDir()
	code, b := postJSON(t, s.base+"/start_profile", map[string]any{"output_dir": out, "activities": []string{"CPU", "GPU"}})
	if code != 200 || !strings.Contains(string(b), "Profiling started (profile_id=") || !strings.Contains(string(b), "Traces will be saved to: "+out) {
		t.Fatalf("start = %d %s", code, b)
	}
	if code, b := postJSON(t, s.base+"/start_profile", map[string]any{}); code != 400 || !strings.Contains(string(b), "Profiling is already in progress. Call /stop_profile first.") {
		t.Fatalf("second start = %d %s", code, b)
	}
	for range 2 {
		if code, b := postJSON(t, s.base+"/v1/images/generations", map[string]any{"prompt": "a cat", "size": "256x256", "num_inference_steps": 3}); code != 200 {
			t.Fatalf("image = %d %s", code, b)
		}
	}
	code, b = postJSON(t, s.base+"/stop_profile", nil)
	if code != 200 || !strings.Contains(string(b), "Profiling stopped (profile_id=") {
		t.Fatalf("stop = %d %s", code, b)
	}
	for _, rank := range []string{"0", "1"} {
		m, _ := filepath.Glob(filepath.Join(out, "*-full_stages-global-rank"+rank+".trace.json.gz"))
		if len(m) != 1 {
			t.Fatalf("rank %s traces %v; log:\n%s", rank, m, s.log.String())
		}
		f, err := os.Open(m[0])
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(zr)
		f.Close()
		if !bytes.Contains(body, []byte(`"cat": "kernel"`)) && !bytes.Contains(body, []byte(`"cat":"kernel"`)) {
			t.Fatalf("rank %s trace has no kernels", rank)
		}
	}
	// An empty window still exports (a trace without GPU work).
	out2 := t.TempDir()
	postJSON(t, s.base+"/start_profile", map[string]any{"output_dir": out2})
	if code, _ := postJSON(t, s.base+"/stop_profile", nil); code != 200 {
		t.Fatalf("empty window stop = %d", code)
	}
	if m, _ := filepath.Glob(filepath.Join(out2, "*.trace.json.gz")); len(m) != 2 {
		t.Fatalf("empty window traces %v", m)
	}
}

func TestServeDiffusionFallbackAndPortTaken(t *testing.T) {
	env := baseEnv(t)
	s := startServe(t, env, "serve", "--model-path", "acme/mystery-model", "--model-type", "diffusion")
	s.waitHealth(t)
	for _, want := range []string{"Falling back to diffusers backend", "Loaded diffusers pipeline: DiffusionPipeline"} {
		if !strings.Contains(s.log.String(), want) {
			t.Fatalf("no %q in log:\n%s", want, s.log.String())
		}
	}
	r := sglang(t, env, "serve", "--model-path", "Qwen/Qwen-Image", "--strict-ports", "--port", strconv.Itoa(s.port), "--scheduler-port", strconv.Itoa(freeTestPort(t)))
	if r.rc != 1 || !strings.Contains(r.stderr, fmt.Sprintf("RuntimeError: HTTP port %d is unavailable and --strict-ports is enabled.", s.port)) || strings.Contains(r.stderr, "Starting server") {
		t.Fatalf("second server on the same port: rc %d\n%s", r.rc, r.stderr)
	}
	// Without --strict-ports the port is only met by uvicorn's bind, after loading.
	r = sglang(t, env, "serve", "--model-path", "Qwen/Qwen-Image", "--port", strconv.Itoa(s.port), "--scheduler-port", strconv.Itoa(freeTestPort(t)))
	if r.rc != 1 || !strings.Contains(r.stderr, "address already in use") {
		t.Fatalf("second server on the same port without strict mode: rc %d\n%s", r.rc, r.stderr)
	}
}

// TestServeStrictPorts: with --strict-ports the diffusion server checks its scheduler port
// (default 5555) and a given master port at start, as ServerArgs._adjust_network_ports does,
// and dies before loading when one is busy; the explicit ports stay bound while it runs.
func TestServeStrictPorts(t *testing.T) {
	// A port held here whose predecessor is free (the --dp-size case starts one below it): ports
	// next to a free one are not free for sure while other tests run, so both are checked.
	var busy net.Listener
	for busy == nil {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if below, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(ln.Addr().(*net.TCPAddr).Port-1)); err == nil {
			below.Close()
			busy = ln
		} else {
			ln.Close()
		}
	}
	defer busy.Close()
	bp := busy.Addr().(*net.TCPAddr).Port
	dup := freeTestPort(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--scheduler-port", strconv.Itoa(bp)}, fmt.Sprintf("RuntimeError: Scheduler[0] port %d is unavailable and --strict-ports is enabled.", bp)},
		{[]string{"--scheduler-port", strconv.Itoa(freeTestPort(t)), "--master-port=" + strconv.Itoa(bp)}, fmt.Sprintf("RuntimeError: Master port %d is unavailable and --strict-ports is enabled.", bp)},
		// --dp-size 2: the second replica's scheduler port, scheduler_port + 1, is checked too.
		{[]string{"--dp-size", "2", "--scheduler-port", strconv.Itoa(bp - 1)}, fmt.Sprintf("RuntimeError: Scheduler[1] port %d is unavailable and --strict-ports is enabled.", bp)},
		// Two flags naming one port are refused before either is bound.
		{[]string{"--scheduler-port", strconv.Itoa(dup), "--master-port", strconv.Itoa(dup)}, fmt.Sprintf("RuntimeError: Master port %d duplicates Scheduler[0] port and --strict-ports is enabled.", dup)},
	} {
		args := append([]string{"serve", "--model-path", "Qwen/Qwen-Image", "--strict-ports", "--port", strconv.Itoa(freeTestPort(t))}, tc.args...)
		r := sglang(t, baseEnv(t), args...)
		if r.rc != 1 || !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, "Loading weights") {
			t.Errorf("%v: rc %d\n%s", tc.args, r.rc, r.stderr)
		}
	}
	// The default scheduler port: busy (held here, or by someone else) kills a strict server.
	if ln, err := net.Listen("tcp", "127.0.0.1:5555"); err == nil {
		defer ln.Close()
	}
	r := sglang(t, baseEnv(t), "serve", "--model-path", "Qwen/Qwen-Image", "--strict-ports", "--port", strconv.Itoa(freeTestPort(t)))
	if r.rc != 1 || !strings.Contains(r.stderr, "RuntimeError: Scheduler[0] port 5555 is unavailable and --strict-ports is enabled.") {
		t.Errorf("busy 5555: rc %d\n%s", r.rc, r.stderr)
	}
	// Without strict mode a busy scheduler port is moved, not fatal.
	bps := strconv.Itoa(bp)
	ns := startServe(t, baseEnv(t), "serve", "--model-path", "Qwen/Qwen-Image", "--scheduler-port", bps)
	ns.waitHealth(t)
	// Free explicit ports are held while the server runs.
	sp, mp := freeTestPort(t), freeTestPort(t)
	s := startServe(t, baseEnv(t), "serve", "--model-path", "Qwen/Qwen-Image", "--strict-ports", "--scheduler-port", strconv.Itoa(sp), "--master-port", strconv.Itoa(mp))
	s.waitHealth(t)
	for _, p := range []int{sp, mp} {
		if portAvailable(p) {
			t.Errorf("port %d is not held by the running server", p)
		}
	}
}

func TestServeFailureModes(t *testing.T) {
	for _, tc := range []struct {
		mode, want string
	}{
		{"crash-load", "MetadataIncompleteBuffer"},
		{"oom", "torch.OutOfMemoryError: CUDA out of memory"},
	} {
		r := sglang(t, baseEnv(t, EnvFail, tc.mode), "serve", "--model-path", "Qwen/Qwen-Image", "--port", strconv.Itoa(freeTestPort(t)))
		if r.rc != 1 || !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, "Uvicorn running") {
			t.Errorf("%s: rc %d\n%s", tc.mode, r.rc, r.stderr)
		}
	}
	// never-ready blocks until stopped and never listens.
	s := startServe(t, baseEnv(t, EnvFail, "never-ready"), "serve", "--model-path", "Qwen/Qwen-Image")
	s.waitLog(t, "Loading safetensors checkpoint shards") // it now loads forever
	if _, err := http.Get(s.base + "/health"); err == nil {
		t.Fatal("never-ready server answers /health")
	}
	s.cancel()
	if rc := <-s.rc; rc != 0 {
		t.Fatalf("never-ready stopped with %d", rc)
	}
	s.rc <- 0 // for the cleanup
	// http-500: every third generation request fails.
	h := startServe(t, baseEnv(t, EnvFail, "http-500"), "serve", "--model-path", "Qwen/Qwen-Image")
	h.waitHealth(t)
	var codes []int
	for range 6 {
		c, _ := postJSON(t, h.base+"/v1/images/generations", map[string]any{"prompt": "p"})
		codes = append(codes, c)
	}
	if !slicesEqual(codes, []int{200, 200, 500, 200, 200, 500}) {
		t.Fatalf("codes %v", codes)
	}
}

func slicesEqual(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestServeLLMProfileWindow(t *testing.T) {
	env := baseEnv(t, simclock.EnvTimeScale, "0.1")
	s := startServe(t, env, "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-8B-Instruct")
	seen := s.waitHealth(t)
	if len(seen) < 2 || seen[0] != 503 {
		t.Fatalf("/health went %v; want 503 before 200", seen)
	}
	if !strings.Contains(s.log.String(), "The server is fired up and ready to roll!") {
		t.Fatalf("no readiness line:\n%s", s.log.String())
	}
	if _, b := getBody(t, s.base+"/get_model_info"); !strings.Contains(string(b), `"is_generation":true`) {
		t.Fatalf("/get_model_info = %s", b)
	}
	// /stop_profile without a session: HTTP 500 (the tokenizer manager raises).
	if code, _ := postJSON(t, s.base+"/stop_profile", nil); code != 500 {
		t.Fatalf("stop without start = %d", code)
	}
	dir := t.TempDir()
	code, b := postJSON(t, s.base+"/start_profile", map[string]any{"output_dir": dir, "profile_by_stage": true, "merge_profiles": true, "profile_prefix": "cellA", "num_steps": 1000})
	if code != 200 || string(b) != "Start profiling.\n" {
		t.Fatalf("start = %d %q", code, b)
	}
	if code, _ := postJSON(t, s.base+"/start_profile", nil); code != 500 {
		t.Fatalf("second start = %d", code)
	}
	code, b = postJSON(t, s.base+"/generate", map[string]any{"text": "a b c d", "sampling_params": map[string]any{"max_new_tokens": 9}})
	if code != 200 || !strings.Contains(string(b), `"completion_tokens":9`) || !strings.Contains(string(b), `"prompt_tokens":4`) {
		t.Fatalf("generate = %d %s", code, b)
	}
	code, b = postJSON(t, s.base+"/v1/completions", map[string]any{"prompt": "x y", "max_tokens": 3})
	if code != 200 || !strings.Contains(string(b), `"total_tokens":5`) {
		t.Fatalf("completions = %d %s", code, b)
	}
	code, b = postJSON(t, s.base+"/stop_profile", nil)
	if code != 200 || string(b) != "Stop profiling. This will take some time.\n" {
		t.Fatalf("stop = %d %q", code, b)
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	// The prefix keeps ProfileMerger's "<profile_id>*" glob from finding the stage traces, so
	// no merged file is written (TestLLMMergeWithPrefixFails).
	re := regexp.MustCompile(`^cellA-[0-9]+\.[0-9]{6}-TP-0-(EXTEND|DECODE)\.trace\.json\.gz$`)
	if len(names) != 2 {
		t.Fatalf("traces %v", names)
	}
	for _, n := range names {
		if !re.MatchString(n) {
			t.Fatalf("trace name %q", n)
		}
	}
	if !strings.Contains(s.log.String(), "Profiling done. Traces are saved to: "+dir) {
		t.Fatalf("no done line:\n%s", s.log.String())
	}
}

func TestServeLLMAutoStopAfterNumSteps(t *testing.T) {
	s := startServe(t, baseEnv(t), "serve", "--model-type", "llm", "--model-path", "m")
	s.waitHealth(t)
	dir := t.TempDir()
	postJSON(t, s.base+"/start_profile", map[string]any{"output_dir": dir, "num_steps": 3, "activities": []string{"CPU", "GPU"}})
	postJSON(t, s.base+"/generate", map[string]any{"text": "hi", "sampling_params": map[string]any{"max_new_tokens": 32}})
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(s.log.String(), "Profiling done.") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("auto-stopped window wrote %d traces", len(ents))
	}
	// The window has closed itself: /stop_profile now fails like sglang's.
	if code, _ := postJSON(t, s.base+"/stop_profile", nil); code != 500 {
		t.Fatalf("stop after auto-stop = %d", code)
	}
	// An unknown activity is skipped silently upstream (activity_map filter): the window opens
	// and closes and writes no trace. (The plan refuses unknown activities for that reason.)
	dir2 := t.TempDir()
	if code, _ := postJSON(t, s.base+"/start_profile", map[string]any{"output_dir": dir2, "activities": []string{"BOGUS"}}); code != 200 {
		t.Fatalf("unknown activity = %d", code)
	}
	if code, _ := postJSON(t, s.base+"/stop_profile", nil); code != 200 {
		t.Fatalf("stop after an unknown activity = %d", code)
	}
	if ents, _ := os.ReadDir(dir2); len(ents) != 0 {
		t.Fatalf("an unknown activity wrote %d files", len(ents))
	}
}

// TestServeLLMProfilerOptions: MEM writes a memory snapshot per stage, and the options are
// logged; the diffusion server ignores names it does not know
// (MEM, CUDA_PROFILER) and records CPU and CUDA anyway, as SGLDiffusionProfiler does.
func TestServeLLMProfilerOptions(t *testing.T) {
	s := startServe(t, baseEnv(t), "serve", "--model-type", "llm", "--model-path", "m")
	s.waitHealth(t)
	dir := t.TempDir()
	postJSON(t, s.base+"/start_profile", map[string]any{"output_dir": dir, "activities": []string{"GPU", "MEM"}, "profile_by_stage": true,
		"profile_stages": []string{"decode"}, "with_stack": false, "record_shapes": true})
	postJSON(t, s.base+"/generate", map[string]any{"text": "hi", "sampling_params": map[string]any{"max_new_tokens": 4}})
	if code, b := postJSON(t, s.base+"/stop_profile", nil); code != 200 {
		t.Fatalf("stop %d %s", code, b)
	}
	var names []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		names = append(names, e.Name())
	}
	// The default profiler ignores profile_stages (upstream_test.go): both stage traces and a
	// memory snapshot per stage.
	if len(names) != 4 || !strings.HasSuffix(names[0], "-TP-0-DECODE.trace.json.gz") || !strings.HasSuffix(names[1], "-TP-0-EXTEND.trace.json.gz") ||
		!strings.HasSuffix(names[2], "-TP-0-memory-EXTEND.pickle") || !strings.HasSuffix(names[3], "-TP-0-memory-DECODE.pickle") {
		t.Fatalf("files %v", names)
	}
	if !strings.Contains(s.log.String(), "activities=[GPU MEM] with_stack=false record_shapes=true profile_stages=[decode]") {
		t.Fatalf("options not logged:\n%s", s.log.String())
	}

	d := startServe(t, baseEnv(t), "serve", "--model-path", "Qwen/Qwen-Image")
	d.waitHealth(t)
	out := t.TempDir()
	postJSON(t, d.base+"/start_profile", map[string]any{"output_dir": out, "activities": []string{"MEM", "CUDA_PROFILER"}})
	if code, b := postJSON(t, d.base+"/stop_profile", nil); code != 200 {
		t.Fatalf("diffusion stop %d %s", code, b)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 1 || !strings.Contains(d.log.String(), "Unknown profiler activity: 'CUDA_PROFILER'; ignoring.") {
		t.Fatalf("diffusion window: %d traces, log:\n%s", len(ents), d.log.String())
	}
}

// TestVLLMProfilerConfigUnknownKey: vLLM's ProfilerConfig forbids extra fields, so a key it
// does not know fails the argument parse (exit 2) before the server starts.
func TestVLLMProfilerConfigUnknownKey(t *testing.T) {
	var stderr bytes.Buffer
	rc := vllmMain(context.Background(), []string{"serve", "Qwen/Qwen-Image", "--omni", "--profiler-config", `{"profiler":"torch","torch_profiler_dir":"/tmp","torch_profiler_bogus":true}`}, baseEnv(t), io.Discard, &stderr)
	if rc != 2 || !strings.Contains(stderr.String(), "argument --profiler-config") {
		t.Fatalf("rc %d, stderr %s", rc, stderr.String())
	}
}
