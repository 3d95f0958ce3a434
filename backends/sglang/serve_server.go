package sglang

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
)

// The methods of backends.Server for sglang's two servers (ref-sglang-interfaces.md §A.8,
// §B): the LLM server (`sglang serve --model-type llm`, `python -m sglang.launch_server`) and
// the diffusion server both profile in a window opened and closed over HTTP and write into the
// directory the window names (the cell's). The diffusion images API takes no per-request
// profiling fields upstream (docs/upstream.md).

// Executable implements backends.Server: backend.command.
func (ServeBackend) Executable(c plans.Cell) []string { return c.Backend.Command }

// ValidateCell implements backends.Backend. nsys wraps a diffusion server for the whole of one
// cell; an LLM server is captured only in the runner's window, through the CUDA_PROFILER
// activity and a cudaProfilerApi capture range (the whole life of an LLM server is mostly
// model loading and warmup), so an LLM nsys cell without that range is refused. The diffusion
// runtime has no cudaProfilerStart path in /start_profile, so there the same key runs the
// server in an interactive nsys session whose collection the runner starts and stops around
// the measured requests (backends.WindowNSysSession): every capture range is accepted.
//
// SGLANG_PROFILE_V2 in backend.env switches the LLM scheduler to the stage-based profiler,
// which implements no /stop_profile (manual_stop raises NotImplementedError) and refuses
// start_step and merge_profiles: the runner's window cannot drive it, so such a cell is refused.
func (ServeBackend) ValidateCell(c plans.Cell) error {
	if c.Profiler == plans.ProfilerNsys && ModelType(c) == ModelTypeLLM && c.NSys.CaptureRange != plans.CaptureRangeCudaAPI {
		return fmt.Errorf("profiler \"nsys\" for an LLM server (backend.mode = \"serve\", model_type = \"llm\") needs [nsys] capture_range = \"cudaProfilerApi\": the runner's /start_profile window then opens and closes the capture")
	}
	if v, ok := c.Backend.Env[EnvProfileV2]; ok && ModelType(c) == ModelTypeLLM && c.Profiler != plans.ProfilerNone && slices.Contains([]string{"true", "1", "yes", "y"}, strings.ToLower(v)) {
		return fmt.Errorf("backend.env sets %s = %q: sglang's stage-based profiler then has no /stop_profile, which closes the runner's profiling window; drop the variable (the default profiler writes -EXTEND and -DECODE traces with profile_by_stage = true)", EnvProfileV2, v)
	}
	return nil
}

// EnvProfileV2 selects sglang's stage-based LLM profiler (srt/environ.py, default false).
const EnvProfileV2 = "SGLANG_PROFILE_V2"

// EnvProbes implements backends.Backend: as the generate backend's.
func (ServeBackend) EnvProbes(c plans.Cell) backends.EnvProbes { return envProbes(c) }

// ServerKey implements backends.Server.
func (ServeBackend) ServerKey(c plans.Cell) string { return ServerKey(c) }

// PortFlags implements backends.Server: the ports --strict-ports checks besides --port
// (StrictPorts).
func (ServeBackend) PortFlags(c plans.Cell) []backends.PortFlag { return StrictPorts(c) }

// ServerLaunch implements backends.Server with ServerCommand, and the ports the runner chose
// for PortFlags appended (PortArgs).
func (ServeBackend) ServerLaunch(c plans.Cell, site backends.ServerSite) (rundir.Launch, error) {
	c.Backend.Command = site.Command
	l, err := ServerCommand(c, site.Port, site.Dir, site.TraceDir, site.Marker)
	if err != nil {
		return l, err
	}
	ports, err := PortArgs(StrictPorts(c), site.Ports)
	if err != nil {
		return rundir.Launch{}, err
	}
	l.Argv = append(l.Argv, ports...)
	return l, nil
}

// NewServerWatcher implements backends.Server: the generate watcher (fallback, OOM,
// unrecognized arguments, dead scheduler) watches the server log too.
func (ServeBackend) NewServerWatcher(plans.Cell) backends.ServerWatcher { return NewWatcher() }

// FlushCachePath is the LLM server's route that flushes the radix cache (http_server.py
// flush_cache, GET or POST); it answers 400 while requests run or wait.
const FlushCachePath = "/flush_cache"

// Protocol implements backends.Server.
func (ServeBackend) Protocol(c plans.Cell) backends.Protocol {
	if ModelType(c) == ModelTypeLLM {
		return backends.Protocol{ModelType: ModelTypeLLM, ReadyLine: ReadyLineLLM, ModelInfoPath: "/get_model_info", ServerInfoPath: "/get_server_info", API: plans.APIGenerate, ProfileDoneLine: ProfileDoneLine, CacheReset: FlushCachePath}
	}
	// Diffusion requests take perf_dump_path: one dump per measured request.
	return backends.Protocol{ModelType: ModelTypeDiffusion, ReadyLine: ReadyLineDiffusion, ModelInfoPath: "/v1/model_info", ServerInfoPath: "/v1/model_info", API: plans.APIImages, PerfDumps: true}
}

// Window implements backends.Server: a /start_profile window whose body points output_dir at
// the cell. The LLM server's body carries the cell's [profile] (StartProfileBody); the
// diffusion server's ProfileReqInput takes output_dir and activities, and its window covers
// whole requests (all stages), so num_profiled_timesteps and profile_all_stages apply to
// generate cells only.
func (ServeBackend) Window(c plans.Cell, cellTraces string) backends.Window {
	switch {
	case c.Profiler == plans.ProfilerNsys && c.NSys.CaptureRange == plans.CaptureRangeCudaAPI && ModelType(c) == ModelTypeLLM:
		// nsys capture range: CUDA_PROFILER alone makes the scheduler call cudaProfilerStart
		// and, at /stop_profile, cudaProfilerStop; no torch trace is written (docs/upstream.md).
		return backends.Window{Kind: backends.WindowStartStop, Start: map[string]any{"output_dir": cellTraces, "activities": []string{"CUDA_PROFILER"}, "profile_prefix": c.ID}, Flush: "POST /stop_profile"}
	case c.Profiler == plans.ProfilerNsys && c.NSys.CaptureRange == plans.CaptureRangeCudaAPI:
		// The diffusion runtime calls no cudaProfilerStart in the window (docs/upstream.md):
		// the runner opens and closes an nsys collection of the server's session instead.
		return backends.Window{Kind: backends.WindowNSysSession, Flush: "nsys stop"}
	case c.Profiler != plans.ProfilerTorch:
		return backends.Window{}
	case ModelType(c) == ModelTypeLLM:
		return backends.Window{Kind: backends.WindowStartStop, Start: StartProfileBody(c, cellTraces), Flush: "POST /stop_profile"}
	}
	b := map[string]any{"output_dir": cellTraces}
	profilerOptions(b, c.Profile)
	return backends.Window{Kind: backends.WindowStartStop, Start: b, Flush: "POST /stop_profile"}
}

// profilerOptions adds the [profile] options both of sglang's ProfileReqInput bodies take:
// activities (default ["CPU", "GPU"], sent explicitly so the record shows them), and
// with_stack and record_shapes when the plan sets them (unset: the server's default).
func profilerOptions(b map[string]any, p plans.Profile) {
	b["activities"] = []string{"CPU", "GPU"}
	if len(p.Activities) > 0 {
		b["activities"] = p.Activities
	}
	if p.WithStack != nil {
		b["with_stack"] = *p.WithStack
	}
	if p.RecordShapes != nil {
		b["record_shapes"] = *p.RecordShapes
	}
}

// StartProfileBody is the ProfileReqInput of an LLM cell (§B.1).
func StartProfileBody(c plans.Cell, traces string) map[string]any {
	b := map[string]any{
		"output_dir":       traces,
		"profile_by_stage": c.Profile.ProfileByStage,
		"merge_profiles":   c.Profile.MergeProfiles,
	}
	// The prefix names the traces after the cell, but ProfileMerger globs
	// "<profile_id>*.trace.json.gz", which "<prefix>-<profile_id>-TP-..." does not match: with a
	// prefix the merge fails. output_dir is the cell's own, so a merging window needs none.
	if !c.Profile.MergeProfiles {
		b["profile_prefix"] = c.ID
	}
	if c.Profile.StartStep >= 0 {
		b["start_step"] = c.Profile.StartStep
	}
	// A window that stops itself after num_steps is closed when the server logs that it is
	// done; the log of a server the runner attached to (backend.url) is not the runner's to
	// read, so there the window lasts until POST /stop_profile (the plan refuses num_steps).
	if c.Profile.NumSteps > 0 && c.Backend.URL == "" {
		b["num_steps"] = c.Profile.NumSteps
	}
	profilerOptions(b, c.Profile)
	if len(c.Profile.ProfileStages) > 0 {
		b["profile_stages"] = c.Profile.ProfileStages
	}
	return b
}

// AwaitTraces implements backends.Server: sglang has written its traces when /stop_profile
// answers (every rank has exported into the window's output_dir).
func (ServeBackend) AwaitTraces(context.Context, plans.Cell, backends.TraceDirs) error { return nil }

// CollectTraces implements backends.Server: the window wrote into the cell's traces
// directory already; each trace must be complete and hold GPU work, and every rank upstream
// exports for a start-stop window must have written one (TraceRanks).
func (ServeBackend) CollectTraces(c plans.Cell, d backends.TraceDirs) backends.TraceReport {
	var r backends.TraceReport
	if c.Profiler != plans.ProfilerTorch {
		return r // an nsys window: the capture is in nsys's report, written when the server stops
	}
	traces, problems := CheckServeTraces(d.Cell, TraceRanks(c, WindowStartStop))
	for _, t := range traces {
		r.Traces = append(r.Traces, filepath.Join(d.Cell, t))
	}
	for _, p := range problems {
		r.Reasons = append(r.Reasons, rundir.Reason{Code: "trace-check", Message: p})
	}
	return r
}

func listTraceFiles(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".trace.json.gz") {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

var (
	rankLLM       = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`-TP-(\d+)`) })
	rankDiffusion = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`global-rank(\d+)`) })
)

// CheckServeTraces checks the traces of a cell before triage: at least one, each a complete
// gzip stream with at least one kernel event, and traces from the expected number of ranks.
// It returns the trace names and the problems.
func CheckServeTraces(dir string, ranks int) ([]string, []string) {
	names := listTraceFiles(dir)
	var problems []string
	if len(names) == 0 {
		return nil, []string{fmt.Sprintf("the profiler wrote no *.trace.json.gz into %s; check the server log for the profiler's lines", dir)}
	}
	seen := map[string]bool{}
	for _, n := range names {
		p := filepath.Join(dir, n)
		if err := CheckTrace(p); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", n, err))
			continue
		}
		if !backends.HasKernel(p) {
			problems = append(problems, fmt.Sprintf("%s has no kernel events (the window captured no GPU work; profile later steps or more requests)", n))
		}
		if strings.HasPrefix(n, "merged-") {
			continue
		}
		for _, re := range []*regexp.Regexp{rankLLM(), rankDiffusion()} {
			if m := re.FindStringSubmatch(n); m != nil {
				seen[m[1]] = true
			}
		}
	}
	if len(seen) > 0 && len(seen) < ranks {
		problems = append(problems, fmt.Sprintf("traces of %d rank(s) found, %d expected (tensor parallel size)", len(seen), ranks))
	}
	return names, problems
}

// fatalFindings are the server log findings that end a start at once, in the order they are
// reported.
var fatalFindings = []Finding{FindingUnrecognized, FindingOOM, FindingWorkerDead}

// Fatal implements backends.ServerWatcher.
func (w *Watcher) Fatal() (string, rundir.Evidence, bool) {
	for _, f := range fatalFindings {
		if ev := w.Evidence(f); len(ev) > 0 {
			return string(f), ev[0], true
		}
	}
	return "", rundir.Evidence{}, false
}

// Mark implements backends.ServerWatcher.
func (w *Watcher) Mark() backends.Mark {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := make(backends.Mark, len(w.counts))
	for f, n := range w.counts {
		m[string(f)] = n
	}
	return m
}

// AssessCell implements backends.Server: the gates of Assess, where an OOM or a scheduler
// death logged during an earlier cell of a shared server is that cell's, and fails this one
// only if it happens again while it runs. A diffusers fallback is the server's and makes every
// cell it serves invalid.
func (b ServeBackend) AssessCell(c plans.Cell, sw backends.ServerWatcher, since backends.Mark) backends.Assessment {
	a := b.Assess(c, "", sw, rundir.Exit{})
	now := sw.Mark()
	a.Verdict = plans.VerdictOK
	var kept []rundir.Reason
	for _, r := range a.Reasons {
		switch {
		case (r.Code == string(FindingOOM) || r.Code == string(FindingWorkerDead)) && now[r.Code] == since[r.Code]:
			continue
		case r.Code == string(FindingFallback):
			if a.Verdict == plans.VerdictOK {
				a.Verdict = plans.VerdictInvalid
			}
		default:
			a.Verdict = plans.VerdictFailed
		}
		kept = append(kept, r)
	}
	a.Reasons = kept
	return a
}
