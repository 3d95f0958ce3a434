package bundle

import (
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"

	"github.com/dustin/go-humanize"

	"github.com/sglprof/runner/rundir"
	"github.com/sglprof/runner/runner"
)

// Fact is one row of the environment table: what maintainers ask for first (GPU, driver,
// CUDA, sglang version, ...), as read from a manifest.
type Fact struct {
	Name  string
	Value string
}

var (
	nvccRelease   = regexp.MustCompile(`release ([0-9][0-9.]*)(?:, V([0-9.]+))?`)
	sglangVersion = regexp.MustCompile(`(?m)^sglang version:\s*(\S+)`)
	sglangRev     = regexp.MustCompile(`(?m)^git revision:\s*(\S+)`)
)

// Facts lists the environment of a manifest in a fixed order; a probe that failed says why.
func Facts(m *rundir.Manifest) []Fact {
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
		if g := m.GPUs[0]; g.PowerLimit != "" || g.MaxSMClock != "" {
			gpu += fmt.Sprintf(" (SM clock %s of max %s, power limit %s)", g.SMClock, g.MaxSMClock, g.PowerLimit)
		}
	}
	cuda := unknown("nvcc")
	if p, ok := m.Probes["nvcc"]; ok && p.Available {
		if mm := nvccRelease.FindStringSubmatch(p.Output); mm != nil {
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
			if mm := sglangVersion.FindStringSubmatch(p.Output); mm != nil {
				sgl = mm[1]
				if r := sglangRev.FindStringSubmatch(p.Output); r != nil {
					sgl += " (git " + r[1] + ")"
				}
			} else {
				sgl = firstLine(p.Output)
			}
			break
		}
	}
	facts := []Fact{
		{"GPU", gpu},
		{"GPU memory", orDash(mem)},
		{"Driver", driver},
		{"CUDA", cuda},
		{"sglang", sgl},
	}
	if p, ok := m.Probes["nsys"]; ok {
		v := unknown("nsys")
		if p.Available {
			v = firstLine(p.Output)
		}
		facts = append(facts, Fact{"nsys", v})
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
	return append(facts, Fact{"runner", runnerV}, Fact{"Host", host}, Fact{"Simulated", sim})
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

// Diff is one difference between the bundle's environment and this machine's.
type Diff struct {
	Name         string
	Bundle, Here string
}

// DiffManifests compares the environment facts and the variables that matter (the manifests'
// env) of the bundle and of this machine. Host names and CPU counts differ between any two
// machines and are reported like the rest; a redacted value only differs when it is missing.
func DiffManifests(bundle, here *rundir.Manifest) []Diff {
	var out []Diff
	bf, hf := Facts(bundle), Facts(here)
	hm := map[string]string{}
	for _, f := range hf {
		hm[f.Name] = f.Value
	}
	for _, f := range bf {
		if h, ok := hm[f.Name]; !ok {
			out = append(out, Diff{Name: f.Name, Bundle: f.Value, Here: "(not probed)"})
		} else if h != f.Value {
			out = append(out, Diff{Name: f.Name, Bundle: f.Value, Here: h})
		}
	}
	names := map[string]bool{}
	for k := range bundle.Env {
		names[k] = true
	}
	for k := range here.Env {
		names[k] = true
	}
	keys := make([]string, 0, len(names))
	for k := range names {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b, inB := bundle.Env[k]
		h, inH := here.Env[k]
		if inH && runner.IsSecretName(k) {
			h = Redacted
		}
		switch {
		case inB && !inH:
			out = append(out, Diff{Name: "$" + k, Bundle: b, Here: "(unset)"})
		case !inB && inH:
			out = append(out, Diff{Name: "$" + k, Bundle: "(unset)", Here: h})
		case b != h:
			out = append(out, Diff{Name: "$" + k, Bundle: b, Here: h})
		}
	}
	return out
}

// WriteDiff prints the differences, or that there are none.
func WriteDiff(w io.Writer, diffs []Diff) error {
	if len(diffs) == 0 {
		_, err := fmt.Fprintln(w, "environment: this machine matches the bundle's (GPU, driver, CUDA, sglang, runner, variables)")
		return err
	}
	if _, err := fmt.Fprintf(w, "environment: %d differences between the bundle and this machine (they may explain a result that does not reproduce):\n", len(diffs)); err != nil {
		return err
	}
	for _, d := range diffs {
		if _, err := fmt.Fprintf(w, "  %-12s bundle: %s\n  %-12s here:   %s\n", d.Name, d.Bundle, "", d.Here); err != nil {
			return err
		}
	}
	return nil
}
