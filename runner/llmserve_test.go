package runner

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sglprof/runner/backends/sim"
	"github.com/sglprof/runner/backends/simclock"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/load"
)

// startLLMSim starts the simulated LLM server in-process (scale: real seconds a simulated
// second) and returns its base URL.
func startLLMSim(t *testing.T, scale string, args ...string) string {
	t.Helper()
	t.Chdir(t.TempDir())
	return launchLLMSim(t, scale, args...)()
}

// launchLLMSim starts a simulated LLM server in the working directory and returns a function
// that waits until it is healthy and returns its URL, so that a test can start several and
// wait for their (simulated) model loads at once.
func launchLLMSim(t *testing.T, scale string, args ...string) func() string {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	env := map[string]string{simclock.EnvTimeScale: scale}
	args = append([]string{"-m", "sglang.launch_server", "--model-path", "Qwen/Qwen2.5-0.5B-Instruct", "--port", strconv.Itoa(port)}, args...)
	go func() { done <- sim.SGLang(ctx, args, env, io.Discard, io.Discard) }()
	t.Cleanup(func() { cancel(); <-done })
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	return func() string {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if resp, err := http.Get(base + "/health"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					return base
				}
			}
			if time.Now().After(deadline) {
				t.Fatal("the simulated server never became healthy")
			}
		}
	}
}

const llmServePlan = `name = "llm"
[backend]
mode = "serve"
[matrix]
model = ["Qwen/Qwen2.5-0.5B-Instruct"]
prompt = ["hi"]
input_len = [64]
output_len = [16]
concurrency = [1, 4]
request_rate = ["inf"]
[load]
warmup = 1
requests = 8
slo_ttft = "1s"
slo_tpot = "1s"
`

func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

func TestRunLLMLoadAgainstSimulator(t *testing.T) {
	base := startLLMSim(t, "0.002")
	cells := testPlan(t, llmServePlan).Expand()
	if len(cells) != 2 || cells[1].Load.Concurrency != 4 {
		t.Fatalf("cells %+v", cells)
	}
	for _, c := range cells {
		dir := t.TempDir()
		opened := 0
		sum, res, err := runLLMLoad(context.Background(), base, c, dir, func() error { opened++; return nil })
		if err != nil {
			t.Fatalf("%s: %v", c.ID, err)
		}
		if opened != 1 {
			t.Errorf("%s: beforeMeasured ran %d times, want once", c.ID, opened)
		}
		if sum.Count != 8 || sum.Errors != 0 || sum.MeanNS <= 0 || sum.P99NS < sum.P50NS {
			t.Errorf("%s: load summary %+v", c.ID, sum)
		}
		l := res.LLMSummary
		if l.Completed != 8 || l.TotalInput != 8*64 || l.TotalOutput != 8*16 || l.ApproxInput {
			t.Errorf("%s: completed %d, tokens %d/%d, approx %v; want 8 requests of exactly 64 in, 16 out (token ids)", c.ID, l.Completed, l.TotalInput, l.TotalOutput, l.ApproxInput)
		}
		for name, st := range map[string]rundir.LLMStats{"ttft": l.TTFT, "tpot": l.TPOT, "itl": l.ITL, "e2e": l.E2E} {
			if st.N == 0 || !(st.Mean > 0) || st.P99 < st.Median || st.P95 < st.P90 {
				t.Errorf("%s: %s stats %+v", c.ID, name, st)
			}
		}
		if l.ITL.N != 8*15 {
			t.Errorf("%s: %d ITL samples, want 8·15", c.ID, l.ITL.N)
		}
		if !(l.OutputThroughput > 0) || !(l.RequestThroughput > 0) || !(l.Concurrency > 0) || l.GoodRequests != 8 || !(l.Goodput > 0) {
			t.Errorf("%s: throughput %v, concurrency %v, goodput %d %v", c.ID, l.OutputThroughput, l.Concurrency, l.GoodRequests, l.Goodput)
		}
		if res.MaxConcurrency != c.Load.Concurrency || res.Dataset != "random" || res.API != "generate" || res.Records != rundir.LLMRecordsFile {
			t.Errorf("%s: result %+v", c.ID, res)
		}
		recs := readLines(t, filepath.Join(dir, rundir.LLMRecordsFile))
		var r load.Record
		if len(recs) != 8 || json.Unmarshal([]byte(recs[0]), &r) != nil || len(r.ITL) != 15 || r.TTFT <= 0 {
			t.Errorf("%s: %d llm records, first %s", c.ID, len(recs), recs[0])
		}
		var lr load.Record
		if reqs := readLines(t, filepath.Join(dir, rundir.RequestsFile)); len(reqs) != 8 || json.Unmarshal([]byte(reqs[0]), &lr) != nil || lr.Status != 200 || lr.Latency != r.Latency {
			t.Errorf("%s: requests.jsonl %q", c.ID, reqs)
		}
	}
}

// The chat API sends text, so the result says that the input lengths are approximate.
func TestRunLLMLoadChatIsApproximate(t *testing.T) {
	base := startLLMSim(t, "0.002")
	c := testPlan(t, llmServePlan+"api = \"chat\"\n").Expand()[0]
	_, res, err := runLLMLoad(context.Background(), base, c, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.ApproxInput || res.Completed != 8 || res.API != "chat" {
		t.Errorf("chat result %+v", res.LLMSummary)
	}
}

// A larger tp-size lowers the simulated per-token cost: the sweep shows it. The median E2E is
// compared (the simulator keeps each request's total on one deadline, so a stall on a loaded
// machine moves time between TTFT and TPOT but not out of E2E); TestLLMCosts pins the costs.
func TestRunLLMLoadTPSizeLowersE2E(t *testing.T) {
	c := testPlan(t, llmServePlan).Expand()[1]
	// Slow enough (about 110 ms a request at tp 1, 40 ms at tp 4) that the client's own
	// overhead on a loaded machine, under -race, does not blur the shape. Both servers load
	// their (simulated) weights at once; the loads are measured one after the other.
	t.Chdir(t.TempDir())
	ready := map[string]func() string{}
	for _, tp := range []string{"1", "4"} {
		ready[tp] = launchLLMSim(t, "0.5", "--tp-size", tp)
	}
	e2e := map[string]float64{}
	for _, tp := range []string{"1", "4"} {
		_, res, err := runLLMLoad(context.Background(), ready[tp](), c, t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		e2e[tp] = res.E2E.Median
	}
	if !(e2e["4"] < e2e["1"]) {
		t.Errorf("median E2E tp 1 %.3f ms, tp 4 %.3f ms; want tp 4 faster", e2e["1"], e2e["4"])
	}
}

func TestRunLLMLoadShareGPT(t *testing.T) {
	sample := filepath.Join(repoRoot(t), "testdata", "sharegpt-sample.json")
	base := startLLMSim(t, "0.002")
	src := strings.Replace(llmServePlan, "[load]\n", "[load]\ndataset = \"sharegpt\"\ndataset_path = \""+sample+"\"\n", 1)
	c := testPlan(t, src).Expand()[0]
	_, res, err := runLLMLoad(context.Background(), base, c, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed != 8 || !res.ApproxInput || res.Dataset != plans.DatasetShareGPT {
		t.Errorf("sharegpt result: completed %d approx %v dataset %q", res.Completed, res.ApproxInput, res.Dataset)
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(wd)
}

// A server flag the server does not know fails the cell with the server's argparse complaint
// naming it.
func TestServerArgsUnknownFlagFailsCell(t *testing.T) {
	p := testPlan(t, `name = "bad-flag"
[backend]
mode = "serve"
[matrix]
model = ["Qwen/Qwen2.5-0.5B-Instruct"]
prompt = ["hi"]
input_len = [16]
output_len = [4]
[matrix.server_args]
bogus-flag = ["1"]
[load]
warmup = 0
requests = 1
`)
	sum, err := Run(context.Background(), p, simOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	r := serveResult(t, sum, sum.Cells[0].ID)
	var msgs []string
	for _, rs := range r.Reasons {
		msgs = append(msgs, rs.Message)
	}
	if r.Verdict != plans.VerdictFailed || !strings.Contains(strings.Join(msgs, "\n"), "unrecognized arguments: --bogus-flag 1") {
		t.Fatalf("verdict %q, reasons %q", r.Verdict, msgs)
	}
	if !strings.Contains(sum.Cells[0].ID, "-bogus-flag-1-") {
		t.Errorf("id %q lacks the server arg", sum.Cells[0].ID)
	}
}

// A simulated sweep shows the cost model's shapes, measured on the simulated clock: TPOT lower
// at tp-size 2 than 1 under the same load (and TTFT for a request alone), TPOT growing with concurrency, and ITLs
// in the cost model's range (a decode step is 11.5 ms × batch slope / tp^0.7: 7.1 ms at tp 2
// alone, up to 14.7 ms at tp 1 with 8 in flight). On the real clock the µs-scale simulated
// costs were drowned by loopback overhead (ITLs near 0.6 µs, tp 2 slower at c8).
func TestSimulatedLLMSweepShapes(t *testing.T) {
	p := testPlan(t, `name = "shapes"
[backend]
mode = "serve"
model_type = "llm"
[matrix]
model = ["Qwen/Qwen2.5-7B-Instruct"]
prompt = ["unused"]
input_len = [256]
output_len = [24]
concurrency = [1, 8]
request_rate = ["inf"]
[matrix.server_args]
tp-size = ["1", "2"]
[load]
warmup = 0
requests = 8
`)
	opts := simOptions(t)
	// Slow enough that the 8 requests of a c8 cell overlap on the server (the batch it decodes
	// follows the real overlap): about 30 ms of real time a request, so that even a client
	// slowed by the race detector on a loaded machine has all 8 in flight at once (at 0.01,
	// 3 ms a request, the c8 requests of a race run came one at a time: TPOT as alone). The
	// timings themselves are simulated.
	opts.Env = append(opts.Env, "RUNNER_SIM_TIME_SCALE=0.1")
	sum, err := Run(context.Background(), p, opts)
	if err != nil {
		t.Fatal(err)
	}
	if sum.ExitCode != 0 {
		t.Fatalf("summary %+v", sum)
	}
	type key struct{ tp, conc string }
	got := map[key]*rundir.LLMResult{}
	for _, row := range sum.Cells {
		r := serveResult(t, sum, row.ID)
		if r.Serve == nil || r.Serve.LLM == nil {
			t.Fatalf("%s: no serve.llm", row.ID)
		}
		tp := "1"
		if strings.Contains(row.ID, "tp-size-2") {
			tp = "2"
		}
		conc := "1"
		if strings.Contains(row.ID, "-c8-") {
			conc = "8"
		}
		got[key{tp, conc}] = r.Serve.LLM
	}
	if len(got) != 4 {
		t.Fatalf("cells %v", got)
	}
	// TTFT is compared alone only: at c8 it is mostly the wait behind other requests' prefill
	// and decode steps, which follows when the requests really reached the server (tp 2 came out
	// 0.4 ms slower than tp 1 on a loaded CI machine), so it says nothing about the cost model.
	if a, b := got[key{"1", "1"}], got[key{"2", "1"}]; !(b.TTFT.Median < a.TTFT.Median) {
		t.Errorf("c1: TTFT p50 tp1 %.2f tp2 %.2f ms; want tp 2 lower", a.TTFT.Median, b.TTFT.Median)
	}
	for _, conc := range []string{"1", "8"} {
		a, b := got[key{"1", conc}], got[key{"2", conc}]
		if !(b.TPOT.Median < a.TPOT.Median) {
			t.Errorf("c%s: TPOT p50 tp1 %.2f tp2 %.2f ms; want tp 2 lower", conc, a.TPOT.Median, b.TPOT.Median)
		}
	}
	for _, tp := range []string{"1", "2"} {
		c1, c8 := got[key{tp, "1"}], got[key{tp, "8"}]
		if !(c8.TPOT.Median > c1.TPOT.Median) {
			t.Errorf("tp %s: TPOT p50 c1 %.2f c8 %.2f ms; want it to grow with concurrency", tp, c1.TPOT.Median, c8.TPOT.Median)
		}
	}
	for k, r := range got {
		if r.ITL.Median < 7 || r.ITL.Median > 15 {
			t.Errorf("tp %s c%s: ITL p50 %.3f ms, outside the cost model's 7..15 ms", k.tp, k.conc, r.ITL.Median)
		}
	}
	// One request alone at tp 1: prefill 15 + 0.04×256 ms, decode exactly 11.5 ms a token.
	if c := got[key{"1", "1"}]; c.TTFT.Median < 25.2 || c.TTFT.Median > 25.3 || c.TPOT.Median < 11.49 || c.TPOT.Median > 11.51 {
		t.Errorf("tp 1 c1: TTFT p50 %.3f ms, TPOT p50 %.3f ms; want 25.24 and 11.5", c.TTFT.Median, c.TPOT.Median)
	}
}
