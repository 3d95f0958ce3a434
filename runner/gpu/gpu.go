// Package gpu is the one owner of nvidia-smi: it asks the GPUs, through whatever nvidia-smi is
// on the cells' PATH, which compute processes hold them, how their clocks, throttle reasons,
// temperature and memory stand, and whether application clocks are locked. The runner uses it
// before and after every cell (the noise guard) and once per run (the manifest).
//
// Every query is best-effort: nvidia-smi missing, hanging or printing something unexpected
// gives a Snapshot whose Error says why, never an error that stops a run, because a missing
// probe must not cost a GPU sweep. Tests put a stand-in nvidia-smi on the PATH, so each path is
// exercised on a machine without a GPU.
package gpu

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/proc"
)

// GPUQuery is the --query-gpu field list of a Snapshot, in the order ParseGPUs reads it.
const GPUQuery = "index,uuid,utilization.gpu,memory.used,clocks.sm,clocks.max.sm," +
	"clocks_throttle_reasons.active,persistence_mode,power.draw,temperature.gpu"

// AppsQuery is the --query-compute-apps field list, in the order ParseApps reads it.
const AppsQuery = "pid,process_name,used_memory,gpu_uuid"

// The records this package produces (rundir.GPUState, GPUApp, GPUSnapshot, GPUDevice,
// GPUVersions) are part of result.json and manifest.json, whose types the rundir package owns.

// Prober runs nvidia-smi. The zero value looks nvidia-smi up on the process's PATH with a
// 5 s timeout.
type Prober struct {
	// Env is the environment nvidia-smi runs with and whose PATH finds it (the cells' own,
	// so a stand-in earlier on that PATH wins); nil finds no nvidia-smi (a core package never reads the process's own environment).
	Env []string
	// Timeout bounds each nvidia-smi call; 0 means 5 s.
	Timeout time.Duration
	// Command overrides the program (default "nvidia-smi").
	Command string
}

// Throttle reason bits of nvmlClocksThrottleReasons (nvidia-smi's
// clocks_throttle_reasons.active is their OR, printed in hex).
const (
	ReasonGPUIdle           uint64 = 0x1
	ReasonAppClocksSetting  uint64 = 0x2
	ReasonSWPowerCap        uint64 = 0x4
	ReasonHWSlowdown        uint64 = 0x8
	ReasonSyncBoost         uint64 = 0x10
	ReasonSWThermalSlowdown uint64 = 0x20
	ReasonHWThermalSlowdown uint64 = 0x40
	ReasonHWPowerBrake      uint64 = 0x80
	ReasonDisplayClock      uint64 = 0x100
)

var reasonNames = []struct {
	bit  uint64
	name string
}{
	{ReasonGPUIdle, "gpu_idle"},
	{ReasonAppClocksSetting, "applications_clocks_setting"},
	{ReasonSWPowerCap, "sw_power_cap"},
	{ReasonHWSlowdown, "hw_slowdown"},
	{ReasonSyncBoost, "sync_boost"},
	{ReasonSWThermalSlowdown, "sw_thermal_slowdown"},
	{ReasonHWThermalSlowdown, "hw_thermal_slowdown"},
	{ReasonHWPowerBrake, "hw_power_brake_slowdown"},
	{ReasonDisplayClock, "display_clock_setting"},
}

// ReasonNames spells out the bits of a throttle mask, lowest first.
func ReasonNames(mask uint64) []string {
	var out []string
	for _, r := range reasonNames {
		if mask&r.bit != 0 {
			out = append(out, r.name)
		}
	}
	return out
}

// Capping is the part of a throttle mask that lowers clocks for power or heat: the reasons a
// timing taken under them is not comparable with one taken without.
const Capping = ReasonSWPowerCap | ReasonHWSlowdown | ReasonSWThermalSlowdown |
	ReasonHWThermalSlowdown | ReasonHWPowerBrake

// Snapshot queries the GPUs and their compute processes. indices restricts the GPUs kept (nil
// keeps all); apps on other GPUs are dropped too.
func (p Prober) Snapshot(ctx context.Context, indices []int) rundir.GPUSnapshot {
	t0 := time.Now()
	s := rundir.GPUSnapshot{At: t0.UTC()}
	// The two queries are independent; asking both at once halves what the guard adds to a
	// cell (docs/performance.md).
	type reply struct {
		out []byte
		err error
	}
	appsc := make(chan reply, 1)
	go func() {
		out, err := p.run(ctx, "--query-compute-apps="+AppsQuery, "--format=csv,noheader")
		appsc <- reply{out, err}
	}()
	out, err := p.run(ctx, "--query-gpu="+GPUQuery, "--format=csv,noheader")
	ar := <-appsc
	if err != nil {
		s.Error = err.Error()
		s.WallNS = time.Since(t0).Nanoseconds()
		return s
	}
	gpus, err := ParseGPUs(out)
	if err != nil {
		s.Error = "nvidia-smi --query-gpu: " + err.Error()
		s.WallNS = time.Since(t0).Nanoseconds()
		return s
	}
	var apps []rundir.GPUApp
	err = ar.err
	if err == nil {
		apps, err = ParseApps(ar.out)
		if err != nil {
			err = fmt.Errorf("nvidia-smi --query-compute-apps: %w", err)
		}
	}
	if err != nil {
		s.Error = err.Error()
	}
	s.GPUs, s.Apps = keep(gpus, apps, indices)
	s.WallNS = time.Since(t0).Nanoseconds()
	return s
}

// keep restricts gpus and apps to indices and fills each app's GPU index.
func keep(gpus []rundir.GPUState, apps []rundir.GPUApp, indices []int) ([]rundir.GPUState, []rundir.GPUApp) {
	want := func(i int) bool {
		if indices == nil {
			return true
		}
		for _, x := range indices {
			if x == i {
				return true
			}
		}
		return false
	}
	byUUID := map[string]int{}
	var kg []rundir.GPUState
	for _, g := range gpus {
		byUUID[g.UUID] = g.Index
		if want(g.Index) {
			kg = append(kg, g)
		}
	}
	var ka []rundir.GPUApp
	for _, a := range apps {
		a.GPU = -1
		if i, ok := byUUID[a.GPUUUID]; ok {
			a.GPU = i
		}
		if a.GPU < 0 && indices != nil || a.GPU >= 0 && !want(a.GPU) {
			continue
		}
		ka = append(ka, a)
	}
	return kg, ka
}

// ClocksLocked reads `nvidia-smi -q -d CLOCK,PERFORMANCE` and reports whether every GPU's
// clocks are pinned (see ParseClockLock for the rule). An error means the state could not be
// read. PERFORMANCE is asked for beside CLOCK because a lock set with `nvidia-smi -lgc` leaves
// the application clocks alone and shows only as the "Applications Clocks Setting" reason.
func (p Prober) ClocksLocked(ctx context.Context) (bool, error) {
	out, err := p.run(ctx, "-q", "-d", "CLOCK,PERFORMANCE")
	if err != nil {
		return false, err
	}
	return ParseClockLock(out)
}

// Topology returns `nvidia-smi topo -m` as printed, less its terminal escape codes.
func (p Prober) Topology(ctx context.Context) (string, error) {
	out, err := p.run(ctx, "topo", "-m")
	return strings.TrimSpace(StripEscapes(string(out))), err
}

// ansiEscape matches a terminal escape sequence (CSI: ESC [ parameters letter).
var ansiEscape = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`) })

// StripEscapes removes terminal escape sequences from nvidia-smi's output: driver 580's `topo
// -m` underlines its header (ESC[4m ... ESC[0m) even when the output is not a terminal, which
// a manifest, a report or a diff of two topologies must not carry.
func StripEscapes(s string) string {
	if !strings.Contains(s, "\x1b") {
		return s
	}
	return ansiEscape().ReplaceAllString(s, "")
}

// run executes nvidia-smi with args and returns its standard output. It runs under
// runner/proc like every child of the runner (proc.Probe): under the supervisor, so an
// nvidia-smi that leaves a process behind has it swept and one the timeout cuts has its whole
// tree stopped, and with its output bounded (proc.ProbeLimit), so one that prints without end
// is stopped and costs a few MiB, not what it printed.
func (p Prober) run(ctx context.Context, args ...string) ([]byte, error) {
	name := p.Command
	if name == "" {
		name = "nvidia-smi"
	}
	env := p.Env // the caller's (cmd/runner hands the runner its environment); nil finds nothing
	path, err := proc.LookPath(name, env)
	if err != nil {
		return nil, fmt.Errorf("unavailable: %w", err)
	}
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	out, res := proc.Probe(ctx, proc.Spec{
		Argv: append([]string{path}, args...), Env: env, Timeout: timeout,
		// A query has nothing to save: a short ladder, and what it leaves behind is garbage.
		InterruptGrace: 100 * time.Millisecond, TerminateGrace: 400 * time.Millisecond,
		LeftoverGrace: 250 * time.Millisecond,
	}, 0, nil)
	what := name + " " + strings.Join(args, " ")
	switch {
	case res.TimedOut:
		return nil, fmt.Errorf("%s timed out after %s", what, timeout)
	case res.Interrupted:
		return nil, ctx.Err()
	case out.Cut:
		return nil, fmt.Errorf("%s printed more than %d MiB; it was stopped and its output is not read (is it really nvidia-smi?)", what, proc.ProbeLimit>>20)
	case res.StartErr != nil:
		return nil, fmt.Errorf("%s: %w", what, res.StartErr)
	case res.ExitCode != 0 || res.Signal != "":
		msg := strings.TrimSpace(string(out.Stderr))
		if msg == "" {
			msg = strings.TrimSpace(string(out.Stdout))
		}
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
		how := fmt.Sprintf("exit status %d", res.ExitCode)
		if res.Signal != "" {
			how = "killed by " + res.Signal
		}
		return nil, fmt.Errorf("%s: %s: %s", what, how, msg)
	}
	return out.Stdout, nil
}
