// Package envfacts turns a run's manifest into the environment facts maintainers ask for
// first (GPU, driver, CUDA, torch, triton, flashinfer, NCCL, sglang or vLLM, clock state, ...)
// and lists what differs between the environments of two runs. compare, report and replay
// show these facts; a difference in clock state holds back a regression call (runner's
// baseline resolution). It also names the variables a manifest records (CapturedEnvName), which
// the runner captures and a replay checks a bundle's manifest against. It reads no file and runs
// nothing: the manifest is its input.
package envfacts

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/sglprof/runner/backends/vllmomni"
	"github.com/sglprof/runner/reports/compare"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/gpu"

	"github.com/dustin/go-humanize"
)

// envPrefixes are the variables that change what sglang, CUDA and NCCL do: the ones a run
// records in its manifest.
var envPrefixes = []string{"CUDA_", "SGLANG_", "NCCL_", "HF_", "TORCH_", "PYTORCH_", "VLLM_", "NVIDIA_"}

// CapturedEnvName reports whether a run records the variable name in its manifest's env (the
// runner's CaptureEnv keeps only these): a bundle's manifest that lists any other was edited.
func CapturedEnvName(name string) bool {
	for _, p := range envPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// EnvFact is one row of the environment table: what maintainers ask for first (GPU, driver,
// CUDA, sglang version, ...), as read from a manifest.
type EnvFact struct {
	Name  string
	Value string
}

var (
	nvccRelease   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`release ([0-9][0-9.]*)(?:, V([0-9.]+))?`) })
	sglangVersion = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?m)^sglang version:\s*(\S+)`) })
	sglangRev     = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?m)^git revision:\s*(\S+)`) })
)

// EnvFacts lists the environment of a manifest in a fixed order; a probe that failed says why.
func EnvFacts(m *rundir.Manifest) []EnvFact {
	unknown := func(probe string) string {
		if p, ok := m.Probes[probe]; ok && p.Error != "" {
			return "unknown (" + p.Error + ")"
		}
		return "unknown"
	}
	gpu, driver, mem := unknown("nvidia-smi"), unknown("nvidia-smi"), ""
	if len(m.GPUs) > 0 {
		counts := map[string]int{}
		var order []string
		for _, g := range m.GPUs {
			if counts[g.Name] == 0 {
				order = append(order, g.Name)
			}
			counts[g.Name]++
		}
		var parts []string
		for _, n := range order {
			parts = append(parts, fmt.Sprintf("%d× %s", counts[n], n))
		}
		gpu = strings.Join(parts, ", ")
		driver = m.GPUs[0].Driver
		mem = m.GPUs[0].MemoryMiB
		// Not the SM clock of the moment: it is whatever the idle GPU showed when the probe
		// ran, and would make every two runs differ.
		if g := m.GPUs[0]; g.PowerLimit != "" || g.MaxSMClock != "" {
			gpu += fmt.Sprintf(" (max SM clock %s, power limit %s)", g.MaxSMClock, g.PowerLimit)
		}
	}
	cuda := unknown("nvcc")
	if p, ok := m.Probes["nvcc"]; ok && p.Available {
		if mm := nvccRelease().FindStringSubmatch(p.Output); mm != nil {
			cuda = "nvcc " + mm[1]
			if mm[2] != "" {
				cuda += " (V" + mm[2] + ")"
			}
		} else {
			cuda = firstLine(p.Output)
		}
	}
	sgl := unknown("sglang")
	for _, probe := range []string{"sglang", "sglang-python"} {
		if p, ok := m.Probes[probe]; ok && p.Available {
			if mm := sglangVersion().FindStringSubmatch(p.Output); mm != nil {
				sgl = mm[1]
				if r := sglangRev().FindStringSubmatch(p.Output); r != nil {
					sgl += " (git " + r[1] + ")"
				}
			} else {
				sgl = firstLine(p.Output)
			}
			break
		}
	}
	facts := []EnvFact{
		{"GPU", gpu},
		{"GPU memory", orDash(mem)},
		{"Driver", driver},
		{"CUDA", cuda},
	}
	// The program's version is under its backend's name: sglang's (with the Python package
	// as the fallback probe), or vLLM-Omni's `vllm --version`.
	if p, ok := m.Probes[vllmomni.Kind]; ok {
		v := unknown("vllm")
		if p.Available {
			v = firstLine(p.Output)
		}
		facts = append(facts, EnvFact{"vllm", v})
	} else {
		facts = append(facts, EnvFact{"sglang", sgl})
	}
	if p, ok := m.Probes["nsys"]; ok {
		v := unknown("nsys")
		if p.Available {
			v = firstLine(p.Output)
		}
		facts = append(facts, EnvFact{"nsys", v})
	}
	host := fmt.Sprintf("%s, %s/%s, %d CPUs", orDash(m.Host.Hostname), m.Host.OS, m.Host.Arch, m.Host.CPUs)
	if m.Host.CPUModel != "" {
		host += " (" + m.Host.CPUModel + ")"
	}
	if m.Host.MemoryBytes > 0 {
		host += ", " + humanize.IBytes(uint64(m.Host.MemoryBytes)) + " RAM"
	}
	runnerV := m.Runner.Version
	if m.Runner.Go != "" {
		runnerV += " (" + m.Runner.Go + ")"
	}
	sim := "no"
	if m.Simulated {
		sim = "yes: sglang and nsys were the runner's simulators, timings are invented"
	}
	facts = append(facts, gpuEnvFacts(m.GPUEnv)...)
	return append(facts, EnvFact{"runner", runnerV}, EnvFact{"Host", host}, EnvFact{"Simulated", sim})
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// topoLink is one cell of `nvidia-smi topo -m` that names how two GPUs are connected.
var topoLink = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(NV[0-9]+|PIX|PXB|PHB|NODE|SYS|SOC)$`) })

// topoLinks counts the links between GPUs in the matrix of `nvidia-smi topo -m`: each pair of
// GPUs once (the matrix is symmetric), NIC rows and columns, the CPU and NUMA affinity columns
// and the legend printed under the matrix (whose lines name every link kind) left out; a
// manifest written before the escape codes were stripped at the probe reads the same. order
// is the link kinds in the order first seen.
func topoLinks(topo string) (counts map[string]int, order []string) {
	counts = map[string]int{}
	var cols []string // header cells; cols[j] names column j of every row
	for _, line := range strings.Split(gpu.StripEscapes(topo), "\n") {
		cells := strings.Split(line, "\t")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if cols == nil {
			if strings.TrimSpace(line) != "" {
				cols = cells
			}
			continue
		}
		row, ok := strings.CutPrefix(cells[0], "GPU")
		if !ok || row == "" || strings.TrimLeft(row, "0123456789") != "" {
			if strings.TrimSpace(line) == "" {
				break // the legend follows the matrix after an empty line
			}
			continue // a NIC row
		}
		for j := 1; j < len(cells) && j < len(cols); j++ {
			col, ok := strings.CutPrefix(cols[j], "GPU")
			if !ok || strings.TrimLeft(col, "0123456789") != "" || col == "" || !gpuBefore(row, col) {
				continue
			}
			if f := cells[j]; topoLink().MatchString(f) {
				if counts[f] == 0 {
					order = append(order, f)
				}
				counts[f]++
			}
		}
	}
	return counts, order
}

// gpuBefore reports whether GPU index a (decimal digits) is below GPU index b, so that each
// pair of a symmetric matrix is counted once.
func gpuBefore(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// gpuEnvFacts are the facts of the GPU environment (runner/gpuenv.go); none for a manifest
// written before it existed, so such manifests read as they did.
func gpuEnvFacts(e *rundir.GPUEnv) []EnvFact {
	if e == nil {
		return nil
	}
	clocks := "unknown (" + e.ClockError + ")"
	if e.ClocksLocked != nil {
		clocks = ClockStateFloating
		if *e.ClocksLocked {
			clocks = ClockStateLocked
		}
	}
	facts := []EnvFact{{"GPU clocks", clocks}}
	if len(e.Devices) > 0 {
		mig, ecc := map[string]bool{}, map[string]bool{}
		var migs, eccs []string
		for _, d := range e.Devices {
			if !mig[d.MIG] {
				mig[d.MIG] = true
				migs = append(migs, d.MIG)
			}
			if !ecc[d.ECC] {
				ecc[d.ECC] = true
				eccs = append(eccs, d.ECC)
			}
		}
		facts = append(facts, EnvFact{"MIG", strings.Join(migs, ", ")}, EnvFact{"ECC", strings.Join(eccs, ", ")})
	}
	if e.Topology != "" {
		counts, order := topoLinks(e.Topology)
		parts := make([]string, len(order))
		for i, l := range order {
			parts[i] = fmt.Sprintf("%s×%d", l, counts[l])
		}
		facts = append(facts, EnvFact{"Topology", orDash(strings.Join(parts, ", "))})
	}
	v := e.Versions
	missing := "-"
	if e.VersionsError != "" {
		missing = "unknown (" + firstLine(e.VersionsError) + ")"
	} else if e.Interpreter == "" {
		missing = "unknown (no Python interpreter beside backend.command)"
	}
	or := func(s string) string {
		if s == "" {
			return missing
		}
		return s
	}
	return append(facts,
		EnvFact{"Python", or(v.Python)}, EnvFact{"torch", or(v.Torch)}, EnvFact{"CUDA runtime", or(v.CUDA)},
		EnvFact{"triton", or(v.Triton)}, EnvFact{"flashinfer", or(v.FlashInfer)}, EnvFact{"NCCL", or(v.NCCL)})
}

// Values of the "GPU clocks" fact.
const (
	ClockStateLocked   = "locked"
	ClockStateFloating = "not locked"
)

// DiffEnv lists what differs between the environments of two runs: the facts of EnvFacts
// (GPU, driver, CUDA, torch, triton, flashinfer, NCCL, sglang, clock state, ...) and the
// variables that matter (the manifests' env, already redacted), sorted facts first.
func DiffEnv(base, cur *rundir.Manifest) []compare.EnvChange {
	var out []compare.EnvChange
	cf := map[string]string{}
	for _, f := range EnvFacts(cur) {
		cf[f.Name] = f.Value
	}
	for _, f := range EnvFacts(base) {
		if v, ok := cf[f.Name]; !ok {
			out = append(out, compare.EnvChange{Name: f.Name, Base: f.Value, New: "(not probed)"})
		} else if v != f.Value {
			out = append(out, compare.EnvChange{Name: f.Name, Base: f.Value, New: v})
		}
	}
	names := map[string]bool{}
	for k := range base.Env {
		names[k] = true
	}
	for k := range cur.Env {
		names[k] = true
	}
	keys := make([]string, 0, len(names))
	for k := range names {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b, inB := base.Env[k]
		c, inC := cur.Env[k]
		if !inB {
			b = "(unset)"
		}
		if !inC {
			c = "(unset)"
		}
		if b != c {
			out = append(out, compare.EnvChange{Name: "$" + k, Base: b, New: c})
		}
	}
	return out
}

// ClockState is the "GPU clocks" fact of a manifest: ClockStateLocked, ClockStateFloating or
// "" when unknown.
func ClockState(m *rundir.Manifest) string {
	if m.GPUEnv == nil || m.GPUEnv.ClocksLocked == nil {
		return ""
	}
	if *m.GPUEnv.ClocksLocked {
		return ClockStateLocked
	}
	return ClockStateFloating
}
