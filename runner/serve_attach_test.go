package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sglprof/runner/backends/sim"
	"github.com/sglprof/runner/reports/rundir"
)

// startAttachTarget runs a simulated server in this process, as a server someone else
// started: the runner is given only its URL. It returns the URL and the server's log.
func startAttachTarget(t *testing.T, args ...string) (string, *syncBuilder) {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	logw := &syncBuilder{}
	env := sim.EnvMap(append(os.Environ(), "RUNNER_SIM_TIME_SCALE=0"))
	go func() {
		code, _ := sim.Main(ctx, append(args, "--port", strconv.Itoa(port)), env, io.Discard, logw)
		done <- code
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the attach target did not stop")
		}
	})
	return "http://127.0.0.1:" + strconv.Itoa(port), logw
}

// syncBuilder is a log the simulated server writes while the test reads it.
type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuilder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeAttachToRunningServer: backend.url runs the cells' load and /start_profile
// windows against a server the runner did not start; nothing is started or stopped (the
// server still answers afterwards), and server.json holds the URL and /get_server_info
// instead of a command line.
func TestServeAttachToRunningServer(t *testing.T) {
	url, logb := startAttachTarget(t, "sglang", "serve", "--model-type", "llm", "--model-path", "m")
	p := testPlan(t, `
name = "attach"
[backend]
mode = "serve"
model_type = "llm"
url = "`+url+`"
ready_timeout = "30s"
[matrix]
model = ["m"]
prompt = ["hi"]
input_len = [8]
output_len = [4]
[load]
warmup = 0
requests = 2
[profile]
profilers = ["none", "torch"]
`)
	opts := simOptions(t)
	opts.Exe = "/nonexistent/runner" // nothing may be started: no simulator either
	sum, err := Run(context.Background(), p, opts)
	if err != nil {
		t.Fatal(err)
	}
	if sum.ExitCode != 0 {
		t.Fatalf("summary %+v", sum)
	}
	rec, err := rundir.ReadServer(filepath.Join(sum.RunDir, rundir.ServersDir, "1"))
	if err != nil {
		t.Fatal(err)
	}
	var info map[string]any
	if rec.URL != url || len(rec.Argv) != 0 || rec.PID != 0 || json.Unmarshal(rec.Info, &info) != nil || info["model_path"] != "m" || len(rec.Cells) != 2 {
		t.Fatalf("server record %+v (info %s)", rec, rec.Info)
	}
	if _, err := os.Stat(filepath.Join(sum.RunDir, rundir.ServersDir, "2")); err == nil {
		t.Fatal("both cells should share the attached server")
	}
	// The manifest names the attached server and what it said about itself (no command line).
	man, err := rundir.ReadManifest(sum.RunDir)
	if err != nil {
		t.Fatal(err)
	}
	var minfo map[string]any
	if len(man.Attached) != 1 || man.Attached[0].URL != url || man.Attached[0].Server != filepath.Join(rundir.ServersDir, "1") ||
		json.Unmarshal(man.Attached[0].Info, &minfo) != nil || minfo["model_path"] != "m" {
		t.Fatalf("manifest attached = %+v", man.Attached)
	}
	torch := serveResult(t, sum, sum.Cells[1].ID)
	if torch.Serve == nil || torch.Serve.Profile == nil || len(torch.Serve.Profile.Traces) == 0 {
		t.Fatalf("torch cell %+v", torch.Serve)
	}
	if !strings.Contains(logb.String(), "Profiling starts. Traces will be saved to: "+filepath.Join(sum.RunDir, "cells")) {
		t.Fatalf("the window did not point the attached server at the cell:\n%s", logb.String())
	}
	if code := get(context.Background(), &http.Client{Timeout: 5 * time.Second}, url+"/health"); code != 200 {
		t.Fatalf("the attached server was stopped (health %d)", code)
	}
	// Someone else's prefix cache is left alone unless the plan asks ([load] flush_cache).
	if torch.Serve.LLM == nil || torch.Serve.LLM.CacheReset != rundir.CacheNotReset+"[load] flush_cache = false" || strings.Contains(logb.String(), "Cache flushed") {
		t.Errorf("attached server: cache_reset %+v; want it not flushed", torch.Serve.LLM)
	}
}

// TestServeAttachNotReady: a URL where nothing answers fails the cell with
// server-not-ready after ready_timeout, naming the URL.
func TestServeAttachNotReady(t *testing.T) {
	port, _ := freePort()
	p := testPlan(t, `
name = "attach-down"
[backend]
mode = "serve"
url = "http://127.0.0.1:`+strconv.Itoa(port)+`"
ready_timeout = "1s"
[matrix]
model = ["Qwen/Qwen-Image"]
prompt = ["a cat"]
[load]
warmup = 0
requests = 1
`)
	sum, err := Run(context.Background(), p, simOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	r := serveResult(t, sum, sum.Cells[0].ID)
	if r.Verdict != "timeout" || len(r.Reasons) == 0 || r.Reasons[0].Code != "server-not-ready" || !strings.Contains(r.Reasons[0].Message, "backend.url = http://127.0.0.1:"+strconv.Itoa(port)) {
		t.Fatalf("result %+v", r)
	}
}

// TestServeAttachSimulateMeasuresWallTime: under --simulate an attached server is whatever runs
// at the URL, not the simulator, so its requests are timed on the client's clock. A server that
// answers like sglang's /generate after 30 ms (no simulated-clock field in its chunks) got a
// TTFT of 0 and no throughput when the simulated clock was used for it.
func TestServeAttachSimulateMeasuresWallTime(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) {})
	mux.HandleFunc("/get_server_info", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"model_path": "m"}`)
	})
	mux.HandleFunc("/generate", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		time.Sleep(30 * time.Millisecond)
		for k := 1; k <= 4; k++ {
			fmt.Fprintf(w, "data: {\"text\": \"%s\", \"meta_info\": {\"prompt_tokens\": 8, \"completion_tokens\": %d}}\n\n", strings.Repeat("x", k), k)
			f.Flush()
			time.Sleep(2 * time.Millisecond)
		}
		io.WriteString(w, "data: [DONE]\n\n")
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	p := testPlan(t, `
name = "attachwall"
[backend]
mode = "serve"
model_type = "llm"
url = "`+srv.URL+`"
ready_timeout = "10s"
[matrix]
model = ["m"]
prompt = ["hi"]
input_len = [8]
output_len = [4]
[load]
warmup = 0
requests = 2
`)
	opts := simOptions(t) // --simulate
	opts.Exe = "/nonexistent/runner"
	sum, err := Run(context.Background(), p, opts)
	if err != nil {
		t.Fatal(err)
	}
	r := serveResult(t, sum, sum.Cells[0].ID)
	if r.Serve == nil || r.Serve.LLM == nil {
		t.Fatalf("no LLM result: %+v", r.Serve)
	}
	if l := r.Serve.LLM; l.TTFT.Median < 30 || l.OutputThroughput <= 0 {
		t.Fatalf("TTFT median %v ms, output throughput %v: want at least the server's 30 ms and some tokens/s", l.TTFT.Median, l.OutputThroughput)
	}
}
