package plans

import (
	"fmt"
	"time"
)

// The [gate] keys of the GPU noise guard: what a foreign compute process on a cell's
// GPUs does to the cell, how long "wait" waits, and whether unlocked clocks fail it.
const (
	BusyGPUWarn = "warn"
	BusyGPUFail = "fail"
	BusyGPUWait = "wait"

	DefaultBusyGPU = BusyGPUWarn
	// DefaultBusyWait is how long busy_gpu = "wait" polls when busy_wait is not set: long enough
	// for a neighbour's short job to finish, short enough that a stuck one is reported the
	// same night.
	DefaultBusyWait = 10 * time.Minute
)

// BusyGPUPolicies are the values of [gate] busy_gpu.
var BusyGPUPolicies = []string{BusyGPUWarn, BusyGPUFail, BusyGPUWait}

// decodeGPUGate decodes the guard's [gate] keys.
func (d *decoder) decodeGPUGate(rg rawGate, g *Gate) {
	decodeField(d, path("gate", "busy_gpu"), rg.BusyGPU, &g.BusyGPU, `a string: "warn", "fail" or "wait"`)
	decodeField(d, path("gate", "busy_wait"), rg.BusyWait, &g.BusyWait, `a duration string such as "10m"`)
	decodeField(d, path("gate", "require_locked_clocks"), rg.RequireLockedClocks, &g.RequireLockedClocks, `true or false`)
}

// gpuGateDefaults fills the guard's keys the plan leaves out.
func gpuGateDefaults(p *Plan, set func(k ...string) bool) {
	if !set("gate", "busy_gpu") {
		p.Gate.BusyGPU = DefaultBusyGPU
	}
	if !set("gate", "busy_wait") {
		p.Gate.BusyWait.Duration = DefaultBusyWait
	}
}

// validateGPUGate checks busy_gpu and busy_wait.
func (d *decoder) validateGPUGate(p *Plan) {
	if k := path("gate", "busy_gpu"); d.check(k...) && !oneOf(p.Gate.BusyGPU, BusyGPUPolicies) {
		d.addKey(k, fmt.Sprintf("unknown value %q; use %s (wait polls up to busy_wait for the GPU to come free)", p.Gate.BusyGPU, quoteList(BusyGPUPolicies)))
	}
	if k := path("gate", "busy_wait"); d.check(k...) && d.md.IsDefined(k...) {
		if p.Gate.BusyGPU != BusyGPUWait {
			d.addKey(k, fmt.Sprintf(`busy_wait only applies with busy_gpu = "wait" (busy_gpu is %q); remove it or set busy_gpu = "wait"`, p.Gate.BusyGPU))
		} else {
			d.positiveDuration(k, p.Gate.BusyWait, `"10m"`)
		}
	}
}
