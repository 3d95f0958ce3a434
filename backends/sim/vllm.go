package sim

// The simulated vLLM-Omni diffusion server: `vllm serve MODEL --omni [--host H] [--port P]
// [--profiler-config JSON]` (ref-sglang-interfaces.md §C). It is reached as
// `runner sim vllm-omni serve ...` (sim.Main dispatches on the backend kind).
//
// What it reproduces: the image endpoint (b64_json only), /health and /v1/models; the
// profiler routes exist only when --profiler-config sets a profiler; /stop_profile exports
// `<torch_profiler_dir>/<YYYYMMDD-HHMMSS>_diffusion_rank0_<unix>/trace_rank0.json` (one session
// directory per diffusion worker; the request cannot name it) and compresses it in the
// background (`trace_rank0.json.gz` appears while the .json still exists, and the .json is
// removed when gzip finishes), which is why a client must wait for the .gz to be complete.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/sglprof/runner/reports/kineto/kinetogen"
)

// VLLMVersion is the version the simulated vLLM reports.
const VLLMVersion = "0.14.0-sim"

// profilerConfig is the subset of vLLM's ProfilerConfig the simulator reads (§C.1).
type profilerConfig struct {
	Profiler          string `json:"profiler"`
	TorchProfilerDir  string `json:"torch_profiler_dir"`
	UseGzip           *bool  `json:"torch_profiler_use_gzip"`
	WithStack         *bool  `json:"torch_profiler_with_stack"`
	RecordShapes      *bool  `json:"torch_profiler_record_shapes"`
	WithFlops         *bool  `json:"torch_profiler_with_flops"`
	DumpCudaTimeTotal *bool  `json:"torch_profiler_dump_cuda_time_total"`
	WithMemory        *bool  `json:"torch_profiler_with_memory"`
	IgnoreFrontend    *bool  `json:"ignore_frontend"`
	DelayIterations   *int   `json:"delay_iterations"`
	MaxIterations     *int   `json:"max_iterations"`
	WarmupIterations  *int   `json:"warmup_iterations"`
	ActiveIterations  *int   `json:"active_iterations"`
	WaitIterations    *int   `json:"wait_iterations"`
	CudaDPRank        *int   `json:"cuda_profiler_control_dp_rank"`
	CudaWorkerRank    *int   `json:"cuda_profiler_control_worker_rank"`
}

type vllmServer struct {
	*server
	pcfg    *profilerConfig
	mu2     sync.Mutex
	session *vllmSession
}

type vllmSession struct {
	name  string // the worker's trace file name: the session directory is <ts>_<name>
	steps int
}

func vllmMain(ctx context.Context, args []string, env map[string]string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-v") {
		// argparse's version action: importlib.metadata.version("vllm") on stdout, exit 0.
		fmt.Fprintln(stdout, vllmSimVersion)
		return 0
	}
	va, ok := parseVLLMArgs(args, stderr)
	if !ok {
		return 2
	}
	k, err := readKnobs(env)
	if err != nil {
		fmt.Fprintf(stderr, "runner sim: %v\n", err)
		return 2
	}
	lg := &logger{w: stderr}
	if !va.omni {
		lg.log("ValueError: %s is a diffusion pipeline; serve it with --omni (vLLM-Omni)", va.model)
		return 1
	}
	if !validProfilerConfig(lg, va.pcfg) {
		return 1
	}
	prof, known := resolveModel(va.model, "")
	if !known {
		prof = diffusersProfile
		prof.id = va.model
	}
	s := &vllmServer{server: &server{p: parsedArgs{"port": va.port}, k: k, env: env, log: lg, model: va.model, served: va.served, prof: prof, jobs: map[string]*videoJob{}}, pcfg: va.pcfg}
	s.cwd, _ = os.Getwd()
	return serveVLLM(ctx, s.server, k, func() (int, error) { return s.run(va.port) })
}

// serveVLLM runs a simulated vLLM API server until run returns: its clock stops on SIGINT,
// SIGTERM or ctx's end, and an interrupted server logs uvicorn's shutdown lines and exits 0,
// as vLLM's does.
func serveVLLM(ctx context.Context, s *server, k knobs, run func() (int, error)) int {
	defer s.openServerActivity().close()
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sig:
			cancel()
		case <-sctx.Done():
		}
	}()
	s.clk = &clock{ctx: sctx, scale: k.scale, start: time.Now()}
	code, err := run()
	var intr *errInterrupted
	if errors.As(err, &intr) {
		s.log.raw("INFO:     Shutting down\nINFO:     Application shutdown complete.\n")
		return 0
	}
	return code
}

// vllmArgs is what the simulator reads of `vllm serve`'s command line.
type vllmArgs struct {
	model, served string
	port          int
	host          string // parsed, but the simulator binds the loopback interface only
	omni          bool
	pcfg          *profilerConfig // --profiler-config (nil: none)
}

// vllmSimVersion is what the simulated `vllm --version` prints.
const vllmSimVersion = "0.11.0+sim"

// parseVLLMArgs parses the simulated vLLM-Omni server's `vllm serve MODEL --omni [options]`;
// on a usage error it prints argparse's message and reports false (exit status 2).
func parseVLLMArgs(args []string, stderr io.Writer) (vllmArgs, bool) {
	va, ok := parseVLLMServe(args, stderr, false)
	return va.vllmArgs, ok
}

// decodeProfilerConfig parses --profiler-config's JSON; vLLM's config dataclasses forbid extra
// fields, so an unknown key fails the parse with argparse's message (reported false).
func decodeProfilerConfig(v string, stderr io.Writer) (*profilerConfig, bool) {
	pc := &profilerConfig{}
	dec := json.NewDecoder(strings.NewReader(v))
	dec.DisallowUnknownFields()
	if err := dec.Decode(pc); err != nil {
		fmt.Fprintf(stderr, "vllm serve: error: argument --profiler-config: Value %s cannot be converted to <class 'vllm.config.profiler.ProfilerConfig'>.\n", v)
		return nil, false
	}
	return pc, true
}

// validProfilerConfig checks --profiler-config as vLLM's ProfilerConfig does after parsing,
// logging its ValueError when it fails (nil: no config, valid).
func validProfilerConfig(lg *logger, pcfg *profilerConfig) bool {
	if pcfg == nil {
		return true
	}
	switch pcfg.Profiler {
	case "torch":
		if pcfg.TorchProfilerDir == "" {
			lg.log("ValueError: torch_profiler_dir must be set when profiler is 'torch'")
			return false
		}
	case "cuda":
	default:
		lg.log("ValueError: Invalid profiler '%s'; expected one of: torch, cuda", pcfg.Profiler)
		return false
	}
	return true
}

func (s *vllmServer) run(port int) (int, error) {
	s.log.log("INFO vLLM API server version %s", VLLMVersion)
	s.log.log("INFO Initializing Omni diffusion engine for %s (%s)", s.model, s.prof.pipeline)
	if s.k.fail["never-ready"] {
		return 0, s.clk.block()
	}
	if err := s.ms(s.prof.loadS * 1000); err != nil {
		return 0, err
	}
	if s.pcfg != nil {
		s.log.log("WARNING Profiler with mode '%s' is enabled in the API server. This should ONLY be used for local development!", s.pcfg.Profiler)
		if s.pcfg.Profiler == "torch" {
			s.log.log("INFO Omni torch profiling enabled. Traces will be saved to: %s", s.pcfg.TorchProfilerDir)
		}
	}
	s.log.log("INFO Starting vLLM API server on http://127.0.0.1:%d", port)
	ln, code := s.listen(port)
	if ln == nil {
		return code, nil
	}
	defer ln.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("POST /v1/images/generations", s.vllmImages)
	if s.pcfg != nil {
		mux.HandleFunc("POST /start_profile", s.vllmStart)
		mux.HandleFunc("POST /stop_profile", s.vllmStop)
	}
	go (&http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}).Serve(ln)
	s.log.raw("INFO:     Application startup complete.\n")
	s.ready.Store(true)
	<-s.clk.ctx.Done()
	return 0, &errInterrupted{}
}

func (s *vllmServer) vllmImages(w http.ResponseWriter, r *http.Request) {
	q, ok := s.parseDiffusion(w, r)
	if !ok || !s.admit(w) {
		return
	}
	q.Profile = false // profiling is a server-wide window here, not a request field
	inf, _, err := s.generateDiffusion(q, "")
	if err != nil {
		http.Error(w, "server shutting down", http.StatusServiceUnavailable)
		return
	}
	s.mu2.Lock()
	if s.session != nil {
		s.session.steps += q.NumInferenceSteps
	}
	s.mu2.Unlock()
	data := make([]map[string]any, q.N)
	for i := range data {
		data[i] = map[string]any{"b64_json": tinyPNG(), "url": nil, "revised_prompt": nil}
	}
	s.log.log("INFO Generated %d image(s) in %.2f s", q.N, inf)
	writeJSON(w, 200, map[string]any{"created": time.Now().Unix(), "data": data})
}

func (s *vllmServer) vllmStart(w http.ResponseWriter, r *http.Request) {
	// vLLM-Omni's ProfileRequest has one field, stages (pydantic drops any other, so a
	// profile_prefix changes nothing); each diffusion worker then names its session
	// diffusion_rank<r>_<unix seconds> (DiffusionWorker.profile without a prefix).
	var body struct {
		Stages []int `json:"stages"`
	}
	json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body)
	name := "diffusion_rank0_" + strconv.FormatInt(time.Now().Unix(), 10)
	s.mu2.Lock()
	s.session = &vllmSession{name: name}
	s.mu2.Unlock()
	s.log.log("INFO Starting profiler...")
	if s.pcfg.Profiler == "cuda" {
		s.cudaProfiler(true) // vLLM's CUDA profiler wrapper: cudaProfilerStart
	}
	if b, err := json.Marshal(s.pcfg); err == nil {
		s.log.log("INFO [sim] profiler config: %s", b) // not a vLLM line: what the simulated profiler got, for tests
	}
	if body.Stages != nil {
		s.log.log("INFO Starting profiler for stages=%v...", body.Stages)
	}
	s.log.log("INFO Profiler started.")
	w.WriteHeader(200)
}

func (s *vllmServer) vllmStop(w http.ResponseWriter, r *http.Request) {
	s.mu2.Lock()
	sess := s.session
	s.session = nil
	s.mu2.Unlock()
	s.log.log("INFO Stopping profiler...")
	if s.pcfg.Profiler == "cuda" {
		s.cudaProfiler(false)
	}
	s.log.log("INFO Stopping diffusion profiling...")
	if sess != nil && s.pcfg.Profiler == "torch" {
		d := 1500.0
		if s.k.fail["slow-flush"] {
			d = 3600_000
		}
		if err := s.ms(d); err != nil {
			http.Error(w, "server shutting down", http.StatusServiceUnavailable)
			return
		}
		dir := filepath.Join(s.pcfg.TorchProfilerDir, time.Now().Format("20060102-150405")+"_"+sess.name)
		path := filepath.Join(dir, "trace_rank0.json")
		cfg := kinetogen.Config{Flavor: kinetogen.FlavorDiffusion, Layers: s.prof.layers, WithStack: s.pcfg.WithStack == nil || *s.pcfg.WithStack, Model: s.model,
			StepScale: s.k.slow, StepNS: int64(s.prof.stepMS * 1e6), Steps: min(max(sess.steps, 1), 10)} // capped: a simulator need not write huge traces
		if err := writePlainTrace(path, cfg); err != nil {
			s.log.log("ERROR [Rank 0] Failed to export trace: %v", err)
		} else {
			s.log.log("INFO [Rank 0] Trace exported to %s", path)
			os.WriteFile(filepath.Join(dir, "profiler_out_0.txt"), []byte("Name  Self CUDA %  Self CUDA  CUDA total\n"), 0o644)
			if s.pcfg.UseGzip == nil || *s.pcfg.UseGzip {
				s.log.log("INFO [Rank 0] Triggered background compression for %s", path)
				go s.backgroundGzip(path)
			}
		}
	}
	s.log.log("INFO Profiler stopped.")
	w.WriteHeader(200)
}

func writePlainTrace(path string, cfg kinetogen.Config) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = kinetogen.Write(f, cfg)
	return errors.Join(err, f.Close())
}

// backgroundGzip behaves like `gzip -f path`: it writes path.gz progressively, then removes
// path. A reader that opens path.gz before it finishes sees a truncated stream.
func (s *vllmServer) backgroundGzip(path string) {
	in, err := os.ReadFile(path)
	if err != nil {
		return
	}
	out, err := os.Create(path + ".gz")
	if err != nil {
		return
	}
	zw, _ := gzip.NewWriterLevel(out, gzip.BestSpeed)
	half := len(in) / 2
	zw.Write(in[:half])
	zw.Flush()
	s.ms(2000) // compression of a large trace takes a while
	zw.Write(in[half:])
	zw.Close()
	out.Close()
	os.Remove(path)
}
