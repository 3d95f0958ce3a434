package runner

// Load beyond one client process ([load] clients = N). The runner starts N client processes,
// the runner binary itself as `runner load-client SPEC` (LoadClientCommand), through
// runner/proc like every other process. Each runs its share of the cell's one arrival schedule
// (load.Config.Shard) and writes its raw per-request records; the runner merges them
// (load.MergeShards), so the cell's percentiles are those of one client over the same records,
// and every latency was measured by the one client that sent the request.
//
// The clients run on the runner's machine, not as executor tasks on other nodes: the runner's
// servers listen on 127.0.0.1 only (a server is never exposed to the network by the runner), so
// a client elsewhere could not reach it, and an attached server's address is the plan's to
// choose, not the executor's.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/load"
	"github.com/sglprof/runner/runner/proc"
)

// LoadClientCommand is the hidden subcommand of a client process: `runner load-client SPEC`.
const LoadClientCommand = "load-client"

// clientsDir holds a multi-client cell's client specs, records and logs, under the cell.
const clientsDir = "clients"

// loadClientSpec is one client process's share of a cell's load.
type loadClientSpec struct {
	Base   string     `json:"base"`
	Cell   plans.Cell `json:"cell"`
	Shard  int        `json:"shard"`
	Shards int        `json:"shards"`
	// Scale > 0 stamps times on the simulated server's clock (load.SimClock) at that scale; 0
	// on the client's own clock.
	Scale float64 `json:"scale,omitempty"`
	// Out is the records file the client writes: one load.Record a line, then its trailer.
	Out string `json:"out"`
}

// clientTrailer is the last line of a client's records file.
type clientTrailer struct {
	WallNS int64  `json:"wall_ns"`
	Error  string `json:"error,omitempty"`
	Done   bool   `json:"done"`
}

// clientStarter runs one client process (argv after the runner binary) to its end, its output
// to logPath.
type clientStarter func(ctx context.Context, args []string, logPath string) error

// procClients starts client processes as exe (the runner binary) through runner/proc.
func procClients(exe string, env []string, log *slog.Logger) clientStarter {
	if exe == "" {
		return nil
	}
	return func(ctx context.Context, args []string, logPath string) error {
		f, err := os.Create(logPath)
		if err != nil {
			return fmt.Errorf("load client log: %w", err)
		}
		defer f.Close()
		res := proc.Run(ctx, proc.Spec{Argv: append([]string{exe}, args...), Env: env, Log: f}, log)
		switch {
		case res.StartErr != nil:
			return fmt.Errorf("start load client: %w", res.StartErr)
		case res.ExitCode != 0:
			return fmt.Errorf("load client exited with status %d%s; see %s", res.ExitCode, signalNote(res.Signal), logPath)
		}
		return nil
	}
}

func signalNote(sig string) string {
	if sig == "" {
		return ""
	}
	return " (" + sig + ")"
}

// RunLoadClient is a client process: it reads its spec, sends its share of the cell's measured
// requests and writes their records to the spec's records file. The records file is written
// under a temporary name and renamed when complete, so the runner never reads a half-written one.
func RunLoadClient(ctx context.Context, specPath string) error {
	var spec loadClientSpec
	if err := rundir.ReadJSON(specPath, &spec); err != nil {
		return fmt.Errorf("load client spec: %w", err)
	}
	if spec.Shards < 1 || spec.Shard < 0 || spec.Shard >= spec.Shards || spec.Out == "" {
		return fmt.Errorf("load client spec %s: shard %d of %d, records %q: not a client's share", specPath, spec.Shard, spec.Shards, spec.Out)
	}
	cfg, _, _, err := llmConfig(spec.Base, spec.Cell)
	if err != nil {
		return err
	}
	cfg.Warmup = 0 // the runner's own, before the clients start
	cfg.Shard, cfg.Shards = spec.Shard, spec.Shards
	cfg.Concurrency = load.ShardConcurrency(cfg.Concurrency, spec.Shards, spec.Shard)
	cfg.Clock = load.RealClock{}
	if spec.Scale > 0 {
		cfg.Clock = load.SimClock{Scale: spec.Scale}
	}
	rs, wall, runErr := load.Run(ctx, cfg)
	tmp := spec.Out + ".part"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("load client records: %w", err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for i := range rs {
		if err := enc.Encode(&rs[i]); err != nil {
			f.Close()
			return fmt.Errorf("load client records: %w", err)
		}
	}
	tr := clientTrailer{WallNS: int64(wall), Done: true}
	if runErr != nil {
		tr.Error = runErr.Error()
	}
	if err := enc.Encode(tr); err != nil {
		f.Close()
		return fmt.Errorf("load client records: %w", err)
	}
	if err := errors.Join(w.Flush(), f.Close()); err != nil {
		return fmt.Errorf("load client records: %w", err)
	}
	return os.Rename(tmp, spec.Out)
}

// runClients runs a cell's measured load from n client processes and merges their records.
// Every client is started, even when one fails; the cell's error is the first failure.
func runClients(ctx context.Context, base string, c plans.Cell, cellDir string, cfg load.Config, scale float64, start clientStarter) ([]load.Record, time.Duration, error) {
	n := c.Load.Clients
	if start == nil {
		return nil, 0, errors.New("[load] clients: this run cannot start client processes (the runner's own binary is unknown); drop clients or run through `runner run`")
	}
	if cfg.Concurrency > 0 && cfg.Concurrency < n {
		return nil, 0, fmt.Errorf("[load] clients = %d exceeds the cell's concurrency cap %d (each client keeps at least one request in flight); raise max_concurrency or lower clients", n, cfg.Concurrency)
	}
	dir := filepath.Join(cellDir, clientsDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, 0, fmt.Errorf("load clients: %w", err)
	}
	if cfg.Warmup > 0 {
		if err := load.Warmup(ctx, cfg); err != nil {
			return nil, 0, err
		}
	}
	if cfg.BeforeMeasured != nil {
		if err := cfg.BeforeMeasured(); err != nil {
			return nil, 0, err
		}
	}
	specs := make([]loadClientSpec, n)
	for k := range specs {
		specs[k] = loadClientSpec{Base: base, Cell: c, Shard: k, Shards: n, Scale: scale,
			Out: filepath.Join(dir, strconv.Itoa(k)+".jsonl")}
		if err := rundir.WriteJSON(filepath.Join(dir, strconv.Itoa(k)+".json"), specs[k], nil); err != nil {
			return nil, 0, fmt.Errorf("load client spec: %w", err)
		}
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for k := range specs {
		wg.Go(func() {
			errs[k] = start(ctx, []string{LoadClientCommand, filepath.Join(dir, strconv.Itoa(k)+".json")}, filepath.Join(dir, strconv.Itoa(k)+".log"))
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, 0, ctx.Err()
	}
	parts := make([][]load.Record, n)
	walls := make([]time.Duration, n)
	var runErr error
	for k := range specs {
		if errs[k] != nil {
			return nil, 0, fmt.Errorf("load client %d of %d: %w", k, n, errs[k])
		}
		rs, tr, err := readClientRecords(specs[k].Out, clientShare(c, cfg, n, k))
		if err != nil {
			return nil, 0, fmt.Errorf("load client %d of %d: %w", k, n, err)
		}
		if tr.Error != "" && runErr == nil {
			runErr = fmt.Errorf("load client %d of %d: %s", k, n, tr.Error)
		}
		parts[k], walls[k] = rs, time.Duration(tr.WallNS)
	}
	rs, wall, err := load.MergeShards(parts, walls)
	if err != nil {
		return nil, 0, err
	}
	return rs, wall, runErr
}

// maxClientRecords bounds a duration-bounded client's records file (a count-bounded one holds
// its share of the requests).
const maxClientRecords = 1 << 22

// clientShare is how many records client k may report.
func clientShare(c plans.Cell, cfg load.Config, n, k int) int {
	if cfg.Requests > 0 {
		return (cfg.Requests - k + n - 1) / n
	}
	return maxClientRecords
}

// readClientRecords reads a client's records file: at most limit records (a line each, 64 MiB
// at most) and the trailer. A file without its trailer is incomplete and refused.
func readClientRecords(path string, limit int) ([]load.Record, clientTrailer, error) {
	var tr clientTrailer
	f, err := rundir.OpenFile(path)
	if err != nil {
		return nil, tr, fmt.Errorf("records: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	var rs []load.Record
	for line := 1; sc.Scan(); line++ {
		var probe struct {
			Done *bool `json:"done"`
		}
		if err := json.Unmarshal(sc.Bytes(), &probe); err != nil {
			return nil, tr, fmt.Errorf("%s:%d: not a record: %w", path, line, err)
		}
		if probe.Done != nil {
			if err := json.Unmarshal(sc.Bytes(), &tr); err != nil {
				return nil, tr, fmt.Errorf("%s:%d: not a trailer: %w", path, line, err)
			}
			if sc.Scan() {
				return nil, tr, fmt.Errorf("%s:%d: lines after the trailer", path, line+1)
			}
			return rs, tr, sc.Err()
		}
		if len(rs) >= limit {
			return nil, tr, fmt.Errorf("%s: more than the client's %d requests", path, limit)
		}
		var r load.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, tr, fmt.Errorf("%s:%d: not a record: %w", path, line, err)
		}
		rs = append(rs, r)
	}
	if err := sc.Err(); err != nil {
		return nil, tr, fmt.Errorf("%s: %w", path, err)
	}
	return nil, tr, fmt.Errorf("%s: no trailer: the client did not finish", path)
}
