package runner

// The server's life: start (port, command, process group), readiness, served model, and the
// teardown checks. What the command line and readiness look like is the backend's.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/backends/sglang"
	"github.com/sglprof/runner/nsys"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/gpu"
	"github.com/sglprof/runner/runner/load"
	"github.com/sglprof/runner/runner/proc"
)

// serverCommand is the argv prefix of a server: the backend's program, or under --simulate
// the simulator of that kind (`runner sim <kind>`).
func (o *Options) serverCommand(be backends.Server, c plans.Cell) []string {
	if o.Simulate {
		return []string{o.Exe, "sim", be.Name()}
	}
	return be.Executable(c)
}

// start launches the server for rec's cell and waits until it is ready. On failure it returns
// nil, the verdict for the cell and the reasons (the server is stopped and recorded).
func (ss *serveSession) start(ctx context.Context, rec cellRecord, be backends.Server, key string) (*server, string, []rundir.Reason) {
	c := rec.Cell
	opts := ss.opts
	ss.n++
	rel := filepath.Join(rundir.ServersDir, strconv.Itoa(ss.n))
	dir, _ := filepath.Abs(filepath.Join(ss.runDir, rel))
	failed := func(code, msg string) (*server, string, []rundir.Reason) {
		return nil, plans.VerdictFailed, []rundir.Reason{{Code: code, Message: msg}}
	}
	site, err := ss.site(be, c, dir)
	if err != nil {
		return failed(err.code, err.msg)
	}
	if !opts.Simulate && be.Name() == sglang.Kind && sglang.NeedsLauncherProbe(c, site.Command) {
		site.Command = ss.llmLauncher(ctx, site.Command)
	}
	launch, lerr := be.ServerLaunch(c, site)
	if lerr != nil {
		return failed("server-command", lerr.Error())
	}
	session := ""
	if rec.NSys != nil {
		session = fmt.Sprintf("runner_%d_%d", os.Getpid(), ss.n)
		var sessionUsed bool
		launch.Argv, sessionUsed = wrapServerNSys(opts, be, c, session, filepath.Join(rec.abs, rec.NSys.Report), launch.Argv)
		if !sessionUsed {
			session = ""
		}
	}
	if opts.Simulate {
		launch.Env["RUNNER_SIM_JITTER_SEED"] = simJitterSeed(opts.Env, c.Repeat)
	}
	if err := opts.writeRedactedJSON(filepath.Join(dir, rundir.CommandFile), redactLaunch(launch)); err != nil {
		opts.Logger.Warn("server command.json", "err", err)
	}
	logf, ferr := os.Create(filepath.Join(dir, rundir.LogFile))
	if ferr != nil {
		return failed("log-create", fmt.Sprintf("cannot create the server log: %v; check free space", ferr))
	}
	proto := be.Protocol(c)
	srv := &server{key: key, n: ss.n, dir: dir, rel: rel, port: site.Port, host: c.Backend.Host, be: be, proto: proto,
		launch: launch, nsysSession: session, done: make(chan struct{}), watch: be.NewServerWatcher(c), logf: logf, changed: make(chan struct{})}
	shown := redactLaunch(launch)
	srv.rec = rundir.ServerRecord{N: ss.n, Kind: c.Backend.Kind, Argv: shown.Argv, Env: shown.Env, Dir: dir, Port: site.Port, ModelType: proto.ModelType, Start: opts.Now().UTC()}
	srv.rec.GPUMemBefore = gpuMemory(ctx, opts)
	ss.spawn(ctx, rec, srv)
	verdict, rs := ss.waitReady(ctx, c, srv)
	if rs != nil {
		srv.rec.Failure = rs[0].Code
		ss.stop(srv)
		return nil, verdict, rs
	}
	return srv, "", nil
}

// siteError is why a server could not be given a place to run: a reason code and message.
type siteError struct{ code, msg string }

// site prepares the server's directory and port: the plan's port, else a free one, refused
// when something holds it (named, and recognised when it is a server of ours).
func (ss *serveSession) site(be backends.Server, c plans.Cell, dir string) (backends.ServerSite, *siteError) {
	traces := filepath.Join(dir, backends.TracesDir)
	if err := os.MkdirAll(traces, 0o755); err != nil {
		return backends.ServerSite{}, &siteError{"server-dir", fmt.Sprintf("cannot create %s: %v; check the output directory", dir, err)}
	}
	port := c.Backend.Port
	if port == 0 {
		p, err := freePort()
		if err != nil {
			return backends.ServerSite{}, &siteError{"port", fmt.Sprintf("no free port on 127.0.0.1: %v", err)}
		}
		port = p
	}
	if err := portFree(port); err != nil {
		return backends.ServerSite{}, &siteError{"port-in-use", fmt.Sprintf("port %d is already in use: %s; stop that process, or set [backend] port to another port (or leave it out to let the runner pick a free one)", port, describePortOwner(port, ss.runDir))}
	}
	// The other ports the server checks at start (sglang serve --strict-ports: the
	// scheduler's, default 5555, and the torch.distributed master port) are chosen here too,
	// so that a port another process holds never kills the server before it loads.
	flags := be.PortFlags(c)
	spans, names := make([]int, len(flags)), make([]string, len(flags))
	for i, f := range flags {
		spans[i], names[i] = f.Span, f.Flag
	}
	ports, err := freePorts(spans, port)
	if err != nil {
		return backends.ServerSite{}, &siteError{"port", fmt.Sprintf("no free port on 127.0.0.1 for %s: %v", strings.Join(names, ", "), err)}
	}
	return backends.ServerSite{Command: ss.opts.serverCommand(be, c), Port: port, Ports: ports, Dir: dir, TraceDir: traces, Marker: ss.runDir + "#server-" + strconv.Itoa(ss.n)}, nil
}

// spawn starts the server's process group in the background; srv.done closes when it ends.
// Every log line goes to the backend's watcher, and the readiness and profile-done lines of
// the protocol become events that waitReady and the flush wait on.
func (ss *serveSession) spawn(ctx context.Context, rec cellRecord, srv *server) {
	c := rec.Cell
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
	ready, done := srv.proto.ReadyLine, srv.proto.ProfileDoneLine
	spec := proc.Spec{
		Argv: srv.launch.Argv, Env: srv.env(ss.opts), Dir: srv.launch.Dir, Log: srv.logf,
		OnLine: func(l proc.Line) {
			srv.watch.Line(l.No, l.Stream, l.Text)
			if ready != "" && strings.Contains(l.Text, ready) {
				srv.event(func() { srv.readyLine = true })
			}
			if done != "" && strings.Contains(l.Text, done) {
				srv.event(func() { srv.profDone++ })
			}
		},
		InterruptGrace: intGrace, TerminateGrace: grace, Record: filepath.Join(srv.dir, proc.RecordFile),
	}
	// No selectLines here: readiness failures quote the tail of a server that is still running,
	// and a selective watcher gets its tail only once the process has exited. A server logs per
	// request, far below the rate at which a per-line watcher costs anything.
	log := ss.opts.Logger.With("server", srv.rel)
	go func() {
		srv.pres = proc.Run(sctx, spec, log)
		close(srv.done)
		srv.event(func() {})
	}()
	log.Info("server starting", "port", srv.port, "argv", srv.launch.Argv)
}

// waitReady polls GET /health until 200 while the process lives, then waits for the readiness
// line (a short grace: a healthy /health is the stronger signal), then records the served model.
func (ss *serveSession) waitReady(ctx context.Context, c plans.Cell, srv *server) (string, []rundir.Reason) {
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
	for {
		if f, ev, ok := srv.watch.Fatal(); ok {
			return plans.VerdictFailed, []rundir.Reason{{Code: "server-" + f, Message: fmt.Sprintf("the server (%s) logged a fatal error before it was ready: %s; the last log lines follow", srv.rel, ev.Text), Lines: srv.tail()}}
		}
		if srv.exited() {
			tail := srv.tail()
			return plans.VerdictFailed, []rundir.Reason{{Code: "server-exited", Message: fmt.Sprintf("the server (%s) exited with %s before it was ready; the last %d log lines follow", srv.rel, exitText(srv.pres), len(tail)), Lines: tail}}
		}
		if healthySince.IsZero() && get(ctx, hc, base+"/health") == http.StatusOK {
			healthySince = time.Now()
		}
		line, _, _ := srv.snapshot()
		// An attached server's log is not the runner's: /health alone says it is ready.
		if !healthySince.IsZero() && (line || srv.url != "" || time.Since(healthySince) > 5*time.Second) {
			if !line && srv.url == "" {
				srv.rec.ReadinessNote = "GET /health answered 200 but the readiness line was not logged within 5s"
			}
			break
		}
		select {
		case <-ctx.Done():
			return plans.VerdictInterrupted, []rundir.Reason{{Code: "interrupted", Message: "stopped by the user while the server was starting"}}
		case <-deadline.C:
			if srv.url != "" {
				return plans.VerdictTimeout, []rundir.Reason{{Code: "server-not-ready", Message: fmt.Sprintf("the server at backend.url = %s was not ready after backend.ready_timeout = %s (GET /health never answered 200); check that it runs and is reachable from here, or raise ready_timeout", srv.url, timeout)}}
			}
			return plans.VerdictTimeout, []rundir.Reason{{Code: "server-not-ready", Message: fmt.Sprintf("the server (%s) was not ready after backend.ready_timeout = %s (GET /health never answered 200); its process group was stopped; raise ready_timeout if the model loads slowly; the last log lines follow", srv.rel, timeout), Lines: srv.tail()}}
		case <-srv.done:
		case <-tick.C:
		}
	}
	srv.rec.ReadyNS = time.Since(t0).Nanoseconds()
	srv.rec.PID = srv.pres.PID
	srv.rec.ServedModel = servedModel(ctx, hc, base, srv.proto.ModelInfoPath)
	ss.opts.Logger.Info("server ready", "server", srv.rel, "port", srv.port, "model", srv.rec.ServedModel, "after", time.Duration(srv.rec.ReadyNS))
	return "", nil
}

func get(ctx context.Context, hc *http.Client, url string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v)
}

// servedModel asks /v1/models, then the backend's model-info route, if it has one.
func servedModel(ctx context.Context, hc *http.Client, base, infoPath string) string {
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
	if infoPath != "" && getJSON(ctx, hc, base+infoPath, &info) == nil {
		return info.ModelPath
	}
	return ""
}

// stop tears a server down: the stop ladder on its group (SIGINT, grace, SIGTERM, grace,
// SIGKILL), then checks that no process of ours is left (group and marker), that the port is
// free, and what GPU memory is in use; problems are charged to the next cell.
func (ss *serveSession) stop(srv *server) {
	if srv.url != "" {
		ss.detach(srv)
		return
	}
	if srv.nsysSession != "" && !srv.exited() {
		// Ends the nsys session (nsys sends the server SIGTERM); the stop ladder below then
		// finds the process group ending, or finishes it.
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := nsys.Session(sctx, proc.Command, nsys.SessionShutdownArgv(ss.opts.nsysCommand(), srv.nsysSession), srv.env(ss.opts)); err != nil {
			ss.opts.Logger.Warn("nsys shutdown", "server", srv.rel, "err", err)
		}
		cancel()
	}
	srv.cancel()
	<-srv.done
	srv.logf.Close()
	r := &srv.rec
	r.End = ss.opts.Now().UTC()
	r.StoppedWith, r.ExitCode, r.Signal, r.Leftovers = srv.pres.StoppedWith, srv.pres.ExitCode, srv.pres.Signal, srv.pres.Leftovers
	if r.PID == 0 {
		r.PID = srv.pres.PID
	}
	problems := ss.leftovers(srv)
	if err := ss.opts.writeRedactedJSON(filepath.Join(srv.dir, rundir.ServerFile), r); err != nil {
		ss.opts.Logger.Warn("server.json", "err", err)
	}
	if len(problems) > 0 && r.Failure == "" {
		ss.pending = append(ss.pending, rundir.Reason{Code: "server-teardown", Message: fmt.Sprintf("the previous server (%s) did not go away cleanly: %s; this cell was not run so that it does not measure a GPU shared with leftovers; free the GPU and resume the run", srv.rel, strings.Join(problems, "; "))})
	}
	ss.opts.Logger.Info("server stopped", "server", srv.rel, "stopped_with", r.StoppedWith, "port_free", r.PortFree)
}

// leftovers kills the processes that carry the server's marker outside its group and checks
// what a stopped server must not leave behind: a live group, a bound port, GPU memory. It
// fills the record and returns the problems.
func (ss *serveSession) leftovers(srv *server) []string {
	r := &srv.rec
	var problems []string
	if srv.pres.PID > 0 && proc.GroupAlive(srv.pres.PID) {
		problems = append(problems, fmt.Sprintf("process group %d is still alive after the stop ladder", srv.pres.PID))
	}
	r.Strays = append(r.Strays, proc.KillMarked(backends.EnvServerMarker, srv.launch.Env[backends.EnvServerMarker])...)
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
	return problems
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

// freePorts chooses, for each span, that many consecutive free loopback ports and returns the
// first of each run; no port of one run is in another or equals avoid. The kernel hands out the
// first port of a run and the rest are bound to check them; every listener stays open until all
// are chosen, so no port is handed out twice. A run whose later ports are taken is tried again
// from another first port (sglang's diffusion server with --dp-size N binds
// scheduler_port + r for each replica r, and --strict-ports checks each).
func freePorts(spans []int, avoid int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	out := make([]int, 0, len(spans))
	for _, span := range spans {
		found := false
		for try := 0; try < 64 && !found; try++ {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return nil, err
			}
			lns = append(lns, ln)
			p := ln.Addr().(*net.TCPAddr).Port
			if p == avoid || p+max(span, 1)-1 > 65535 {
				continue
			}
			found = true
			for r := 1; r < span; r++ {
				if p+r == avoid {
					found = false
					break
				}
				rl, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+r)))
				if err != nil {
					found = false
					break
				}
				lns = append(lns, rl)
			}
			if found {
				out = append(out, p)
			}
		}
		if !found {
			return nil, fmt.Errorf("no run of %d consecutive free ports found in 64 tries", span)
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

// describePortOwner names the process listening on port and says whether it is a server of
// ours (its environment carries the server marker), and of which run.
func describePortOwner(port int, runDir string) string {
	pid, ok := proc.PortOwner(port)
	if !ok {
		return "its owner could not be found (another user's process, or /proc is not readable)"
	}
	msg := fmt.Sprintf("held by pid %d (%s)", pid, shortenArgs(proc.Cmdline(pid)))
	if m := proc.EnvOf(pid, backends.EnvServerMarker); m != "" {
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

// shortenArgs bounds a command line quoted in a message.
func shortenArgs(args string) string {
	if len(args) > 200 {
		return args[:200] + "..."
	}
	return args
}

// gpuMemory returns the memory in use per GPU (MiB, comma separated) from nvidia-smi, or
// "unavailable: <why>".
func gpuMemory(ctx context.Context, opts *Options) string {
	s := opts.guard().snapshot(ctx, nil)
	if len(s.GPUs) == 0 {
		if strings.HasPrefix(s.Error, "unavailable") {
			return s.Error
		}
		return "unavailable: " + s.Error
	}
	mem := make([]string, len(s.GPUs))
	for i, g := range s.GPUs {
		mem[i] = strconv.Itoa(g.MemUsedMiB)
	}
	return strings.Join(mem, ",")
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

// wrapServerNSys puts an nsys cell's server command under nsys, the one place that decides how
// (the run and `runner plan` both call it, so the plan shows what runs): inside an interactive
// nsys session named session when the backend's window is one (collection off until the cell's
// `nsys start`), else under `nsys profile` writing report. It reports whether the session is
// used.
func wrapServerNSys(opts *Options, be backends.Server, c plans.Cell, session, report string, argv []string) ([]string, bool) {
	if be.Window(c, "").Kind == backends.WindowNSysSession {
		return nsys.Launch(opts.nsysCommand(), c.NSys, session, argv), true
	}
	return nsys.WrapServer(opts.nsysCommand(), c.NSys, report, argv), false
}

// env is the environment the server runs with: the runner's, with the backend's on top. The
// nsys session commands of a server in an interactive session run with it too, since nsys
// finds a session through it (TMPDIR among others).
func (srv *server) env(opts *Options) []string {
	return mergeEnv(opts.Env, srv.launch.Env)
}

// llmLauncher is the command that starts an SGLang LLM server given the plan's `sglang`
// command: older SGLang has no `sglang serve --model-type`, so the installed one's help is
// asked once per command (sglang.LLMLauncher chooses) and the choice is logged.
func (ss *serveSession) llmLauncher(ctx context.Context, command []string) []string {
	key := strings.Join(command, "\x00")
	if argv, ok := ss.launchers[key]; ok {
		return argv
	}
	pr := runProbe(ctx, append(slices.Clone(command), sglang.ServeHelpArgs...), ss.opts.Env, ss.opts.ProbeTimeout)
	var perr error
	if !pr.Available {
		perr = errors.New(pr.Error)
	}
	argv, note := sglang.LLMLauncher(command, pr.Output, perr, gpu.Interpreter(command, ss.opts.Env))
	ss.opts.Logger.Info("LLM server launcher: "+note, "command", quoteArgv(argv))
	if ss.launchers == nil {
		ss.launchers = map[string][]string{}
	}
	ss.launchers[key] = argv
	return argv
}
