package runner

// Serve mode ([backend] mode = "serve", issue 5): a serve cell is a client phase against a
// server process the runner owns. Cells whose server arguments are equal (sglang.ServerKey:
// command, model, model type, extra args, env, port) share one server, started when the first
// of them runs and stopped when a cell needs a different server, when the server died, or at
// the end of the run; restart = "per-cell" gives every cell a fresh server.
//
// Layout: servers/<n>/log.txt (the server's output), servers/<n>/command.json,
// servers/<n>/server.json (port, served model, readiness time, how it stopped, whether the
// port came free and what GPU memory was in use before and after), servers/<n>/traces (the
// diffusion server's torch-profiler directory). Each cell keeps requests.jsonl, load.json and
// its traces/, and its result.json names its server.
//
// Trace attribution: every torch cell opens a /start_profile window around its measured
// requests with output_dir pointing straight at the cell's traces/ (LLM and diffusion servers
// alike; the diffusion images API takes no per-request profiling fields upstream, see
// docs/upstream.md), so traces never need to be moved or matched to requests.

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/backends/sglang"
	"github.com/sglprof/runner/backends/vllmomni"
	"github.com/sglprof/runner/nsys"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/rundir"
	"github.com/sglprof/runner/runner/load"
	"github.com/sglprof/runner/runner/proc"
)

// serveSession runs the serve cells of one execute call.
type serveSession struct {
	runDir  string
	opts    *Options
	cur     *server
	n       int
	failed  map[string][]backends.Reason // server key -> why its server failed (shared restart)
	pending []backends.Reason            // teardown problems charged to the next cell
}

func newServeSession(runDir string, opts *Options) *serveSession {
	if abs, err := filepath.Abs(runDir); err == nil {
		runDir = abs // the marker names the run wherever the runner was started from
	}
	ss := &serveSession{runDir: runDir, opts: opts, failed: map[string][]backends.Reason{}}
	// A resumed run keeps its earlier servers' directories: number on from the highest.
	ents, _ := os.ReadDir(filepath.Join(runDir, rundir.ServersDir))
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > ss.n {
			ss.n = n
		}
	}
	return ss
}

// serverKey is the grouping key of a cell's server.
func serverKey(c plans.Cell) string {
	if c.Backend.Kind == vllmomni.Kind {
		return vllmomni.ServerKey(c)
	}
	if c.Profiler == plans.ProfilerNsys {
		// nsys profiles a process from start to end: an nsys cell gets a server of its own,
		// stopped at the end of the cell so that its report is written.
		return sglang.ServerKey(c) + "|nsys|" + c.ID
	}
	return sglang.ServerKey(c)
}

// isServeCells reports whether the cells run in serve mode (a plan is all one mode).
func isServeCells(recs []cellRecord) bool {
	return len(recs) > 0 && recs[0].Cell.Backend.Mode == sglang.ModeServe
}

// server is one running server process.
type server struct {
	key    string
	n      int
	dir    string
	rel    string
	port   int
	llm    bool
	vllm   bool   // vLLM-Omni (backends/vllmomni) instead of sglang
	host   string // [backend] host
	launch backends.Launch
	cancel context.CancelFunc
	done   chan struct{}
	pres   proc.Result
	watch  *sglang.Watcher
	rec    rundir.ServerRecord
	logf   *os.File

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

// close stops the server in use, if any.
func (ss *serveSession) close() {
	if ss.cur != nil {
		ss.stop(ss.cur)
		ss.cur = nil
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
	fail := func(verdict string, rs ...backends.Reason) *cellResult {
		if res.Verdict == "" || res.Verdict == plans.VerdictOK || verdict == plans.VerdictInterrupted {
			res.Verdict = verdict
		}
		res.Reasons = append(res.Reasons, rs...)
		return res
	}
	if len(ss.pending) > 0 {
		rs := ss.pending
		ss.pending = nil
		return fail(plans.VerdictFailed, rs...)
	}
	key := serverKey(c)
	perCell := c.Backend.Restart == "per-cell"
	if ss.cur != nil && (ss.cur.key != key || perCell || ss.cur.exited()) {
		ss.close()
		if len(ss.pending) > 0 {
			rs := ss.pending
			ss.pending = nil
			return fail(plans.VerdictFailed, rs...)
		}
	}
	if rs, ok := ss.failed[key]; ok && !perCell {
		return fail(plans.VerdictFailed, rs...)
	}
	if ss.cur == nil {
		srv, verdict, rs := ss.start(ctx, rec)
		if srv == nil {
			if verdict != plans.VerdictInterrupted && !perCell {
				ss.failed[key] = rs
			}
			return fail(verdict, rs...)
		}
		ss.cur = srv
	}
	srv := ss.cur
	srv.rec.Cells = append(srv.rec.Cells, c.ID)
	// OOM and scheduler deaths logged during an earlier cell of a shared server are that
	// cell's; this cell fails for them only if they happen again while it runs.
	oomBefore, deadBefore := srv.watch.Count(sglang.FindingOOM), srv.watch.Count(sglang.FindingWorkerDead)
	sr := &rundir.ServeResult{Server: srv.rel, Port: srv.port, ServedModel: srv.rec.ServedModel}
	res.Serve = sr

	// backend.timeout bounds the cell's client phase (the server's startup has ready_timeout).
	cctx, cancel := context.WithCancel(ctx)
	if d := c.Backend.Timeout.Duration; d > 0 {
		cctx, cancel = context.WithTimeout(ctx, d)
	}
	ss.client(cctx, rec, srv, res, sr)
	timedOut := ctx.Err() == nil && cctx.Err() != nil
	cancel()

	if ctx.Err() != nil {
		fail(plans.VerdictInterrupted, backends.Reason{Code: "interrupted", Message: "stopped by the user; the server's process group was stopped; `runner run --resume` runs this cell again"})
	}
	if timedOut {
		res.Verdict = plans.VerdictTimeout
		res.Reasons = append([]backends.Reason{{Code: "timeout", Message: fmt.Sprintf("the cell's requests were still running after backend.timeout = %s; the server (%s) is restarted for the next cell because it may still be busy with them; raise backend.timeout if the model is just slow", c.Backend.Timeout.Duration, srv.rel)}}, res.Reasons...)
		ss.close()
	}
	if ctx.Err() == nil && sr.Load != nil && sr.Load.Statuses["error"] > 0 {
		// Connection errors usually mean the server is going down; give its exit a moment to
		// be seen so the cell says why instead of only counting failed requests.
		select {
		case <-srv.done:
		case <-time.After(3 * time.Second):
		}
	}
	if srv.exited() && !timedOut && res.Verdict != plans.VerdictInterrupted {
		fail(plans.VerdictFailed, backends.Reason{Code: "server-exited", Message: fmt.Sprintf("the server (%s) exited during the cell (exit %s); its last log lines follow; the next cell starts a new server", srv.rel, exitText(srv.pres)), Lines: srv.watch.Tail(sglang.TailLines)})
	}
	a := sglang.ServeBackend{}.Assess(c, rec.abs, srv.watch, backends.Exit{})
	res.Warnings = append(res.Warnings, a.Warnings...)
	for _, r := range a.Reasons {
		switch {
		case r.Code == string(sglang.FindingOOM) && srv.watch.Count(sglang.FindingOOM) == oomBefore:
		case r.Code == string(sglang.FindingWorkerDead) && srv.watch.Count(sglang.FindingWorkerDead) == deadBefore:
		case r.Code == string(sglang.FindingFallback):
			fail(plans.VerdictInvalid, r)
		default:
			fail(plans.VerdictFailed, r)
		}
	}
	if res.Verdict == "" {
		res.Verdict = plans.VerdictOK
	}
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

func exitText(r proc.Result) string {
	if r.Signal != "" {
		return r.Signal
	}
	return strconv.Itoa(r.ExitCode)
}

// start launches the server for rec's cell and waits until it is ready. On failure it returns
// nil, the verdict for the cell and the reasons (the server is stopped and recorded).
func (ss *serveSession) start(ctx context.Context, rec cellRecord) (*server, string, []backends.Reason) {
	c := rec.Cell
	opts := ss.opts
	ss.n++
	rel := filepath.Join(rundir.ServersDir, strconv.Itoa(ss.n))
	dir, _ := filepath.Abs(filepath.Join(ss.runDir, rel))
	failed := func(code, msg string) (*server, string, []backends.Reason) {
		return nil, plans.VerdictFailed, []backends.Reason{{Code: code, Message: msg}}
	}
	if err := os.MkdirAll(filepath.Join(dir, "traces"), 0o755); err != nil {
		return failed("server-dir", fmt.Sprintf("cannot create %s: %v; check the output directory", dir, err))
	}
	port := c.Backend.Port
	if port == 0 {
		p, err := freePort()
		if err != nil {
			return failed("port", fmt.Sprintf("no free port on 127.0.0.1: %v", err))
		}
		port = p
	}
	if err := portFree(port); err != nil {
		return failed("port-in-use", fmt.Sprintf("port %d is already in use: %s; stop that process, or set [backend] port to another port (or leave it out to let the runner pick a free one)", port, describePortOwner(port, ss.runDir)))
	}
	marker := ss.runDir + "#server-" + strconv.Itoa(ss.n)
	isVLLM := c.Backend.Kind == vllmomni.Kind
	var launch backends.Launch
	var err error
	if isVLLM {
		cmd := vllmomni.Command(c)
		if opts.Simulate {
			// The vLLM-Omni simulator is reached through the sglang simulator's entry.
			cmd = append(opts.sglangCommand(c), "vllm")
		}
		launch, err = vllmomni.ServerCommand(c, cmd, port, dir, filepath.Join(dir, "traces"), marker)
	} else {
		lc := c
		lc.Backend.Command = opts.sglangCommand(c)
		launch, err = sglang.ServerCommand(lc, port, dir, filepath.Join(dir, "traces"), marker)
		if err == nil {
			var ports []string
			ports, err = strictPortArgs(c, port)
			launch.Argv = append(launch.Argv, ports...)
		}
	}
	if err != nil {
		return failed("server-command", err.Error())
	}
	if rec.NSys != nil {
		launch.Argv = nsys.Wrap(opts.nsysCommand(), c.NSys, filepath.Join(rec.abs, rec.NSys.Report), launch.Argv)
	}
	if opts.Simulate {
		launch.Env["RUNNER_SIM_JITTER_SEED"] = simJitterSeed(opts.Env, c.Repeat)
	}
	if err := writeRedactedJSON(filepath.Join(dir, rundir.CommandFile), redactLaunch(launch)); err != nil {
		opts.Logger.Warn("server command.json", "err", err)
	}
	logf, err := os.Create(filepath.Join(dir, rundir.LogFile))
	if err != nil {
		return failed("log-create", fmt.Sprintf("cannot create the server log: %v; check free space", err))
	}
	srv := &server{key: serverKey(c), n: ss.n, dir: dir, rel: rel, port: port, llm: !isVLLM && sglang.ModelType(c) == sglang.ModelTypeLLM, vllm: isVLLM, host: c.Backend.Host,
		launch: launch, done: make(chan struct{}), watch: sglang.NewWatcher(), logf: logf, changed: make(chan struct{})}
	srv.rec = rundir.ServerRecord{N: ss.n, Kind: c.Backend.Kind, Argv: launch.Argv, Env: redactLaunch(launch).Env, Dir: dir, Port: port, ModelType: sglang.ModelType(c), Start: opts.Now().UTC()}
	srv.rec.GPUMemBefore = gpuMemory(ctx, opts)
	readyLine := sglang.ReadyLineDiffusion
	switch {
	case srv.llm:
		readyLine = sglang.ReadyLineLLM
	case srv.vllm:
		readyLine = vllmomni.ReadyLine
	}
	grace := c.Backend.Grace.Duration
	if grace <= 0 {
		grace = 10 * time.Second
	}
	intGrace := grace
	if rec.NSys != nil && intGrace < time.Minute {
		// nsys writes its report after SIGINT; a big capture takes a while to finalise.
		intGrace = time.Minute
	}
	sctx, cancel := context.WithCancel(ctx)
	srv.cancel = cancel
	spec := proc.Spec{
		Argv: launch.Argv, Env: mergeEnv(opts.Env, launch.Env), Dir: launch.Dir, Log: logf,
		OnLine: func(l proc.Line) {
			srv.watch.Line(l.No, l.Stream, l.Text)
			if strings.Contains(l.Text, readyLine) {
				srv.event(func() { srv.readyLine = true })
			}
			if strings.Contains(l.Text, sglang.ProfileDoneLine) {
				srv.event(func() { srv.profDone++ })
			}
		},
		InterruptGrace: intGrace, TerminateGrace: grace, Record: filepath.Join(dir, proc.RecordFile),
	}
	// No selectLines here: readiness failures quote the tail of a server that is still running,
	// and a selective watcher gets its tail only once the process has exited. A server logs per
	// request, far below the rate at which a per-line watcher costs anything.
	log := opts.Logger.With("server", rel)
	go func() {
		srv.pres = proc.Run(sctx, spec, log)
		close(srv.done)
		srv.event(func() {})
	}()
	log.Info("server starting", "port", port, "argv", launch.Argv)
	verdict, rs := ss.waitReady(ctx, c, srv)
	if rs != nil {
		srv.rec.Failure = rs[0].Code
		ss.stop(srv)
		return nil, verdict, rs
	}
	return srv, "", nil
}

// fatalFindings are server log findings that end a start at once.
var fatalFindings = []sglang.Finding{sglang.FindingUnrecognized, sglang.FindingOOM, sglang.FindingWorkerDead}

// waitReady polls GET /health until 200 while the process lives, then waits for the readiness
// line (a short grace: a healthy /health is the stronger signal), then records the served model.
func (ss *serveSession) waitReady(ctx context.Context, c plans.Cell, srv *server) (string, []backends.Reason) {
	timeout := c.Backend.ReadyTimeout.Duration
	if timeout <= 0 {
		timeout = 20 * time.Minute
	}
	t0 := time.Now()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	hc := &http.Client{Timeout: 2 * time.Second, Transport: load.NewTransport(1)}
	base := srv.baseURL()
	var healthySince time.Time
	tail := func() []backends.Evidence { return srv.watch.Tail(sglang.TailLines) }
	for {
		for _, f := range fatalFindings {
			if ev := srv.watch.Evidence(f); len(ev) > 0 {
				return plans.VerdictFailed, []backends.Reason{{Code: "server-" + string(f), Message: fmt.Sprintf("the server (%s) logged a fatal error before it was ready: %s; the last log lines follow", srv.rel, ev[0].Text), Lines: tail()}}
			}
		}
		if srv.exited() {
			// Let the log catch up so the reason shows the last lines.
			return plans.VerdictFailed, []backends.Reason{{Code: "server-exited", Message: fmt.Sprintf("the server (%s) exited with %s before it was ready; the last %d log lines follow", srv.rel, exitText(srv.pres), len(tail())), Lines: tail()}}
		}
		if healthySince.IsZero() && get(ctx, hc, base+"/health") == 200 {
			healthySince = time.Now()
		}
		line, _, _ := srv.snapshot()
		if !healthySince.IsZero() && (line || time.Since(healthySince) > 5*time.Second) {
			if !line {
				srv.rec.ReadinessNote = "GET /health answered 200 but the readiness line was not logged within 5s"
			}
			break
		}
		select {
		case <-ctx.Done():
			return plans.VerdictInterrupted, []backends.Reason{{Code: "interrupted", Message: "stopped by the user while the server was starting"}}
		case <-deadline.C:
			return plans.VerdictTimeout, []backends.Reason{{Code: "server-not-ready", Message: fmt.Sprintf("the server (%s) was not ready after backend.ready_timeout = %s (GET /health never answered 200); its process group was stopped; raise ready_timeout if the model loads slowly; the last log lines follow", srv.rel, timeout), Lines: tail()}}
		case <-srv.done:
		case <-tick.C:
		}
	}
	srv.rec.ReadyNS = time.Since(t0).Nanoseconds()
	srv.rec.PID = srv.pres.PID
	srv.rec.ServedModel = servedModel(ctx, hc, base, srv.llm)
	ss.opts.Logger.Info("server ready", "server", srv.rel, "port", srv.port, "model", srv.rec.ServedModel, "after", time.Duration(srv.rec.ReadyNS))
	return "", nil
}

func get(ctx context.Context, hc *http.Client, url string) int {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return 0
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp.StatusCode
}

func getJSON(ctx context.Context, hc *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v)
}

// servedModel asks /v1/models, then /v1/model_info (diffusion) or /get_model_info (LLM).
func servedModel(ctx context.Context, hc *http.Client, base string, llm bool) string {
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if getJSON(ctx, hc, base+"/v1/models", &list) == nil && len(list.Data) > 0 {
		return list.Data[0].ID
	}
	var info struct {
		ModelPath string `json:"model_path"`
	}
	path := "/v1/model_info"
	if llm {
		path = "/get_model_info"
	}
	if getJSON(ctx, hc, base+path, &info) == nil {
		return info.ModelPath
	}
	return ""
}

// stop tears a server down: the stop ladder on its group (SIGINT, grace, SIGTERM, grace,
// SIGKILL), then checks that no process of ours is left (group and marker), that the port is
// free, and what GPU memory is in use; problems are charged to the next cell.
func (ss *serveSession) stop(srv *server) {
	srv.cancel()
	<-srv.done
	srv.logf.Close()
	r := &srv.rec
	r.End = ss.opts.Now().UTC()
	r.StoppedWith, r.ExitCode, r.Signal, r.Leftovers = srv.pres.StoppedWith, srv.pres.ExitCode, srv.pres.Signal, srv.pres.Leftovers
	if r.PID == 0 {
		r.PID = srv.pres.PID
	}
	var problems []string
	if srv.pres.PID > 0 && proc.GroupAlive(srv.pres.PID) {
		problems = append(problems, fmt.Sprintf("process group %d is still alive after the stop ladder", srv.pres.PID))
	}
	marker := srv.launch.Env[sglang.EnvServerMarker]
	for _, pid := range pidsWithEnv(sglang.EnvServerMarker + "=" + marker) {
		r.Strays = append(r.Strays, pid)
		syscall.Kill(pid, syscall.SIGKILL)
	}
	if len(r.Strays) > 0 {
		problems = append(problems, fmt.Sprintf("processes %v of this server had left its process group and were killed", r.Strays))
	}
	for i := 0; ; i++ {
		if portFree(srv.port) == nil {
			r.PortFree = true
			break
		}
		if i == 50 {
			problems = append(problems, fmt.Sprintf("port %d is still in use after the server stopped: %s", srv.port, describePortOwner(srv.port, ss.runDir)))
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.GPUMemAfter = gpuMemory(context.Background(), ss.opts)
	if leak := memoryLeak(r.GPUMemBefore, r.GPUMemAfter); leak != "" {
		problems = append(problems, leak)
	}
	if err := rundir.WriteJSON(filepath.Join(srv.dir, rundir.ServerFile), r, nil); err != nil {
		ss.opts.Logger.Warn("server.json", "err", err)
	}
	if len(problems) > 0 && r.Failure == "" {
		ss.pending = append(ss.pending, backends.Reason{Code: "server-teardown", Message: fmt.Sprintf("the previous server (%s) did not go away cleanly: %s; this cell was not run so that it does not measure a GPU shared with leftovers; free the GPU and resume the run", srv.rel, strings.Join(problems, "; "))})
	}
	ss.opts.Logger.Info("server stopped", "server", srv.rel, "stopped_with", r.StoppedWith, "port_free", r.PortFree)
}

// freePort asks the kernel for a free port on the loopback interface.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	p := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return p, nil
}

// strictPortArgs chooses the ports besides --port that `sglang serve --strict-ports` checks at
// start (sglang.StrictPorts: the scheduler's, default 5555, and the torch.distributed master
// port) and returns them as flags, so that a port another process holds never kills the
// server before it loads.
func strictPortArgs(c plans.Cell, httpPort int) ([]string, error) {
	flags := sglang.StrictPorts(c)
	ports, err := freePorts(len(flags), httpPort)
	if err != nil {
		return nil, fmt.Errorf("no free port on 127.0.0.1 for %s: %w", strings.Join(flags, ", "), err)
	}
	return sglang.PortArgs(flags, ports)
}

// freePorts asks the kernel for n distinct free loopback ports, none equal to avoid; each
// listener stays open until all are chosen, so the kernel cannot hand out one twice.
func freePorts(n, avoid int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	out := make([]int, 0, n)
	for len(out) < n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		if p := ln.Addr().(*net.TCPAddr).Port; p != avoid {
			out = append(out, p)
		}
	}
	return out, nil
}

// portFree checks that 127.0.0.1:port can be bound now.
func portFree(port int) error {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return ln.Close()
}

// describePortOwner names the process listening on port from /proc/net/tcp{,6} and the
// socket links in /proc/<pid>/fd, and says whether it is a server of ours (its environment
// carries EnvServerMarker), and of which run.
func describePortOwner(port int, runDir string) string {
	pid, ok := portOwner(port)
	if !ok {
		return "its owner could not be found (another user's process, or /proc is not readable)"
	}
	cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	args := strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))
	if len(args) > 200 {
		args = args[:200] + "..."
	}
	msg := fmt.Sprintf("held by pid %d (%s)", pid, args)
	if m := envOf(pid, sglang.EnvServerMarker); m != "" {
		run, _, _ := strings.Cut(m, "#")
		if run == runDir {
			msg += "; it is a server of this run"
		} else {
			// The server may be a child of its process group's leader (a wrapper, the supervisor):
			// the hint names the group, which kill -TERM -<pgid> stops as a whole.
			hint := fmt.Sprintf("kill -TERM %d", pid)
			if st, ok := proc.ReadStat(pid); ok && st.PGRP > 0 {
				hint = fmt.Sprintf("kill -TERM -%d", st.PGRP)
			}
			msg += fmt.Sprintf("; it is a server the runner started for an earlier run (%s) that did not stop it (a crashed or killed runner): kill it with `%s`", run, hint)
		}
	}
	return msg
}

var procPID = regexp.MustCompile(`^[0-9]+$`)

// portOwner finds the pid listening on port.
func portOwner(port int) (int, bool) {
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, ino := range listenInodes(b, port) {
			inodes["socket:["+ino+"]"] = true
		}
	}
	if len(inodes) == 0 {
		return 0, false
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if !procPID.MatchString(e.Name()) {
			continue
		}
		fds, err := os.ReadDir("/proc/" + e.Name() + "/fd")
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink("/proc/" + e.Name() + "/fd/" + fd.Name()); err == nil && inodes[l] {
				pid, _ := strconv.Atoi(e.Name())
				return pid, true
			}
		}
	}
	return 0, false
}

// listenInodes parses /proc/net/tcp or tcp6 and returns the socket inodes listening on port
// (state 0A). Lines that do not parse are skipped.
func listenInodes(b []byte, port int) []string {
	var out []string
	lines := strings.Split(string(b), "\n")
	if len(lines) > 0 {
		lines = lines[1:] // the header
	}
	for _, line := range lines {
		fs := strings.Fields(line)
		if len(fs) < 10 || fs[3] != "0A" {
			continue
		}
		i := strings.LastIndexByte(fs[1], ':')
		if i < 0 {
			continue
		}
		if p, err := strconv.ParseUint(fs[1][i+1:], 16, 16); err == nil && int(p) == port && fs[9] != "0" {
			out = append(out, fs[9])
		}
	}
	return out
}

// envOf returns the value of key in /proc/<pid>/environ ("" when absent or unreadable).
func envOf(pid int, key string) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return ""
	}
	for kv := range bytes.SplitSeq(b, []byte{0}) {
		if k, v, ok := bytes.Cut(kv, []byte("=")); ok && string(k) == key {
			return string(v)
		}
	}
	return ""
}

// pidsWithEnv lists the processes whose environment contains the exact entry kv.
func pidsWithEnv(kv string) []int {
	var out []int
	self := os.Getpid()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if !procPID.MatchString(e.Name()) {
			continue
		}
		pid, _ := strconv.Atoi(e.Name())
		if pid == self {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		if envOf(pid, k) == v {
			out = append(out, pid)
		}
	}
	return out
}

// gpuMemory returns the memory in use per GPU (MiB, comma separated) from nvidia-smi, or
// "unavailable: <why>".
func gpuMemory(ctx context.Context, opts *Options) string {
	if opts.Simulate {
		return "unavailable: simulated run"
	}
	smi, err := lookPath("nvidia-smi", opts.Env)
	if err != nil {
		return "unavailable: nvidia-smi not found"
	}
	ctx, cancel := context.WithTimeout(ctx, opts.ProbeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, smi, "--query-gpu=memory.used", "--format=csv,noheader,nounits")
	cmd.Env = opts.Env
	out, err := cmd.Output()
	if err != nil {
		return "unavailable: nvidia-smi failed: " + err.Error()
	}
	return strings.Join(strings.Fields(strings.ReplaceAll(string(out), ",", " ")), ",")
}

// memoryLeak compares before/after readings: more than 1 GiB more in use on any GPU after
// the server stopped means leftover processes hold memory.
func memoryLeak(before, after string) string {
	if strings.HasPrefix(before, "unavailable") || strings.HasPrefix(after, "unavailable") {
		return ""
	}
	b, a := strings.Split(before, ","), strings.Split(after, ",")
	for i := range min(len(a), len(b)) {
		x, e1 := strconv.Atoi(b[i])
		y, e2 := strconv.Atoi(a[i])
		if e1 == nil && e2 == nil && y-x > 1024 {
			return fmt.Sprintf("GPU %d has %d MiB in use after the server stopped, %d MiB before it started (leaked scheduler processes?)", i, y, x)
		}
	}
	return ""
}

// client runs the cell's client phase: warmup, profiling window, measured requests, flush,
// trace checks. It fills res and sr.
func (ss *serveSession) client(ctx context.Context, rec cellRecord, srv *server, res *cellResult, sr *rundir.ServeResult) {
	c := rec.Cell
	opts := ss.opts
	spec := loadSpec(c, srv.llm)
	sr.API = spec.API
	base := srv.baseURL()
	ls := c.Load
	warm, n, conc := max(ls.Warmup, 0), ls.Requests, max(ls.Concurrency, 1)
	if n <= 0 {
		n = 5
	}
	reqTimeout := ls.RequestTimeout.Duration
	torch := c.Profiler == plans.ProfilerTorch
	// A diffusion server is profiled by its /start_profile window, not by per-request fields:
	// upstream's ImageGenerationsRequest has none and its image handler forwards none.
	diffusionWindow := torch && !srv.llm && !srv.vllm
	perfDir := filepath.Join(rec.abs, "perf")
	if !srv.llm && !srv.vllm {
		// sglang's diffusion requests take perf_dump_path: one dump per measured request
		// gives the cell the stage and denoise-step timings that generate cells have.
		if err := os.MkdirAll(perfDir, 0o755); err == nil {
			spec.PerfDumpDir = perfDir
		}
	}
	reqf, err := os.Create(filepath.Join(rec.abs, rundir.RequestsFile))
	if err != nil {
		res.Verdict = plans.VerdictFailed
		res.Reasons = append(res.Reasons, backends.Reason{Code: "requests-file", Message: err.Error()})
		return
	}
	defer reqf.Close()
	srvTraces := filepath.Join(srv.dir, "traces")
	cellTraces := filepath.Join(rec.abs, sglang.TracesDir)
	fail := func(code, msg string, lines ...backends.Evidence) {
		if res.Verdict == "" || res.Verdict == plans.VerdictOK {
			res.Verdict = plans.VerdictFailed
		}
		res.Reasons = append(res.Reasons, backends.Reason{Code: code, Message: msg, Lines: lines})
	}
	cfg := load.Config{BaseURL: base, Warmup: warm, Requests: n, Concurrency: conc, Timeout: reqTimeout, Records: reqf,
		Build: func(int, bool) (load.Request, error) { return load.Request{}, nil }}
	// Warmup first, unprofiled, then the window opens, then the measured requests.
	if warm > 0 {
		wcfg := cfg
		wcfg.Requests = 0
		wcfg.Build = func(i int, _ bool) (load.Request, error) { return load.Build(spec, false) }
		if _, _, err := load.Run(ctx, wcfg); err != nil && ctx.Err() == nil {
			fail("load", err.Error())
			return
		}
	}
	if ctx.Err() != nil {
		return
	}
	var window *rundir.ProfileWindow
	sessionsBefore := vllmomni.SessionNames(srvTraces)
	if torch && srv.vllm {
		window = &rundir.ProfileWindow{Kind: "start-stop", Request: map[string]any{"profile_prefix": c.ID}}
		sr.Profile = window
		code, body := post(ctx, base+"/start_profile", window.Request, time.Minute)
		if code != 200 {
			fail("start-profile", fmt.Sprintf("POST /start_profile answered %d: %s; vLLM registers it only when --profiler-config sets a profiler", code, body))
			return
		}
	}
	if torch && srv.llm {
		window = &rundir.ProfileWindow{Kind: "start-stop", Request: startProfileBody(c, cellTraces)}
		sr.Profile = window
		code, body := post(ctx, base+"/start_profile", window.Request, time.Minute)
		if code != 200 {
			fail("start-profile", fmt.Sprintf("POST /start_profile answered %d: %s", code, body))
			return
		}
	}
	if diffusionWindow {
		window = &rundir.ProfileWindow{Kind: "start-stop", Request: map[string]any{"output_dir": cellTraces, "activities": []string{"CPU", "GPU"}}}
		sr.Profile = window
		code, body := post(ctx, base+"/start_profile", window.Request, time.Minute)
		if code != 200 {
			fail("start-profile", fmt.Sprintf("POST /start_profile answered %d: %s", code, strings.TrimSpace(body)))
			return
		}
	}
	_, doneBefore, _ := srv.snapshot()
	cfg.Warmup = 0
	cfg.Build = func(i int, measured bool) (load.Request, error) { return load.BuildIndexed(spec, i, measured) }
	sum, _, lerr := load.Run(ctx, cfg)
	if lerr != nil && ctx.Err() == nil {
		fail("load", lerr.Error())
	}
	sr.Load = &sum
	var simE2E int64
	if spec.PerfDumpDir != "" {
		simE2E = perfTimings(spec.PerfDumpDir, res)
	}
	// The serve cell's end-to-end time is what clients see: the mean request latency. Under
	// --simulate that latency is real time of a simulator sleeping a scaled-down fraction of
	// the simulated time, while the stage and step times come from the simulated clock; the
	// mean simulated request time keeps the row's timings on one clock.
	res.Timings.E2ENS = sum.MeanNS
	if opts.Simulate && simE2E > 0 {
		res.Timings.E2ENS = simE2E
	}
	res.Timings.PeakMemoryMB = max(res.Timings.PeakMemoryMB, sum.MaxPeakMemoryMB)
	if err := rundir.WriteJSON(filepath.Join(rec.abs, rundir.LoadFile), sum, nil); err != nil {
		opts.Logger.Warn("load.json", "err", err)
	}
	if ctx.Err() == nil && sum.Count > 0 && sum.ErrorRate > ls.MaxErrorRate {
		fail("error-rate", fmt.Sprintf("%d of %d requests failed (%.0f%%), more than [load] max_error_rate = %g; see %s%s", sum.Errors, sum.Count, 100*sum.ErrorRate, ls.MaxErrorRate, rundir.RequestsFile, firstError(rec.abs)))
	}
	if window != nil && ctx.Err() == nil && !srv.exited() {
		switch {
		case srv.vllm:
			ss.flushVLLM(ctx, c, srv, window, sessionsBefore, cellTraces, res, fail)
		case srv.llm:
			ss.flush(ctx, c, srv, window, doneBefore, fail)
		default:
			ss.flushDiffusion(ctx, c, srv, window, fail)
		}
	}
	if ctx.Err() != nil {
		return
	}
	if torch && srv.vllm {
		return // flushVLLM checked and attributed the traces
	}
	if torch && window != nil {
		traces, problems := checkServeTraces(cellTraces, sglang.TraceRanks(c, sglang.WindowStartStop))
		for _, t := range traces {
			res.Found.Traces = append(res.Found.Traces, filepath.Join(cellTraces, t))
			window.Traces = append(window.Traces, filepath.Join(sglang.TracesDir, t))
		}
		for _, p := range problems {
			fail("trace-check", p)
		}
	}
}

// StatusReporter is implemented by a Progress that can show a transient status line for the
// current cell; serve mode uses it to keep saying that it waits for a profiler flush (which
// can take minutes). Progress implementations without it get the same text in the log only.
type StatusReporter interface {
	Status(c plans.Cell, msg string)
}

// status reports msg for cell c on the logger and, when it can, on the progress display.
func (ss *serveSession) status(c plans.Cell, msg string, args ...any) {
	ss.opts.Logger.Info(msg, append([]any{"cell", c.ID}, args...)...)
	if sr, ok := ss.opts.Progress.(StatusReporter); ok {
		line := msg
		for i := 0; i+1 < len(args); i += 2 {
			line += fmt.Sprintf(" %v=%v", args[i], args[i+1])
		}
		sr.Status(c, line)
	}
}

// flush closes the LLM profiling window: POST /stop_profile with flush_timeout as the client
// timeout, reporting the wait; a window that auto-stopped after num_steps answers 500 ("not in
// progress") and is waited for through the scheduler's "Profiling done." line instead.
func (ss *serveSession) flush(ctx context.Context, c plans.Cell, srv *server, window *rundir.ProfileWindow, doneBefore int, fail func(string, string, ...backends.Evidence)) {
	ft := c.Profile.FlushTimeout.Duration
	if ft <= 0 {
		ft = 10 * time.Minute
	}
	t0 := time.Now()
	stopReport := make(chan struct{})
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		ss.status(c, "waiting for the profiler flush (POST /stop_profile)", "flush_timeout", ft)
		for {
			select {
			case <-stopReport:
				return
			case <-t.C:
				ss.status(c, "still waiting for the profiler flush", "waited", time.Since(t0).Round(time.Second), "flush_timeout", ft)
			}
		}
	}()
	defer close(stopReport)
	code, body := post(ctx, srv.baseURL()+"/stop_profile", map[string]any{}, ft)
	if code != 200 && ctx.Err() == nil {
		deadline := time.NewTimer(ft - time.Since(t0))
		defer deadline.Stop()
		for {
			_, done, ch := srv.snapshot()
			if done > doneBefore {
				break
			}
			if srv.exited() {
				fail("profile-flush", fmt.Sprintf("the server exited while flushing the profile (POST /stop_profile answered %d: %s)", code, body))
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-deadline.C:
				fail("profile-flush", fmt.Sprintf("POST /stop_profile answered %d (%s) and the server did not log %q within [profile] flush_timeout = %s; raise flush_timeout (big traces take minutes) or profile fewer steps", code, strings.TrimSpace(body), sglang.ProfileDoneLine, ft))
				return
			case <-ch:
			}
		}
	}
	window.FlushNS = time.Since(t0).Nanoseconds()
}

// flushDiffusion closes a diffusion server's window: POST /stop_profile, which answers once
// every rank has exported its trace into the window's output_dir (the cell's traces).
func (ss *serveSession) flushDiffusion(ctx context.Context, c plans.Cell, srv *server, window *rundir.ProfileWindow, fail func(string, string, ...backends.Evidence)) {
	ft := c.Profile.FlushTimeout.Duration
	if ft <= 0 {
		ft = 10 * time.Minute
	}
	ss.status(c, "waiting for the profiler flush (POST /stop_profile)", "flush_timeout", ft)
	t0 := time.Now()
	code, body := post(ctx, srv.baseURL()+"/stop_profile", map[string]any{}, ft)
	window.FlushNS = time.Since(t0).Nanoseconds()
	if code != 200 && ctx.Err() == nil {
		fail("profile-flush", fmt.Sprintf("POST /stop_profile answered %d (%s) within [profile] flush_timeout = %s; raise flush_timeout (big traces take minutes) or send fewer requests", code, strings.TrimSpace(body), ft))
	}
}

// flushVLLM closes a vLLM-Omni window: POST /stop_profile (which returns once the traces are
// exported), then waits, within flush_timeout, until the background gzip of every new
// session's trace_rank<r>.json has finished, and moves the sessions into the cell's traces/.
func (ss *serveSession) flushVLLM(ctx context.Context, c plans.Cell, srv *server, window *rundir.ProfileWindow, before map[string]bool, cellTraces string, res *cellResult, fail func(string, string, ...backends.Evidence)) {
	ft := c.Profile.FlushTimeout.Duration
	if ft <= 0 {
		ft = 10 * time.Minute
	}
	t0 := time.Now()
	ss.status(c, "waiting for the profiler flush (POST /stop_profile, then the trace gzip)", "flush_timeout", ft)
	code, body := post(ctx, srv.baseURL()+"/stop_profile", map[string]any{}, ft)
	if ctx.Err() != nil {
		return
	}
	if code != 200 {
		fail("profile-flush", fmt.Sprintf("POST /stop_profile answered %d: %s", code, strings.TrimSpace(body)))
		return
	}
	wctx, cancel := context.WithTimeout(ctx, max(ft-time.Since(t0), time.Second))
	defer cancel()
	sessions, err := vllmomni.WaitSessions(wctx, filepath.Join(srv.dir, "traces"), before, 50*time.Millisecond)
	window.FlushNS = time.Since(t0).Nanoseconds()
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		fail("profile-flush", fmt.Sprintf("%v; raise [profile] flush_timeout (big traces take minutes to export and compress)", err))
		return
	}
	for _, s := range sessions {
		name := filepath.Base(s.Dir)
		dst := filepath.Join(cellTraces, name)
		if err := os.Rename(s.Dir, dst); err != nil {
			fail("trace-move", err.Error())
			continue
		}
		for _, t := range s.Traces {
			p := filepath.Join(dst, filepath.Base(t))
			res.Found.Traces = append(res.Found.Traces, p)
			window.Traces = append(window.Traces, filepath.Join(sglang.TracesDir, name, filepath.Base(t)))
			if err := sglang.CheckTrace(p); err != nil {
				fail("trace-check", fmt.Sprintf("%s: %v", filepath.Base(t), err))
			} else if !hasKernel(p) {
				fail("trace-check", fmt.Sprintf("%s/%s has no kernel events (the window captured no GPU work)", name, filepath.Base(t)))
			}
		}
	}
}

// perfTimings fills a cell's timings from its per-request perf dumps: stages and denoise
// steps of the first, the mean denoise step over all of them. It returns the mean total
// request time the dumps record (0 without dumps).
func perfTimings(dir string, res *cellResult) int64 {
	paths, _ := filepath.Glob(filepath.Join(dir, "request-*.json"))
	var sum, n, total, nt int64
	for i, p := range paths {
		d, err := perf.ReadDumpFile(p)
		if err != nil {
			res.Warnings = append(res.Warnings, backends.Reason{Code: "perf-dump-unreadable", Message: err.Error()})
			continue
		}
		if i == 0 {
			fillTimings(&res.Timings, d)
			res.Found.PerfDump = p
		}
		if m := d.MeanDenoiseStep().Nanoseconds(); m > 0 {
			sum += m
			n++
		}
		if t := d.Total.Nanoseconds(); t > 0 {
			total += t
			nt++
		}
	}
	if n > 0 {
		res.Timings.MeanDenoiseStepNS = sum / n
	}
	if nt == 0 {
		return 0
	}
	return total / nt
}

// startProfileBody is the ProfileReqInput of a cell (§B.1).
func startProfileBody(c plans.Cell, traces string) map[string]any {
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

// post sends a JSON POST and returns the status (0 on a transport error) and the body.
func post(ctx context.Context, url string, body any, timeout time.Duration) (int, string) {
	b, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(b))
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: load.NewTransport(1)}).Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, load.MaxErrorBody))
	return resp.StatusCode, string(rb)
}

// loadSpec builds the request description of a cell.
func loadSpec(c plans.Cell, llm bool) load.Spec {
	api := c.Load.API
	if api == "" {
		api = load.APIImages
		if llm {
			api = load.APIGenerate
		}
	}
	w, h := c.Resolution.Width, c.Resolution.Height
	return load.Spec{API: api, Model: c.Model, Prompt: c.Prompt, Width: w, Height: h, Steps: c.Steps, Seed: c.Seed,
		InputLen: c.InputLen, OutputLen: c.OutputLen}
}

func firstError(cellDir string) string {
	b, err := os.ReadFile(filepath.Join(cellDir, rundir.RequestsFile))
	if err != nil {
		return ""
	}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		var r load.Record
		if json.Unmarshal(line, &r) == nil && !r.Warmup && !r.OK() {
			msg := r.Error
			if r.Body != "" {
				msg += ": " + strings.TrimSpace(r.Body)
			}
			return "; first error: " + shorten(msg, 300)
		}
	}
	return ""
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
)

// checkServeTraces checks the traces of a cell before triage: at least one, each a complete
// gzip stream with at least one kernel event, and traces from the expected number of ranks.
func checkServeTraces(dir string, ranks int) ([]string, []string) {
	names := listTraceFiles(dir)
	var problems []string
	if len(names) == 0 {
		return nil, []string{fmt.Sprintf("the profiler wrote no *.trace.json.gz into %s; check the server log for the profiler's lines", dir)}
	}
	seen := map[string]bool{}
	for _, n := range names {
		p := filepath.Join(dir, n)
		if err := sglang.CheckTrace(p); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", n, err))
			continue
		}
		if !hasKernel(p) {
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

// hasKernel streams the decompressed trace looking for a kernel event.
func hasKernel(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return false
	}
	needles := [][]byte{[]byte(`"cat": "kernel"`), []byte(`"cat":"kernel"`)}
	buf := make([]byte, 1<<20)
	var carry []byte
	for {
		n, err := zr.Read(buf)
		chunk := append(carry, buf[:n]...)
		for _, nd := range needles {
			if bytes.Contains(chunk, nd) {
				return true
			}
		}
		if len(chunk) > 32 {
			carry = append(carry[:0], chunk[len(chunk)-32:]...)
		}
		if err != nil {
			return false
		}
	}
}
