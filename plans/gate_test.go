package plans

import (
	"testing"
	"time"
)

var gpuGateBadCases = []struct {
	name string
	src  string
	want []want
}{
	{"busy_gpu unknown value",
		minimal + "[gate]\nbusy_gpu = \"ignore\"\n",
		[]want{{"gate.busy_gpu", 6, 1, []string{`unknown value "ignore"`, `"warn", "fail", "wait"`}}}},
	{"busy_wait without wait",
		minimal + "[gate]\nbusy_gpu = \"fail\"\nbusy_wait = \"1m\"\n",
		[]want{{"gate.busy_wait", 7, 1, []string{`only applies with busy_gpu = "wait"`}}}},
	{"busy_wait zero",
		minimal + "[gate]\nbusy_gpu = \"wait\"\nbusy_wait = \"0s\"\n",
		[]want{{"gate.busy_wait", 7, 1, []string{"must be > 0"}}}},
	{"busy_wait bare number",
		minimal + "[gate]\nbusy_gpu = \"wait\"\nbusy_wait = 30\n",
		[]want{{"gate.busy_wait", 7, 1, []string{"bare number"}}}},
	{"require_locked_clocks not a bool",
		minimal + "[gate]\nrequire_locked_clocks = \"yes\"\n",
		[]want{{"gate.require_locked_clocks", 6, 1, []string{"true or false"}}}},
}

func TestGPUGateBadInputs(t *testing.T) { runBadCases(t, gpuGateBadCases) }

func TestGPUGateDefaultsAndValues(t *testing.T) {
	p := mustParse(t, minimal)
	if p.Gate.BusyGPU != BusyGPUWarn || p.Gate.BusyWait.Duration != DefaultBusyWait || p.Gate.RequireLockedClocks {
		t.Errorf("defaults = %+v, want warn, %s, false", p.Gate, DefaultBusyWait)
	}
	p = mustParse(t, minimal+"[gate]\nbusy_gpu = \"wait\"\nbusy_wait = \"90s\"\nrequire_locked_clocks = true\n")
	if p.Gate.BusyGPU != BusyGPUWait || p.Gate.BusyWait.Duration != 90*time.Second || !p.Gate.RequireLockedClocks {
		t.Errorf("gate = %+v", p.Gate)
	}
	if c := p.Expand()[0]; c.Gate != p.Gate {
		t.Errorf("cell gate = %+v, want the plan's %+v", c.Gate, p.Gate)
	}
}
