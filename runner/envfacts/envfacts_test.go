package envfacts

import (
	"os"
	"testing"

	"github.com/sglprof/runner/reports/rundir"
)

// The topology fact counts the links between GPUs in `nvidia-smi topo -m`'s matrix, not the
// words of the legend nvidia-smi prints under it, and not the escape codes of its header.
func TestTopologyFact(t *testing.T) {
	real, err := os.ReadFile("../gpu/testdata/h100-driver580/topo.txt")
	if err != nil {
		t.Fatal(err)
	}
	legend := "\n\nLegend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node\n  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)\n  PIX  = Connection traversing at most a single PCIe bridge\n  NV#  = Connection traversing a bonded set of # NVLinks"
	for _, c := range []struct{ name, topo, want string }{
		{"one H100, as its driver 580 prints it", string(real), "-"},
		{"four GPUs on NVLink, a NIC on PCIe",
			"\x1b[4m\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n" +
				"GPU0\t X \tNV18\tNV18\tNV18\tPXB\t0-47\t0\t\tN/A\n" +
				"GPU1\tNV18\t X \tNV18\tNV18\tSYS\t0-47\t0\t\tN/A\n" +
				"GPU2\tNV18\tNV18\t X \tNV18\tSYS\t48-95\t1\t\tN/A\n" +
				"GPU3\tNV18\tNV18\tNV18\t X \tSYS\t48-95\t1\t\tN/A\n" +
				"NIC0\tPXB\tSYS\tSYS\tSYS\t X \t\t\t\t\n" + legend,
			"NV18×6"},
		{"two GPUs over PCIe", "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPHB\t0-15\nGPU1\tPHB\t X \t0-15" + legend, "PHB×1"},
	} {
		got := "(absent)"
		for _, f := range gpuEnvFacts(&rundir.GPUEnv{Topology: c.topo}) {
			if f.Name == "Topology" {
				got = f.Value
			}
		}
		if got != c.want {
			t.Errorf("%s: Topology fact %q, want %q", c.name, got, c.want)
		}
	}
}
