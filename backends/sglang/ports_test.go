package sglang

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sglprof/runner/backends"
)

// TestStrictPorts: a diffusion server's --strict-ports also checks the scheduler and master
// ports, so the runner picks both unless extra_args sets them; LLM servers have neither.
func TestStrictPorts(t *testing.T) {
	sched, master := backends.PortFlag{Flag: FlagSchedulerPort, Span: 1}, backends.PortFlag{Flag: FlagMasterPort, Span: 1}
	c := serveCell()
	if d := cmp.Diff([]backends.PortFlag{sched, master}, StrictPorts(c)); d != "" {
		t.Fatalf("diffusion (-want +got):\n%s", d)
	}
	c.Backend.ExtraArgs = []string{"--scheduler-port=6000"}
	if d := cmp.Diff([]backends.PortFlag{master}, StrictPorts(c)); d != "" {
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
	args, err := PortArgs([]backends.PortFlag{sched, master}, []int{41000, 41001})
	if err != nil || strings.Join(args, " ") != "--scheduler-port 41000 --master-port 41001" {
		t.Fatalf("PortArgs = %q, %v", args, err)
	}
	for _, bad := range [][]int{{41000}, {0, 1}, {1, 70000}} {
		if _, err := PortArgs([]backends.PortFlag{sched, master}, bad); err == nil {
			t.Errorf("PortArgs(%v) accepted", bad)
		}
	}
	if _, err := PortArgs([]backends.PortFlag{{Flag: FlagSchedulerPort, Span: 4}}, []int{65534}); err == nil {
		t.Error("a span running past 65535 was accepted")
	}
}

// TestStrictPortsDataParallel: with --dp-size N upstream checks scheduler_port + r for every
// replica, so the scheduler flag spans N ports (failed before: the span was always one port).
func TestStrictPortsDataParallel(t *testing.T) {
	for _, tc := range []struct {
		args []string
		span int
	}{
		{nil, 1}, {[]string{"--dp-size", "2"}, 2}, {[]string{"--dp=3"}, 3}, {[]string{"--dp-size=4", "--dp", "2"}, 2},
		{[]string{"--dp-size", "x"}, 1}, {[]string{"--dp-size"}, 1}, {[]string{"--data-parallel-size", "5"}, 5},
	} {
		c := serveCell()
		c.Backend.ExtraArgs = tc.args
		got := StrictPorts(c)
		if len(got) != 2 || got[0] != (backends.PortFlag{Flag: FlagSchedulerPort, Span: tc.span}) || got[1].Span != 1 {
			t.Errorf("%q: %v, want a scheduler span of %d", tc.args, got, tc.span)
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
