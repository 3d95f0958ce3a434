package sglang

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/plans"
)

// The methods of backends.Server for sglang's two servers (ref-sglang-interfaces.md §A.8,
// §B): the LLM server (`sglang serve --model-type llm`, `python -m sglang.launch_server`)
// profiles in a window opened and closed over HTTP and writes into the directory the window
// names; the diffusion server profiles requests that ask for it and writes into its
// profiler directory, a server-level setting.

// Executable implements backends.Server: backend.command.
func (ServeBackend) Executable(c plans.Cell) []string { return c.Backend.Command }

// ServerKey implements backends.Server.
func (ServeBackend) ServerKey(c plans.Cell) string { return ServerKey(c) }

// ServerLaunch implements backends.Server with ServerCommand.
func (ServeBackend) ServerLaunch(c plans.Cell, site backends.ServerSite) (backends.Launch, error) {
	c.Backend.Command = site.Command
	return ServerCommand(c, site.Port, site.Dir, site.TraceDir, site.Marker)
}

// NewServerWatcher implements backends.Server: the generate watcher (fallback, OOM,
// unrecognized arguments, dead scheduler) watches the server log too.
func (ServeBackend) NewServerWatcher(plans.Cell) backends.ServerWatcher { return NewWatcher() }

// Protocol implements backends.Server.
func (ServeBackend) Protocol(c plans.Cell) backends.Protocol {
	if ModelType(c) == ModelTypeLLM {
		return backends.Protocol{ModelType: ModelTypeLLM, ReadyLine: ReadyLineLLM, ModelInfoPath: "/get_model_info", API: plans.APIGenerate, ProfileDoneLine: ProfileDoneLine}
	}
	// Diffusion requests take perf_dump_path: one dump per measured request.
	return backends.Protocol{ModelType: ModelTypeDiffusion, ReadyLine: ReadyLineDiffusion, ModelInfoPath: "/v1/model_info", API: plans.APIImages, PerfDumps: true}
}

// Window implements backends.Server: the LLM server's /start_profile window, whose body
// points output_dir at the cell; the diffusion server's per-request profiling.
func (ServeBackend) Window(c plans.Cell, cellTraces string) backends.Window {
	switch {
	case c.Profiler != plans.ProfilerTorch:
		return backends.Window{}
	case ModelType(c) == ModelTypeLLM:
		return backends.Window{Kind: backends.WindowStartStop, Start: StartProfileBody(c, cellTraces), Flush: "POST /stop_profile"}
	}
	return backends.Window{Kind: backends.WindowPerRequest}
}

// StartProfileBody is the ProfileReqInput of an LLM cell (§B.1).
func StartProfileBody(c plans.Cell, traces string) map[string]any {
	b := map[string]any{
		"output_dir":       traces,
		"activities":       []string{"CPU", "GPU"},
		"profile_by_stage": c.Profile.ProfileByStage,
		"merge_profiles":   c.Profile.MergeProfiles,
		"profile_prefix":   c.ID,
	}
	if c.Profile.StartStep >= 0 {
		b["start_step"] = c.Profile.StartStep
	}
	if c.Profile.NumSteps > 0 {
		b["num_steps"] = c.Profile.NumSteps
	}
	return b
}

// AwaitTraces implements backends.Server: sglang has written its traces when /stop_profile
// answers (LLM) or the request returns (diffusion).
func (ServeBackend) AwaitTraces(context.Context, plans.Cell, backends.TraceDirs) error { return nil }

// CollectTraces implements backends.Server. A shared diffusion server writes every cell's
// traces into its own directory: the ones that appeared during the cell are moved into the
// cell, and each should start with the id of one of the cell's responses (sglang names traces
// by request id). The LLM server wrote into the cell already.
func (ServeBackend) CollectTraces(c plans.Cell, d backends.TraceDirs) backends.TraceReport {
	var r backends.TraceReport
	llm := ModelType(c) == ModelTypeLLM
	if !llm {
		for _, f := range listTraceFiles(d.Server) {
			if d.Before[f] {
				continue
			}
			if err := os.Rename(filepath.Join(d.Server, f), filepath.Join(d.Cell, f)); err != nil {
				r.Reasons = append(r.Reasons, backends.Reason{Code: "trace-move", Message: err.Error()})
			}
			if !slices.ContainsFunc(d.ResponseIDs, func(id string) bool { return id != "" && strings.HasPrefix(f, id) }) {
				r.Warnings = append(r.Warnings, backends.Reason{Code: "trace-attribution", Message: fmt.Sprintf("trace %s names no request of this cell; it was attributed by time (it appeared during the cell)", f)})
			}
		}
	}
	traces, problems := CheckServeTraces(d.Cell, ExpectedRanks(c, llm))
	for _, t := range traces {
		r.Traces = append(r.Traces, filepath.Join(d.Cell, t))
	}
	for _, p := range problems {
		r.Reasons = append(r.Reasons, backends.Reason{Code: "trace-check", Message: p})
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
	rankLLM       = regexp.MustCompile(`-TP-(\d+)`)
	rankDiffusion = regexp.MustCompile(`global-rank(\d+)`)
	tpFlag        = regexp.MustCompile(`^--(?:tp-size|tp|num-gpus)(?:=(\d+))?$`)
)

// ExpectedRanks is the number of ranks whose traces a cell must have: the server's
// --tp-size/--tp (LLM) or --num-gpus (diffusion) from extra_args, default 1.
func ExpectedRanks(c plans.Cell, llm bool) int {
	n := 1
	args := c.Backend.ExtraArgs
	for i, a := range args {
		m := tpFlag.FindStringSubmatch(a)
		if m == nil {
			continue
		}
		if (llm && strings.HasPrefix(a, "--num-gpus")) || (!llm && !strings.HasPrefix(a, "--num-gpus")) {
			continue
		}
		v := m[1]
		if v == "" && i+1 < len(args) {
			v = args[i+1]
		}
		if k, err := strconv.Atoi(v); err == nil && k > 0 {
			n = k
		}
	}
	return n
}

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
		for _, re := range []*regexp.Regexp{rankLLM, rankDiffusion} {
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
func (w *Watcher) Fatal() (string, backends.Evidence, bool) {
	for _, f := range fatalFindings {
		if ev := w.Evidence(f); len(ev) > 0 {
			return string(f), ev[0], true
		}
	}
	return "", backends.Evidence{}, false
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
	a := b.Assess(c, "", sw, backends.Exit{})
	now := sw.Mark()
	a.Verdict = plans.VerdictOK
	var kept []backends.Reason
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
