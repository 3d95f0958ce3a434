package runner

// The GPU noise guard. Before each cell, and before each serve cell's client phase,
// the runner asks nvidia-smi (runner/gpu) which compute processes hold the GPUs the cell uses
// and how their clocks stand; after the cell it asks again for leaked memory and throttling.
// What it saw goes into result.json ("gpu"); [gate] busy_gpu and require_locked_clocks decide
// whether a cell may start. A probe that cannot be read is recorded with its reason and never
// fails a cell, except under require_locked_clocks, where an unknown clock state is a failure.
//
// --simulate replaces sglang and nsys only: the guard always reads the nvidia-smi on the
// cells' PATH, so tests put a stand-in there.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sglprof/runner/reports/rundir"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/runner/gpu"
	"github.com/sglprof/runner/runner/proc"
)

// Warning and reason codes of the guard.
const (
	CodeGPUBusy       = "gpu-busy"
	CodeGPUThrottled  = "gpu-throttled"
	CodeGPULeaked     = "gpu-leaked"
	CodeClocksLocked  = "gpu-clocks-unlocked"
	CodeClocksUnknown = "gpu-clocks-unknown"
)

// gpuGuard runs the checks of one run. After a probe that is missing or hangs it stops asking
// for the rest of the run, so a hung nvidia-smi costs one timeout, not one per cell.
type gpuGuard struct {
	prober gpu.Prober
	log    *slog.Logger
	self   int
	poll   time.Duration // busy_gpu = "wait" polling interval
	settle time.Duration // how long a suspected leak is given to clear before it is reported

	mu     sync.Mutex
	down   string
	warned bool
}

// guardTimeout bounds each nvidia-smi call of the guard: a healthy one answers in well under a
// second, and a hang must not hold up a sweep for long.
const guardTimeout = 5 * time.Second

func newGPUGuard(opts *Options) *gpuGuard {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &gpuGuard{
		prober: gpu.Prober{Env: opts.Env, Timeout: min(opts.ProbeTimeout, guardTimeout)},
		log:    log,
		self:   os.Getpid(),
		poll:   2 * time.Second,
		settle: time.Second,
	}
}

// guard returns the run's GPU guard, creating it on first use (cells run one at a time).
func (o *Options) guard() *gpuGuard {
	if o.gpu == nil {
		o.gpu = newGPUGuard(o)
	}
	return o.gpu
}

// snapshot asks nvidia-smi about devices, unless an earlier probe showed it cannot answer.
func (g *gpuGuard) snapshot(ctx context.Context, devices []int) *rundir.GPUSnapshot {
	if down := g.isDown(); down != "" {
		return &rundir.GPUSnapshot{At: time.Now().UTC(), Error: down}
	}
	s := g.prober.Snapshot(ctx, devices)
	if !s.Available() && ctx.Err() == nil {
		g.failed(s.Error)
	}
	return &s
}

// failed notes a probe failure: logged once per run; one that will not get better (no
// nvidia-smi, a hang) stops further probes.
func (g *gpuGuard) failed(why string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if strings.HasPrefix(why, "unavailable") || strings.Contains(why, "timed out") {
		g.down = why + " (not asked again this run)"
	}
	if !g.warned {
		g.warned = true
		// No nvidia-smi at all is a machine without a GPU (a laptop running --simulate): say
		// it, but not as a warning; one that is there and fails is worth a warning.
		level := slog.LevelWarn
		if strings.Contains(why, "not found on PATH") {
			level = slog.LevelInfo
		}
		g.log.Log(context.Background(), level, "GPU probe unavailable; cells run without the idle and clock checks", "reason", why)
	}
}

// isDown says why nvidia-smi is no longer asked this run, or "".
func (g *gpuGuard) isDown() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.down
}

// clocksLocked reads whether application clocks are locked; the error says why it cannot.
func (g *gpuGuard) clocksLocked(ctx context.Context) (bool, error) {
	if down := g.isDown(); down != "" {
		return false, fmt.Errorf("%s", down)
	}
	ok, err := g.prober.ClocksLocked(ctx)
	if err != nil && ctx.Err() == nil {
		g.failed(err.Error())
	}
	return ok, err
}

// own reports whether pid is the runner or one of its descendants (a cell, a server, their
// workers): such a process is the cell's own, not a neighbour. Processes in another PID
// namespace (nvidia-smi in a container may list host pids) are not found and count as foreign.
func (g *gpuGuard) own(pid int) bool {
	for range 64 {
		if pid == g.self {
			return true
		}
		if pid <= 1 {
			return false
		}
		st, ok := proc.ReadStat(pid)
		if !ok {
			return false
		}
		pid = st.PPID
	}
	return false
}

// cudaDevices reads the GPU indices of CUDA_VISIBLE_DEVICES in env; nil (all GPUs) when it is
// unset, empty or names GPUs by UUID or MIG instance.
func cudaDevices(env []string) []int {
	v := strings.TrimSpace(envValue(env, "CUDA_VISIBLE_DEVICES"))
	if v == "" {
		return nil
	}
	var out []int
	for f := range strings.SplitSeq(v, ",") {
		i, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || i < 0 {
			return nil
		}
		out = append(out, i)
	}
	return out
}

// gpuBefore runs the checks before a cell starts and records them in res. It returns false
// when the cell must not start (busy_gpu = "fail" or "wait" ran out, require_locked_clocks);
// res then holds the verdict and reasons.
func gpuBefore(ctx context.Context, rec cellRecord, opts *Options, res *cellResult) bool {
	g := opts.guard()
	t0 := time.Now()
	chk := &rundir.GPUCheck{Devices: cudaDevices(mergeEnv(opts.Env, rec.Launch.Env))}
	res.GPU = chk
	defer func() { chk.CheckNS += time.Since(t0).Nanoseconds() - chk.WaitedNS }()
	var fails []rundir.Reason
	chk.Start, fails = g.idle(ctx, rec.Cell, chk, res)
	if rec.Cell.Gate.RequireLockedClocks {
		fails = append(fails, g.requireLocked(ctx, chk)...)
	}
	return g.refuse(ctx, res, fails)
}

// gpuClient is the idle check before a serve cell's client phase (the server is the runner's
// own, so only neighbours count). It returns false when the client phase must not run.
func gpuClient(ctx context.Context, rec cellRecord, opts *Options, res *cellResult) bool {
	t0 := time.Now()
	if res.GPU == nil {
		res.GPU = &rundir.GPUCheck{Devices: cudaDevices(mergeEnv(opts.Env, rec.Launch.Env))}
	}
	chk := res.GPU
	waited := chk.WaitedNS
	var fails []rundir.Reason
	g := opts.guard()
	chk.Client, fails = g.idle(ctx, rec.Cell, chk, res)
	chk.CheckNS += time.Since(t0).Nanoseconds() - (chk.WaitedNS - waited)
	return g.refuse(ctx, res, fails)
}

// idle takes a snapshot of the cell's GPUs and applies [gate] busy_gpu to the foreign compute
// processes on them; a throttled GPU adds a warning to res. It returns the snapshot and the
// reasons the cell must not go on.
func (g *gpuGuard) idle(ctx context.Context, c plans.Cell, chk *rundir.GPUCheck, res *cellResult) (*rundir.GPUSnapshot, []rundir.Reason) {
	s := g.snapshot(ctx, chk.Devices)
	foreign := gpu.Foreign(s.Apps, g.own)
	if len(foreign) > 0 && c.Gate.BusyGPU == plans.BusyGPUWait {
		s, foreign = g.wait(ctx, c, chk, s, foreign, res)
	}
	if msg := gpu.Throttled(s.GPUs); msg != "" {
		g.warn(res, rundir.Reason{Code: CodeGPUThrottled, Message: msg + " before the cell; its timings are lower than the GPU can reach; let it cool down, check its power limit, or keep this run out of comparisons"})
	}
	if len(foreign) == 0 {
		return s, nil
	}
	chk.Foreign = foreign
	r := rundir.Reason{Code: CodeGPUBusy, Message: gpu.BusyMessage(foreign)}
	switch c.Gate.BusyGPU {
	case plans.BusyGPUFail:
		r.Message += `; [gate] busy_gpu = "fail": the cell was not started; stop that process, or set busy_gpu = "wait"`
		return s, []rundir.Reason{r}
	case plans.BusyGPUWait:
		r.Message += fmt.Sprintf("; still there after [gate] busy_wait = %s: the cell was not started; stop that process or raise busy_wait", c.Gate.BusyWait.Duration)
		return s, []rundir.Reason{r}
	}
	r.Message += `; set [gate] busy_gpu = "fail" or "wait" to refuse such cells`
	g.warn(res, r)
	return s, nil
}

// wait polls until the foreign processes are gone, busy_wait ran out or the run was stopped.
func (g *gpuGuard) wait(ctx context.Context, c plans.Cell, chk *rundir.GPUCheck, s *rundir.GPUSnapshot, foreign []rundir.GPUApp, res *cellResult) (*rundir.GPUSnapshot, []rundir.GPUApp) {
	t0 := time.Now()
	first := gpu.BusyMessage(foreign)
	deadline := t0.Add(c.Gate.BusyWait.Duration)
	g.log.Info("GPU busy; waiting for it to come free", "cell", c.ID, "busy_wait", c.Gate.BusyWait.Duration, "processes", first)
	for len(foreign) > 0 && time.Now().Before(deadline) {
		t := time.NewTimer(min(g.poll, time.Until(deadline)))
		select {
		case <-ctx.Done():
			t.Stop()
			chk.WaitedNS += time.Since(t0).Nanoseconds()
			return s, foreign
		case <-t.C:
		}
		s = g.snapshot(ctx, chk.Devices)
		foreign = gpu.Foreign(s.Apps, g.own)
	}
	chk.WaitedNS += time.Since(t0).Nanoseconds()
	if len(foreign) == 0 {
		g.warn(res, rundir.Reason{Code: CodeGPUBusy, Message: fmt.Sprintf("waited %s for the GPU to come free ([gate] busy_gpu = \"wait\"): %s", time.Duration(chk.WaitedNS).Round(time.Millisecond), first)})
	}
	return s, foreign
}

// requireLocked fails the cell when the clocks are not locked or their state cannot be read.
func (g *gpuGuard) requireLocked(ctx context.Context, chk *rundir.GPUCheck) []rundir.Reason {
	locked, err := g.clocksLocked(ctx)
	if err != nil {
		chk.ClockError = err.Error()
		return []rundir.Reason{{Code: CodeClocksUnknown, Message: fmt.Sprintf("[gate] require_locked_clocks = true, but the clock state could not be read (%v); the cell was not started; make nvidia-smi -q -d CLOCK,PERFORMANCE work on this machine or set require_locked_clocks = false", err)}}
	}
	chk.ClocksLocked = &locked
	if locked {
		return nil
	}
	return []rundir.Reason{{Code: CodeClocksLocked, Message: "[gate] require_locked_clocks = true, but the GPU clocks float (application clocks at their defaults, auto boost on); the cell was not started; lock them, e.g. `sudo nvidia-smi -lgc <max SM MHz>` (and `-rgc` after), or set require_locked_clocks = false"}}
}

// gpuAfter takes the snapshot after a cell and adds warnings for memory nobody holds and for
// throttling that started during the cell. serve marks a serve cell: its server may rightly
// keep running (and holding memory) after the cell, so only memory that no process holds is a
// leak, measured from the client phase's snapshot.
func gpuAfter(ctx context.Context, opts *Options, res *cellResult, serve bool) {
	chk := res.GPU
	if chk == nil {
		return
	}
	g := opts.guard()
	t0 := time.Now()
	defer func() { chk.CheckNS += time.Since(t0).Nanoseconds() }()
	chk.End = g.snapshot(ctx, chk.Devices)
	before := chk.Start
	own := g.own
	if serve {
		own = nil
		if chk.Client != nil {
			before = chk.Client
		}
	}
	if before != nil {
		leaked := gpu.Leaked(*before, *chk.End, own)
		if len(leaked) > 0 && ctx.Err() == nil {
			// The driver frees a context a moment after its process exits: look once more
			// before calling it a leak.
			time.Sleep(g.settle)
			chk.End = g.snapshot(ctx, chk.Devices)
			leaked = gpu.Leaked(*before, *chk.End, own)
		}
		chk.Leaked = leaked
		if len(leaked) > 0 {
			g.warn(res, rundir.Reason{Code: CodeGPULeaked, Message: strings.Join(leaked, "; ") + "; the next cells share the GPU with it; find the holder with nvidia-smi and free the GPU"})
		}
	}
	if throttledBefore(chk) {
		return
	}
	if msg := gpu.Throttled(chk.End.GPUs); msg != "" {
		g.warn(res, rundir.Reason{Code: CodeGPUThrottled, Message: msg + " at the end of the cell; part of its work ran at lower clocks; let the GPU cool down between cells or check its power limit"})
	}
}

// refuse fails the cell for fails, if any, and reports whether it may go on. A check cut short
// by Ctrl-C (busy_gpu = "wait") makes the cell interrupted, so --resume runs it again.
func (g *gpuGuard) refuse(ctx context.Context, res *cellResult, fails []rundir.Reason) bool {
	if ctx.Err() != nil {
		res.Verdict = plans.VerdictInterrupted
		res.Reasons = append(res.Reasons, rundir.Reason{Code: "interrupted", Message: "stopped by the user during the GPU checks, before the cell started; `runner run --resume` runs this cell again"})
		return false
	}
	if len(fails) == 0 {
		return true
	}
	res.Verdict = plans.VerdictFailed
	res.Reasons = append(res.Reasons, fails...)
	for _, r := range fails {
		g.log.Error(r.Message, "cell", res.ID, "code", r.Code)
	}
	return false
}

// warn adds a warning to the cell's result and says it on the log, so a terminal shows a busy
// or throttled GPU as it happens and not only in result.json.
func (g *gpuGuard) warn(res *cellResult, r rundir.Reason) {
	res.Warnings = append(res.Warnings, r)
	g.log.Warn(r.Message, "cell", res.ID, "code", r.Code)
}

// throttledBefore reports whether a warning for throttling was already given before the cell.
func throttledBefore(chk *rundir.GPUCheck) bool {
	for _, s := range []*rundir.GPUSnapshot{chk.Start, chk.Client} {
		if s != nil && gpu.Throttled(s.GPUs) != "" {
			return true
		}
	}
	return false
}
