package vllmomni

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
)

// The methods of backends.Server for `vllm serve MODEL --omni` (ref-sglang-interfaces.md §C):
// the profiler is configured at startup (--profiler-config), /start_profile and /stop_profile
// bracket the measured requests, and each window leaves a session directory of per-rank
// traces that a background gzip finishes after /stop_profile has answered.

// Log findings (the codes of the reasons they give).
const (
	FindingUnrecognized = "unrecognized-arguments"
	FindingOOM          = "cuda-oom"
)

// patterns are the log gates of a vLLM server: argparse rejecting a flag (vLLM's
// FlexibleArgumentParser is an argparse.ArgumentParser) and torch's out-of-memory error.
var patterns = []backends.Pattern{
	{Finding: FindingUnrecognized, Subs: []string{"error: unrecognized arguments:"}, Fatal: true},
	{Finding: FindingOOM, Subs: []string{"CUDA out of memory", "OutOfMemoryError"}, Fatal: true},
}

// Executable implements backends.Server.
func (Backend) Executable(c plans.Cell) []string { return Command(c) }

// ValidateCell implements backends.Backend: under nsys the server's cuda profiler
// (--profiler-config '{"profiler": "cuda"}') opens and closes a cudaProfilerApi range, which is
// the only way nsys sees the runner's window, so an nsys cell needs that capture range.
func (Backend) ValidateCell(c plans.Cell) error {
	if c.Profiler == plans.ProfilerNsys && c.NSys.CaptureRange != plans.CaptureRangeCudaAPI {
		return fmt.Errorf("profiler \"nsys\" with backend.kind = \"vllm-omni\" needs [nsys] capture_range = \"cudaProfilerApi\": the server's cuda profiler then opens and closes the capture in the runner's /start_profile window")
	}
	return nil
}

// EnvProbes implements backends.Backend: the Python of the program Command runs (vllm, not
// the plan default "sglang"), without check_env, which is sglang's and fails in an
// interpreter that has no sglang.
func (Backend) EnvProbes(c plans.Cell) backends.EnvProbes {
	// `vllm --version` prints importlib.metadata.version("vllm") (vllm/entrypoints/cli/main.py).
	return backends.EnvProbes{Command: Command(c), Version: []string{"--version"}}
}

// ServerKey implements backends.Server.
func (Backend) ServerKey(c plans.Cell) string { return ServerKey(c) }

// PortFlags implements backends.Server: `vllm serve` binds no other port the runner must
// choose.
func (Backend) PortFlags(plans.Cell) []backends.PortFlag { return nil }

// ServerLaunch implements backends.Server with ServerCommand.
func (Backend) ServerLaunch(c plans.Cell, site backends.ServerSite) (rundir.Launch, error) {
	return ServerCommand(c, site.Command, site.Port, site.Dir, site.TraceDir, site.Marker)
}

// NewServerWatcher implements backends.Server.
func (Backend) NewServerWatcher(plans.Cell) backends.ServerWatcher {
	return backends.NewLogWatcher(patterns)
}

// Protocol implements backends.Server: uvicorn's startup line, and /v1/models alone names the
// served model (vLLM has no model-info route).
func (Backend) Protocol(c plans.Cell) backends.Protocol {
	return backends.Protocol{ModelType: modelType(c), ReadyLine: ReadyLine, ServerInfoPath: "/v1/models", API: plans.APIImages}
}

// Window implements backends.Server: torch cells profile between /start_profile and
// /stop_profile. vLLM-Omni's ProfileRequest body has one field, stages (none: every stage);
// it takes no prefix (a profile_prefix would be dropped), so each diffusion worker names its
// own session directory <YYYYMMDD-HHMMSS>_diffusion_rank<r>_<unix>/ and CollectTraces takes
// every session directory that appeared during the window.
func (Backend) Window(c plans.Cell, _ string) backends.Window {
	if c.Profiler == plans.ProfilerNsys && c.NSys.CaptureRange == plans.CaptureRangeCudaAPI {
		// The cuda profiler (--profiler-config) calls cudaProfilerStart and cudaProfilerStop.
		return backends.Window{Kind: backends.WindowStartStop, Start: map[string]any{},
			StartHint: "vLLM registers it only when --profiler-config sets a profiler", Flush: "POST /stop_profile"}
	}
	if c.Profiler != plans.ProfilerTorch {
		return backends.Window{}
	}
	return backends.Window{
		Kind:      backends.WindowStartStop,
		Start:     map[string]any{},
		StartHint: "vLLM registers it only when --profiler-config sets a profiler",
		Flush:     "POST /stop_profile, then the trace gzip",
	}
}

// AwaitTraces implements backends.Server: /stop_profile returns once the traces are
// exported; this waits until the background gzip of every new session's traces is done.
func (Backend) AwaitTraces(ctx context.Context, c plans.Cell, d backends.TraceDirs) error {
	if c.Profiler != plans.ProfilerTorch {
		return nil // the cuda profiler writes nothing; nsys writes its report when the server stops
	}
	_, err := WaitSessions(ctx, d.Server, d.Before, 50*time.Millisecond)
	return err
}

// CollectTraces implements backends.Server: the new session directories (one per diffusion
// worker rank) move into the cell's traces directory whole; each trace must be complete and
// hold GPU work.
func (Backend) CollectTraces(c plans.Cell, d backends.TraceDirs) backends.TraceReport {
	var r backends.TraceReport
	if c.Profiler != plans.ProfilerTorch {
		return r // an nsys window: the capture is in nsys's report
	}
	fail := func(code, msg string) { r.Reasons = append(r.Reasons, rundir.Reason{Code: code, Message: msg}) }
	for _, s := range Sessions(d.Server, d.Before) {
		name := filepath.Base(s.Dir)
		dst := filepath.Join(d.Cell, name)
		if err := os.Rename(s.Dir, dst); err != nil {
			fail("trace-move", err.Error())
			continue
		}
		for _, t := range s.Traces {
			p := filepath.Join(dst, filepath.Base(t))
			r.Traces = append(r.Traces, p)
			if err := backends.CheckTrace(p); err != nil {
				fail("trace-check", fmt.Sprintf("%s: %v", filepath.Base(t), err))
			} else if !backends.HasKernel(p) {
				fail("trace-check", fmt.Sprintf("%s/%s has no kernel events (the window captured no GPU work)", name, filepath.Base(t)))
			}
		}
	}
	return r
}

// AssessCell implements backends.Server: rejected arguments fail every cell; an
// out-of-memory error fails the cell during which it was logged.
func (Backend) AssessCell(c plans.Cell, sw backends.ServerWatcher, since backends.Mark) backends.Assessment {
	a := backends.Assessment{Verdict: plans.VerdictOK}
	w, ok := sw.(*backends.LogWatcher)
	if !ok {
		return a
	}
	if ev := w.Evidence(FindingUnrecognized); len(ev) > 0 {
		a.Verdict = plans.VerdictFailed
		a.Reasons = append(a.Reasons, rundir.Reason{Code: FindingUnrecognized, Message: "the server rejected its arguments: " + ev[0].Text + "; fix backend.extra_args (`vllm serve` takes server arguments only; sampling parameters go into requests)", Lines: ev})
	}
	if ev := w.Evidence(FindingOOM); len(ev) > 0 && sw.Mark()[FindingOOM] > since[FindingOOM] {
		a.Verdict = plans.VerdictFailed
		a.Reasons = append(a.Reasons, rundir.Reason{Code: FindingOOM, Message: "the server ran out of GPU memory; lower the resolution or batch, or free the GPU (check for leftover processes with nvidia-smi)", Lines: ev})
	}
	return a
}
