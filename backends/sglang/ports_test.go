package sglang

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestStrictPorts: a diffusion server's --strict-ports also checks the scheduler and master
// ports, so the runner picks both unless extra_args sets them; LLM servers have neither.
func TestStrictPorts(t *testing.T) {
	c := serveCell()
	if d := cmp.Diff([]string{FlagSchedulerPort, FlagMasterPort}, StrictPorts(c)); d != "" {
		t.Fatalf("diffusion (-want +got):\n%s", d)
	}
	c.Backend.ExtraArgs = []string{"--scheduler-port=6000"}
	if d := cmp.Diff([]string{FlagMasterPort}, StrictPorts(c)); d != "" {
		t.Fatalf("scheduler port set (-want +got):\n%s", d)
	}
	c.Backend.ExtraArgs = []string{"--master-port", "29500", "--scheduler-port", "6000"}
	if got := StrictPorts(c); len(got) != 0 {
		t.Fatalf("both set: %v", got)
	}
	l := serveCell()
	l.Backend.ModelType = ModelTypeLLM
	if got := StrictPorts(l); len(got) != 0 {
		t.Fatalf("llm: %v", got)
	}
	args, err := PortArgs([]string{FlagSchedulerPort, FlagMasterPort}, []int{41000, 41001})
	if err != nil || strings.Join(args, " ") != "--scheduler-port 41000 --master-port 41001" {
		t.Fatalf("PortArgs = %q, %v", args, err)
	}
	for _, bad := range [][]int{{41000}, {0, 1}, {1, 70000}} {
		if _, err := PortArgs([]string{FlagSchedulerPort, FlagMasterPort}, bad); err == nil {
			t.Errorf("PortArgs(%v) accepted", bad)
		}
	}
}

// TestServePlanShowsStrictPorts: `runner plan` shows that the runner chooses those ports.
func TestServePlanShowsStrictPorts(t *testing.T) {
	l, err := ServeBackend{}.Command(serveCell(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	i := slices.Index(l.Argv, FlagSchedulerPort)
	if i < 0 || i+3 >= len(l.Argv) || l.Argv[i+1] != PortPlaceholder || l.Argv[i+2] != FlagMasterPort || l.Argv[i+3] != PortPlaceholder {
		t.Fatalf("argv %q", l.Argv)
	}
}
