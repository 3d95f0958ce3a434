// Package vllm drives plain vLLM's OpenAI-compatible LLM server, `vllm serve MODEL`, in serve
// mode (backend.kind = "vllm", model_type = "llm"): the server command with a
// --profiler-config made from the plan's [profile], readiness (uvicorn's startup line, GET
// /health, GET /v1/models), the OpenAI completions and chat APIs (vLLM has no SGLang
// /generate), the /start_profile and /stop_profile window, the torch traces each worker and the
// API frontend write, and the log lines of a failed start. docs/upstream.md has the vLLM
// source each of these was read from.
package vllm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/backends/vllmomni"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
)

// Kind is the plan's backend.kind for `vllm serve`.
const Kind = plans.KindVLLM

// ReadyLine is uvicorn's last startup line, logged once the API server accepts requests.
const ReadyLine = vllmomni.ReadyLine

// Log findings (the codes of the reasons they give).
const (
	FindingUnrecognized = "unrecognized-arguments"
	FindingOOM          = "cuda-oom"
	FindingEngineInit   = "engine-init-failed"
)

// patterns are the log gates of a vLLM LLM server: argparse rejecting a flag (vLLM's
// FlexibleArgumentParser is an argparse.ArgumentParser), torch's out-of-memory error and the
// KV cache that does not fit (both are GPU memory), and the API server's RuntimeError when an
// engine core process died while starting (v1/engine/utils.py wait_for_engine_startup), whose
// root cause is logged above it.
var patterns = []backends.Pattern{
	{Finding: FindingUnrecognized, Subs: []string{"error: unrecognized arguments:"}, Fatal: true},
	{Finding: FindingOOM, Subs: []string{"CUDA out of memory", "OutOfMemoryError", "No available memory for the cache blocks"}, Fatal: true},
	{Finding: FindingEngineInit, Subs: []string{"Engine core initialization failed"}, Fatal: true},
}

// Command returns the argv prefix: the plan's command, except that the plan default ["sglang"]
// (the default of every kind) means ["vllm"].
func Command(c plans.Cell) []string { return vllmomni.Command(c) }

// ServerCommand builds `vllm serve MODEL --host 127.0.0.1 --port P [--profiler-config JSON]
// extra_args...` for the server of cell c.
func ServerCommand(c plans.Cell, command []string, port int, dir, traceDir, marker string) (rundir.Launch, error) {
	if len(command) == 0 || command[0] == "" {
		return rundir.Launch{}, fmt.Errorf("vllm: cell %s has an empty backend.command; set it to [\"vllm\"]", c.ID)
	}
	if c.Model == "" {
		return rundir.Launch{}, fmt.Errorf("vllm: cell %s has no model; add one to matrix.model", c.ID)
	}
	if port <= 0 || port > 65535 {
		return rundir.Launch{}, fmt.Errorf("vllm: port %d out of range", port)
	}
	host := c.Backend.Host
	if host == "" {
		host = "127.0.0.1"
	}
	argv := append([]string(nil), command...)
	argv = append(argv, "serve", c.Model, "--host", host, "--port", strconv.Itoa(port))
	pc, err := vllmomni.ProfilerConfig(c, traceDir)
	if err != nil {
		return rundir.Launch{}, err
	}
	if pc != "" {
		argv = append(argv, "--profiler-config", pc)
	}
	argv = append(argv, c.Backend.ExtraArgs...)
	env := make(map[string]string, len(c.Backend.Env)+1)
	for k, v := range c.Backend.Env {
		env[k] = v
	}
	if _, set := env[EnvDevMode]; !set && c.Load.FlushCache && c.Backend.URL == "" {
		// The reset route exists only in development mode; a value the plan sets is kept
		// (the parity check and the cell's cache_reset then say that no reset happened).
		env[EnvDevMode] = "1"
	}
	env[backends.EnvServerMarker] = marker
	return rundir.Launch{Argv: argv, Env: env, Dir: dir}, nil
}

// EnvDevMode is vLLM's development-mode switch (envs.py: bool(int(value)), default 0): the API
// server mounts POST /reset_prefix_cache only when it is true.
const EnvDevMode = "VLLM_SERVER_DEV_MODE"

// ResetPrefixCachePath is the API server's route that resets the prefix cache
// (entrypoints/serve/cache/api_router.py); 404 unless EnvDevMode is true. It answers 200
// without checking that the engine reset anything.
const ResetPrefixCachePath = "/reset_prefix_cache"

// DevMode reports whether the server's environment turns development mode on, as vLLM reads
// it (an integer other than 0), and whether the value could be read at all.
func DevMode(env map[string]string) (on, valid bool) {
	v, set := env[EnvDevMode]
	if !set {
		return false, true
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	return err == nil && n != 0, err == nil
}

// Backend is the backends.Server of vLLM LLM serve cells.
type Backend struct{}

// New returns the backend.
func New() backends.Server { return Backend{} }

// Name implements backends.Backend.
func (Backend) Name() string { return Kind }

// Launch implements backends.Backend.
func (b Backend) Launch(c plans.Cell, cellDir string) (rundir.Launch, error) {
	if err := backends.MakeCellDirs("vllm", cellDir); err != nil {
		return rundir.Launch{}, err
	}
	return b.Command(c, cellDir)
}

// Command is Launch without creating the cell's directories: what `runner plan` shows.
func (Backend) Command(c plans.Cell, _ string) (rundir.Launch, error) {
	port := c.Backend.Port
	if port == 0 {
		port = 8000
	}
	l, err := ServerCommand(c, Command(c), port, "<run>/servers/<n>", "/<run>/servers/<n>/traces", "")
	if err != nil {
		return rundir.Launch{}, err
	}
	return backends.ShowPort(l, c), nil
}

// NewWatcher implements backends.Backend.
func (b Backend) NewWatcher(c plans.Cell) backends.Watcher { return b.NewServerWatcher(c) }

// Assess implements backends.Backend: the log gates of AssessCell over the whole log.
func (b Backend) Assess(c plans.Cell, _ string, w backends.Watcher, _ rundir.Exit) backends.Assessment {
	sw, ok := w.(backends.ServerWatcher)
	if !ok {
		return backends.Assessment{Verdict: plans.VerdictOK}
	}
	return b.AssessCell(c, sw, nil)
}

// Executable implements backends.Server.
func (Backend) Executable(c plans.Cell) []string { return Command(c) }

// ValidateCell implements backends.Backend: vLLM serves LLMs here (a diffusion model is
// vLLM-Omni's, kind "vllm-omni"); an nsys cell needs the cudaProfilerApi capture range that
// the server's cuda profiler opens and closes in the runner's window.
func (Backend) ValidateCell(c plans.Cell) error {
	if c.Backend.ModelType != "" && c.Backend.ModelType != plans.ModelTypeLLM {
		return fmt.Errorf("backend.kind = \"vllm\" serves LLMs (model_type = \"llm\"); serve a diffusion model with kind = \"vllm-omni\"")
	}
	if c.Load.API == plans.APIGenerate {
		return fmt.Errorf("vLLM has no /generate (SGLang's native API); set [load] api = \"completions\" or \"chat\"")
	}
	if c.Profiler == plans.ProfilerNsys && c.NSys.CaptureRange != plans.CaptureRangeCudaAPI {
		return fmt.Errorf("profiler \"nsys\" with backend.kind = \"vllm\" needs [nsys] capture_range = \"cudaProfilerApi\": the server's cuda profiler then opens and closes the capture in the runner's /start_profile window")
	}
	return nil
}

// EnvProbes implements backends.Backend: the Python of `vllm`, without sglang's check_env.
func (Backend) EnvProbes(c plans.Cell) backends.EnvProbes {
	return backends.EnvProbes{Command: Command(c), Version: []string{"--version"}}
}

// ServerKey implements backends.Server: the profiler configuration is a server argument, so
// torch and unprofiled cells cannot share a server; [load] flush_cache sets the server's
// development mode (ServerCommand).
func (Backend) ServerKey(c plans.Cell) string {
	return Kind + "|" + backends.ServerArgsKey(c, plans.ModelTypeLLM) + "|" + c.Profiler + "|flush=" + strconv.FormatBool(c.Load.FlushCache)
}

// PortFlags implements backends.Server: `vllm serve` binds no other port the runner chooses.
func (Backend) PortFlags(plans.Cell) []backends.PortFlag { return nil }

// ServerLaunch implements backends.Server with ServerCommand.
func (Backend) ServerLaunch(c plans.Cell, site backends.ServerSite) (rundir.Launch, error) {
	return ServerCommand(c, site.Command, site.Port, site.Dir, site.TraceDir, site.Marker)
}

// NewServerWatcher implements backends.Server.
func (Backend) NewServerWatcher(plans.Cell) backends.ServerWatcher {
	return backends.NewLogWatcher(patterns)
}

// Protocol implements backends.Server: uvicorn's startup line; GET /v1/models names the served
// model and is all vLLM has for a server description; requests go to /v1/completions unless
// the plan says chat.
func (Backend) Protocol(plans.Cell) backends.Protocol {
	return backends.Protocol{ModelType: plans.ModelTypeLLM, ReadyLine: ReadyLine, ServerInfoPath: "/v1/models", API: plans.APICompletions, CacheReset: ResetPrefixCachePath}
}

// Window implements backends.Server: the routes exist only when --profiler-config sets a
// profiler, and take no body (the upstream handlers read none), so traces cannot be named
// after the cell: CollectTraces takes what appeared in the server's directory during the window.
func (Backend) Window(c plans.Cell, _ string) backends.Window {
	const hint = "vLLM registers it only when --profiler-config sets a profiler"
	switch {
	case c.Profiler == plans.ProfilerNsys && c.NSys.CaptureRange == plans.CaptureRangeCudaAPI:
		return backends.Window{Kind: backends.WindowStartStop, Start: map[string]any{}, StartHint: hint, Flush: "POST /stop_profile"}
	case c.Profiler != plans.ProfilerTorch:
		return backends.Window{}
	}
	return backends.Window{Kind: backends.WindowStartStop, Start: map[string]any{}, StartHint: hint, Flush: "POST /stop_profile"}
}

// AwaitTraces implements backends.Server: torch's tensorboard_trace_handler writes (and
// gzips) each trace before the worker's stop returns, and /stop_profile waits for every worker.
func (Backend) AwaitTraces(context.Context, plans.Cell, backends.TraceDirs) error { return nil }

// traceName is a torch trace of tensorboard_trace_handler: <worker_name>.<ns>.pt.trace.json[.gz].
var traceName = regexp.MustCompile(`^(.+)\.(\d+)\.pt\.trace\.json(\.gz)?$`)

// workerRank is the rank suffix vLLM names a GPU worker's trace with
// (get_worker_rank_suffix: dp<d>_pp<p>_tp<t>_dcp<c>_ep<e>_rank<r>).
var workerRank = regexp.MustCompile(`(?:^|_)rank(\d+)$`)

// frontendSuffix ends the worker name of the API process's CPU-only trace
// (<host>_<pid>.async_llm), written unless ProfilerConfig.ignore_frontend.
const frontendSuffix = ".async_llm"

// FrontendDir is the directory, inside the cell's traces directory, of the API frontend's
// CPU-only traces.
const FrontendDir = "frontend"

// CollectTraces implements backends.Server: the torch traces that appeared in the server's
// profiler directory during the window move into the cell's traces directory. Each must be a
// complete trace; each GPU worker's must hold kernels (the frontend's is CPU only); and every
// tensor-parallel rank must have written one.
func (Backend) CollectTraces(c plans.Cell, d backends.TraceDirs) backends.TraceReport {
	var r backends.TraceReport
	if c.Profiler != plans.ProfilerTorch {
		return r
	}
	fail := func(code, msg string) { r.Reasons = append(r.Reasons, rundir.Reason{Code: code, Message: msg}) }
	ents, _ := os.ReadDir(d.Server)
	var names []string
	for _, e := range ents {
		if e.Type().IsRegular() && !d.Before[e.Name()] && traceName.MatchString(e.Name()) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	ranks := map[string]bool{}
	for _, n := range names {
		worker := traceName.FindStringSubmatch(n)[1]
		frontend := strings.HasSuffix(worker, frontendSuffix)
		dst := filepath.Join(d.Cell, n)
		if frontend {
			// The API process's CPU-only trace has no rank and no GPU work: it goes beside
			// the workers' (FrontendDir), so that triage of the cell reads one job's ranks.
			if err := os.MkdirAll(filepath.Join(d.Cell, FrontendDir), 0o755); err != nil {
				fail("trace-move", err.Error())
				continue
			}
			dst = filepath.Join(d.Cell, FrontendDir, n)
		}
		if err := os.Rename(filepath.Join(d.Server, n), dst); err != nil {
			fail("trace-move", err.Error())
			continue
		}
		if frontend {
			continue
		}
		r.Traces = append(r.Traces, dst)
		if !strings.HasSuffix(n, ".gz") {
			continue // torch_profiler_use_gzip = false: a plain JSON trace, not checked here
		}
		if err := backends.CheckTrace(dst); err != nil {
			fail("trace-check", fmt.Sprintf("%s: %v", n, err))
			continue
		}
		if m := workerRank.FindStringSubmatch(worker); m != nil {
			ranks[m[1]] = true
		}
		if !backends.HasKernel(dst) {
			fail("trace-check", fmt.Sprintf("%s has no kernel events (the window captured no GPU work; send more requests)", n))
		}
	}
	if len(names) == 0 {
		fail("trace-check", fmt.Sprintf("the profiler wrote no *.pt.trace.json.gz into %s during the window; check the server log for the profiler's lines", d.Server))
	} else if want := TensorParallel(c); len(ranks) < want {
		fail("trace-check", fmt.Sprintf("traces of %d GPU worker(s) found, %d expected (tensor parallel size)", len(ranks), want))
	}
	return r
}

// TensorParallel is the tensor-parallel size the cell's server arguments give vLLM
// (--tensor-parallel-size N, -tp N, or the = forms), 1 without one.
func TensorParallel(c plans.Cell) int {
	v, ok := backends.FlagValue(c.Backend.ExtraArgs, "--tensor-parallel-size", "-tp")
	if !ok {
		return 1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// AssessCell implements backends.Server: rejected arguments and a failed engine start fail
// every cell of the server; an out-of-memory error fails the cell during which it was logged.
func (Backend) AssessCell(c plans.Cell, sw backends.ServerWatcher, since backends.Mark) backends.Assessment {
	a := backends.Assessment{Verdict: plans.VerdictOK}
	w, ok := sw.(*backends.LogWatcher)
	if !ok {
		return a
	}
	if ev := w.Evidence(FindingUnrecognized); len(ev) > 0 {
		a.Verdict = plans.VerdictFailed
		a.Reasons = append(a.Reasons, rundir.Reason{Code: FindingUnrecognized, Message: "the server rejected its arguments: " + ev[0].Text + "; fix backend.extra_args or [matrix.server_args] (`vllm serve` spells SGLang's --tp-size as --tensor-parallel-size, --context-length as --max-model-len)", Lines: ev})
	}
	if ev := w.Evidence(FindingEngineInit); len(ev) > 0 {
		a.Verdict = plans.VerdictFailed
		a.Reasons = append(a.Reasons, rundir.Reason{Code: FindingEngineInit, Message: "vLLM's engine core died while starting; its root cause is logged above this line in the server log (often GPU memory: lower --gpu-memory-utilization's competitors or --max-model-len)", Lines: ev})
	}
	if ev := w.Evidence(FindingOOM); len(ev) > 0 && sw.Mark()[FindingOOM] > since[FindingOOM] {
		a.Verdict = plans.VerdictFailed
		a.Reasons = append(a.Reasons, rundir.Reason{Code: FindingOOM, Message: "the server ran out of GPU memory; lower --max-model-len or --max-num-seqs, or free the GPU (check for leftover processes with nvidia-smi)", Lines: ev})
	}
	return a
}
