package sglang

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
)

// Serve mode (ref-sglang-interfaces.md §A.8, §B): one `sglang serve` (or `python -m
// sglang.launch_server`) process serves the requests of one or more cells; the runner drives
// it over HTTP. This file builds the server command; serve_server.go answers the rest of
// backends.Server (protocol, profiling window, traces, per-cell judgement); the lifecycle
// (port, process group, polling, load, the window's calls, teardown) is the runner's
// (runner/serve*.go).

// ModeServe is the plan's backend.mode for server cells.
const ModeServe = backends.ModeServe

// Model types of backend.model_type.
const (
	ModelTypeDiffusion = "diffusion"
	ModelTypeLLM       = "llm"
)

// Readiness lines (§A.8, §B.3): the LLM server logs its line after the warmup request; the
// diffusion server's last startup line is uvicorn's.
const (
	ReadyLineLLM       = "The server is fired up and ready to roll!"
	ReadyLineDiffusion = "Uvicorn running on"
	// ProfileDoneLine is the LLM scheduler's line once a profile's traces are written.
	ProfileDoneLine = "Profiling done."
)

// EnvServerMarker is backends.EnvServerMarker, the variable that marks a server as ours.
const EnvServerMarker = backends.EnvServerMarker

// ModelType returns the cell's model type: backend.model_type, else "llm" when the cell has
// token lengths, else "diffusion".
func ModelType(c plans.Cell) string {
	switch {
	case c.Backend.ModelType != "":
		return c.Backend.ModelType
	case c.InputLen > 0 || c.OutputLen > 0:
		return ModelTypeLLM
	}
	return ModelTypeDiffusion
}

// isLaunchServer reports whether the command is the LLM-only `python -m sglang.launch_server`
// entry, which takes no subcommand and no --model-type.
func isLaunchServer(cmd []string) bool {
	return slices.Contains(cmd, "sglang.launch_server")
}

// ServerKey identifies the server a cell needs: cells with equal keys can share one server.
// Everything that changes the server process is in it (command, model, model type, extra
// args, environment); what only changes requests (prompt, size, steps, seed, token lengths,
// the torch profiler) is not.
func ServerKey(c plans.Cell) string {
	return backends.ServerArgsKey(c, ModelType(c), fmt.Sprint(ProfilerEnv(c)))
}

// Variables of sglang's environment (srt/environ.py) that the diffusion server's
// /start_profile reads: with_stack = obj.with_stack or SGLANG_PROFILE_WITH_STACK, record_shapes
// = obj.record_shapes or SGLANG_PROFILE_RECORD_SHAPES, both default true. A false in the body
// therefore changes nothing (docs/upstream.md).
const (
	EnvProfileWithStack    = "SGLANG_PROFILE_WITH_STACK"
	EnvProfileRecordShapes = "SGLANG_PROFILE_RECORD_SHAPES"
)

// ProfilerEnv is the server environment a cell's [profile] options need: for a diffusion
// server, with_stack = false and record_shapes = false become SGLANG_PROFILE_WITH_STACK=false
// and SGLANG_PROFILE_RECORD_SHAPES=false, the only way to turn them off there. The LLM
// server takes false in the /start_profile body, so it gets none.
func ProfilerEnv(c plans.Cell) map[string]string {
	if ModelType(c) != ModelTypeDiffusion {
		return nil
	}
	env := map[string]string{}
	if p := c.Profile.WithStack; p != nil && !*p {
		env[EnvProfileWithStack] = "false"
	}
	if p := c.Profile.RecordShapes; p != nil && !*p {
		env[EnvProfileRecordShapes] = "false"
	}
	return env
}

// ServerCommand builds the server process for cell c: argv, environment (the torch-profiler
// directory variables point at traceDir, the marker variable carries marker) and working
// directory dir. port is the port the runner chose.
//
// argv = command [serve --model-type T] --model-path M --host 127.0.0.1 --port P
// [--strict-ports (diffusion)] extra_args...; the runner appends the other ports strict mode
// checks (StrictPorts, PortArgs).
func ServerCommand(c plans.Cell, port int, dir, traceDir, marker string) (rundir.Launch, error) {
	if len(c.Backend.Command) == 0 || c.Backend.Command[0] == "" {
		return rundir.Launch{}, fmt.Errorf("sglang serve: cell %s has an empty backend.command; set it to [\"sglang\"] or [\"python\", \"-m\", \"sglang.launch_server\"]", c.ID)
	}
	if c.Model == "" {
		return rundir.Launch{}, fmt.Errorf("sglang serve: cell %s has no model; add one to matrix.model", c.ID)
	}
	if port <= 0 || port > 65535 {
		return rundir.Launch{}, fmt.Errorf("sglang serve: port %d out of range", port)
	}
	if dir == "" || traceDir == "" {
		return rundir.Launch{}, errors.New("sglang serve: empty server directory")
	}
	mt := ModelType(c)
	if mt != ModelTypeDiffusion && mt != ModelTypeLLM {
		return rundir.Launch{}, fmt.Errorf("sglang serve: backend.model_type = %q; use \"diffusion\" or \"llm\"", mt)
	}
	host := c.Backend.Host
	if host == "" {
		host = "127.0.0.1"
	}
	argv := append([]string(nil), c.Backend.Command...)
	if isLaunchServer(c.Backend.Command) {
		if mt != ModelTypeLLM {
			return rundir.Launch{}, fmt.Errorf("sglang serve: cell %s: sglang.launch_server serves LLMs only, but the model type is %s; use backend.command = [\"sglang\"]", c.ID, mt)
		}
	} else {
		argv = append(argv, "serve", "--model-type", mt)
	}
	argv = append(argv, "--model-path", c.Model, "--host", host, "--port", strconv.Itoa(port))
	if mt == ModelTypeDiffusion {
		// The diffusion server's ServerArgs have --strict-ports (fail instead of moving to
		// another port); the LLM server has no such flag.
		argv = append(argv, "--strict-ports")
	}
	argv = append(argv, c.Backend.ExtraArgs...)
	env := make(map[string]string, len(c.Backend.Env)+3)
	for k, v := range c.Backend.Env {
		env[k] = v
	}
	for k, v := range ProfilerEnv(c) {
		env[k] = v // the plan's [profile] option overrides a backend.env value
	}
	env[EnvProfilerDir] = traceDir
	env[EnvDiffusionProfilerDir] = traceDir
	env[EnvServerMarker] = marker
	return rundir.Launch{Argv: argv, Env: env, Dir: dir}, nil
}

// PortPlaceholder is backends.PortPlaceholder.
const PortPlaceholder = backends.PortPlaceholder

// ServeBackend is the backends.Server of sglang's serve cells (serve_server.go has the
// methods of backends.Server). Launch only prepares the cell directory and describes the
// server the cell will use (with the port chosen at run time shown as a placeholder), and
// Assess judges a server log.
type ServeBackend struct{}

// NewServe returns the serve backend.
func NewServe() backends.Server { return ServeBackend{} }

// Name implements backends.Backend.
func (ServeBackend) Name() string { return Kind }

// Launch implements backends.Backend.
func (b ServeBackend) Launch(c plans.Cell, cellDir string) (rundir.Launch, error) {
	dir, err := filepath.Abs(cellDir)
	if err != nil {
		return rundir.Launch{}, err
	}
	if err := backends.MakeCellDirs("sglang serve", dir); err != nil {
		return rundir.Launch{}, err
	}
	return b.Command(c, dir)
}

// Command is Launch without creating the cell's directories: what `runner plan` shows.
func (ServeBackend) Command(c plans.Cell, cellDir string) (rundir.Launch, error) {
	dir, err := filepath.Abs(cellDir)
	if err != nil {
		return rundir.Launch{}, err
	}
	port := c.Backend.Port
	if port == 0 {
		port = 30000 // replaced below: the runner picks a free port at run time
	}
	// The server's directory (and with it the diffusion profiler directory) is numbered when
	// the server starts, so the description shows placeholders there.
	const serverTraces = "<run>/servers/<n>/traces"
	l, err := ServerCommand(c, port, dir, serverTraces, "")
	if err != nil {
		return rundir.Launch{}, err
	}
	// The other ports strict mode checks are chosen at run time too (StrictPorts).
	for _, f := range StrictPorts(c) {
		l.Argv = append(l.Argv, f.Flag, PortPlaceholder)
	}
	l.Dir = "<run>/servers/<n>"
	return backends.ShowPort(l, c), nil
}

// NewWatcher implements backends.Backend: the server log is watched with the generate
// watcher (fallback, OOM, unrecognized arguments, dead scheduler).
func (ServeBackend) NewWatcher(plans.Cell) backends.Watcher { return NewWatcher() }

// Assess implements backends.Backend for a server log: the gates of generate (diffusers
// fallback, CUDA OOM, rejected arguments, dead scheduler). Artifacts are the runner's.
func (ServeBackend) Assess(c plans.Cell, _ string, bw backends.Watcher, exit rundir.Exit) backends.Assessment {
	a := backends.Assessment{Verdict: plans.VerdictOK}
	w, ok := bw.(*Watcher)
	if !ok {
		return a
	}
	if ev := w.Evidence(FindingUnrecognized); len(ev) > 0 {
		a.Verdict = plans.VerdictFailed
		a.Reasons = append(a.Reasons, rundir.Reason{Code: string(FindingUnrecognized), Message: "the server rejected its arguments: " + ev[0].Text + "; fix backend.extra_args (diffusion `sglang serve` takes server arguments only, sampling and profiling flags go into requests)", Lines: ev})
	}
	if ev := w.Evidence(FindingOOM); len(ev) > 0 {
		a.Verdict = plans.VerdictFailed
		a.Reasons = append(a.Reasons, rundir.Reason{Code: string(FindingOOM), Message: "the server ran out of GPU memory; lower the resolution or batch, or free the GPU (check for leftover scheduler processes with nvidia-smi)", Lines: ev})
	}
	if ev := w.Evidence(FindingWorkerDead); len(ev) > 0 {
		a.Verdict = plans.VerdictFailed
		a.Reasons = append(a.Reasons, rundir.Reason{Code: string(FindingWorkerDead), Message: "the server's scheduler died; see the server log", Lines: ev})
	}
	if ev := w.Evidence(FindingFallback); len(ev) > 0 {
		r := rundir.Reason{Code: string(FindingFallback), Message: "the server fell back to the diffusers backend, so it does not measure sglang's native engine; pass --model-id or --backend sglang in backend.extra_args (or set gate.diffusers_fallback = \"warn\")", Lines: ev}
		if c.Gate.DiffusersFallback == "warn" {
			a.Warnings = append(a.Warnings, r)
		} else {
			if a.Verdict == plans.VerdictOK {
				a.Verdict = plans.VerdictInvalid
			}
			a.Reasons = append(a.Reasons, r)
		}
	}
	return a
}
