package runner

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/load"
)

const llmClientsPlan = `name = "clients"
[backend]
mode = "serve"
[matrix]
model = ["Qwen/Qwen2.5-0.5B-Instruct"]
input_len = [32]
output_len = [4]
[load]
requests = 7
max_concurrency = 4
clients = 2
`

// inProcessClients runs each client as RunLoadClient in this process: the path of a client
// process without the process (cmd/runner's load-client subcommand calls the same function).
func inProcessClients(started *atomic.Int32) clientStarter {
	return func(ctx context.Context, args []string, logPath string) error {
		started.Add(1)
		if len(args) != 2 || args[0] != LoadClientCommand {
			return errors.New("bad client argv: " + strings.Join(args, " "))
		}
		return RunLoadClient(ctx, args[1])
	}
}

// [load] clients = 2: two clients share the cell's requests, their records are merged into the
// cell's, in index order, and the server's /metrics is scraped around them.
func TestRunLLMWithClients(t *testing.T) {
	base := startLLMSim(t, "0.002", "--enable-metrics")
	c := testPlan(t, llmClientsPlan).Expand()[0]
	dir := t.TempDir()
	var started atomic.Int32
	opened := 0
	var reqs bytes.Buffer
	sum, res, err := runLLM(context.Background(), base, c, dir, &reqs, func() error { opened++; return nil }, load.SimClock{Scale: 0.002}, inProcessClients(&started))
	if err != nil {
		t.Fatal(err)
	}
	if started.Load() != 2 || opened != 1 {
		t.Errorf("%d clients started, the profiling window opened %d times; want 2 and once", started.Load(), opened)
	}
	if res.Completed != 7 || sum.Count != 7 || res.TotalOutput != 7*4 || res.ITL.N != 7*3 {
		t.Errorf("merged: %d completed, %d records, %d output tokens, %d ITLs", res.Completed, sum.Count, res.TotalOutput, res.ITL.N)
	}
	recs := readLines(t, filepath.Join(dir, rundir.LLMRecordsFile))
	for i, l := range recs {
		if !strings.HasPrefix(l, `{"index":`+strconv.Itoa(i)+`,`) {
			t.Errorf("record %d: %s", i, l)
		}
	}
	for _, f := range []string{"0.json", "0.jsonl", "1.json", "1.jsonl"} {
		if _, err := os.Stat(filepath.Join(dir, clientsDir, f)); err != nil {
			t.Error(err)
		}
	}
	if m := res.ServerMetrics; m == nil || m.Engine != "sglang" || m.CacheHitRate == nil || m.PeakQueued == nil {
		t.Errorf("server metrics %+v", m)
	}
}

// A client that fails, or reports requests that are not its share, fails the cell with a
// message naming the client; clients beyond the concurrency cap are refused before any starts.
func TestRunLLMClientFailures(t *testing.T) {
	base := startLLMSim(t, "0")
	c := testPlan(t, llmClientsPlan).Expand()[0]
	run := func(start clientStarter) error {
		_, _, err := runLLM(context.Background(), base, c, t.TempDir(), &bytes.Buffer{}, nil, load.RealClock{}, start)
		return err
	}
	var started atomic.Int32
	failing := func(ctx context.Context, args []string, logPath string) error {
		if strings.HasSuffix(args[1], "1.json") {
			return errors.New("load client exited with status 2")
		}
		return inProcessClients(&started)(ctx, args, logPath)
	}
	if err := run(failing); err == nil || !strings.Contains(err.Error(), "load client 1 of 2") {
		t.Errorf("a failed client: %v", err)
	}
	// Client 1 writes client 0's records as its own: a client that did not keep to its share.
	var spec0 string
	lying := func(ctx context.Context, args []string, logPath string) error {
		if strings.HasSuffix(args[1], "0.json") {
			spec0 = args[1]
			return RunLoadClient(ctx, args[1])
		}
		var s loadClientSpec
		if err := rundir.ReadJSON(args[1], &s); err != nil {
			return err
		}
		s.Shard = 0
		if err := rundir.WriteJSON(args[1], s, nil); err != nil {
			return err
		}
		return RunLoadClient(ctx, args[1])
	}
	c.Load.Requests = 8 // equal shares: the count bound cannot tell, the merge must
	if err := run(lying); err == nil || !strings.Contains(err.Error(), "which is client 0's") {
		t.Errorf("a client reporting another's requests: %v (spec %s)", err, spec0)
	}
	if err := run(nil); err == nil || !strings.Contains(err.Error(), "cannot start client processes") {
		t.Errorf("no starter: %v", err)
	}
	c.Load.MaxConcurrency, c.Load.Requests = 1, 7
	started.Store(0)
	if err := run(inProcessClients(&started)); err == nil || !strings.Contains(err.Error(), "exceeds the cell's concurrency cap 1") || started.Load() != 0 {
		t.Errorf("clients over the cap: %v, %d started", err, started.Load())
	}
}

// A records file without its trailer (a client killed mid-write) or over the client's share is
// refused.
func TestReadClientRecordsBounds(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "r.jsonl")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rec := `{"index":0,"status":200,"start_ns":0,"latency_ns":5,"bytes":1}` + "\n"
	if _, _, err := readClientRecords(write(rec), 5); err == nil || !strings.Contains(err.Error(), "no trailer") {
		t.Errorf("no trailer: %v", err)
	}
	if _, _, err := readClientRecords(write(rec+rec+`{"wall_ns":5,"done":true}`+"\n"), 1); err == nil || !strings.Contains(err.Error(), "more than the client's 1 requests") {
		t.Errorf("over the share: %v", err)
	}
	if _, _, err := readClientRecords(write(rec+`{"wall_ns":5,"done":true}`+"\n"+rec), 5); err == nil || !strings.Contains(err.Error(), "after the trailer") {
		t.Errorf("lines after the trailer: %v", err)
	}
	rs, tr, err := readClientRecords(write(rec+`{"wall_ns":5,"done":true}`+"\n"), 1)
	if err != nil || len(rs) != 1 || tr.WallNS != 5 {
		t.Errorf("a good file: %v %+v %v", rs, tr, err)
	}
}
