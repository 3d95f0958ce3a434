package backends

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
)

// Serve mode: one server process serves the requests of one or more cells, and the runner
// drives it over HTTP. The runner owns the lifecycle (port, process group, readiness polling,
// the client phase, the profiling window's HTTP calls and timers, teardown); a Server backend
// owns everything that differs between programs: the command line, what readiness and the
// served model look like, what opens and closes a profiling window and how long its flush
// takes, where the traces land and how many ranks must have written one, and which log lines
// fail a cell. docs/decisions.md says why the line is drawn there.

// ModeServe is the plan's backend.mode for server cells.
const ModeServe = "serve"

// EnvServerMarker is set in the environment of every server the runner starts, with the run
// directory and server number as value, so that a server left behind by a crashed run can be
// recognised as ours (its /proc/<pid>/environ carries it).
const EnvServerMarker = "RUNNER_SERVER_MARKER"

// PortPlaceholder stands for the port the runner chooses at run time in the server command
// shown by `runner plan` and recorded in cells.json.
const PortPlaceholder = "<free port>"

// AttachedPlaceholder is the command `runner plan` shows, followed by the URL, for a cell
// whose server the runner attaches to (backend.url) instead of starting.
const AttachedPlaceholder = "<attached>"

// WindowStartStop is the kind of profiling window every server has today
// (ServeResult.Profile.Kind in result.json): the runner brackets the measured requests with
// POST /start_profile and POST /stop_profile. (Per-request profiling fields are not used:
// sglang's images API takes none upstream, see docs/upstream.md.)
const WindowStartStop = "start-stop"

// WindowNSysSession is the window of an nsys cell on a server that has no cudaProfilerStart
// path of its own (sglang's diffusion server): the server runs in an interactive nsys session
// (nsys.Launch), and the runner's `nsys start` and `nsys stop` around the measured requests
// are the window; nsys writes the report at stop. No HTTP call, no traces.
const WindowNSysSession = "nsys-session"

// Server is a Backend whose cells are served by a long-running server. Every method is pure
// (no process, no network); the ones that look at files say so. The methods past ServerLaunch
// need only a base URL and directories, not a process the runner started, so a server the
// runner attaches to by URL can be driven through the same interface.
type Server interface {
	Backend
	// Executable is the argv prefix that runs the server program: backend.command, or the
	// program's own name where the plan kept the default. Preflight looks it up in PATH.
	Executable(c plans.Cell) []string
	// ServerKey identifies the server a cell needs: cells with equal keys share one server.
	// Everything that changes the server process is in it; what only changes requests is not.
	ServerKey(c plans.Cell) string
	// PortFlags are the flags, besides the HTTP port, whose ports the runner must choose at
	// run time and hand over in ServerSite.Ports, in this order (sglang's diffusion server
	// with --strict-ports fails at start when one of them is taken).
	PortFlags(c plans.Cell) []PortFlag
	// ServerLaunch builds the server process of cell c at site.
	ServerLaunch(c plans.Cell, site ServerSite) (rundir.Launch, error)
	// NewServerWatcher returns the watcher of one server's log (which outlives its cells).
	NewServerWatcher(c plans.Cell) ServerWatcher
	// Protocol says how the runner talks to the server of cell c.
	Protocol(c plans.Cell) Protocol
	// Window is the profiling window of cell c whose traces directory is cellTraces
	// (absolute); Kind is "" when the cell is not profiled through the server.
	Window(c plans.Cell, cellTraces string) Window
	// AwaitTraces blocks until the traces a closed window produced are final (a background
	// compression has finished), or ctx ends: the last part of the flush. It reads files.
	AwaitTraces(ctx context.Context, c plans.Cell, d TraceDirs) error
	// CollectTraces moves the traces of the cell's window from the server's profiler
	// directory into the cell's (where the server writes them there) and checks them: each
	// complete, with GPU work, from every rank the server runs. It reads and moves files.
	CollectTraces(c plans.Cell, d TraceDirs) TraceReport
	// AssessCell judges one cell's share of a server log: findings that are events (an
	// out-of-memory error) count only when logged after since, the mark taken when the cell
	// began; findings that describe the server (a diffusers fallback) count for every cell.
	AssessCell(c plans.Cell, w ServerWatcher, since Mark) Assessment
}

// PortFlag is one port flag a server must be given: the runner chooses Span consecutive free
// ports and passes the first. Span is more than 1 when the server binds port+r for each of
// several replicas (sglang's diffusion --scheduler-port with --dp-size N binds one per
// data-parallel replica, and --strict-ports checks all N).
type PortFlag struct {
	Flag string
	Span int
}

// ServerSite is where and as what a server runs: what the runner decided at run time.
type ServerSite struct {
	// Command is the argv prefix: Executable, or the simulator under --simulate.
	Command []string
	// Port is the port the server must listen on.
	Port int
	// Ports are free ports for PortFlags(c), in order: the first of each flag's span.
	Ports []int
	// Dir is the server's directory (absolute): its working directory.
	Dir string
	// TraceDir is the directory the server's profiler writes into (absolute).
	TraceDir string
	// Marker is the value of EnvServerMarker in the server's environment.
	Marker string
}

// Protocol is how the runner talks to one kind of server.
type Protocol struct {
	// ModelType is recorded in server.json ("diffusion" or "llm").
	ModelType string
	// ReadyLine is the log line of a server that is ready; GET /health answering 200 is the
	// stronger signal, the line is waited for only a few seconds after it.
	ReadyLine string
	// ModelInfoPath answers {"model_path": ...}; it is asked for the served model when GET
	// /v1/models (which every server here has) names none. Empty: no such route.
	ModelInfoPath string
	// ServerInfoPath answers what the server runs with (its arguments, model, version): what
	// the record of a server the runner attached to by URL holds instead of a command line.
	ServerInfoPath string
	// API is the request API when the plan names none (runner/load's API names).
	API string
	// ProfileDoneLine is the line the server logs once a profile's traces are written. When
	// POST /stop_profile is refused, the profile may have stopped by itself (after
	// num_steps), and the window is closed once the server logs this line once more. Empty:
	// a refused stop fails the cell.
	ProfileDoneLine string
	// PerfDumps says that requests can ask for a perf dump each (perf_dump_path), which gives
	// serve cells the stage and denoise-step timings of generate cells.
	PerfDumps bool
	// CacheReset is the route (POST) that empties the server's prefix cache, sent before each
	// LLM cell's measured requests when [load] flush_cache is on. Empty: the server has none.
	CacheReset string
}

// Window is a cell's profiling window on its server. The runner does the HTTP calls and the
// timing; the backend says what to send and what a closed window looks like. This is where the
// profiler's options go: Start is built from the cell's [profile] (a torch window today; an
// nsys capture range would be a Start with the CUDA profiler activity, and the server wrapped
// in nsys with --capture-range=cudaProfilerApi).
type Window struct {
	// Kind is WindowStartStop, or "" (no window).
	Kind string
	// Start is the body of POST /start_profile.
	Start map[string]any
	// StartHint is added to the failure when /start_profile is refused.
	StartHint string
	// Flush names what the flush waits for, for the status line.
	Flush string
}

// TraceDirs are the directories of one cell's window.
type TraceDirs struct {
	// Server is the server's profiler directory, Cell the cell's traces directory.
	Server, Cell string
	// Before names the entries of Server before the window opened: anything else in it
	// appeared during the cell's client phase and is the cell's (cells run one at a time).
	Before map[string]bool
}

// TraceReport is what CollectTraces found.
type TraceReport struct {
	// Traces are absolute paths in the cell's traces directory.
	Traces []string
	// Reasons fail the cell (codes trace-move, trace-check); Warnings do not.
	Reasons, Warnings []rundir.Reason
}

// ServerWatcher watches a server's log. It is a Selective watcher that also answers the
// runner's questions while the server starts and between cells.
type ServerWatcher interface {
	Selective
	// Tail returns up to n of the last lines, oldest first.
	Tail(n int) []rundir.Evidence
	// Fatal reports a finding that means the server will never be ready (rejected
	// arguments, out of memory, a dead worker): its name and first line.
	Fatal() (finding string, first rundir.Evidence, ok bool)
	// Mark is the count of each finding so far.
	Mark() Mark
}

// Mark is a point in a server's log: how many lines showed each finding until then.
type Mark map[string]int

// ServerArgsKey is the part of a server key that every program shares: command, model,
// extra args, environment and port, then parts (what else the backend's server depends on).
func ServerArgsKey(c plans.Cell, parts ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%q|%q|", c.Backend.Command, c.Model)
	for _, p := range parts {
		fmt.Fprintf(&b, "%s|", p)
	}
	fmt.Fprintf(&b, "%q|", c.Backend.ExtraArgs)
	keys := make([]string, 0, len(c.Backend.Env))
	for k := range c.Backend.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%q=%q,", k, c.Backend.Env[k])
	}
	fmt.Fprintf(&b, "|%d", c.Backend.Port)
	return b.String()
}

// ShowPort is the launch `runner plan` shows for a server cell whose port the runner picks at
// run time: the placeholder instead of the port, no marker.
func ShowPort(l rundir.Launch, c plans.Cell) rundir.Launch {
	if c.Backend.URL != "" {
		// An attached server (backend.url) runs no command of the runner's.
		return rundir.Launch{Argv: []string{AttachedPlaceholder, c.Backend.URL}, Env: map[string]string{}}
	}
	if c.Backend.Port == 0 {
		for i := 1; i < len(l.Argv); i++ {
			if l.Argv[i-1] == "--port" {
				l.Argv[i] = PortPlaceholder
			}
		}
	}
	delete(l.Env, EnvServerMarker)
	return l
}
