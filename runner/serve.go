package runner

// Serve mode ([backend] mode = "serve"): a serve cell is a client phase against a
// server process the runner owns. Cells whose servers are equal (the backend's ServerKey:
// command, model, extra args, env, port and what else its server depends on) share one
// server, started when the first of them runs and stopped when a cell needs a different
// server, when the server died, or at the end of the run; restart = "per-cell" gives every
// cell a fresh server. An nsys cell gets a server of its own: nsys profiles a process from
// start to end, and its report is written when the server stops.
//
// Everything that differs between programs (command line, readiness line, served-model route,
// request API, the profiling window's start body and flush, where traces land and how they are
// checked, which log findings fail a cell) comes from the cell's backends.Server; this file and
// serve_server.go and serve_client.go are the orchestration: port, process group, polling,
// the client phase, the window's HTTP calls and timers, teardown, and the cell's verdict.
//
// Layout: servers/<n>/log.txt (the server's output), servers/<n>/command.json,
// servers/<n>/server.json (port, served model, readiness time, how it stopped, whether the
// port came free and what GPU memory was in use before and after), servers/<n>/traces (the
// server's profiler directory). Each cell keeps requests.jsonl, load.json and its traces/, and
// its result.json names its server.
//
// Trace attribution: sglang's servers take output_dir in /start_profile, which points straight
// at the cell's traces/. A server whose profiler directory is a server-level setting
// (vLLM-Omni) writes every cell's traces into servers/<n>/traces; cells run one after another
// and warmup requests are never profiled, so whatever appears there during a cell's client
// phase belongs to that cell, and the backend moves it into the cell's traces/
// (backends.Server.CollectTraces).

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/proc"
)

// serveSession runs the serve cells of one execute call.
type serveSession struct {
	runDir  string
	opts    *Options
	cur     *server
	n       int
	failed  map[string][]rundir.Reason // server key -> why its server failed (shared restart)
	pending []rundir.Reason            // teardown problems charged to the next cell
	// attached are the servers the session attached to ([backend] url), for the manifest.
	attached []rundir.AttachedServer
	// launchers are the LLM server commands chosen per plan command (llmLauncher).
	launchers map[string][]string
}

func newServeSession(runDir string, opts *Options) *serveSession {
	if abs, err := filepath.Abs(runDir); err == nil {
		runDir = abs // the marker names the run wherever the runner was started from
	}
	ss := &serveSession{runDir: runDir, opts: opts, failed: map[string][]rundir.Reason{}}
	// A resumed run keeps its earlier servers' directories: number on from the highest.
	ents, _ := os.ReadDir(filepath.Join(runDir, rundir.ServersDir))
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > ss.n {
			ss.n = n
		}
	}
	return ss
}

// serverOf is the cell's backend as a server; backendFor gives every serve cell one.
func serverOf(rec cellRecord) (backends.Server, error) {
	be, ok := rec.be.(backends.Server)
	if !ok {
		return nil, fmt.Errorf("backend %q of cell %s cannot run a server", rec.Cell.Backend.Kind, rec.Cell.ID)
	}
	return be, nil
}

// serverKey is the grouping key of a cell's server: the backend's, and for an nsys cell a
// server of its own.
func serverKey(be backends.Server, c plans.Cell) string {
	if c.Profiler == plans.ProfilerNsys {
		return be.ServerKey(c) + "|nsys|" + c.ID
	}
	if c.Backend.URL != "" {
		return "url|" + c.Backend.URL
	}
	return be.ServerKey(c)
}

// isServeCells reports whether the cells run in serve mode (a plan is all one mode).
func isServeCells(recs []cellRecord) bool {
	return len(recs) > 0 && recs[0].Cell.Backend.Mode == backends.ModeServe
}

// server is one running server process.
type server struct {
	// nsysSession names the interactive nsys session the server runs in ("" when none).
	nsysSession string
	key         string
	n           int
	dir         string
	rel         string
	port        int
	host        string // [backend] host
	url         string // [backend] url: a server the runner attached to (serve_attach.go)
	be          backends.Server
	proto       backends.Protocol
	launch      rundir.Launch
	cancel      context.CancelFunc
	done        chan struct{}
	pres        proc.Result
	watch       backends.ServerWatcher
	rec         rundir.ServerRecord
	logf        *os.File

	mu        sync.Mutex
	readyLine bool
	profDone  int
	changed   chan struct{} // closed and replaced on every event
}

func (s *server) event(f func()) {
	s.mu.Lock()
	f()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

func (s *server) snapshot() (ready bool, done int, ch chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readyLine, s.profDone, s.changed
}

// baseURL is where the runner reaches the server: [backend] host, except that an empty or
// wildcard host (the server listens everywhere) is reached on the loopback interface.
func (s *server) baseURL() string {
	if s.url != "" {
		return s.url
	}
	h := s.host
	if h == "" || h == "0.0.0.0" || h == "::" {
		h = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(h, strconv.Itoa(s.port))
}

func (s *server) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// tail is the server log's last lines, for reasons that quote them.
func (s *server) tail() []rundir.Evidence { return s.watch.Tail(s.watch.TailLines()) }

// close stops the server in use, if any.
func (ss *serveSession) close() {
	if ss.cur != nil {
		ss.stop(ss.cur)
		ss.cur = nil
	}
}

// cellFailer returns the function that records a non-ok verdict and its reasons on res: the
// first non-ok verdict stands, except that an interrupt overrides it.
func cellFailer(res *cellResult) func(string, ...rundir.Reason) *cellResult {
	return func(verdict string, rs ...rundir.Reason) *cellResult {
		if res.Verdict == "" || res.Verdict == plans.VerdictOK || verdict == plans.VerdictInterrupted {
			res.Verdict = verdict
		}
		res.Reasons = append(res.Reasons, rs...)
		return res
	}
}

// runCell runs one serve cell to its verdict.
func (ss *serveSession) runCell(ctx context.Context, rec cellRecord) *cellResult {
	c := rec.Cell
	opts := ss.opts
	res := &cellResult{CellResult: rundir.CellResult{ID: c.ID, Index: c.Index, Key: c.Key, Profiler: c.Profiler, Start: opts.Now().UTC()}}
	t0 := time.Now()
	defer func() {
		res.End = opts.Now().UTC()
		res.Timings.WallNS = time.Since(t0).Nanoseconds()
		res.Artifacts = collectArtifacts(rec.abs)
	}()
	fail := cellFailer(res)
	srv, verdict, rs := ss.serverFor(ctx, rec, res)
	if srv == nil {
		if verdict == "" {
			return res // the GPU guard refused the cell before a server started (its reasons are in res)
		}
		return fail(verdict, rs...)
	}
	srv.rec.Cells = append(srv.rec.Cells, c.ID)
	// Findings logged during an earlier cell of a shared server are that cell's.
	mark := srv.watch.Mark()
	sr := &rundir.ServeResult{Server: srv.rel, Port: srv.port, ServedModel: srv.rec.ServedModel}
	res.Serve = sr

	// The GPU idle check (runner/gpucheck.go) runs before the client phase's clock starts.
	// An attached server is not the runner's: its own processes would count as neighbours,
	// and its GPUs may be another host's, so attached cells are not checked.
	clientOK := c.Backend.URL != "" || gpuClient(ctx, rec, opts, res)
	// backend.timeout bounds the cell's client phase (the server's startup has ready_timeout).
	cctx, cancel := context.WithCancel(ctx)
	if d := c.Backend.Timeout.Duration; d > 0 {
		cctx, cancel = context.WithTimeout(ctx, d)
	}
	if clientOK {
		ss.client(cctx, rec, srv, res, sr)
	}
	timedOut := ctx.Err() == nil && cctx.Err() != nil
	cancel()
	if clientOK {
		gpuAfter(ctx, opts, res, true)
	}
	ss.judge(ctx, rec, srv, res, mark, timedOut)
	if rec.NSys != nil && ctx.Err() == nil {
		// The report is written when nsys ends: stop the cell's server, then export it.
		if ss.cur == srv {
			ss.close()
		}
		nsysStep(ctx, rec, res, opts)
	}
	if !opts.NoTriage && res.Verdict == plans.VerdictOK && (len(res.Found.Traces) > 0 || rec.NSys != nil) {
		triageCell(ctx, rec, res, opts)
	}
	return res
}

// serverFor returns the server rec's cell runs on: the one in use when its key matches and it
// is alive, else a new one (after the old one is stopped). Without a server it returns the
// cell's verdict and reasons: teardown problems of the previous server, the earlier failure of
// the same server, or why this one did not start; or no verdict when the GPU guard refused the
// cell before a server started (gpuBefore wrote its reasons into res).
func (ss *serveSession) serverFor(ctx context.Context, rec cellRecord, res *cellResult) (*server, string, []rundir.Reason) {
	c := rec.Cell
	if len(ss.pending) > 0 {
		rs := ss.pending
		ss.pending = nil
		return nil, plans.VerdictFailed, rs
	}
	be, err := serverOf(rec)
	if err != nil {
		return nil, plans.VerdictFailed, []rundir.Reason{{Code: "server-command", Message: err.Error()}}
	}
	key := serverKey(be, c)
	perCell := c.Backend.Restart == plans.RestartPerCell
	if ss.cur != nil && (ss.cur.key != key || perCell || ss.cur.exited()) {
		ss.close()
		if len(ss.pending) > 0 {
			rs := ss.pending
			ss.pending = nil
			return nil, plans.VerdictFailed, rs
		}
	}
	if rs, ok := ss.failed[key]; ok && !perCell {
		return nil, plans.VerdictFailed, rs
	}
	if ss.cur == nil && c.Backend.URL != "" {
		// An attached server is not the runner's: no GPU check before it (it holds the GPU).
		srv, verdict, rs := ss.attach(ctx, rec, be, key)
		if srv == nil {
			if verdict != plans.VerdictInterrupted {
				ss.failed[key] = rs
			}
			return nil, verdict, rs
		}
		ss.cur = srv
	}
	if ss.cur == nil && !gpuBefore(ctx, rec, ss.opts, res) {
		return nil, "", nil // a neighbour holds the GPU or the clocks float: no server is started
	}
	if ss.cur == nil {
		srv, verdict, rs := ss.start(ctx, rec, be, key)
		if srv == nil {
			if verdict != plans.VerdictInterrupted && !perCell {
				ss.failed[key] = rs
			}
			return nil, verdict, rs
		}
		ss.cur = srv
	}
	return ss.cur, "", nil
}

// judge turns how the client phase ended into the cell's verdict: interrupted, timed out
// (the server is restarted for the next cell), the server gone, and the backend's findings in
// the part of the server log that belongs to this cell (logged after mark).
func (ss *serveSession) judge(ctx context.Context, rec cellRecord, srv *server, res *cellResult, mark backends.Mark, timedOut bool) {
	c := rec.Cell
	fail := cellFailer(res)
	if ctx.Err() != nil {
		fail(plans.VerdictInterrupted, rundir.Reason{Code: "interrupted", Message: "stopped by the user; the server's process group was stopped; `runner run --resume` runs this cell again"})
	}
	if timedOut {
		res.Verdict = plans.VerdictTimeout
		res.Reasons = append([]rundir.Reason{{Code: "timeout", Message: fmt.Sprintf("the cell's requests were still running after backend.timeout = %s; the server (%s) is restarted for the next cell because it may still be busy with them; raise backend.timeout if the model is just slow", c.Backend.Timeout.Duration, srv.rel)}}, res.Reasons...)
		ss.close()
	}
	if ctx.Err() == nil && res.Serve.Load != nil && res.Serve.Load.Statuses["error"] > 0 {
		// Connection errors usually mean the server is going down; give its exit a moment to
		// be seen so the cell says why instead of only counting failed requests.
		select {
		case <-srv.done:
		case <-time.After(3 * time.Second):
		}
	}
	if srv.exited() && !timedOut && res.Verdict != plans.VerdictInterrupted {
		fail(plans.VerdictFailed, rundir.Reason{Code: "server-exited", Message: fmt.Sprintf("the server (%s) exited during the cell (exit %s); its last log lines follow; the next cell starts a new server", srv.rel, exitText(srv.pres)), Lines: srv.tail()})
	}
	a := srv.be.AssessCell(c, srv.watch, mark)
	res.Warnings = append(res.Warnings, a.Warnings...)
	if a.Verdict != plans.VerdictOK {
		fail(a.Verdict, a.Reasons...)
	}
	if res.Verdict == "" {
		res.Verdict = plans.VerdictOK
	}
}

func exitText(r proc.Result) string {
	if r.Signal != "" {
		return r.Signal
	}
	return strconv.Itoa(r.ExitCode)
}
