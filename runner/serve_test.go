package runner

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sglprof/runner/backends/vllmomni"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/exitcode"
)

func serveResult(t *testing.T, sum *rundir.Summary, id string) *rundir.CellResult {
	t.Helper()
	r, err := rundir.ReadResult(rundir.CellDir(sum.RunDir, id))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestServeGroupsCellsByServerArguments(t *testing.T) {
	p := testPlan(t, `
name = "grp"
[backend]
mode = "serve"
[matrix]
model = ["Qwen/Qwen-Image", "black-forest-labs/FLUX.1-dev"]
prompt = ["a cat"]
resolution = ["512x512", "256x256"]
[load]
warmup = 0
requests = 2
`)
	sum, err := Run(context.Background(), p, simOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	if sum.ExitCode != 0 {
		t.Fatalf("summary %+v", sum)
	}
	servers := map[string][]string{}
	for _, row := range sum.Cells {
		r := serveResult(t, sum, row.ID)
		if r.Serve == nil || r.Serve.Load == nil || r.Serve.Load.Count != 2 {
			t.Fatalf("%s: serve result %+v", row.ID, r.Serve)
		}
		servers[r.Serve.Server] = append(servers[r.Serve.Server], r.Serve.ServedModel)
	}
	// Two models: two servers, each serving both resolutions of its model.
	if len(servers) != 2 || len(servers["servers/1"]) != 2 || len(servers["servers/2"]) != 2 || servers["servers/1"][0] == servers["servers/2"][0] {
		t.Fatalf("servers %v", servers)
	}
	rec, err := rundir.ReadServer(filepath.Join(sum.RunDir, rundir.ServersDir, "1"))
	if err != nil {
		t.Fatal(err)
	}
	if !rec.PortFree || rec.StoppedWith != "SIGINT" || len(rec.Cells) != 2 || !strings.HasPrefix(rec.GPUMemAfter, "unavailable") {
		t.Fatalf("server record %+v", rec)
	}
}

func TestServeFlushTimeout(t *testing.T) {
	p := testPlan(t, `
name = "flush"
[backend]
mode = "serve"
model_type = "llm"
grace = "2s"
[matrix]
model = ["m"]
prompt = ["hi"]
input_len = [8]
output_len = [4]
[load]
warmup = 0
requests = 1
[profile]
profilers = ["torch"]
num_steps = 100000
flush_timeout = "200ms"
`)
	opts := simOptions(t)
	opts.Env = append(opts.Env, "RUNNER_SIM_TIME_SCALE=0.002", "RUNNER_SIM_FAIL=slow-flush")
	sum, err := Run(context.Background(), p, opts)
	if err != nil {
		t.Fatal(err)
	}
	r := serveResult(t, sum, sum.Cells[0].ID)
	if r.Verdict != plans.VerdictFailed || len(r.Reasons) == 0 || r.Reasons[0].Code != "profile-flush" || !strings.Contains(r.Reasons[0].Message, "flush_timeout = 200ms") {
		t.Fatalf("verdict %s reasons %+v", r.Verdict, r.Reasons)
	}
}

func TestServeRefusesNsysForLLM(t *testing.T) {
	p := testPlan(t, `
name = "ns"
[backend]
mode = "serve"
model_type = "llm"
[matrix]
model = ["m"]
prompt = ["a cat"]
input_len = [8]
output_len = [4]
[profile]
profilers = ["nsys"]
`)
	_, err := Run(context.Background(), p, simOptions(t))
	var ue *exitcode.UsageError
	if err == nil || !strings.Contains(err.Error(), "nsys") || !asUsage(err, &ue) {
		t.Fatalf("err = %v", err)
	}
}

func asUsage(err error, ue **exitcode.UsageError) bool {
	u, ok := err.(*exitcode.UsageError)
	*ue = u
	return ok
}

func TestDescribePortOwnerFindsOurListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	if portFree(port) == nil {
		t.Fatal("a port we listen on is reported free")
	}
	msg := describePortOwner(port, "/some/run")
	if !strings.Contains(msg, "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("owner = %q", msg)
	}
	if strings.Contains(msg, "earlier run") {
		t.Fatalf("the test process is not one of our servers: %q", msg)
	}
}

func TestMemoryLeak(t *testing.T) {
	for _, tc := range []struct {
		before, after string
		leak          bool
	}{
		{"1000,500", "1100,400", false},
		{"1000,500", "1000,40000", true},
		{"unavailable: nvidia-smi not found", "unavailable: nvidia-smi not found", false},
		{"1000", "unavailable: x", false},
	} {
		if got := memoryLeak(tc.before, tc.after); (got != "") != tc.leak {
			t.Errorf("memoryLeak(%q, %q) = %q", tc.before, tc.after, got)
		}
	}
}

func TestServeCellTimeoutRestartsServer(t *testing.T) {
	p := testPlan(t, `
name = "tmo"
[backend]
mode = "serve"
timeout = "300ms"
grace = "1s"
[matrix]
model = ["Qwen/Qwen-Image"]
prompt = ["a cat"]
repeats = 2
[load]
warmup = 0
requests = 1
`)
	opts := simOptions(t)
	// 50 steps of Qwen-Image take 20 s simulated: 2 s at this scale, past the 300ms timeout.
	opts.Env = append(opts.Env, "RUNNER_SIM_TIME_SCALE=0.1")
	sum, err := Run(context.Background(), p, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i, row := range sum.Cells {
		r := serveResult(t, sum, row.ID)
		if r.Verdict != plans.VerdictTimeout || r.Reasons[0].Code != "timeout" {
			t.Fatalf("cell %d: %s %+v", i, r.Verdict, r.Reasons)
		}
		if want := "servers/" + strconv.Itoa(i+1); r.Serve.Server != want {
			t.Fatalf("cell %d used %s, want a fresh %s", i, r.Serve.Server, want)
		}
	}
}

// statusProgress records Status calls.
type statusProgress struct {
	nopProgress
	lines []string
}

func (p *statusProgress) Status(c plans.Cell, msg string) { p.lines = append(p.lines, c.ID+": "+msg) }

func TestServeFlushStatusReachesProgress(t *testing.T) {
	p := testPlan(t, `
name = "st"
[backend]
mode = "serve"
model_type = "llm"
[matrix]
model = ["m"]
prompt = ["hi"]
input_len = [8]
output_len = [4]
[load]
warmup = 0
requests = 1
[profile]
profilers = ["torch"]
`)
	opts := simOptions(t)
	prog := &statusProgress{}
	opts.Progress = prog
	if _, err := Run(context.Background(), p, opts); err != nil {
		t.Fatal(err)
	}
	if len(prog.lines) == 0 || !strings.Contains(prog.lines[0], "waiting for the profiler flush") || !strings.Contains(prog.lines[0], "flush_timeout=") {
		t.Fatalf("status lines %q", prog.lines)
	}
}

func TestServerKeyAndCommandComeFromTheBackend(t *testing.T) {
	c := plans.Cell{ID: "001-a", Model: "Qwen/Qwen-Image", Profiler: plans.ProfilerNsys}
	c.Backend = plans.Backend{Kind: "vllm-omni", Mode: "serve", Command: []string{"sglang"}}
	be := vllmomni.New()
	d := c
	d.ID = "002-b"
	// nsys profiles a server from start to end: every nsys cell gets its own server.
	if serverKey(be, c) == serverKey(be, d) || !strings.HasPrefix(serverKey(be, c), be.ServerKey(c)) {
		t.Fatalf("nsys keys %q %q", serverKey(be, c), serverKey(be, d))
	}
	c.Profiler, d.Profiler = plans.ProfilerNone, plans.ProfilerNone
	if serverKey(be, c) != serverKey(be, d) {
		t.Fatal("two unprofiled cells of one server do not share it")
	}
	o := &Options{Exe: "/bin/runner"}
	if got := o.serverCommand(be, c); !slices.Equal(got, []string{"vllm"}) {
		t.Fatalf("command %v", got)
	}
	o.Simulate = true
	if got := o.serverCommand(be, c); !slices.Equal(got, []string{"/bin/runner", "sim", "vllm-omni"}) {
		t.Fatalf("simulated command %v", got)
	}
}

// backendFor refuses what the cell's backend refuses (Backend.ValidateCell), as a usage error
// with the backend's message unchanged; the rules themselves are tested in each backend.
func TestBackendForValidatesCell(t *testing.T) {
	c := plans.Cell{ID: "000-x", Model: "Qwen/Qwen-Image", Profiler: plans.ProfilerNsys}
	c.Backend = plans.Backend{Kind: vllmomni.Kind, Mode: "serve", Command: []string{"sglang"}}
	_, err := backendFor(c)
	var ue *exitcode.UsageError
	if !errors.As(err, &ue) || err.Error() != vllmomni.New().ValidateCell(c).Error() {
		t.Fatalf("nsys without a capture range: %v", err)
	}
	c.NSys.CaptureRange = plans.CaptureRangeCudaAPI
	if be, err := backendFor(c); err != nil || be.Name() != vllmomni.Kind {
		t.Fatalf("with cudaProfilerApi: %v, %v", be, err)
	}
}

// TestServerRecordRedacted: servers/<n>/server.json goes through the run's redactor like the
// other run-directory JSON: a secret flag's value in the server's argv, a password variable of
// [backend.env] whose name says so in other words (PGPASSWORD), and a docker login password
// inside an argument were written as given.
func TestServerRecordRedacted(t *testing.T) {
	apiKey, pgPass, dockerPass := "k9Xv2LpQ7rT4wZ1m", "pw5Hq8Nz3Rb6", "dl2Mx9Vc4Ks7"
	p := testPlan(t, `
name = "srvred"
[backend]
mode = "serve"
extra_args = ["--api-key", "`+apiKey+`", "--revision", "docker login -u bob -p `+dockerPass+` reg.example.com"]
env = { PGPASSWORD = "`+pgPass+`" }
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
	b, err := os.ReadFile(filepath.Join(sum.RunDir, rundir.ServersDir, "1", rundir.ServerFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"--api-key"`) || !strings.Contains(string(b), `"PGPASSWORD"`) {
		t.Fatalf("server.json does not record the argv and environment:\n%s", b)
	}
	for _, s := range []string{apiKey, pgPass, dockerPass} {
		if strings.Contains(string(b), s) {
			t.Errorf("server.json holds %q:\n%s", s, b)
		}
	}
}
