package runner

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sglprof/runner/reports/rundir"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/runner/exitcode"
)

// smiStandIn is a stand-in nvidia-smi whose answers a test chooses. Files in its directory are
// its output: gpus.csv (the guard's --query-gpu), apps.csv, devices.csv, clock.txt, topo.txt;
// gpus.N.csv and apps.N.csv, when present, answer the N-th call of their query instead (1-based),
// so a test can make a process leave or memory grow. hang makes every call sleep.
type smiStandIn struct {
	dir string
}

const (
	smiIdle = "0, GPU-aaaa, 0 %, 1 MiB, 1980 MHz, 1980 MHz, 0x0000000000000001, Enabled, 70.12 W, 33\n" +
		"1, GPU-bbbb, 0 %, 1 MiB, 1980 MHz, 1980 MHz, 0x0000000000000001, Enabled, 69.00 W, 34\n"
	smiForeign   = "4242, python3 other_job.py, 30000 MiB, GPU-aaaa\n"
	smiDevices   = "0, NVIDIA H100 80GB HBM3, 550.54.15, Disabled, Enabled, 700.00 W, 1980 MHz\n1, NVIDIA H100 80GB HBM3, 550.54.15, Disabled, Enabled, 700.00 W, 1980 MHz\n"
	smiTopo      = "\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tNV18\t X \n"
	smiUnlocked  = "GPU 00000000:18:00.0\n    Applications Clocks\n        Graphics : 1755 MHz\n    Default Applications Clocks\n        Graphics : 1755 MHz\n    Clock Policy\n        Auto Boost : On\n"
	smiLocked    = "GPU 00000000:18:00.0\n    Applications Clocks\n        Graphics : 1980 MHz\n    Default Applications Clocks\n        Graphics : 1755 MHz\n"
	smiThermal   = "0, GPU-aaaa, 99 %, 1 MiB, 1410 MHz, 1980 MHz, 0x0000000000000020, Enabled, 650.00 W, 91\n"
	smiBadOutput = "Failed to initialize NVML: Driver/library version mismatch\n"
)

func newSMI(t testing.TB, opts *Options, files map[string]string, hang bool) *smiStandIn {
	t.Helper()
	s := &smiStandIn{dir: t.TempDir()}
	base := map[string]string{"gpus.csv": smiIdle, "apps.csv": "", "devices.csv": smiDevices, "clock.txt": smiUnlocked, "topo.txt": smiTopo}
	for k, v := range files {
		base[k] = v
	}
	for k, v := range base {
		if err := os.WriteFile(filepath.Join(s.dir, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pre := ""
	if hang {
		pre = "sleep 30\n"
	}
	d := s.dir
	script := "#!/bin/sh\n" + pre + `
next() { n=$(cat "` + d + `/$1.n" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "` + d + `/$1.n"
  if [ -f "` + d + `/$1.$n.csv" ]; then cat "` + d + `/$1.$n.csv"; else cat "` + d + `/$1.csv"; fi; }
case "$1" in
--query-gpu=index,uuid,*) next gpus ;;
--query-gpu=index,name,*) cat "` + d + `/devices.csv" ;;
--query-gpu=*) echo "name, driver_version"; echo "NVIDIA H100 80GB HBM3, 550.54.15" ;;
--query-compute-apps=*) next apps ;;
-q) cat "` + d + `/clock.txt" ;;
topo) cat "` + d + `/topo.txt" ;;
*) echo "unknown option $1" >&2; exit 2 ;;
esac
`
	if err := os.WriteFile(filepath.Join(d, "nvidia-smi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	opts.Env = append(opts.Env, "PATH="+d+":"+envValue(opts.Env, "PATH"))
	return s
}

const gpuPlan = `name = "gpu"
[matrix]
model = ["Qwen/Qwen-Image"]
prompt = ["a cat"]
num_inference_steps = [4]
repeats = 2
`

func runGPUPlan(t *testing.T, gate string, opts Options) (*rundir.Summary, []*rundir.CellResult, *rundir.Manifest) {
	t.Helper()
	sum, err := Run(context.Background(), testPlan(t, gpuPlan+gate), opts)
	if err != nil {
		t.Fatal(err)
	}
	var rs []*rundir.CellResult
	for _, row := range sum.Cells {
		var r rundir.CellResult
		if err := rundir.ReadJSON(filepath.Join(sum.RunDir, rundir.CellsDir, row.ID, rundir.ResultFile), &r); err != nil {
			t.Fatal(err)
		}
		rs = append(rs, &r)
	}
	var m rundir.Manifest
	if err := rundir.ReadJSON(filepath.Join(sum.RunDir, rundir.ManifestFile), &m); err != nil {
		t.Fatal(err)
	}
	return sum, rs, &m
}

func warning(r *rundir.CellResult, code string) string {
	for _, w := range r.Warnings {
		if w.Code == code {
			return w.Message
		}
	}
	return ""
}

func reason(r *rundir.CellResult, code string) string {
	for _, w := range r.Reasons {
		if w.Code == code {
			return w.Message
		}
	}
	return ""
}

// A foreign process on GPU 0 gives every cell a gpu-busy warning naming it; the cells still
// run, and result.json carries the clock, throttle and temperature state.
func TestGPUBusyWarns(t *testing.T) {
	opts := simOptions(t)
	newSMI(t, &opts, map[string]string{"apps.csv": smiForeign}, false)
	sum, rs, man := runGPUPlan(t, "", opts)
	if sum.ExitCode != exitcode.OK {
		t.Fatalf("exit %d, want 0 (busy_gpu = warn)", sum.ExitCode)
	}
	for _, r := range rs {
		msg := warning(r, CodeGPUBusy)
		for _, want := range []string{"pid 4242", "python3 other_job.py", "30000 MiB", "GPU 0"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: gpu-busy warning %q lacks %q", r.ID, msg, want)
			}
		}
		g := r.GPU
		if g == nil || g.Start == nil || g.End == nil || len(g.Start.GPUs) != 2 {
			t.Fatalf("%s: gpu check %+v, want start and end snapshots of 2 GPUs", r.ID, g)
		}
		if s := g.Start.GPUs[0]; s.SMClockMHz != 1980 || s.MaxSMMHz != 1980 || s.TempC != 33 || s.Persistence != "Enabled" || len(s.Reasons) != 1 {
			t.Errorf("%s: start GPU 0 = %+v", r.ID, s)
		}
		if len(g.Foreign) != 1 || g.Foreign[0].PID != 4242 {
			t.Errorf("%s: foreign = %+v", r.ID, g.Foreign)
		}
	}
	e := man.GPUEnv
	if e == nil || len(e.Devices) != 2 || e.Devices[0].Driver != "550.54.15" || e.Devices[0].MIG != "Disabled" || e.ClocksLocked == nil || *e.ClocksLocked || !strings.Contains(e.Topology, "NV18") {
		t.Errorf("manifest gpu_env = %+v", e)
	}
}

// busy_gpu = "fail" fails every affected cell without starting it: the run exits 3.
func TestGPUBusyFails(t *testing.T) {
	opts := simOptions(t)
	newSMI(t, &opts, map[string]string{"apps.csv": smiForeign}, false)
	sum, rs, _ := runGPUPlan(t, "[gate]\nbusy_gpu = \"fail\"\n", opts)
	if sum.ExitCode != exitcode.CellsFailed {
		t.Fatalf("exit %d, want 3", sum.ExitCode)
	}
	for _, r := range rs {
		if r.Verdict != plans.VerdictFailed || !strings.Contains(reason(r, CodeGPUBusy), "pid 4242 (python3 other_job.py") {
			t.Errorf("%s: %s %+v", r.ID, r.Verdict, r.Reasons)
		}
		if _, err := os.Stat(filepath.Join(sum.RunDir, rundir.CellsDir, r.ID, rundir.LogFile)); err == nil {
			t.Errorf("%s: the cell was started (log.txt exists)", r.ID)
		}
	}
}

// A cell on GPU 1 (CUDA_VISIBLE_DEVICES) does not care about a process on GPU 0.
func TestGPUBusyOnlyTheCellsGPUs(t *testing.T) {
	opts := simOptions(t)
	newSMI(t, &opts, map[string]string{"apps.csv": smiForeign}, false)
	sum, rs, _ := runGPUPlan(t, "[gate]\nbusy_gpu = \"fail\"\n[backend]\nenv = { CUDA_VISIBLE_DEVICES = \"1\" }\n", opts)
	if sum.ExitCode != exitcode.OK {
		t.Fatalf("exit %d, want 0: %+v", sum.ExitCode, rs[0].Reasons)
	}
	if got := rs[0].GPU.Devices; len(got) != 1 || got[0] != 1 || len(rs[0].GPU.Start.GPUs) != 1 {
		t.Errorf("devices %v, snapshot %+v", got, rs[0].GPU.Start.GPUs)
	}
}

// busy_gpu = "wait": the first cell waits until the process leaves, then runs; a process that
// never leaves fails the cell after busy_wait.
func TestGPUBusyWait(t *testing.T) {
	opts := simOptions(t)
	opts.defaults()
	newSMI(t, &opts, map[string]string{"apps.csv": "", "apps.1.csv": smiForeign, "apps.2.csv": smiForeign}, false)
	opts.gpu = newGPUGuard(&opts)
	opts.gpu.poll = 20 * time.Millisecond
	sum, rs, _ := runGPUPlan(t, "[gate]\nbusy_gpu = \"wait\"\nbusy_wait = \"30s\"\n", opts)
	if sum.ExitCode != exitcode.OK {
		t.Fatalf("exit %d: %+v", sum.ExitCode, rs[0].Reasons)
	}
	if msg := warning(rs[0], CodeGPUBusy); !strings.HasPrefix(msg, "waited ") || !strings.Contains(msg, "pid 4242") || rs[0].GPU.WaitedNS <= 0 {
		t.Errorf("first cell: warning %q, waited %d ns", msg, rs[0].GPU.WaitedNS)
	}
	if msg := warning(rs[1], CodeGPUBusy); msg != "" {
		t.Errorf("second cell found the GPU free, yet warns %q", msg)
	}

	opts = simOptions(t)
	opts.defaults()
	newSMI(t, &opts, map[string]string{"apps.csv": smiForeign}, false)
	opts.gpu = newGPUGuard(&opts)
	opts.gpu.poll = 20 * time.Millisecond
	sum, rs, _ = runGPUPlan(t, "[gate]\nbusy_gpu = \"wait\"\nbusy_wait = \"100ms\"\n", opts)
	if sum.ExitCode != exitcode.CellsFailed || !strings.Contains(reason(rs[0], CodeGPUBusy), "still there after [gate] busy_wait = 100ms") {
		t.Errorf("exit %d, reasons %+v", sum.ExitCode, rs[0].Reasons)
	}
}

// Thermal capping before the cell is a gpu-throttled warning.
func TestGPUThrottledWarns(t *testing.T) {
	opts := simOptions(t)
	newSMI(t, &opts, map[string]string{"gpus.csv": smiThermal}, false)
	_, rs, _ := runGPUPlan(t, "", opts)
	msg := warning(rs[0], CodeGPUThrottled)
	if !strings.Contains(msg, "GPU 0 sw_thermal_slowdown (SM 1410 of 1980 MHz, 91 °C)") {
		t.Errorf("gpu-throttled warning %q", msg)
	}
	if r := rs[0].GPU.Start.GPUs[0].Reasons; len(r) != 1 || r[0] != "sw_thermal_slowdown" {
		t.Errorf("throttle reasons in result.json: %v", r)
	}
}

// require_locked_clocks: unlocked clocks fail the cells, locked ones pass, and a state that
// cannot be read fails them saying so.
func TestRequireLockedClocks(t *testing.T) {
	gate := "[gate]\nrequire_locked_clocks = true\n"
	opts := simOptions(t)
	newSMI(t, &opts, nil, false)
	sum, rs, _ := runGPUPlan(t, gate, opts)
	if sum.ExitCode != exitcode.CellsFailed || !strings.Contains(reason(rs[0], CodeClocksLocked), "nvidia-smi -lgc") {
		t.Errorf("unlocked: exit %d, reasons %+v", sum.ExitCode, rs[0].Reasons)
	}

	opts = simOptions(t)
	newSMI(t, &opts, map[string]string{"clock.txt": smiLocked}, false)
	sum, rs, _ = runGPUPlan(t, gate, opts)
	if sum.ExitCode != exitcode.OK || rs[0].GPU.ClocksLocked == nil || !*rs[0].GPU.ClocksLocked {
		t.Errorf("locked: exit %d, check %+v", sum.ExitCode, rs[0].GPU)
	}

	opts = simOptions(t)
	opts.Env = append(opts.Env, "PATH="+t.TempDir()+":/usr/bin:/bin") // no nvidia-smi
	sum, rs, _ = runGPUPlan(t, gate, opts)
	if sum.ExitCode != exitcode.CellsFailed || !strings.Contains(reason(rs[0], CodeClocksUnknown), "clock state could not be read") {
		t.Errorf("no nvidia-smi: exit %d, reasons %+v", sum.ExitCode, rs[0].Reasons)
	}
}

// nvidia-smi missing, printing garbage or hanging: recorded as unavailable, the run goes on;
// a hang costs one timeout, not one per cell.
func TestGPUProbeUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		hang  bool
		none  bool
		want  string
	}{
		{name: "missing", none: true, want: "unavailable: nvidia-smi not found on PATH"},
		{name: "garbage", files: map[string]string{"gpus.csv": smiBadOutput, "devices.csv": smiBadOutput}, want: "fields, want 10"},
		{name: "hang", hang: true, want: "timed out after 300ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := simOptions(t)
			if tc.hang {
				opts.ProbeTimeout = 300 * time.Millisecond
			}
			if tc.none {
				opts.Env = append(opts.Env, "PATH="+t.TempDir()+":/usr/bin:/bin")
			} else {
				newSMI(t, &opts, tc.files, tc.hang)
			}
			sum, rs, man := runGPUPlan(t, "", opts)
			if sum.ExitCode != exitcode.OK {
				t.Fatalf("exit %d: %+v", sum.ExitCode, rs[0].Reasons)
			}
			for _, r := range rs {
				if r.GPU == nil || r.GPU.Start == nil || !strings.Contains(r.GPU.Start.Error, tc.want) || len(r.Warnings) != 0 {
					t.Errorf("%s: gpu %+v, warnings %+v; want the error %q and no warning", r.ID, r.GPU.Start, r.Warnings, tc.want)
				}
			}
			if man.GPUEnv == nil || !strings.Contains(man.GPUEnv.DevicesError, strings.SplitN(tc.want, " ", 2)[0]) {
				t.Errorf("manifest gpu_env %+v", man.GPUEnv)
			}
			if tc.hang {
				// Asked once (by the manifest), then left alone: no cell waits for it again.
				for _, r := range rs {
					if !strings.Contains(r.GPU.Start.Error, "not asked again this run") || r.GPU.Start.WallNS != 0 {
						t.Errorf("%s: a hanging nvidia-smi was asked again: %+v", r.ID, r.GPU.Start)
					}
				}
			}
		})
	}
}

// Memory that grew during the cell and that no process holds is reported as leaked (after a
// second look).
func TestGPULeakReported(t *testing.T) {
	opts := simOptions(t)
	opts.defaults()
	leaked := strings.Replace(smiIdle, " 1 MiB", " 9000 MiB", 1)
	newSMI(t, &opts, map[string]string{"gpus.csv": leaked, "gpus.1.csv": smiIdle}, false)
	opts.gpu = newGPUGuard(&opts)
	opts.gpu.settle = time.Millisecond
	_, rs, _ := runGPUPlan(t, "", opts)
	if msg := warning(rs[0], CodeGPULeaked); !strings.Contains(msg, "GPU 0 holds 8999 MiB more after the cell") {
		t.Errorf("gpu-leaked warning %q", msg)
	}
	if msg := warning(rs[1], CodeGPULeaked); msg != "" {
		t.Errorf("second cell started with the memory already in use, yet %q", msg)
	}
}

func TestOwnProcessTree(t *testing.T) {
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	g := newGPUGuard(&Options{})
	if !g.own(cmd.Process.Pid) || !g.own(os.Getpid()) {
		t.Error("a child of the runner is not its own")
	}
	if g.own(1) || g.own(1<<30) {
		t.Error("init or a pid that does not exist counted as the runner's own")
	}
}

func TestCudaDevices(t *testing.T) {
	for v, want := range map[string][]int{"": nil, "0,2": {0, 2}, " 3 ": {3}, "GPU-aaaa": nil, "0,MIG-x": nil, "-1": nil} {
		got := cudaDevices([]string{"CUDA_VISIBLE_DEVICES=" + v})
		if len(got) != len(want) || (len(want) > 0 && got[len(got)-1] != want[len(want)-1]) {
			t.Errorf("%q: %v, want %v", v, got, want)
		}
	}
}

// A serve cell: the idle check before the client phase counts the runner's own server as its
// own and names only the neighbour. The stand-in lists, beside a foreign process, every
// grandchild of the runner (its caller's parent: the stand-in runs under a supervisor, as the
// server does) as a compute process: the server, but not the stand-ins themselves, which are
// gone by the time the list is read.
func TestGPUBusyServeClientPhase(t *testing.T) {
	opts := simOptions(t)
	s := newSMI(t, &opts, map[string]string{"apps.csv": smiForeign}, false)
	script, err := os.ReadFile(filepath.Join(s.dir, "nvidia-smi"))
	if err != nil {
		t.Fatal(err)
	}
	ours := `--query-compute-apps=*) next apps; for c in $(ps -o pid= --ppid $(ps -o ppid= -p $PPID)); do for p in $(ps -o pid=,comm= --ppid $c | grep -v nvidia-smi | cut -c1-8); do echo "$p, ours, 5000 MiB, GPU-aaaa"; done; done ;;` + "\n"
	patched := strings.Replace(string(script), "--query-compute-apps=*) next apps ;;\n", ours, 1)
	if err := os.WriteFile(filepath.Join(s.dir, "nvidia-smi"), []byte(patched), 0o755); err != nil {
		t.Fatal(err)
	}
	p := testPlan(t, `
name = "srv"
[backend]
mode = "serve"
[matrix]
model = ["Qwen/Qwen-Image"]
prompt = ["a cat"]
resolution = ["256x256"]
repeats = 2
[load]
warmup = 0
requests = 1
`)
	sum, err := Run(context.Background(), p, opts)
	if err != nil {
		t.Fatal(err)
	}
	if sum.ExitCode != exitcode.OK {
		t.Fatalf("summary %+v", sum)
	}
	for _, row := range sum.Cells {
		r := serveResult(t, sum, row.ID)
		msg := warning(r, CodeGPUBusy)
		if !strings.Contains(msg, "pid 4242 (python3 other_job.py") || strings.Count(msg, "pid ") != 1 {
			t.Errorf("%s: gpu-busy warning %q, want pid 4242 only (the rest are the runner's)", row.ID, msg)
		}
		if r.GPU == nil || r.GPU.Client == nil || r.GPU.End == nil {
			t.Fatalf("%s: gpu check %+v, want client-phase and end snapshots", row.ID, r.GPU)
		}
		if !slices.ContainsFunc(r.GPU.Client.Apps, func(a rundir.GPUApp) bool { return a.Name == "ours" }) {
			t.Errorf("%s: the stand-in listed none of the runner's processes: %+v", row.ID, r.GPU.Client.Apps)
		}
		if row.ID == sum.Cells[1].ID && r.GPU.Start != nil {
			t.Errorf("%s reuses the server: no separate start check expected", row.ID)
		}
	}
	var rec rundir.ServerRecord
	if err := rundir.ReadJSON(filepath.Join(sum.RunDir, rundir.ServersDir, "1", rundir.ServerFile), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.GPUMemBefore != "1,1" {
		t.Errorf("server record GPU memory before = %q, want the stand-in's 1,1", rec.GPUMemBefore)
	}
}

// BenchmarkGPUCheckCell is what the guard adds to one cell with the stand-in nvidia-smi: the
// idle check before it and the snapshot after it (docs/performance.md; the bar is
// 300 ms). BENCH_SMI names a real nvidia-smi to measure instead.
func BenchmarkGPUCheckCell(b *testing.B) {
	opts := Options{Env: os.Environ()}
	opts.defaults()
	if smi := os.Getenv("BENCH_SMI"); smi != "" {
		opts.Env = append(opts.Env, "PATH="+filepath.Dir(smi)+":"+envValue(opts.Env, "PATH"))
	} else {
		newSMI(b, &opts, map[string]string{"apps.csv": "1, ours, 5000 MiB, GPU-aaaa\n"}, false)
	}
	p, err := plans.Parse("plan.toml", []byte(gpuPlan))
	if err != nil {
		b.Fatal(err)
	}
	rec := cellRecord{CellRecord: rundir.CellRecord{Cell: p.Expand()[0]}}
	ctx := context.Background()
	for b.Loop() {
		res := &cellResult{}
		gpuBefore(ctx, rec, &opts, res)
		gpuAfter(ctx, &opts, res, true)
		if res.GPU.End == nil || !res.GPU.End.Available() {
			b.Fatalf("no end snapshot: %+v", res.GPU.End)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/cell")
}

func FuzzCudaDevices(f *testing.F) {
	for _, s := range []string{"0", "0,1,2", "GPU-aaaa", "", " 3 ,4", "-1", "0,,1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got := cudaDevices([]string{"CUDA_VISIBLE_DEVICES=" + v})
		for _, i := range got {
			if i < 0 {
				t.Fatalf("%q: negative index %d", v, i)
			}
		}
		if strings.TrimSpace(v) == "" && got != nil {
			t.Fatalf("%q: %v, want nil (all GPUs)", v, got)
		}
	})
}

// Ctrl-C while busy_gpu = "wait" waits: the cell is interrupted (so --resume runs it), not
// failed.
func TestGPUBusyWaitInterrupted(t *testing.T) {
	opts := simOptions(t)
	opts.defaults()
	newSMI(t, &opts, map[string]string{"apps.csv": smiForeign}, false)
	p := testPlan(t, gpuPlan+"[gate]\nbusy_gpu = \"wait\"\nbusy_wait = \"1h\"\n")
	ctx, cancel := context.WithCancel(context.Background())
	opts.gpu = newGPUGuard(&opts)
	opts.gpu.poll = 20 * time.Millisecond
	res := &cellResult{CellResult: rundir.CellResult{ID: "c"}}
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	if gpuBefore(ctx, cellRecord{CellRecord: rundir.CellRecord{Cell: p.Expand()[0]}}, &opts, res) {
		t.Fatal("the cell was allowed to start")
	}
	if res.Verdict != plans.VerdictInterrupted || res.Reasons[0].Code != "interrupted" {
		t.Errorf("verdict %s, reasons %+v", res.Verdict, res.Reasons)
	}
}
