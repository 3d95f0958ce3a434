package sim

// The simulated sglang server: `sglang serve` in its diffusion and LLM flavours and the
// `python -m sglang.launch_server` LLM entry (reached as `sim sglang -m sglang.launch_server
// ...`). Endpoints, request fields, readiness lines and trace names follow
// ref-sglang-interfaces.md §A.8 (diffusion HTTP API), §B.1 (/start_profile, /stop_profile and
// the LLM trace names) and §B.3 (LLM readiness). The server listens on the loopback interface
// only, whatever --host says: it exists for tests and --simulate, never for a network.
//
// Server failure modes (RUNNER_SIM_FAIL): never-ready (loads forever; LLM /health stays 503),
// crash-load (a traceback during weight loading, exit 1), oom (CUDA OOM during loading, exit
// 1), crash (the scheduler dies on the second generation request, the process exits 1),
// slow-flush (a profiler flush takes an hour of simulated time), http-500 (every third
// generation request answers HTTP 500), bad-counts (a streamed LLM response reports 50 million
// completion tokens in its last /generate chunk, -5 in its OpenAI usage).

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/sglprof/runner/reports/kineto/kinetogen"
)

// llmSpecs are the LLM ServerArgs options the simulated launch_server accepts (a subset).
var llmSpecs = []argSpec{
	{flags: []string{"--model-path", "--model"}, dest: "model_path"},
	{flags: []string{"--served-model-name"}, dest: "served_model_name"},
	{flags: []string{"--model-type"}, dest: "model_type", choices: []string{"auto", "diffusion", "llm"}},
	{flags: []string{"--host"}, dest: "host"},
	{flags: []string{"--port"}, dest: "port", kind: argInt},
	{flags: []string{"--tp-size", "--tp", "--tensor-parallel-size"}, dest: "tp_size", kind: argInt},
	{flags: []string{"--dp-size", "--dp"}, dest: "dp_size", kind: argInt},
	{flags: []string{"--mem-fraction-static"}, dest: "mem_fraction_static", kind: argFloat},
	{flags: []string{"--max-running-requests"}, dest: "max_running_requests", kind: argInt},
	{flags: []string{"--chunked-prefill-size"}, dest: "chunked_prefill_size", kind: argInt},
	{flags: []string{"--max-total-tokens"}, dest: "max_total_tokens", kind: argInt},
	{flags: []string{"--disable-cuda-graph"}, dest: "disable_cuda_graph", kind: argTrue},
	{flags: []string{"--enable-layerwise-nvtx-marker"}, dest: "enable_layerwise_nvtx_marker", kind: argTrue},
	{flags: []string{"--attention-backend"}, dest: "attention_backend"},
	{flags: []string{"--trust-remote-code"}, dest: "trust_remote_code", kind: argTrue},
	{flags: []string{"--log-level"}, dest: "log_level"},
	{flags: []string{"--dtype"}, dest: "dtype"},
	{flags: []string{"--quantization"}, dest: "quantization"},
	{flags: []string{"--skip-server-warmup"}, dest: "skip_server_warmup", kind: argTrue},
	{flags: []string{"--enable-torch-compile"}, dest: "enable_torch_compile", kind: argTrue},
	{flags: []string{"--stream-interval"}, dest: "stream_interval", kind: argInt},
	{flags: []string{"--enable-metrics"}, dest: "enable_metrics", kind: argTrue},
	{flags: []string{"--disable-radix-cache"}, dest: "disable_radix_cache", kind: argTrue},
}

// diffusionServeSpecs: `sglang serve` for diffusion takes ServerArgs and --config only; the
// sampling and profiling flags of generate are rejected (ref Summary 2).
var diffusionServeSpecs = func() []argSpec {
	out := []argSpec{{flags: []string{"--config"}, dest: "config"}, {flags: []string{"--model-type"}, dest: "model_type", choices: []string{"auto", "diffusion", "llm"}}}
	server := false
	for _, s := range generateSpecs {
		if s.dest == "model_path" {
			server = true
		}
		if server {
			out = append(out, s)
		}
	}
	return out
}()

// llmHints mark model names the auto-detection treats as LLMs (real sglang reads the model's
// config; the simulator has no files to read).
var llmHints = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?i)llama|instruct|qwen[23]|mistral|gpt|deepseek|gemma|phi-`)
})

// serveMain is `sglang serve ARGS` (llmEntry: `python -m sglang.launch_server ARGS`).
func serveMain(ctx context.Context, args []string, env map[string]string, stdout, stderr io.Writer, llmEntry bool) int {
	modelType := "auto"
	model := ""
	for i, a := range args {
		v, ok := strings.CutPrefix(a, "--model-type=")
		if !ok && a == "--model-type" && i+1 < len(args) {
			v, ok = args[i+1], true
		}
		if ok {
			modelType = v
		}
		if mv, ok := strings.CutPrefix(a, "--model-path="); ok {
			model = mv
		} else if (a == "--model-path" || a == "--model") && i+1 < len(args) {
			model = args[i+1]
		}
	}
	if llmEntry {
		modelType = "llm"
	}
	if modelType == "auto" {
		modelType = "diffusion"
		if _, known := resolveModel(model, ""); !known && llmHints().MatchString(model) {
			modelType = "llm"
		}
	}
	prog, specs, badExit := "sglang serve", diffusionServeSpecs, 1
	if modelType == "llm" {
		prog, specs, badExit = "launch_server.py", llmSpecs, 2
	}
	p, err := parseArgs(specs, args)
	if err != nil {
		fmt.Fprint(stderr, usage(prog, specs))
		fmt.Fprintf(stderr, "%s: error: %s\n", prog, err)
		return badExit
	}
	k, err := readKnobs(env)
	if err != nil {
		fmt.Fprintf(stderr, "runner sim: %v\n", err)
		return 2
	}
	if p.str("model_path") == "" {
		fmt.Fprintf(stderr, "%s: error: the following arguments are required: --model-path\n", prog)
		return 2
	}
	s := &server{p: p, k: k, env: env, log: &logger{w: stderr}, llm: modelType == "llm",
		model: p.str("model_path"), jobs: map[string]*videoJob{}}
	s.served = p.str("served_model_name")
	if s.served == "" {
		s.served = s.model
	}
	s.cwd, _ = os.Getwd()

	// One signal must stop every sleeper (loading, requests, a flush), so the first one
	// cancels a context that all of them watch, instead of being read by one of them.
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var got atomic.Value
	go func() {
		select {
		case sg := <-sig:
			got.Store(sg)
			cancel()
		case <-sctx.Done():
		}
	}()
	s.clk = &clock{ctx: sctx, scale: k.scale, start: time.Now()}
	code, err := s.run()
	var intr *errInterrupted
	if errors.As(err, &intr) {
		sg, _ := got.Load().(os.Signal)
		s.log.log("Received %s; shutting down.", sigName(sg))
		return 0
	}
	return code
}

func sigName(s os.Signal) string {
	if s == nil {
		return "shutdown request"
	}
	if s == syscall.SIGINT {
		return "SIGINT"
	}
	return "SIGTERM"
}

// server is one simulated server process.
type server struct {
	p      parsedArgs
	k      knobs
	env    map[string]string
	log    *logger
	clk    *clock
	llm    bool
	model  string
	served string
	prof   modelProfile
	cwd    string

	ready    atomic.Bool
	gpu      sync.Mutex // diffusion: one request at a time on the GPU; LLM: held during a flush
	nGen     atomic.Int64
	crashed  chan struct{}
	crashOne sync.Once

	mu   sync.Mutex
	jobs map[string]*videoJob
	// act is the nsys activity sink (under the nsys simulator): a gen shim reuses generate's
	// emitters, so a diffusion server's requests show up as kernels in the nsys report.
	act   *gen
	actMu sync.Mutex // serialises writes to act (requests, profiler calls)

	prof2 *llmProfile      // the LLM profiling session in progress
	dwin  *diffusionWindow // the diffusion /start_profile window in progress (guarded by mu)
	// flushing is closed when the flush in progress ends (nil: none): LLM requests wait for it.
	flushing chan struct{}
	steps    int64      // LLM forward steps so far
	met      llmMetrics // the /metrics page's counters and prefix cache (metrics.go)
	eng      *llmEngine // the LLM scheduler (llmEngine makes it)
	engOnce  sync.Once
}

// llmProfile is an LLM /start_profile session.
type llmProfile struct {
	id        string
	dir       string
	prefix    string
	startStep int64 // absolute step to start at
	numSteps  int64 // 0: until /stop_profile
	byStage   bool
	merge     bool
	torch     bool
	mem       bool     // MEM: a CUDA memory-history snapshot at stop
	cuda      bool     // CUDA_PROFILER: cudaProfilerStart at start, cudaProfilerStop at stop
	stack     bool     // with_stack (default true)
	v2        bool     // SGLANG_PROFILE_V2: the stage-based ProfileManager
	stages    []string // profile_stages (read by the v2 manager only): only these stages export (nil: all)
	recorded  int64
}

type videoJob struct {
	mu  sync.Mutex
	doc map[string]any
}

func (s *server) ms(d float64) error { return s.clk.sleep(int64(d * 1e6)) }

func (s *server) run() (int, error) {
	port := s.p.intv("port", 30000)
	s.crashed = make(chan struct{})
	var release func()
	ok := true
	if s.llm {
		s.log.log("server_args=ServerArgs(model_path='%s', host='127.0.0.1', port=%d, tp_size=%d)", s.model, port, s.p.intv("tp_size", 1))
		a := s.openServerActivity()
		release = func() { a.close() }
	} else {
		release, ok = s.startDiffusion(port)
	}
	defer release()
	if !ok {
		return 1, nil
	}
	if loaded, code, err := s.loadModel(); !loaded {
		return code, err
	}
	ln, code := s.startHTTP(port)
	if ln == nil {
		return code, nil
	}
	defer ln.Close()
	if s.llm {
		// Warmup /generate, then the readiness line.
		if err := s.ms(800); err != nil {
			return 0, err
		}
		s.ready.Store(true)
		s.log.log("The server is fired up and ready to roll!")
	}
	select {
	case <-s.crashed:
		return 1, nil
	case <-s.clk.ctx.Done():
		return 0, &errInterrupted{}
	}
}

// startDiffusion holds a diffusion server's scheduler/master ports, resolves its pipeline
// (falling back to diffusers, or failing under --backend sglang) and opens its nsys activity
// sink. release (never nil) closes what it opened, as the server's exit must; ok is false
// when the server exits 1 at once.
func (s *server) startDiffusion(port int) (release func(), ok bool) {
	release = func() {}
	held, ok := s.diffusionPorts(port)
	if !ok {
		return release, false
	}
	release = func() {
		for _, ln := range held {
			ln.Close()
		}
	}
	s.log.log("Starting server...")
	prof, known := resolveModel(s.model, s.p.str("model_id"))
	if !known {
		if s.p.str("backend") == "sglang" {
			s.log.log("ValueError: Could not resolve a native pipeline for %s (--backend sglang)", s.model)
			return release, false
		}
		s.log.log("Model %s is not in sglang's native registry. Falling back to diffusers backend.", s.model)
		prof = diffusersProfile
		prof.id = s.model
	}
	s.prof = prof
	if path := s.env[EnvNSysActivity]; path != "" {
		if a, err := openActivity(path); err != nil {
			s.log.log("WARNING: %v", err)
		} else {
			closePorts := release
			release = func() {
				a.close()
				closePorts()
			}
			a.put(&actRec{K: "proc", PID: int32(os.Getpid()), Name: "python3"})
			a.put(&actRec{K: "gpu", Dev: 0, Name: "NVIDIA H100 80GB HBM3"})
			a.flush()
			s.act = &gen{act: a, prof: prof, tp: 1, model: s.model, k: s.k}
		}
	}
	return release, true
}

// loadModel starts the workers and loads the weights, failing as the fault knobs ask.
// loaded is false when run must return code and err at once.
//
// Both flavours load the model before uvicorn starts; the LLM server then answers /health
// 503 until its warmup request has passed (§A.8, §B.3).
func (s *server) loadModel() (loaded bool, code int, err error) {
	loadS := 6.0
	if !s.llm {
		loadS = s.prof.loadS
	}
	// A model that needs more GPUs than are visible fails while the workers start, as torch
	// does when a rank selects a device index that does not exist.
	need := max(s.p.intv("num_gpus", 1), s.p.intv("tp_size", 1))
	if vis := visibleGPUs(s.env); need > vis {
		s.log.log("Launching %d worker processes (%d visible GPUs)", need, vis)
		s.log.raw(fmt.Sprintf("[TP%d] Scheduler hit an exception: Traceback (most recent call last):\nRuntimeError: CUDA error: invalid device ordinal\n", vis))
		s.log.log("Initialization failed. scheduler is dead.")
		return false, 1, nil
	}
	s.log.log("Loading weights for %s ...", s.model)
	switch {
	case s.k.fail["never-ready"]:
		s.log.log("Loading safetensors checkpoint shards: 0%% Completed | 0/4")
		return false, 0, s.clk.block()
	case s.k.fail["crash-load"]:
		if err := s.ms(loadS * 500); err != nil {
			return false, 0, err
		}
		s.log.raw("Traceback (most recent call last):\n  File \"/sgl-workspace/sglang/python/sglang/srt/model_loader/loader.py\", line 412, in load_model\n" +
			"    state_dict = safetensors.torch.load_file(path)\nRuntimeError: Error while deserializing header: MetadataIncompleteBuffer\n")
		s.log.log("Initialization failed. scheduler is dead.")
		return false, 1, nil
	case s.k.fail["oom"]:
		if err := s.ms(loadS * 700); err != nil {
			return false, 0, err
		}
		s.log.raw("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.12 GiB is free.\n")
		return false, 1, nil
	}
	if err := s.ms(loadS * 1000); err != nil {
		return false, 0, err
	}
	return true, 0, nil
}

// startHTTP binds the port and serves the API; a diffusion server is ready at once, an LLM
// server after its warmup (in run). A nil listener means run returns code.
func (s *server) startHTTP(port int) (net.Listener, int) {
	if !s.llm {
		if s.prof.id == s.model && s.prof.pipeline == diffusersProfile.pipeline {
			s.log.log("Loaded diffusers pipeline: %s", s.prof.pipeline)
		} else {
			s.log.log("Loaded pipeline %s for %s", s.prof.pipeline, s.model)
		}
		s.log.log("Starting FastAPI server.")
	}
	ln, code := s.listen(port)
	if ln == nil {
		return nil, code
	}
	go s.serveHTTP(ln)
	if !s.llm {
		s.ready.Store(true)
	}
	return ln, 0
}

// defaultSchedulerPort is ServerArgs.scheduler_port's default (the scheduler's ZMQ socket).
const defaultSchedulerPort = 5555

// diffusionPorts is ServerArgs._adjust_network_ports of the diffusion server
// (multimodal_gen/runtime/server_args.py). With --strict-ports it fails, before anything
// loads, when two of the HTTP port, the scheduler port + r of every data-parallel replica
// r < --dp-size (default 5555) and a given --master-port are the same, or when one of them
// cannot be bound, with upstream's RuntimeError. Without it, a busy scheduler or master port
// moves to a free one (the HTTP port is left to uvicorn's bind, which fails with Errno 98).
// Ports given explicitly stay bound while the server runs (each replica's scheduler socket,
// rank 0's TCPStore), so a second server given the same ones meets them busy; the returned
// listeners are to be closed on exit.
func (s *server) diffusionPorts(port int) ([]net.Listener, bool) {
	sched := s.p.intv("scheduler_port", defaultSchedulerPort)
	master := s.p.intv("master_port", 0) // 0: None
	replicas := max(s.p.intv("data_parallel_size", 1), 1)
	type named struct {
		name string
		port int
	}
	requested := []named{{"HTTP", port}}
	for r := range replicas {
		requested = append(requested, named{fmt.Sprintf("Scheduler[%d]", r), sched + r})
	}
	if master != 0 {
		requested = append(requested, named{"Master", master})
	}
	if s.p.boolv("strict_ports") {
		fail := func(msg string) ([]net.Listener, bool) {
			s.log.raw("Traceback (most recent call last):\n  File \"/sgl-workspace/sglang/python/sglang/multimodal_gen/runtime/server_args.py\", in _adjust_network_ports\n")
			s.log.raw("RuntimeError: " + msg + "\n")
			return nil, false
		}
		seen := map[int]string{}
		for _, c := range requested {
			if prev, dup := seen[c.port]; dup {
				return fail(fmt.Sprintf("%s port %d duplicates %s port and --strict-ports is enabled.", c.name, c.port, prev))
			}
			seen[c.port] = c.name
			if !portAvailable(c.port) {
				return fail(fmt.Sprintf("%s port %d is unavailable and --strict-ports is enabled. Either use a different port or disable --strict-ports.", c.name, c.port))
			}
		}
	}
	var held []net.Listener
	for _, c := range requested[1:] {
		if c.name == "Master" && !s.p.has("master_port") || c.name != "Master" && !s.p.has("scheduler_port") {
			continue
		}
		if ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port))); err == nil {
			held = append(held, ln)
		}
	}
	return held, true
}

// portAvailable is sglang's is_port_available: whether 127.0.0.1:port can be bound now.
func portAvailable(port int) bool {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// visibleGPUs is the simulated machine's GPU count: the entries of CUDA_VISIBLE_DEVICES when
// set, else 8 (one H100 node).
func visibleGPUs(env map[string]string) int {
	v, ok := env["CUDA_VISIBLE_DEVICES"]
	if !ok {
		return 8
	}
	n := 0
	for _, d := range strings.Split(v, ",") {
		if strings.TrimSpace(d) != "" {
			n++
		}
	}
	return n
}

// listen binds 127.0.0.1:port (never another interface) and logs uvicorn's line.
func (s *server) listen(port int) (net.Listener, int) {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		s.log.log("ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', %d): address already in use", port)
		return nil, 1
	}
	s.log.raw(fmt.Sprintf("INFO:     Uvicorn running on http://127.0.0.1:%d (Press CTRL+C to quit)\n", ln.Addr().(*net.TCPAddr).Port))
	return ln, 0
}

func (s *server) serveHTTP(ln net.Listener) {
	mux := http.NewServeMux()
	mux.HandleFunc("/health", s.health)
	mux.HandleFunc("/health_generate", s.health)
	mux.HandleFunc("GET /v1/models", s.models)
	if s.llm {
		mux.HandleFunc("GET /get_model_info", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, 200, map[string]any{"model_path": s.model, "tokenizer_path": s.model, "is_generation": true})
		})
		mux.HandleFunc("/get_server_info", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, 200, map[string]any{"model_path": s.model, "port": s.p.intv("port", 30000), "tp_size": s.p.intv("tp_size", 1), "version": SGLangVersion})
		})
		mux.HandleFunc("POST /generate", s.llmGenerate)
		mux.HandleFunc("POST /v1/completions", s.llmCompletions)
		mux.HandleFunc("POST /v1/chat/completions", s.llmChat)
		mux.HandleFunc("/start_profile", s.startProfile)
		mux.HandleFunc("/stop_profile", s.stopProfile)
		mux.HandleFunc("GET /flush_cache", s.flushCache) // metrics.go
		mux.HandleFunc("POST /flush_cache", s.flushCache)
		if s.p.boolv("enable_metrics") {
			mux.HandleFunc("GET /metrics", metricsHandler(namingSGLang, s.metricsView, s.served))
		}
	} else {
		mux.HandleFunc("GET /v1/model_info", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, 200, map[string]any{"model_path": s.model, "num_gpus": s.p.intv("num_gpus", 1), "task_type": s.task(), "pipeline_name": s.prof.pipeline})
		})
		mux.HandleFunc("/start_profile", s.diffusionStartProfile)
		mux.HandleFunc("/stop_profile", s.diffusionStopProfile)
		mux.HandleFunc("POST /v1/images/generations", s.images)
		mux.HandleFunc("POST /v1/videos", s.videoCreate)
		mux.HandleFunc("GET /v1/videos/{id}", s.videoGet)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	srv.Serve(ln)
}

func (s *server) task() string {
	if s.prof.video {
		return "T2V"
	}
	return "T2I"
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func (s *server) health(w http.ResponseWriter, r *http.Request) {
	if !s.ready.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if s.llm {
		w.WriteHeader(200)
		return
	}
	writeJSON(w, 200, map[string]string{"status": "ok"})
}

func (s *server) models(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, 200, map[string]any{"object": "list", "data": []map[string]any{{"id": s.served, "object": "model", "created": time.Now().Unix(), "owned_by": "sglang", "root": s.model}}})
}

// admit counts a generation request and applies the crash / http-500 failure modes. It
// returns false when the request has been answered (or the process is going down).
func (s *server) admit(w http.ResponseWriter) bool {
	n := s.nGen.Add(1)
	if s.k.fail["crash"] && n >= 2 {
		s.log.raw("[2025-12-20 16:45:31 TP0] Scheduler hit an exception: Traceback (most recent call last):\nRuntimeError: CUDA error: an illegal memory access was encountered\n")
		s.log.log("Received sigquit from a child process. It usually means the child failed.")
		s.crashOne.Do(func() { close(s.crashed) })
		// The process exits; the connection dies with it.
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
			}
		}
		return false
	}
	if s.k.fail["http-500"] && n%3 == 0 {
		http.Error(w, "Internal Server Error", http.StatusInternalServerError)
		return false
	}
	return true
}

func fastapi422(w http.ResponseWriter, loc, msg string) {
	writeJSON(w, 422, map[string]any{"detail": []map[string]any{{"type": "missing", "loc": []string{"body", loc}, "msg": msg}}})
}

// diffusionReq is the subset of ImageGenerationsRequest / VideoGenerationsRequest the
// simulator reads; unknown fields are allowed (extra="allow").
type diffusionReq struct {
	Prompt               *string `json:"prompt"`
	N                    int     `json:"n"`
	Size                 string  `json:"size"`
	Width                int     `json:"width"`
	Height               int     `json:"height"`
	NumInferenceSteps    int     `json:"num_inference_steps"`
	NumFrames            int     `json:"num_frames"`
	Seed                 any     `json:"seed"`
	Profile              bool    `json:"profile"`
	NumProfiledTimesteps *int    `json:"num_profiled_timesteps"`
	ProfileAllStages     bool    `json:"profile_all_stages"`
	PerfDumpPath         string  `json:"perf_dump_path"`
	ResponseFormat       string  `json:"response_format"`
}

func (s *server) parseDiffusion(w http.ResponseWriter, r *http.Request) (*diffusionReq, bool) {
	var q diffusionReq
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&q); err != nil {
		writeJSON(w, 422, map[string]any{"detail": []map[string]any{{"type": "json_invalid", "loc": []string{"body"}, "msg": "JSON decode error: " + err.Error()}}})
		return nil, false
	}
	if q.Prompt == nil {
		fastapi422(w, "prompt", "Field required")
		return nil, false
	}
	if q.Size != "" && q.Width == 0 {
		ws, hs, ok := strings.Cut(q.Size, "x")
		wv, e1 := strconv.Atoi(ws)
		hv, e2 := strconv.Atoi(hs)
		if !ok || e1 != nil || e2 != nil || wv <= 0 || hv <= 0 {
			writeJSON(w, 400, map[string]any{"detail": "Invalid size format: " + q.Size})
			return nil, false
		}
		q.Width, q.Height = wv, hv
	}
	if q.Width <= 0 || q.Height <= 0 {
		q.Width, q.Height = s.prof.w, s.prof.h
	}
	if q.NumInferenceSteps <= 0 {
		q.NumInferenceSteps = s.prof.steps
	}
	q.N = min(max(q.N, 1), 10)
	return &q, true
}

// generateDiffusion runs one request on the simulated GPU and returns its inference time.
func (s *server) generateDiffusion(q *diffusionReq, rid string) (float64, string, error) {
	s.gpu.Lock()
	defer s.gpu.Unlock()
	frames := max(q.NumFrames, s.prof.frames)
	pf := s.prof.pixelFactor(q.Width, q.Height, frames)
	// One server process is one run: its run-level factor scales every request alike.
	rf := s.k.runFactor(uint64(len(s.model))*0xbf58476d1ce4e5b9 ^ uint64(q.Width*q.Height*max(frames, 1)))
	stepMS := s.prof.stepMS * pf * rf
	textMS := s.prof.textMS * kinetogenStageFactor("TextEncodingStage", s.k.slow) * rf
	denoiseStepMS := stepMS * kinetogenStageFactor("DenoisingStage", s.k.slow)
	vaeMS := s.prof.vaeMS * pf * kinetogenStageFactor("DecodingStage", s.k.slow) * rf
	total := (textMS + float64(q.NumInferenceSteps)*denoiseStepMS + vaeMS) * float64(q.N)
	start := s.clk.now()
	if err := s.ms(total); err != nil {
		return 0, "", err
	}
	if g := s.act; g != nil {
		s.actMu.Lock()
		defer s.actMu.Unlock()
		// GPU work of the request on the simulated clock: text encoding, the steps, the VAE.
		// The NVTX ranges are the ones generate's stage logging and layerwise markers push.
		at := start
		g.emitStage(kinetogenTextEncoding, at, s.prof.textMS)
		g.nvtx("TextEncodingStage", at, at+int64(textMS*1e6))
		at += int64(textMS * 1e6)
		denoiseStart := at
		for i := range q.NumInferenceSteps {
			g.emitStep(i, at, stepMS)
			g.nvtx("denoising_step_"+strconv.Itoa(i), at, at+int64(denoiseStepMS*1e6))
			at += int64(denoiseStepMS * 1e6)
		}
		g.nvtx("DenoisingStage", denoiseStart, at)
		g.emitStage(kinetogenDecoding, at, s.prof.vaeMS*pf)
		g.nvtx("DecodingStage", at, at+int64(vaeMS*1e6))
		g.act.flush()
	}
	s.recordWindow(start, q.NumInferenceSteps*q.N, int64(stepMS*1e6), int64(s.prof.textMS*1e6), int64(s.prof.vaeMS*pf*1e6))
	if q.PerfDumpPath != "" {
		// The request's perf dump (§A.4), as generate's --perf-dump-path writes it.
		r := &request{id: rid, prompt: *q.Prompt, totalMS: total,
			stages: []stageRun{{"TextEncodingStage", textMS}, {"DenoisingStage", float64(q.NumInferenceSteps) * denoiseStepMS}, {"DecodingStage", vaeMS}}}
		for range q.NumInferenceSteps {
			r.stepsMS = append(r.stepsMS, denoiseStepMS)
		}
		peak := s.prof.peakGB * 1024
		for _, st := range r.stages {
			r.mem = append(r.mem, memCheckpoint{stage: st.name, alloc: s.prof.residentG * 1024, reserved: s.prof.residentG * 1024 * 1.04, peakA: peak * 0.97, peakRe: peak})
		}
		path := q.PerfDumpPath
		if !filepath.IsAbs(path) {
			path = filepath.Join(s.cwd, path)
		}
		if err := writePerfDump(path, r, &gen{env: s.env, model: s.model}); err != nil {
			s.log.log("Failed to dump metrics: %v", err)
		} else {
			s.log.log("Metrics dumped to: %s", path)
		}
	}
	trace := ""
	if q.Profile {
		nProf := 5
		if q.NumProfiledTimesteps != nil {
			nProf = *q.NumProfiledTimesteps
		}
		if nProf < 0 || nProf > q.NumInferenceSteps {
			nProf = q.NumInferenceSteps
		}
		cfg := kinetogen.Config{Flavor: kinetogen.FlavorDiffusion, Layers: s.prof.layers, WithStack: true, Model: s.model,
			StepScale: s.k.slow, StepNS: int64(stepMS * 1e6), BaseTimeNS: start}
		name := rid + "-" + strconv.Itoa(nProf) + "_steps-global-rank0.trace.json.gz"
		if q.ProfileAllStages {
			cfg.AllStages = true
			cfg.Steps = q.NumInferenceSteps
			cfg.StageNS = map[string]int64{kinetogen.StageTextEncoding: int64(s.prof.textMS * 1e6), kinetogen.StageDecoding: int64(s.prof.vaeMS * pf * 1e6)}
			name = rid + "-full_stages-global-rank0.trace.json.gz"
		} else {
			cfg.FirstStep = 1
			cfg.Steps = max(min(nProf+1, q.NumInferenceSteps), 1)
		}
		dir := s.diffusionTraceDir()
		path := filepath.Join(dir, name)
		if err := writeGzTrace(path, cfg); err != nil {
			s.log.log("Failed to save trace: %v", err)
		} else {
			trace = path
			s.log.log("Saved profiler traces to: %s%s%s", ansiCyan, path, ansiReset)
		}
	}
	return total / 1000, trace, nil
}

func (s *server) diffusionTraceDir() string {
	for _, k := range []string{"SGLANG_DIFFUSION_TORCH_PROFILER_DIR", "SGLANG_TORCH_PROFILER_DIR"} {
		if v := s.env[k]; v != "" {
			if filepath.IsAbs(v) {
				return v
			}
			return filepath.Join(s.cwd, v)
		}
	}
	return filepath.Join(s.cwd, "logs")
}

func writeGzTrace(path string, cfg kinetogen.Config) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	zw, _ := gzip.NewWriterLevel(bw, gzip.BestSpeed)
	_, err = kinetogen.Write(zw, cfg)
	err = errors.Join(err, zw.Close(), bw.Flush(), f.Close())
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

// tinyPNG is the image every simulated request returns, encoded on first
// use: the PNG encoder's compressor is most of a megabyte, which each
// runner process paid at start when this was built at init.
var tinyPNG = sync.OnceValue(func() string { return base64.StdEncoding.EncodeToString(pngImage(1)) })

func (s *server) images(w http.ResponseWriter, r *http.Request) {
	q, ok := s.parseDiffusion(w, r)
	if !ok || !s.admit(w) {
		return
	}
	rid := uuid4()
	// ImageGenerationsRequest declares no profile, num_profiled_timesteps or
	// profile_all_stages (extra="allow" accepts and drops them) and the image handler's
	// build_sampling_params list has none: only a /start_profile window profiles an image.
	q.Profile, q.NumProfiledTimesteps, q.ProfileAllStages = false, nil, false
	s.log.log("Processing prompt 1/1: %s", truncate(*q.Prompt, 100))
	inf, trace, err := s.generateDiffusion(q, rid)
	if err != nil {
		http.Error(w, "server shutting down", http.StatusServiceUnavailable)
		return
	}
	peak := s.prof.peakGB * 1024 * min(1.0+0.02*float64(q.N-1), 1.5)
	data := make([]map[string]any, q.N)
	for i := range data {
		data[i] = map[string]any{"b64_json": tinyPNG(), "revised_prompt": *q.Prompt, "file_path": nil}
	}
	s.log.log("Generated %d image(s) in %.2f seconds", q.N, inf)
	resp := map[string]any{"id": rid, "created": time.Now().Unix(), "data": data,
		"peak_memory_mb": round2(peak), "inference_time_s": round4(inf), "usage": nil}
	if trace != "" {
		resp["profile_trace_path"] = trace
	}
	writeJSON(w, 200, resp)
}

func (s *server) videoCreate(w http.ResponseWriter, r *http.Request) {
	q, ok := s.parseDiffusion(w, r)
	if !ok || !s.admit(w) {
		return
	}
	// VideoGenerationsRequest declares profile, num_profiled_timesteps and profile_all_stages,
	// but video_api.py's _build_video_sampling_params passes only perf_dump_path on: as for
	// images, only a /start_profile window profiles a video.
	q.Profile, q.NumProfiledTimesteps, q.ProfileAllStages = false, nil, false
	id := "video_" + strings.ReplaceAll(uuid4(), "-", "")
	job := &videoJob{doc: map[string]any{"id": id, "object": "video", "model": s.served, "status": "queued", "progress": 0,
		"created_at": time.Now().Unix(), "size": fmt.Sprintf("%dx%d", q.Width, q.Height), "seconds": "4", "quality": "standard",
		"url": nil, "completed_at": nil, "error": nil, "num_outputs": q.N}}
	s.mu.Lock()
	s.jobs[id] = job
	s.mu.Unlock()
	go func() {
		if s.k.fail["video-cancelled"] {
			// A job cancelled on the server ends "cancelled" and never completes.
			job.set("status", "cancelled")
			return
		}
		job.set("status", "in_progress")
		inf, _, err := s.generateDiffusion(q, id)
		job.mu.Lock()
		defer job.mu.Unlock()
		if err != nil {
			job.doc["status"], job.doc["error"] = "failed", map[string]any{"code": "shutdown", "message": "server shutting down"}
			return
		}
		job.doc["status"], job.doc["progress"], job.doc["completed_at"] = "completed", 100, time.Now().Unix()
		job.doc["inference_time_s"], job.doc["peak_memory_mb"] = round4(inf), round2(s.prof.peakGB*1024)
		job.doc["file_path"] = filepath.Join(s.cwd, "outputs", id+".mp4")
	}()
	job.mu.Lock()
	defer job.mu.Unlock()
	writeJSON(w, 200, job.doc)
}

func (j *videoJob) set(k string, v any) {
	j.mu.Lock()
	j.doc[k] = v
	j.mu.Unlock()
}

func (s *server) videoGet(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	job := s.jobs[r.PathValue("id")]
	s.mu.Unlock()
	if job == nil {
		writeJSON(w, 404, map[string]any{"detail": "Video not found"})
		return
	}
	job.mu.Lock()
	defer job.mu.Unlock()
	writeJSON(w, 200, job.doc)
}

// llmReq is the subset of GenerateReqInput / CompletionRequest the simulator reads.
type llmReq struct {
	Text           *string `json:"text"`
	InputIDs       []int   `json:"input_ids"`
	SamplingParams struct {
		MaxNewTokens *int `json:"max_new_tokens"`
	} `json:"sampling_params"`
	Prompt    json.RawMessage `json:"prompt"` // a string or a list of token ids
	MaxTokens *int            `json:"max_tokens"`
	Messages  []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	Stream        bool `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	// SimDue and SimRun are the runner's load client's schedule under --simulate
	// (simclock.DueField): when the request was due, in ns from its load run's start.
	SimDue *int64 `json:"sim_due_ns"`
	SimRun string `json:"sim_run"`
}

// due is the request's place on its load's schedule; nil when the client sent none.
func (q llmReq) due() *simDue {
	if q.SimDue == nil || *q.SimDue < 0 {
		return nil
	}
	return &simDue{run: q.SimRun, ns: *q.SimDue}
}

// llmRunDue runs one request through the server's continuous-batching engine (llmengine.go,
// costs in llmcost.go) and feeds the profiler with its steps. due is where the load client
// placed the request on its schedule (nil: none); cached of its prompt tokens are in the prefix
// cache and are not prefilled again. emit (may be nil) gets the cumulative output token count
// as each token is produced (the first at the end of its prefill, then one per decode step) and
// the request's simulated time so far in ms, from its arrival: queueing, prefill and decode. It
// returns the request's simulated latency in s.
func (s *server) llmRunDue(due *simDue, inTok, outTok, cached int, emit func(n int, simMS float64)) (float64, error) {
	// A flush holds the scheduler; requests wait for it.
	s.mu.Lock()
	flushing := s.flushing
	s.mu.Unlock()
	if flushing != nil {
		<-flushing
	}
	return s.llmEngine().run(inTok, outTok, cached, due, emit)
}

// llmEngine is the server's engine, made at its first request from its flags.
func (s *server) llmEngine() *llmEngine {
	s.engOnce.Do(func() {
		s.eng = newLLMEngine(s.llmCostOf(), s.clk, func(stage string, start, end int64) {
			s.llmKernel(stage, start, end)
			s.step(1, stage)
		})
	})
	return s.eng
}

// step advances the forward-step counter and the profiler window.
func (s *server) step(n int64, stage string) {
	s.mu.Lock()
	s.steps += n
	p := s.prof2
	if p == nil || s.steps <= p.startStep {
		s.mu.Unlock()
		return
	}
	p.recorded += n
	done := p.numSteps > 0 && p.recorded >= p.numSteps
	if done {
		s.prof2 = nil
	}
	s.mu.Unlock()
	if done {
		s.log.log("Stop profiling...")
		if p.cuda {
			s.cudaProfiler(false)
		}
		go s.flush(p)
	}
}

func tokens(s string) int { return max(len(strings.Fields(s)), 1) }

func (s *server) llmGenerate(w http.ResponseWriter, r *http.Request) {
	var q llmReq
	if err := json.NewDecoder(io.LimitReader(r.Body, 16<<20)).Decode(&q); err != nil {
		writeJSON(w, 400, map[string]any{"error": map[string]any{"message": "Invalid request body: " + err.Error()}})
		return
	}
	if q.Text == nil && q.InputIDs == nil {
		writeJSON(w, 400, map[string]any{"error": map[string]any{"message": "Either text or input_ids should be provided."}})
		return
	}
	if !s.admit(w) {
		return
	}
	in := len(q.InputIDs)
	if q.Text != nil {
		in = tokens(*q.Text)
	}
	out := 128
	if q.SamplingParams.MaxNewTokens != nil {
		out = *q.SamplingParams.MaxNewTokens
	}
	text := ""
	if q.Text != nil {
		text = *q.Text
	}
	cached, done := s.track(promptWords(q.InputIDs, text), in, out) // metrics.go
	defer done()
	if q.Stream {
		s.streamGenerate(w, q.due(), in, out, cached)
		return
	}
	lat, err := s.llmRunDue(q.due(), in, out, cached, nil)
	if err != nil {
		http.Error(w, "server shutting down", http.StatusServiceUnavailable)
		return
	}
	writeJSON(w, 200, map[string]any{"text": strings.Repeat(" the", out), "meta_info": map[string]any{
		"id": strings.ReplaceAll(uuid4(), "-", ""), "finish_reason": map[string]any{"type": "length", "length": out},
		"prompt_tokens": in, "completion_tokens": out, "cached_tokens": 0, "e2e_latency": round4(lat)}})
}

// profileReq is ProfileReqInput (§B.1).
type profileReq struct {
	OutputDir      *string  `json:"output_dir"`
	StartStep      *int     `json:"start_step"`
	NumSteps       *int     `json:"num_steps"`
	Activities     []string `json:"activities"`
	ProfileByStage bool     `json:"profile_by_stage"`
	WithStack      *bool    `json:"with_stack"`
	RecordShapes   *bool    `json:"record_shapes"`
	MergeProfiles  bool     `json:"merge_profiles"`
	ProfilePrefix  *string  `json:"profile_prefix"`
	ProfileStages  []string `json:"profile_stages"`
}

func (s *server) startProfile(w http.ResponseWriter, r *http.Request) {
	var q profileReq
	if r.ContentLength != 0 {
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&q); err != nil && !errors.Is(err, io.EOF) {
			writeJSON(w, 422, map[string]any{"detail": []map[string]any{{"type": "json_invalid", "loc": []string{"body"}, "msg": err.Error()}}})
			return
		}
	}
	if q.Activities == nil {
		q.Activities = []string{"CPU", "GPU"}
	}
	p := &llmProfile{id: strconv.FormatFloat(float64(time.Now().UnixNano())/1e9, 'f', 6, 64), byStage: q.ProfileByStage, merge: q.MergeProfiles,
		stack: q.WithStack == nil || *q.WithStack}
	if s.envBool("SGLANG_PROFILE_V2", false) {
		// Only the stage-based ProfileManager of SGLANG_PROFILE_V2 reads profile_stages; the
		// default scheduler profiler takes the field and never looks at it.
		p.v2, p.stages = true, q.ProfileStages
	}
	for _, a := range q.Activities {
		switch a {
		case "CPU", "GPU":
			p.torch = true
		case "MEM":
			p.mem = true
		case "CUDA_PROFILER":
			p.cuda = true
		default:
			// RPD (ROCm), XPU and any unknown name: sglang's activity_map filter skips what
			// it does not know without a word, so an unknown activity profiles nothing.
		}
	}
	p.dir = s.env["SGLANG_TORCH_PROFILER_DIR"]
	if q.OutputDir != nil {
		p.dir = *q.OutputDir
	}
	if p.dir == "" {
		p.dir = "/tmp"
	}
	if q.ProfilePrefix != nil {
		p.prefix = *q.ProfilePrefix
	}
	if q.NumSteps != nil && *q.NumSteps > 0 {
		p.numSteps = int64(*q.NumSteps)
	}
	s.mu.Lock()
	if s.prof2 != nil {
		s.mu.Unlock()
		s.log.log("RuntimeError: Profiling is already in progress. Call /stop_profile first.")
		http.Error(w, "Internal Server Error", 500)
		return
	}
	p.startStep = s.steps
	if q.StartStep != nil && *q.StartStep >= 0 {
		p.startStep = max(int64(*q.StartStep), s.steps)
	}
	s.prof2 = p
	s.mu.Unlock()
	if p.cuda {
		s.cudaProfiler(true)
	}
	s.log.log("Profiling starts. Traces will be saved to: %s (with profile id: %s)", p.dir, p.id)
	// Not an sglang line: what the simulated profiler was configured with, for tests.
	s.log.log("[sim] profiler options: activities=%v with_stack=%v record_shapes=%v profile_stages=%v", q.Activities, p.stack, q.RecordShapes != nil && *q.RecordShapes, q.ProfileStages)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "Start profiling.\n")
}

func (s *server) stopProfile(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	p := s.prof2
	s.prof2 = nil
	s.mu.Unlock()
	if p == nil {
		s.log.log("RuntimeError: Profiling is not in progress. Call /start_profile first.")
		http.Error(w, "Internal Server Error", 500)
		return
	}
	s.log.log("Stop profiling...")
	if p.cuda {
		s.cudaProfiler(false)
	}
	if err := s.flush(p); err != nil {
		http.Error(w, "server shutting down", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "Stop profiling. This will take some time.\n")
}

// flush writes the session's traces while holding the scheduler (requests wait), as the
// real scheduler does inside its event loop.
func (s *server) flush(p *llmProfile) error {
	s.gpu.Lock()
	defer s.gpu.Unlock()
	done := make(chan struct{})
	s.mu.Lock()
	s.flushing = done
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.flushing = nil
		s.mu.Unlock()
		close(done)
	}()
	d := 1500.0
	if s.k.fail["slow-flush"] {
		d = 3600_000
	}
	if err := s.ms(d); err != nil {
		return err
	}
	if p.mem {
		// torch.cuda.memory._dump_snapshot: str(time.time()) + "-TP-<r>-memory" + stage suffix
		// + ".pickle" (no prefix, no profile id), once per stage stop with profile_by_stage.
		stages := []string{""}
		if p.byStage {
			stages = []string{"-EXTEND", "-DECODE"}
		}
		for _, st := range stages {
			ts := strconv.FormatFloat(float64(time.Now().UnixNano())/1e9, 'f', 6, 64)
			path := filepath.Join(p.dir, ts+"-TP-0-memory"+st+".pickle")
			if err := os.WriteFile(path, []byte("sim memory snapshot\n"), 0o644); err != nil {
				s.log.log("Failed to save memory snapshot: %v", err)
			}
		}
	}
	if p.torch {
		steps := int(max(p.recorded, 1))
		write := func(name string, n int, seed int64) {
			cfg := kinetogen.Config{Flavor: kinetogen.FlavorLLM, Steps: max(n, 1), CUDAGraph: !s.p.boolv("disable_cuda_graph"), Model: s.model, Seed: seed, StepScale: s.k.slow, WithStack: p.stack}
			path := filepath.Join(p.dir, name)
			if err := writeGzTrace(path, cfg); err != nil {
				s.log.log("Failed to save trace: %v", err)
			}
		}
		base := p.id + "-TP-0"
		if p.prefix != "" {
			base = p.prefix + "-" + base
		}
		switch {
		case p.v2:
			// The stage-based profiler exports only the stages profile_stages names (all
			// without it), suffixed with the stage's name as it spells it.
			if p.stages == nil || slices.Contains(p.stages, "prefill") {
				write(base+"-prefill.trace.json.gz", 1, 1)
			}
			if p.stages == nil || slices.Contains(p.stages, "decode") {
				write(base+"-decode.trace.json.gz", steps, 2)
			}
		case p.byStage:
			// The default profiler stops once per stage: an EXTEND and a DECODE trace.
			write(base+"-EXTEND.trace.json.gz", 1, 1)
			write(base+"-DECODE.trace.json.gz", steps, 2)
		default:
			write(base+".trace.json.gz", steps, 1)
		}
		if p.merge {
			msg := s.mergeProfiles(p, func(name string) { write(name, steps, 3) })
			s.log.log("Profiling done. Traces are saved to: %s%s", p.dir, msg)
			return nil
		}
	}
	s.log.log("Profiling done. Traces are saved to: %s", p.dir)
	return nil
}

// mergeProfiles is ProfileMerger on rank 0: it globs "<profile_id>*.trace.json.gz" in the output
// directory (names with "TP-", not the merged file itself), so per-rank files named
// "<prefix>-<profile_id>-TP-..." are not found and the merge fails. It returns the message
// the scheduler appends to its "Profiling done." line.
func (s *server) mergeProfiles(p *llmProfile, write func(name string)) string {
	merged := "merged-" + p.id + ".trace.json.gz"
	s.log.log("Starting profile merge...")
	m, _ := filepath.Glob(filepath.Join(p.dir, globEscape(p.id)+"*.trace.json.gz"))
	var files []string
	for _, f := range m {
		if filepath.Base(f) != merged && strings.Contains(filepath.Base(f), "TP-") {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		err := "No trace files found for profile_id: " + p.id
		s.log.log("Failed to merge profiles: %s", err)
		return " Merge failed: " + err
	}
	write(merged)
	path := filepath.Join(p.dir, merged)
	s.log.log("Profile merge completed: %s", path)
	return fmt.Sprintf(" Merged trace: %s (Events: %d, Files: %d)", path, 100*len(files), len(files))
}

// globEscape quotes the glob metacharacters of a literal name part.
func globEscape(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`)
	return r.Replace(s)
}
