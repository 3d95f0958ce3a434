package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/exitcode"
)

// slotPlan is a plan of n equal simulated cells on GPU slots; extra is appended to [executor].
func slotPlan(n int, gpus, extra string) string {
	seeds := make([]string, n)
	for i := range seeds {
		seeds[i] = fmt.Sprint(i)
	}
	return fmt.Sprintf(`name = "slots"
[backend]
extra_args = ["--backend", "sglang"]
[matrix]
model = ["Qwen/Qwen-Image"]
prompt = ["a cat"]
resolution = ["512x512"]
num_inference_steps = [8]
seed = [%s]
[executor]
gpus = %s
%s`, strings.Join(seeds, ", "), gpus, extra)
}

// runSlots runs plan body simulated with time scale scale and returns the run's results by id.
func runSlots(t *testing.T, body, scale string) map[string]*rundir.CellResult {
	t.Helper()
	opts := simOptions(t)
	opts.Env = append(opts.Env, "RUNNER_SIM_TIME_SCALE="+scale)
	sum, err := Run(context.Background(), testPlan(t, body), opts)
	if err != nil {
		t.Fatal(err)
	}
	if sum.ExitCode != 0 {
		t.Fatalf("exit %d: %+v", sum.ExitCode, sum.Counts)
	}
	out := map[string]*rundir.CellResult{}
	for _, row := range sum.Cells {
		var r rundir.CellResult
		if err := rundir.ReadJSON(filepath.Join(sum.RunDir, rundir.CellsDir, row.ID, rundir.ResultFile), &r); err != nil {
			t.Fatal(err)
		}
		log, err := os.ReadFile(filepath.Join(sum.RunDir, rundir.CellsDir, row.ID, rundir.LogFile))
		if err != nil {
			t.Fatal(err)
		}
		// The simulator logs the CUDA_VISIBLE_DEVICES it was started with, as the workers see it.
		m := regexp.MustCompile(`CUDA_VISIBLE_DEVICES=([0-9,]*)`).FindSubmatch(log)
		if m == nil || string(m[1]) != gpuList(r.GPUs) {
			t.Errorf("cell %s: result.json gpus %v, but the simulator saw CUDA_VISIBLE_DEVICES %q", row.ID, r.GPUs, m)
		}
		out[row.ID] = &r
	}
	return out
}

// Cells that run at the same time never share a GPU, and they did run side by side.
func TestGPUSlotsAreDisjoint(t *testing.T) {
	res := runSlots(t, slotPlan(12, `"0,1,2,3"`, ""), "0.0005")
	overlapped := 0
	for a, ra := range res {
		if len(ra.GPUs) != 1 {
			t.Errorf("cell %s holds GPUs %v; want one", a, ra.GPUs)
		}
		for b, rb := range res {
			if a >= b || !ra.Start.Before(rb.End) || !rb.Start.Before(ra.End) {
				continue
			}
			overlapped++
			for _, g := range ra.GPUs {
				if slices.Contains(rb.GPUs, g) {
					t.Errorf("cells %s and %s ran at the same time on GPU %d", a, b, g)
				}
			}
		}
	}
	if overlapped == 0 {
		t.Error("no two cells overlapped in time: the GPU slots ran one cell at a time")
	}
}

// A cell's own --num-gpus sets how many GPUs it holds; gpus_per_cell overrides it.
func TestGPUSlotsCellSize(t *testing.T) {
	body := strings.Replace(slotPlan(4, "4", ""), `["--backend", "sglang"]`, `["--backend", "sglang", "--num-gpus", "2"]`, 1)
	for id, r := range runSlots(t, body, "0") {
		if len(r.GPUs) != 2 {
			t.Errorf("cell %s (--num-gpus 2) holds GPUs %v; want two", id, r.GPUs)
		}
	}
	// gpus_per_cell below a cell's own --num-gpus does not cut the cell down (it would fail
	// with "invalid device ordinal" on too few GPUs).
	for id, r := range runSlots(t, strings.Replace(body, "[executor]\n", "[executor]\ngpus_per_cell = 1\n", 1), "0") {
		if len(r.GPUs) != 2 {
			t.Errorf("cell %s (--num-gpus 2, gpus_per_cell = 1) holds GPUs %v; want two", id, r.GPUs)
		}
	}
	for id, r := range runSlots(t, slotPlan(3, "4", "gpus_per_cell = 4\n"), "0") {
		if !slices.Equal(r.GPUs, []int{0, 1, 2, 3}) {
			t.Errorf("cell %s (gpus_per_cell = 4) holds GPUs %v; want all four", id, r.GPUs)
		}
	}
}

// A GPU list beyond the machine's, checked against a stand-in nvidia-smi, is refused before
// any cell runs.
func TestGPUSlotsBeyondMachine(t *testing.T) {
	bin := t.TempDir()
	smi := "#!/bin/sh\ncase \"$1\" in --query-gpu=*) echo '0, GPU-a, 0, 0, 1980, 1980, 0x0, Enabled, 70.0, 30'; echo '1, GPU-b, 0, 0, 1980, 1980, 0x0, Enabled, 70.0, 30';; esac\n"
	if err := os.WriteFile(filepath.Join(bin, "nvidia-smi"), []byte(smi), 0o755); err != nil {
		t.Fatal(err)
	}
	opts := simOptions(t)
	opts.Env = append(opts.Env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	_, err := Run(context.Background(), testPlan(t, slotPlan(2, `"0,1,2"`, "")), opts)
	var ue *exitcode.UsageError
	if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), "names GPU 2, but nvidia-smi reports 2 GPU(s)") {
		t.Fatalf("err = %v; want a usage error naming GPU 2", err)
	}
	entries, _ := os.ReadDir(opts.OutputDir)
	if len(entries) != 0 {
		t.Errorf("a refused run created %d entries in the output directory", len(entries))
	}
}

// BenchmarkGPUSlots runs 16 equal simulated cells on 4 GPU slots and one at a time; the
// speedup metric is sequential/slots wall time (4 is perfect). The time scale makes a cell
// about half a second of simulated GPU work, so the figure measures the executor rather than
// process start-up on a 2-core machine.
func BenchmarkGPUSlots(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	run := func(gpus string) time.Duration {
		body := slotPlan(16, gpus, "")
		if gpus == "" {
			body = strings.Replace(body, "[executor]\ngpus = \n", "", 1)
		}
		p, err := plans.Parse("plan.toml", []byte(body))
		if err != nil {
			b.Fatal(err)
		}
		opts := Options{Simulate: true, Exe: exe, NoTriage: true, OutputDir: b.TempDir(),
			Env: append(os.Environ(), "RUNNER_SIM_TIME_SCALE=0.5"), Nightly: NightlyOptions{History: "off"}}
		t0 := time.Now()
		if _, err := Run(context.Background(), p, opts); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	var seq, par time.Duration
	for b.Loop() {
		seq += run("")
		par += run("4")
	}
	b.ReportMetric(float64(seq)/float64(par), "speedup")
	b.ReportMetric(float64(par)/float64(seq)*4, "slots/ideal")
}
