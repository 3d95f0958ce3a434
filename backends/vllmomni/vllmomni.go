// Package vllmomni drives vLLM-Omni's diffusion server (`vllm serve MODEL --omni`) in serve
// mode: it builds the server command with a --profiler-config made from the plan's [profile]
// (ref-sglang-interfaces.md §C.1, §C.2), and finds the torch-profiler artifacts the server
// writes on /stop_profile, one session directory per diffusion worker,
// `<torch_profiler_dir>/<YYYYMMDD-HHMMSS>_diffusion_rank<r>_<unix>/trace_rank<r>.json[.gz]`
// (docs/upstream.md), waiting until the background gzip of each trace has finished.
package vllmomni

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
)

// Kind is the plan's backend.kind for vLLM-Omni.
const Kind = "vllm-omni"

// ReadyLine is uvicorn's last startup line, logged once the API server accepts requests.
const ReadyLine = "Application startup complete."

// Command returns the argv prefix: the plan's command, except that the plan default
// ["sglang"] (the default of every kind) means ["vllm"] for this backend.
func Command(c plans.Cell) []string {
	if len(c.Backend.Command) == 1 && c.Backend.Command[0] == "sglang" {
		return []string{"vllm"}
	}
	return c.Backend.Command
}

// ProfilerConfig is the --profiler-config JSON of a cell: torch cells profile with the torch
// profiler into traceDir (gzip on, stacks on, as vLLM's defaults); other cells get none, so
// the server registers no profiling routes. Fields follow vLLM's ProfilerConfig (§C.1).
func ProfilerConfig(c plans.Cell, traceDir string) (string, error) {
	switch c.Profiler {
	case plans.ProfilerTorch:
		if !filepath.IsAbs(traceDir) {
			return "", fmt.Errorf("vllm-omni: torch_profiler_dir %q must be absolute", traceDir)
		}
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false) // a path is shown as written, not as \u003c...
		cfg := map[string]any{
			"profiler":                  "torch",
			"torch_profiler_dir":        traceDir,
			"torch_profiler_use_gzip":   true,
			"torch_profiler_with_stack": true,
		}
		// [profile] with_stack and record_shapes, then [profile.vllm_profiler_config] (whose
		// keys the plan keeps apart from these four).
		if p := c.Profile.WithStack; p != nil {
			cfg["torch_profiler_with_stack"] = *p
		}
		if p := c.Profile.RecordShapes; p != nil {
			cfg["torch_profiler_record_shapes"] = *p
		}
		maps.Copy(cfg, c.Profile.VLLM.Fields())
		enc.Encode(cfg)
		return strings.TrimSuffix(b.String(), "\n"), nil
	case plans.ProfilerNsys:
		return `{"profiler":"cuda"}`, nil
	}
	return "", nil
}

// ServerCommand builds `vllm serve MODEL --omni --host 127.0.0.1 --port P
// [--profiler-config JSON] extra_args...` for the server of cell c.
func ServerCommand(c plans.Cell, command []string, port int, dir, traceDir, marker string) (rundir.Launch, error) {
	if len(command) == 0 || command[0] == "" {
		return rundir.Launch{}, fmt.Errorf("vllm-omni: cell %s has an empty backend.command; set it to [\"vllm\"]", c.ID)
	}
	if c.Model == "" {
		return rundir.Launch{}, fmt.Errorf("vllm-omni: cell %s has no model; add one to matrix.model", c.ID)
	}
	if port <= 0 || port > 65535 {
		return rundir.Launch{}, fmt.Errorf("vllm-omni: port %d out of range", port)
	}
	host := c.Backend.Host
	if host == "" {
		host = "127.0.0.1"
	}
	argv := append([]string(nil), command...)
	argv = append(argv, "serve", c.Model, "--omni", "--host", host, "--port", strconv.Itoa(port))
	pc, err := ProfilerConfig(c, traceDir)
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
	env[backends.EnvServerMarker] = marker
	return rundir.Launch{Argv: argv, Env: env, Dir: dir}, nil
}

// ServerKey is the server arguments plus the profiler: the profiler configuration is a
// server argument here, so torch and unprofiled cells cannot share a server.
func ServerKey(c plans.Cell) string {
	return "vllm-omni|" + backends.ServerArgsKey(c, modelType(c)) + "|" + c.Profiler
}

// modelType is the plan's backend.model_type; vLLM-Omni serves diffusion models here.
func modelType(c plans.Cell) string {
	if c.Backend.ModelType != "" {
		return c.Backend.ModelType
	}
	return plans.ModelTypeDiffusion
}

// Backend is the backends.Server of vLLM-Omni serve cells (server.go has the methods of
// backends.Server): it describes the server and judges its log, and the runner drives it.
type Backend struct{}

// New returns the backend.
func New() backends.Server { return Backend{} }

// Name implements backends.Backend.
func (Backend) Name() string { return Kind }

// Launch implements backends.Backend: the server command with placeholders for what is only
// known at run time.
func (b Backend) Launch(c plans.Cell, cellDir string) (rundir.Launch, error) {
	if err := backends.MakeCellDirs("vllm-omni", cellDir); err != nil {
		return rundir.Launch{}, err
	}
	return b.Command(c, cellDir)
}

// Command is Launch without creating the cell's directories: what `runner plan` shows.
func (Backend) Command(c plans.Cell, cellDir string) (rundir.Launch, error) {
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

var traceRank = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^trace_rank(\d+)\.json(\.gz)?$`) })

// Session is one profiling session directory and its per-rank traces.
type Session struct {
	Dir    string   // absolute
	Traces []string // absolute trace_rank<r>.json.gz (or .json when gzip is off)
}

// Sessions lists the session directories under traceDir that are not in skip, with their
// traces, oldest first.
func Sessions(traceDir string, skip map[string]bool) []Session {
	ents, _ := os.ReadDir(traceDir)
	var out []Session
	for _, e := range ents {
		if !e.IsDir() || skip[e.Name()] {
			continue
		}
		s := Session{Dir: filepath.Join(traceDir, e.Name())}
		files, _ := os.ReadDir(s.Dir)
		for _, f := range files {
			if traceRank().MatchString(f.Name()) {
				s.Traces = append(s.Traces, filepath.Join(s.Dir, f.Name()))
			}
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Dir < out[j].Dir })
	return out
}

// SessionNames returns the names of the session directories now under traceDir.
func SessionNames(traceDir string) map[string]bool {
	m := map[string]bool{}
	ents, _ := os.ReadDir(traceDir)
	for _, e := range ents {
		if e.IsDir() {
			m[e.Name()] = true
		}
	}
	return m
}

// Complete reports whether a session's traces are final: every trace_rank<r>.json has been
// replaced by its .json.gz (gzip deletes the .json when it is done) and every .gz is a
// complete gzip stream. With gzip off, plain .json traces are final once present.
func Complete(s Session, gzipOn bool) (bool, error) {
	if len(s.Traces) == 0 {
		return false, nil
	}
	for _, t := range s.Traces {
		if strings.HasSuffix(t, ".json") {
			if gzipOn {
				return false, nil // still compressing
			}
			continue
		}
		if _, err := os.Stat(strings.TrimSuffix(t, ".gz")); err == nil {
			return false, nil // gzip is still writing
		}
		if err := backends.CheckTrace(t); err != nil {
			return false, err
		}
	}
	return true, nil
}

// WaitSessions waits until at least one new session exists under traceDir and all new
// sessions are complete, polling every poll; it gives up at ctx's deadline.
func WaitSessions(ctx context.Context, traceDir string, skip map[string]bool, poll time.Duration) ([]Session, error) {
	for {
		ss := Sessions(traceDir, skip)
		done := len(ss) > 0
		var lastErr error
		for _, s := range ss {
			ok, err := Complete(s, true)
			if !ok {
				done = false
				lastErr = err
			}
		}
		if done {
			return ss, nil
		}
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return ss, fmt.Errorf("traces still incomplete (%v): %w", lastErr, ctx.Err())
			}
			if len(ss) == 0 {
				return nil, fmt.Errorf("no profiling session directory appeared under %s: %w", traceDir, ctx.Err())
			}
			return ss, fmt.Errorf("background gzip of the traces did not finish: %w", ctx.Err())
		case <-time.After(poll):
		}
	}
}
