package runner

// The environment a maintainer asks for: once per run, the GPUs' fixed
// configuration, topology and clock-lock state from nvidia-smi, and, when the backend's
// program is Python-based, the torch, CUDA runtime, triton, flashinfer and NCCL versions of its
// interpreter, and `python -m sglang.check_env` where the backend says it applies
// (backends.EnvProbes). It goes into the manifest (and so into bundles), through the same
// redaction as the rest of the manifest.

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/backends/sglang"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/gpu"
)

// envProbes are the environment probes of cell c's backend (Backend.EnvProbes): the command
// whose interpreter they ask, the plan's own even under --simulate, and whether check_env
// applies. captureGPUEnv runs them and ProbeCommands lists them, so both follow this one
// answer. A cell no backend takes (refused by the preflight) gets backend.command with
// check_env, as the runner did before backends answered.
func envProbes(c plans.Cell) backends.EnvProbes {
	be, err := pickBackend(c)
	if err != nil {
		return backends.EnvProbes{Command: c.Backend.Command, CheckEnv: true}
	}
	return be.EnvProbes(c)
}

// versionProbe is the manifest's probe of the program's version: its name (the backend's, the
// key the manifest records it under) and argv (the plan's command, or under --simulate the
// backend's simulator, with the backend's version arguments).
func versionProbe(c plans.Cell, opts *Options) (string, []string) {
	be, err := pickBackend(c)
	if err != nil {
		return sglang.Kind, append(slices.Clone(opts.sglangCommand(c)), "version")
	}
	p := be.EnvProbes(c)
	cmd := p.Command
	if opts.Simulate {
		cmd = []string{opts.Exe, "sim", be.Name()}
	}
	return be.Name(), append(slices.Clone(cmd), p.Version...)
}

// captureGPUEnv probes the GPU environment of a run. cells gives the backend command; the
// plan's own command is used even under --simulate, since the simulator replaces sglang's
// work, not the machine the user wants described.
func captureGPUEnv(ctx context.Context, cells []plans.Cell, opts *Options) *rundir.GPUEnv {
	g := opts.guard()
	e := &rundir.GPUEnv{}
	if ds, err := g.prober.Devices(ctx); err != nil {
		e.DevicesError = err.Error()
		g.failed(err.Error())
	} else {
		e.Devices = ds
	}
	if e.DevicesError == "" {
		if t, err := g.prober.Topology(ctx); err != nil {
			e.TopologyError = err.Error()
		} else {
			e.Topology = t
		}
	}
	if locked, err := g.clocksLocked(ctx); err != nil {
		e.ClockError = err.Error()
	} else {
		e.ClocksLocked = &locked
	}
	if len(cells) == 0 {
		return e
	}
	probes := envProbes(cells[0])
	cmd := probes.Command
	if opts.NoPlanProbes {
		e.InterpreterNote = "not probed: a simulated replay runs nothing the bundle's plan names (backend.command " + quoteArgv(cmd) + "); replay without --simulate to be shown the probes and asked"
		return e
	}
	e.Interpreter = gpu.Interpreter(cmd, opts.Env)
	if e.Interpreter == "" {
		e.InterpreterNote = "backend.command " + quoteArgv(cmd) + " is not Python-based as far as the runner can tell (no python beside it on PATH): no check_env and no library versions"
		return e
	}
	timeout := opts.CheckEnvTimeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	if probes.CheckEnv {
		t0 := time.Now()
		out, err := gpu.CheckEnv(ctx, e.Interpreter, opts.Env, timeout)
		e.CheckEnvNS = time.Since(t0).Nanoseconds()
		e.CheckEnv = out
		if err != nil {
			e.CheckEnvError = err.Error()
		}
	}
	v, err := gpu.LibraryVersions(ctx, e.Interpreter, opts.Env, timeout)
	e.Versions = v
	if err != nil {
		e.VersionsError = err.Error()
	}
	return e
}

func quoteArgv(argv []string) string {
	return strconv.Quote(strings.Join(argv, " "))
}
