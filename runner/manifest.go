package runner

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sglprof/runner/backends/sglang"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/envfacts"
	"github.com/sglprof/runner/runner/proc"
	"github.com/sglprof/runner/runner/secrets"
)

// Version is the runner's version, set at build time with
// -ldflags "-X github.com/sglprof/runner/runner.Version=v1.2.3"; otherwise it comes from the
// module build info.
var Version = ""

// RunnerVersion returns the version string the manifest and `runner version` report.
func RunnerVersion() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		return versionFromBuildInfo(bi)
	}
	return "(devel)"
}

// versionFromBuildInfo is the version of a build without -X Version: the module version, with
// the VCS revision added only where the version does not already hold it. Since Go 1.24 a build
// from a checkout has a pseudo-version that holds the revision (v0.0.0-20261124221000-4040857abcde,
// +dirty when the tree was modified); printing the revision again would repeat the hash.
func versionFromBuildInfo(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev string
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if len(rev) >= 12 && !strings.Contains(v, rev[:12]) {
		v += "+" + rev[:12]
		if modified {
			// Not a build of that revision: say so, as Go's own +dirty does.
			v += ".dirty"
		}
	}
	return v
}

const gpuQuery = "name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit"

func captureManifest(ctx context.Context, p *plans.Plan, dir string, cells []plans.Cell, opts *Options, start time.Time) *rundir.Manifest {
	m := &rundir.Manifest{
		Runner:    rundir.RunnerInfo{Version: RunnerVersion(), Go: runtime.Version()},
		Plan:      p.Name,
		RunDir:    dir,
		Args:      redactArgs(opts.Args),
		Simulated: opts.Simulate,
		Executor:  opts.executorKind(),
		Cells:     len(cells),
		Start:     start.UTC(),
		Host:      hostInfo(),
		Probes:    map[string]rundir.Probe{},
		Env:       CaptureEnv(opts.Env),
	}
	if pr := opts.Probed; pr != nil {
		m.GPUEnv, m.GPUs, m.Probes = pr.GPUEnv, pr.GPUs, maps.Clone(pr.Probes)
		return m
	}
	probe := func(name string, argv ...string) rundir.Probe {
		pr := runProbe(ctx, argv, opts.Env, opts.ProbeTimeout)
		m.Probes[name] = pr
		return pr
	}
	m.GPUEnv = captureGPUEnv(ctx, cells, opts)
	if down := opts.guard().isDown(); down != "" {
		m.Probes["nvidia-smi"] = rundir.Probe{Command: []string{"nvidia-smi"}, Error: down}
	} else if pr := probe("nvidia-smi", "nvidia-smi", "--query-gpu="+gpuQuery, "--format=csv"); pr.Available {
		m.GPUs = parseNvidiaSMI(pr.Output)
	}
	probe("nvcc", "nvcc", "--version")
	if len(cells) > 0 {
		name, cmd := versionProbe(cells[0], opts)
		if pr := probe(name, cmd...); !pr.Available && !opts.Simulate && name == sglang.Kind {
			// Older builds have no `sglang version`; the Python package still knows.
			probe("sglang-python", sglangPythonProbe...)
		}
	}
	for _, c := range cells {
		if c.Profiler != plans.ProfilerNsys {
			continue
		}
		if opts.nsysProbe != nil { // preflight asked already
			m.Probes["nsys"] = *opts.nsysProbe
		} else {
			probe("nsys", append(opts.nsysCommand(), "--version")...)
		}
		break
	}
	return m
}

// sglangPythonProbe asks the Python package for sglang's version when `sglang version` fails.
var sglangPythonProbe = []string{"python3", "-c", "import importlib.metadata as m; print('sglang version:', m.version('sglang'))"}

// probeOutputCap is how much of a probe's output the manifest keeps.
const probeOutputCap = 4096

// runProbe runs argv with a timeout and the cells' environment; any failure is recorded, never
// returned, because a missing nvcc must not stop a run. It runs through proc.Probe like every
// probe of the runner: under the supervisor, so a probe outlives neither its timeout nor a
// killed runner, and with its output bounded, so one that prints without end is stopped.
func runProbe(ctx context.Context, argv []string, env []string, timeout time.Duration) rundir.Probe {
	pr := rundir.Probe{Command: argv}
	path, err := proc.LookPath(argv[0], env)
	if err != nil {
		pr.Error = "unavailable: " + err.Error()
		return pr
	}
	out, res := proc.Probe(ctx, proc.Spec{
		Argv: append([]string{path}, argv[1:]...), Env: env, Timeout: timeout,
		InterruptGrace: time.Second, TerminateGrace: time.Second,
	}, 0, nil)
	if !res.Start.IsZero() {
		pr.WallNS = res.End.Sub(res.Start).Nanoseconds()
	}
	pr.Output = strings.TrimSpace(string(out.Stdout) + string(out.Stderr))
	if len(pr.Output) > probeOutputCap {
		pr.Output = pr.Output[:probeOutputCap] + "…"
	}
	switch {
	case res.TimedOut:
		pr.Error = "timed out after " + timeout.String()
	case out.Cut:
		pr.Error = fmt.Sprintf("printed more than %d MiB; stopped", proc.ProbeLimit>>20)
	case res.StartErr != nil:
		pr.Error = res.StartErr.Error()
	case res.Signal != "":
		pr.Error = "killed by " + res.Signal
	case res.ExitCode != 0:
		pr.Error = fmt.Sprintf("exit status %d", res.ExitCode)
	default:
		pr.Available = true
	}
	return pr
}

// parseNvidiaSMI reads the CSV of `nvidia-smi --query-gpu=... --format=csv` (header line first).
func parseNvidiaSMI(out string) []rundir.GPUInfo {
	var gpus []rundir.GPUInfo
	sc := bufio.NewScanner(strings.NewReader(out))
	first := true
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if first {
			first = false
			if strings.HasPrefix(line, "name") {
				continue
			}
		}
		f := strings.Split(line, ",")
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		for len(f) < 6 {
			f = append(f, "")
		}
		gpus = append(gpus, rundir.GPUInfo{Name: f[0], Driver: f[1], MemoryMiB: f[2], SMClock: f[3], MaxSMClock: f[4], PowerLimit: f[5]})
	}
	return gpus
}

func hostInfo() rundir.HostInfo {
	h := rundir.HostInfo{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU()}
	h.Hostname, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				h.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					h.MemoryBytes = kb * 1024
				}
			}
		}
	}
	return h
}

// CaptureEnv keeps the variables that matter for a GPU run, with secret values redacted.
func CaptureEnv(env []string) map[string]string {
	out := map[string]string{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		if !envfacts.CapturedEnvName(k) {
			continue
		}
		if secrets.IsSecretName(k) {
			v = secrets.Redacted
		}
		out[k] = v
	}
	return out
}

// redactArgs hides the value that follows a secret-looking flag (--hf-token X, --api-key=X).
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	copy(out, args)
	for i := 0; i < len(out); i++ {
		a := out[i]
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, hasEq := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !secrets.IsSecretName(strings.ReplaceAll(name, "-", "_")) {
			continue
		}
		if hasEq {
			out[i] = a[:strings.Index(a, "=")+1] + secrets.Redacted
		} else if i+1 < len(out) {
			out[i+1] = secrets.Redacted
			i++
		}
	}
	return out
}

func redactEnvMap(env map[string]string) map[string]string {
	if env == nil {
		return nil
	}
	out := make(map[string]string, len(env))
	for k, v := range env {
		if secrets.IsSecretName(k) {
			v = secrets.Redacted
		}
		out[k] = v
	}
	return out
}

func redactRecords(recs []cellRecord) []rundir.CellRecord {
	out := make([]rundir.CellRecord, len(recs))
	for i, r := range recs {
		r.Launch = redactLaunch(r.Launch)
		r.Cell.Backend.Env = redactEnvMap(r.Cell.Backend.Env)
		r.Cell.Backend.Command = secrets.Argv(r.Cell.Backend.Command)
		r.Cell.Backend.ExtraArgs = secrets.Argv(r.Cell.Backend.ExtraArgs)
		out[i] = r.CellRecord
	}
	return out
}

// redactLaunch hides the secrets of a launch's argv and environment before it is written
// down: by name (redactArgs, redactEnvMap), then as the rules see the argv on one line
// (secrets.Argv: sshpass -p X, PGPASSWORD=X), since the run directory's JSON writes it one
// element to a line.
func redactLaunch(l rundir.Launch) rundir.Launch {
	l.Argv = secrets.Argv(redactArgs(l.Argv))
	l.Env = redactEnvMap(l.Env)
	return l
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
