package runner

// The client phase of a serve cell: warmup, the profiling window, the measured requests, the
// flush and the traces. What opens and closes the window and where the traces land is the
// backend's (backends.Window, AwaitTraces, CollectTraces); the calls, timers and status lines
// are here.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/backends/simclock"
	"github.com/sglprof/runner/nsys"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/plans/infile"
	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/load"
	"github.com/sglprof/runner/runner/proc"
)

// client runs the cell's client phase: warmup, profiling window, measured requests, flush,
// trace checks. It fills res and sr.
func (ss *serveSession) client(ctx context.Context, rec cellRecord, srv *server, res *cellResult, sr *rundir.ServeResult) {
	c := rec.Cell
	cellTraces := filepath.Join(rec.abs, backends.TracesDir)
	win := srv.be.Window(c, cellTraces)
	spec := loadSpec(c, srv.proto.API)
	if srv.proto.PerfDumps {
		// One perf dump per measured request gives the cell the stage and denoise-step
		// timings that generate cells have.
		perfDir := filepath.Join(rec.abs, "perf")
		if err := os.MkdirAll(perfDir, 0o755); err == nil {
			spec.PerfDumpDir = perfDir
		}
	}
	sr.API = spec.API
	fail := func(code, msg string, lines ...rundir.Evidence) {
		cellFailer(res)(plans.VerdictFailed, rundir.Reason{Code: code, Message: msg, Lines: lines})
	}
	reqf, err := os.Create(filepath.Join(rec.abs, rundir.RequestsFile))
	if err != nil {
		fail("requests-file", err.Error())
		return
	}
	defer reqf.Close()
	ls := c.Load
	n := ls.Requests
	if n <= 0 {
		n = 5
	}
	cfg := load.Config{BaseURL: srv.baseURL(), Warmup: max(ls.Warmup, 0), Requests: n, Concurrency: max(ls.Concurrency, 1), Timeout: ls.RequestTimeout.Duration, Records: reqf,
		Build: func(int, bool) (load.Request, error) { return load.Request{}, nil }}
	srvTraces := filepath.Join(srv.dir, backends.TracesDir)
	dirs := backends.TraceDirs{Server: srvTraces, Cell: cellTraces, Before: entryNames(srvTraces)}
	// Warmup first, unprofiled, then the window opens, then the measured requests.
	if cfg.Warmup > 0 {
		// An LLM cell's warmup is streamed as its measured requests are, and not recorded.
		wcfg := cfg
		wcfg.Build = func(i int, _ bool) (load.Request, error) { return load.Build(spec, false) }
		var err error
		if isLLMAPI(spec.API) {
			wcfg, _, _, err = llmConfig(cfg.BaseURL, c)
		}
		if err == nil {
			err = load.Warmup(ctx, wcfg)
		}
		if err != nil && ctx.Err() == nil {
			fail("load", err.Error())
			return
		}
	}
	var reset cacheReset
	if isLLMAPI(spec.API) && ctx.Err() == nil {
		// After the warmup and before the window, as bench_serving --flush-cache does: the
		// measured requests find none of the earlier cells' prompts (llmcache.go).
		reset.again = ss.cacheResetter(c, srv, res)
		reset.first = reset.again(ctx)
	}
	if win.Kind == backends.WindowNSysSession {
		ss.nsysWindow(ctx, rec, srv, cfg, spec, res, sr, reset, fail)
		return
	}
	if ctx.Err() != nil || !ss.open(ctx, srv, win, sr, fail) {
		return
	}
	_, doneBefore, _ := srv.snapshot()
	cfg.Warmup = 0
	cfg.Build = func(i int, measured bool) (load.Request, error) { return load.BuildIndexed(spec, i, measured) }
	ss.measure(ctx, rec, cfg, spec, res, sr, reset)
	flushed := true
	if win.Kind != "" && ctx.Err() == nil && !srv.exited() {
		flushed = ss.flush(ctx, c, srv, win, sr.Profile, dirs, doneBefore, fail)
	}
	if ctx.Err() != nil || win.Kind == "" || !flushed {
		return
	}
	collect(rec, srv, dirs, res, sr)
}

// open opens the cell's window (POST /start_profile with the backend's body) and records it
// in sr; a cell without a window needs no call. It reports whether the client phase can go on.
func (ss *serveSession) open(ctx context.Context, srv *server, win backends.Window, sr *rundir.ServeResult, fail func(string, string, ...rundir.Evidence)) bool {
	if win.Kind == "" {
		return true
	}
	sr.Profile = &rundir.ProfileWindow{Kind: win.Kind, Request: win.Start}
	code, body := post(ctx, srv.baseURL()+"/start_profile", win.Start, time.Minute)
	if code != http.StatusOK {
		msg := fmt.Sprintf("POST /start_profile answered %d: %s", code, body)
		if win.StartHint != "" {
			msg += "; " + win.StartHint
		}
		fail("start-profile", msg)
		return false
	}
	return true
}

// measure runs the measured requests and records their summary: load.json, the cell's
// timings, and a failure when more requests failed than [load] max_error_rate allows.
//
// reset is an LLM cell's prefix-cache reset: the outcome of the one before the measured
// requests, and how to reset again before each further SLA probe.
func (ss *serveSession) measure(ctx context.Context, rec cellRecord, cfg load.Config, spec load.Spec, res *cellResult, sr *rundir.ServeResult, reset cacheReset) {
	fail := cellFailer(res)
	var sum rundir.LoadSummary
	var lerr error
	if isLLMAPI(spec.API) {
		var clock load.Clock = load.RealClock{}
		if ss.opts.Simulate && ss.cur != nil && ss.cur.url == "" {
			// The simulated LLM server reports its times (load.SimClock), and runs at its
			// environment's RUNNER_SIM_TIME_SCALE. An attached server (backend.url) is whatever
			// runs there, not the simulator: its times are the client's own.
			clock = load.SimClock{Scale: simclock.TimeScale(ss.cur.env(ss.opts))}
		}
		clients := procClients(ss.opts.Exe, ss.opts.Env, ss.opts.Logger)
		if rec.Cell.Load.Search != nil {
			sum, sr.LLM, lerr = searchLLM(ctx, cfg.BaseURL, rec.Cell, rec.abs, cfg.Records, clock, clients, ss.opts.Logger, reset)
		} else {
			sum, sr.LLM, lerr = measureLLM(ctx, cfg.BaseURL, rec.Cell, rec.abs, cfg.Records, clock, clients)
			if sr.LLM != nil {
				sr.LLM.CacheReset = reset.first
			}
		}
	} else {
		var recs []load.Record
		var wall time.Duration
		recs, wall, lerr = load.Run(ctx, cfg)
		sum = load.Summarize(recs, wall)
	}
	if lerr != nil && ctx.Err() == nil {
		fail(plans.VerdictFailed, rundir.Reason{Code: "load", Message: lerr.Error()})
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
	if ss.opts.Simulate && simE2E > 0 {
		res.Timings.E2ENS = simE2E
	}
	res.Timings.PeakMemoryMB = max(res.Timings.PeakMemoryMB, sum.MaxPeakMemoryMB)
	if err := rundir.WriteJSON(filepath.Join(rec.abs, rundir.LoadFile), sum, nil); err != nil {
		ss.opts.Logger.Warn("load.json", "err", err)
	}
	if ctx.Err() == nil && sum.ProtocolViolations > 0 {
		// Not excused by max_error_rate: a server that reports more tokens than it was asked
		// for, or answers for another server, makes every number of the cell suspect.
		fail(plans.VerdictFailed, rundir.Reason{Code: "server-protocol", Message: fmt.Sprintf("%d of %d requests got an answer that breaks the API's contract, which [load] max_error_rate does not excuse; first: %s; see %s", sum.ProtocolViolations, sum.Count, sum.FirstViolation, rundir.RequestsFile)})
	}
	if ls := rec.Cell.Load; ctx.Err() == nil && sum.Count > 0 && sum.ErrorRate > ls.MaxErrorRate {
		fail(plans.VerdictFailed, rundir.Reason{Code: "error-rate", Message: fmt.Sprintf("%d of %d requests failed (%.0f%%), more than [load] max_error_rate = %g; see %s%s", sum.Errors, sum.Count, 100*sum.ErrorRate, ls.MaxErrorRate, rundir.RequestsFile, firstError(rec.abs))})
	}
}

// collect has the backend gather and check the window's traces and records them on the cell.
func collect(rec cellRecord, srv *server, dirs backends.TraceDirs, res *cellResult, sr *rundir.ServeResult) {
	window := sr.Profile // set when the window opened (open)
	tr := srv.be.CollectTraces(rec.Cell, dirs)
	for _, t := range tr.Traces {
		res.Found.Traces = append(res.Found.Traces, t)
		if r, err := filepath.Rel(rec.abs, t); err == nil {
			window.Traces = append(window.Traces, r)
		}
	}
	res.Warnings = append(res.Warnings, tr.Warnings...)
	if len(tr.Reasons) > 0 {
		cellFailer(res)(plans.VerdictFailed, tr.Reasons...)
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

// reportWait says every 10 s that the flush is still running, until the returned function is
// called.
func (ss *serveSession) reportWait(c plans.Cell, what string, ft time.Duration) (stop func()) {
	t0 := time.Now()
	done := make(chan struct{})
	ss.status(c, "waiting for the profiler flush ("+what+")", "flush_timeout", ft)
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				ss.status(c, "still waiting for the profiler flush", "waited", time.Since(t0).Round(time.Second), "flush_timeout", ft)
			}
		}
	}()
	return func() { close(done) }
}

// flush closes a start-stop window within [profile] flush_timeout: POST /stop_profile with
// the flush timeout as the client timeout; a refused stop is a window that stopped by itself
// (after num_steps) when the protocol has a profile-done line, waited for then; and then the
// backend's wait for the traces to be final. It reports whether the window closed.
func (ss *serveSession) flush(ctx context.Context, c plans.Cell, srv *server, win backends.Window, window *rundir.ProfileWindow, dirs backends.TraceDirs, doneBefore int, fail func(string, string, ...rundir.Evidence)) bool {
	ft := c.Profile.FlushTimeout.Duration
	if ft <= 0 {
		ft = 10 * time.Minute
	}
	t0 := time.Now()
	defer ss.reportWait(c, win.Flush, ft)()
	code, body := post(ctx, srv.baseURL()+"/stop_profile", map[string]any{}, ft)
	if ctx.Err() != nil {
		return false
	}
	if code != http.StatusOK {
		if srv.proto.ProfileDoneLine == "" {
			fail("profile-flush", fmt.Sprintf("POST /stop_profile answered %d (%s) within [profile] flush_timeout = %s; raise flush_timeout (big traces take minutes) or send fewer requests", code, strings.TrimSpace(body), ft))
			return false
		}
		if !ss.waitDone(ctx, srv, code, body, doneBefore, ft-time.Since(t0), ft, fail) {
			return false
		}
	}
	wctx, cancel := context.WithTimeout(ctx, max(ft-time.Since(t0), time.Second))
	defer cancel()
	err := srv.be.AwaitTraces(wctx, c, dirs)
	window.FlushNS = time.Since(t0).Nanoseconds()
	if ctx.Err() != nil {
		return false
	}
	if err != nil {
		fail("profile-flush", fmt.Sprintf("%v; raise [profile] flush_timeout (big traces take minutes to export and compress)", err))
		return false
	}
	return true
}

// waitDone waits, for at most left, until the server logs its profile-done line once more
// than doneBefore times: the close of a window that /stop_profile refused (code, body).
func (ss *serveSession) waitDone(ctx context.Context, srv *server, code int, body string, doneBefore int, left, ft time.Duration, fail func(string, string, ...rundir.Evidence)) bool {
	deadline := time.NewTimer(left)
	defer deadline.Stop()
	for {
		_, done, ch := srv.snapshot()
		if done > doneBefore {
			return true
		}
		if srv.exited() {
			fail("profile-flush", fmt.Sprintf("the server exited while flushing the profile (POST /stop_profile answered %d: %s)", code, body))
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			fail("profile-flush", fmt.Sprintf("POST /stop_profile answered %d (%s) and the server did not log %q within [profile] flush_timeout = %s; raise flush_timeout (big traces take minutes) or profile fewer steps", code, strings.TrimSpace(body), srv.proto.ProfileDoneLine, ft))
			return false
		case <-ch:
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
			res.Warnings = append(res.Warnings, rundir.Reason{Code: "perf-dump-unreadable", Message: err.Error()})
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

// post sends a POST, with body as JSON (none when body is nil), and returns the status (0 on
// a transport error) and the start of the answer's body (or the error).
func post(ctx context.Context, url string, body any, timeout time.Duration) (int, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader = http.NoBody
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, rd)
	if err != nil {
		return 0, err.Error()
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Transport: load.NewTransport(1)}).Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, load.MaxErrorBody))
	return resp.StatusCode, string(rb)
}

// loadSpec builds the request description of a cell: the plan's API, else the server's.
// Requests carry no profiling fields: the window profiles them.
func loadSpec(c plans.Cell, api string) load.Spec {
	if c.Load.API != "" {
		api = c.Load.API
	}
	w, h := c.Resolution.Width, c.Resolution.Height
	return load.Spec{API: api, Model: c.Model, Prompt: c.Prompt, Width: w, Height: h, Steps: c.Steps, Seed: c.Seed,
		InputLen: c.InputLen, OutputLen: c.OutputLen}
}

func firstError(cellDir string) string {
	// Streamed through the one reader, line by line: the file holds a line per request.
	f, err := infile.Open(filepath.Join(cellDir, rundir.RequestsFile))
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var r load.Record
		if json.Unmarshal(sc.Bytes(), &r) == nil && !r.Warmup && !r.OK() {
			// The error carries the start of an error answer's body ("HTTP 500: ...").
			return "; first error: " + shorten(r.Error, 300)
		}
	}
	return ""
}

// entryNames names the entries of dir now.
func entryNames(dir string) map[string]bool {
	m := map[string]bool{}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		m[e.Name()] = true
	}
	return m
}

// nsysWindow runs the measured requests inside an nsys collection of the server's session:
// `nsys start` right before them, `nsys stop` (which writes the report) right after. The
// server keeps running; the report is exported when the cell ends (nsysStep).
func (ss *serveSession) nsysWindow(ctx context.Context, rec cellRecord, srv *server, cfg load.Config, spec load.Spec, res *cellResult, sr *rundir.ServeResult, reset cacheReset, fail func(string, string, ...rundir.Evidence)) {
	if ctx.Err() != nil {
		return
	}
	nsysCmd := ss.opts.nsysCommand()
	start := nsys.SessionStartArgv(nsysCmd, srv.nsysSession, filepath.Join(rec.abs, rec.NSys.Report))
	sr.Profile = &rundir.ProfileWindow{Kind: backends.WindowNSysSession, Request: map[string]any{"start": start}}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	err := nsys.Session(sctx, proc.Command, start, srv.env(ss.opts))
	cancel()
	if err != nil {
		fail("nsys-start", fmt.Sprintf("%v; the server runs in nsys session %s", err, srv.nsysSession))
		return
	}
	cfg.Warmup = 0
	cfg.Build = func(i int, measured bool) (load.Request, error) { return load.BuildIndexed(spec, i, measured) }
	ss.measure(ctx, rec, cfg, spec, res, sr, reset)
	if ctx.Err() != nil || srv.exited() {
		return
	}
	t0 := time.Now()
	fctx, fcancel := context.WithTimeout(ctx, rec.Cell.Profile.FlushTimeout.Duration+time.Minute)
	err = nsys.Session(fctx, proc.Command, nsys.SessionStopArgv(nsysCmd, srv.nsysSession), srv.env(ss.opts))
	fcancel()
	sr.Profile.FlushNS = time.Since(t0).Nanoseconds()
	if err != nil {
		fail("nsys-stop", fmt.Sprintf("%v; the report of the cell's window was not written", err))
	}
}

// shorten cuts s to n runes, marking the cut, so one error message cannot flood a summary line.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
