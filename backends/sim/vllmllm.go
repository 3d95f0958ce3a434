package sim

// The simulated vLLM LLM server: `vllm serve MODEL [--host H] [--port P] [--profiler-config
// JSON] [engine flags]`, reached as `runner sim vllm serve ...` (with --omni it is vLLM-Omni's
// diffusion server of vllm.go, as the real CLI hands --omni over to vllm_omni).
//
// What it reproduces (docs/upstream.md, "vLLM LLM server"): argparse's rejection of an unknown
// flag; the engine start and its failures (CUDA OOM while the KV cache is sized, then the API
// server's "Engine core initialization failed"); uvicorn's startup line; GET /health (200 with
// an empty body), GET /v1/models, POST /v1/completions and /v1/chat/completions (the OpenAI
// serving of llm.go, whose cost model it shares) and no SGLang /generate (404); POST
// /start_profile and /stop_profile, registered only when --profiler-config sets a profiler and
// reading no body. A torch window writes, on stop, one trace per GPU worker,
// <torch_profiler_dir>/dp0_pp0_tp<r>_dcp0_ep0_rank<r>.<ns>.pt.trace.json.gz, and the API
// frontend's CPU-only <host>_<pid>.async_llm.<ns>.pt.trace.json.gz (not with ignore_frontend),
// all written before /stop_profile answers.
//
// Routes are built by vllmLLMRoutes on a mux the caller owns, so that other pages (a
// Prometheus /metrics in vLLM's naming) can be mounted beside them without touching this file.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/sglprof/runner/reports/kineto/kinetogen"
)

// vllmLLMServer is one simulated `vllm serve` LLM process.
type vllmLLMServer struct {
	*server
	pcfg *profilerConfig
	args vllmLLMArgs

	pmu     sync.Mutex
	window  bool  // a /start_profile window is open
	stepsAt int64 // forward steps when it opened
}

// vllmLLMArgs is what the simulator reads of `vllm serve`'s engine flags.
type vllmLLMArgs struct {
	vllmArgs
	tp            int
	maxModelLen   int
	enforceEager  bool
	prefixCaching bool // --enable-prefix-caching (default on in V1)
	chunked       bool // --enable-chunked-prefill (default on in V1)
}

// vllmValueFlags are the engine flags with a value the simulator accepts (a subset of
// EngineArgs.add_cli_args); vllmBoolFlags are the switches, each with its --no- form
// (argparse.BooleanOptionalAction).
var (
	vllmValueFlags = map[string]bool{
		"--tensor-parallel-size": true, "-tp": true, "--pipeline-parallel-size": true, "-pp": true,
		"--data-parallel-size": true, "-dp": true, "--max-model-len": true, "--max-num-seqs": true,
		"--max-num-batched-tokens": true, "--gpu-memory-utilization": true, "--dtype": true,
		"--seed": true, "--generation-config": true, "--served-model-name": true,
		"--kv-cache-dtype": true, "--quantization": true, "-q": true, "--block-size": true,
		"--tokenizer": true, "--attention-backend": true,
	}
	vllmBoolFlags = map[string]bool{
		"--enable-prefix-caching": true, "--enable-chunked-prefill": true, "--enforce-eager": true,
		"--trust-remote-code": true, "--disable-log-requests": true, "--disable-log-stats": true,
		"--enable-log-requests": true,
	}
)

// parseVLLMLLMArgs parses `vllm serve MODEL [options]`; on a usage error it prints argparse's
// message and reports false (exit status 2).
func parseVLLMLLMArgs(args []string, stderr io.Writer) (vllmLLMArgs, bool) {
	return parseVLLMServe(args, stderr, true)
}

// parseVLLMServe is the one parser of `vllm serve MODEL [options]` for both simulated servers:
// the flags both take, and with llm the LLM server's (tensor parallelism, model length, the
// engine's value and switch flags); any other is refused as vLLM's argparse refuses it.
func parseVLLMServe(args []string, stderr io.Writer, llm bool) (vllmLLMArgs, bool) {
	if len(args) < 2 || args[0] != "serve" || strings.HasPrefix(args[1], "-") {
		fmt.Fprint(stderr, "usage: vllm serve [model_tag] [options]\nvllm: error: the following arguments are required: model_tag\n")
		return vllmLLMArgs{}, false
	}
	va := vllmLLMArgs{vllmArgs: vllmArgs{model: args[1], served: args[1], port: 8000, host: "127.0.0.1"}, tp: 1, prefixCaching: true, chunked: true}
	var unknown []string
	rest := args[2:]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		name, val, hasVal := strings.Cut(a, "=")
		next := func() (string, bool) {
			if hasVal {
				return val, true
			}
			if i+1 < len(rest) {
				i++
				return rest[i], true
			}
			return "", false
		}
		intArg := func(dst *int) bool {
			v, ok := next()
			n, err := strconv.Atoi(v)
			if !ok || err != nil {
				fmt.Fprintf(stderr, "vllm serve: error: argument %s: invalid int value: '%s'\n", name, v)
				return false
			}
			*dst = n
			return true
		}
		switch {
		case name == "--omni":
			va.omni = true
		case name == "--port":
			if !intArg(&va.port) {
				return vllmLLMArgs{}, false
			}
		case name == "--host":
			va.host, _ = next()
		case name == "--profiler-config":
			v, _ := next()
			pc, ok := decodeProfilerConfig(v, stderr)
			if !ok {
				return vllmLLMArgs{}, false
			}
			va.pcfg = pc
		case !llm:
			unknown = append(unknown, a)
		case name == "--tensor-parallel-size" || name == "-tp":
			if !intArg(&va.tp) {
				return vllmLLMArgs{}, false
			}
		case name == "--max-model-len":
			if !intArg(&va.maxModelLen) {
				return vllmLLMArgs{}, false
			}
		case name == "--served-model-name":
			va.served, _ = next()
		case vllmValueFlags[name]:
			next()
		case vllmBoolFlags[name]:
			on := true
			switch name {
			case "--enable-prefix-caching":
				va.prefixCaching = on
			case "--enable-chunked-prefill":
				va.chunked = on
			case "--enforce-eager":
				va.enforceEager = on
			}
		case strings.HasPrefix(name, "--no-") && vllmBoolFlags["--"+strings.TrimPrefix(name, "--no-")]:
			switch "--" + strings.TrimPrefix(name, "--no-") {
			case "--enable-prefix-caching":
				va.prefixCaching = false
			case "--enable-chunked-prefill":
				va.chunked = false
			case "--enforce-eager":
				va.enforceEager = false
			}
		default:
			unknown = append(unknown, a)
		}
	}
	if len(unknown) > 0 {
		fmt.Fprintf(stderr, "vllm serve: error: unrecognized arguments: %s\n", strings.Join(unknown, " "))
		return vllmLLMArgs{}, false
	}
	return va, true
}

// vllmLLMMain is `vllm` (the LLM CLI): --version, `serve MODEL --omni ...` (vLLM-Omni) or the
// LLM server.
func vllmLLMMain(ctx context.Context, args []string, env map[string]string, stdout, stderr io.Writer) int {
	for _, a := range args {
		if a == "--omni" || len(args) > 0 && (args[0] == "--version" || args[0] == "-v") {
			return vllmMain(ctx, args, env, stdout, stderr)
		}
	}
	va, ok := parseVLLMLLMArgs(args, stderr)
	if !ok {
		return 2
	}
	k, err := readKnobs(env)
	if err != nil {
		fmt.Fprintf(stderr, "runner sim: %v\n", err)
		return 2
	}
	lg := &logger{w: stderr}
	if !validProfilerConfig(lg, va.pcfg) {
		return 1
	}
	if _, err := vllmDevMode(env); err != nil {
		lg.raw(err.Error() + "\n") // envs.py reads it with int(): vLLM stops on such a value
		return 1
	}
	p := parsedArgs{"port": va.port, "tp_size": va.tp, "disable_cuda_graph": va.enforceEager}
	s := &vllmLLMServer{server: &server{p: p, k: k, env: env, log: lg, llm: true, model: va.model, served: va.served, jobs: map[string]*videoJob{}}, pcfg: va.pcfg, args: va}
	s.cwd, _ = os.Getwd()
	s.crashed = make(chan struct{})
	return serveVLLM(ctx, s.server, k, s.runLLM)
}

// engineFailed logs what the API server logs when its engine core process dies while starting.
func (s *vllmLLMServer) engineFailed() {
	s.log.raw("(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n")
}

func (s *vllmLLMServer) runLLM() (int, error) {
	a := s.args
	s.log.log("INFO vLLM API server version %s", VLLMVersion)
	s.log.log("INFO non-default args: {'model': '%s', 'tensor_parallel_size': %d, 'max_model_len': %d, 'enable_prefix_caching': %v, 'enable_chunked_prefill': %v}", a.model, a.tp, a.maxModelLen, a.prefixCaching, a.chunked)
	if vis := visibleGPUs(s.env); a.tp > vis {
		s.log.raw(fmt.Sprintf("(EngineCore_DP0 pid=2) ValueError: World size (%d) is larger than the number of available GPUs (%d) in this node.\n", a.tp, vis))
		s.engineFailed()
		return 1, nil
	}
	switch {
	case s.k.fail["never-ready"]:
		s.log.log("INFO Loading safetensors checkpoint shards: 0%% Completed | 0/4")
		return 0, s.clk.block()
	case s.k.fail["oom"]:
		if err := s.ms(4000); err != nil {
			return 0, err
		}
		s.log.raw("(EngineCore_DP0 pid=2) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.12 GiB is free.\n")
		s.engineFailed()
		return 1, nil
	case s.k.fail["crash-load"]:
		if err := s.ms(3000); err != nil {
			return 0, err
		}
		s.log.raw("(EngineCore_DP0 pid=2) RuntimeError: Error while deserializing header: MetadataIncompleteBuffer\n")
		s.engineFailed()
		return 1, nil
	}
	if err := s.ms(6000); err != nil {
		return 0, err
	}
	if s.pcfg != nil {
		s.log.log("WARNING Profiler with mode '%s' is enabled in the API server. This should ONLY be used for local development!", s.pcfg.Profiler)
		if s.pcfg.Profiler == "torch" {
			s.log.log("INFO Torch profiling enabled. Traces will be saved to: %s", s.pcfg.TorchProfilerDir)
		}
	}
	s.log.log("INFO Starting vLLM API server 0 on http://127.0.0.1:%d", a.port)
	ln, code := s.listen(a.port)
	if ln == nil {
		return code, nil
	}
	defer ln.Close()
	mux := http.NewServeMux()
	s.vllmLLMRoutes(mux)
	go (&http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}).Serve(ln)
	s.log.raw("INFO:     Application startup complete.\n")
	s.ready.Store(true)
	select {
	case <-s.crashed:
		return 1, nil
	case <-s.clk.ctx.Done():
		return 0, &errInterrupted{}
	}
}

// vllmLLMRoutes mounts the server's routes on mux. It is the one place they are listed: a page
// another part of the simulator serves for both LLM engines (/metrics) is mounted next to them.
func (s *vllmLLMServer) vllmLLMRoutes(mux *http.ServeMux) {
	mux.HandleFunc("/health", s.health)
	mux.HandleFunc("GET /v1/models", s.vllmModels)
	mux.HandleFunc("POST /v1/completions", s.llmCompletions)
	mux.HandleFunc("POST /v1/chat/completions", s.llmChat)
	// vLLM's API server always serves its Prometheus page (metrics.go has its names).
	mux.HandleFunc("GET /metrics", metricsHandler(namingVLLM, s.metricsView, s.served))
	if on, _ := vllmDevMode(s.env); on {
		// Development mode mounts the cache routes (entrypoints/serve/cache/api_router.py).
		mux.HandleFunc("POST /reset_prefix_cache", s.resetPrefixCache) // metrics.go
	}
	if s.pcfg != nil {
		mux.HandleFunc("POST /start_profile", s.vllmLLMStart)
		mux.HandleFunc("POST /stop_profile", s.vllmLLMStop)
	}
}

// vllmModels is GET /v1/models as vLLM's OpenAI server answers it (owned_by "vllm",
// max_model_len).
func (s *vllmLLMServer) vllmModels(w http.ResponseWriter, r *http.Request) {
	mml := s.args.maxModelLen
	if mml == 0 {
		mml = 32768
	}
	writeJSON(w, 200, map[string]any{"object": "list", "data": []map[string]any{{"id": s.served, "object": "model",
		"created": time.Now().Unix(), "owned_by": "vllm", "root": s.model, "parent": nil, "max_model_len": mml}}})
}

func (s *vllmLLMServer) vllmLLMStart(w http.ResponseWriter, r *http.Request) {
	s.log.log("INFO Starting profiler...")
	s.pmu.Lock()
	if !s.window {
		s.window = true
		s.mu.Lock()
		s.stepsAt = s.steps
		s.mu.Unlock()
		if s.pcfg.Profiler == "cuda" {
			s.cudaProfiler(true)
		}
	} // a second start is ignored, as WorkerProfiler.start does while active
	s.pmu.Unlock()
	s.log.log("INFO Profiler started.")
	w.WriteHeader(200)
}

func (s *vllmLLMServer) vllmLLMStop(w http.ResponseWriter, r *http.Request) {
	s.log.log("INFO Stopping profiler...")
	s.pmu.Lock()
	open := s.window
	s.window = false
	s.pmu.Unlock()
	if open && s.pcfg.Profiler == "cuda" {
		s.cudaProfiler(false)
	}
	if open && s.pcfg.Profiler == "torch" {
		s.mu.Lock()
		steps := int(s.steps - s.stepsAt)
		s.mu.Unlock()
		if err := s.writeVLLMTraces(steps); err != nil {
			http.Error(w, "server shutting down", http.StatusServiceUnavailable)
			return
		}
	}
	s.log.log("INFO Profiler stopped.")
	w.WriteHeader(200)
}

// writeVLLMTraces writes the window's traces as torch's tensorboard_trace_handler names them
// (<worker_name>.<time_ns>.pt.trace.json[.gz]): one per GPU worker, then the frontend's.
func (s *vllmLLMServer) writeVLLMTraces(steps int) error {
	if err := s.ms(1500); err != nil {
		return err
	}
	gz := s.pcfg.UseGzip == nil || *s.pcfg.UseGzip
	stack := s.pcfg.WithStack == nil || *s.pcfg.WithStack
	name := func(worker string) string {
		n := fmt.Sprintf("%s.%d.pt.trace.json", worker, time.Now().UnixNano())
		if gz {
			n += ".gz"
		}
		return filepath.Join(s.pcfg.TorchProfilerDir, n)
	}
	write := func(path string, cfg kinetogen.Config) error {
		if gz {
			return writeGzTrace(path, cfg)
		}
		return writePlainTrace(path, cfg)
	}
	for r := 0; r < s.args.tp; r++ {
		cfg := kinetogen.Config{Flavor: kinetogen.FlavorLLM, Steps: min(max(steps, 1), 64), CUDAGraph: !s.args.enforceEager, Model: s.model, Seed: int64(r + 1), StepScale: s.k.slow, WithStack: stack}
		if s.k.fail["trace-fail"] {
			s.log.log("WARNING Failed to stop profiler: [Errno 28] No space left on device")
			continue
		}
		if err := write(name(fmt.Sprintf("dp0_pp0_tp%d_dcp0_ep0_rank%d", r, r)), cfg); err != nil {
			s.log.log("WARNING Failed to stop profiler: %v", err)
		}
	}
	if s.pcfg.IgnoreFrontend == nil || !*s.pcfg.IgnoreFrontend {
		// The frontend profiles CPU only: its trace has host events and no kernels.
		host, _ := os.Hostname()
		path := name(fmt.Sprintf("%s_%d.async_llm", host, os.Getpid()))
		doc := fmt.Sprintf(`{"schemaVersion": 1, "traceName": %q, "traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "AsyncLLM.generate", "pid": %d, "tid": 1, "ts": 1000, "dur": 500}]}`, filepath.Base(path), os.Getpid())
		if err := writeFrontendTrace(path, doc, gz); err != nil {
			s.log.log("WARNING Failed to stop profiler: %v", err)
		}
	}
	return nil
}

// writeFrontendTrace writes the API process's CPU-only trace, gzipped when gz.
func writeFrontendTrace(path, doc string, gz bool) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if !gz {
		_, err = io.WriteString(f, doc)
		return errors.Join(err, f.Close())
	}
	zw, _ := gzip.NewWriterLevel(f, gzip.BestSpeed)
	_, err = io.WriteString(zw, doc)
	return errors.Join(err, zw.Close(), f.Close())
}
