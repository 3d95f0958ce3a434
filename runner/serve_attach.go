package runner

// Attaching to a running server ([backend] url): the cells run their load
// and profiling windows against a server the runner did not start. Nothing is started or
// stopped and no port is chosen; readiness is still checked (GET /health within
// backend.ready_timeout), and servers/<n>/server.json and manifest.json (`attached`) hold the URL and the server's own
// description (the backend's ServerInfoPath) instead of a command line.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/load"
)

// attach returns the server of rec's cell at backend.url once it is ready. On failure it
// returns nil, the cell's verdict and the reasons (the attempt is recorded).
func (ss *serveSession) attach(ctx context.Context, rec cellRecord, be backends.Server, key string) (*server, string, []rundir.Reason) {
	c := rec.Cell
	ss.n++
	rel := filepath.Join(rundir.ServersDir, strconv.Itoa(ss.n))
	dir, _ := filepath.Abs(filepath.Join(ss.runDir, rel))
	// The traces directory exists for every server; an attached sglang server writes into the
	// cell's (output_dir), so it stays empty.
	if err := os.MkdirAll(filepath.Join(dir, backends.TracesDir), 0o755); err != nil {
		return nil, plans.VerdictFailed, []rundir.Reason{{Code: "server-dir", Message: fmt.Sprintf("cannot create %s: %v; check the output directory", dir, err)}}
	}
	base := strings.TrimSuffix(c.Backend.URL, "/")
	port := 0
	if u, err := url.Parse(base); err == nil {
		port, _ = strconv.Atoi(u.Port())
	}
	proto := be.Protocol(c)
	srv := &server{key: key, n: ss.n, dir: dir, rel: rel, port: port, url: base, be: be, proto: proto,
		cancel: func() {}, done: make(chan struct{}), watch: be.NewServerWatcher(c), changed: make(chan struct{})}
	srv.rec = rundir.ServerRecord{N: ss.n, Kind: c.Backend.Kind, Dir: dir, Port: port, URL: base, ModelType: proto.ModelType, Start: ss.opts.Now().UTC()}
	ss.opts.Logger.Info("attaching to a running server", "server", rel, "url", base)
	verdict, rs := ss.waitReady(ctx, c, srv)
	if rs != nil {
		srv.rec.Failure = rs[0].Code
		ss.stop(srv)
		return nil, verdict, rs
	}
	srv.rec.Info = serverInfo(ctx, base, proto.ServerInfoPath)
	ss.attached = append(ss.attached, rundir.AttachedServer{URL: base, Server: rel, Info: srv.rec.Info})
	return srv, "", nil
}

// detach ends the use of an attached server: its record is written; the server runs on.
func (ss *serveSession) detach(srv *server) {
	srv.rec.End = ss.opts.Now().UTC()
	// Through the run's redactor: the server's own description (sglang's server_args) holds
	// its api_key and hf_token.
	if err := ss.opts.writeRedactedJSON(filepath.Join(srv.dir, rundir.ServerFile), srv.rec); err != nil {
		ss.opts.Logger.Warn("server.json", "err", err)
	}
	ss.opts.Logger.Info("detached from the server", "server", srv.rel, "url", srv.url)
}

// serverInfo is the answer of the server's info route as JSON, or a JSON string saying why
// there is none (the record says so rather than leaving the field out).
func serverInfo(ctx context.Context, base, path string) json.RawMessage {
	why := func(s string) json.RawMessage {
		b, _ := json.Marshal("unavailable: " + s)
		return b
	}
	if path == "" {
		return why("the backend has no server-info route")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return why(err.Error())
	}
	resp, err := (&http.Client{Transport: load.NewTransport(1)}).Do(req)
	if err != nil {
		return why(err.Error())
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case err != nil:
		return why(err.Error())
	case resp.StatusCode != http.StatusOK:
		return why(fmt.Sprintf("GET %s answered %d", path, resp.StatusCode))
	case !json.Valid(b):
		return why(fmt.Sprintf("GET %s did not answer JSON", path))
	}
	return b
}
