// Package simclock is the simulated clock's contract between the runner's simulators
// (backends/sim) and its load client (runner/load): the variable that says how fast simulated
// time runs in real time, and the key under which a simulated server reports a request's
// simulated elapsed time. Both sides import this leaf, so the client needs nothing of the
// simulators (only cmd/runner and the simulators themselves import backends/sim).
package simclock

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// EnvTimeScale is the simulators' variable of real seconds slept per simulated second.
const EnvTimeScale = "RUNNER_SIM_TIME_SCALE"

// DefaultTimeScale is the real-time fraction of simulated time when EnvTimeScale is unset: a
// 50-step Qwen-Image run (≈30 s) takes about 60 ms.
const DefaultTimeScale = 0.002

// ElapsedField is the key, in every streamed chunk of the LLM simulator, of the request's
// simulated time so far in nanoseconds (from its arrival to this chunk). Upstream sends no such
// key and clients ignore unknown keys; the runner under --simulate reads TTFT, ITL and E2E from
// it, because at the default time scale a simulated token is a few µs of real time, well below
// the loopback and scheduling noise a client's own clock would measure.
const ElapsedField = "sim_elapsed_ns"

// DueField and RunField are the keys of a request body, under --simulate only, that tell the
// LLM simulator when the request was due on the load's arrival schedule (ns from the load run's
// start) and which load run it belongs to. The load client sends them for requests sent on their
// schedule (not those that waited for a concurrency slot); the simulator places the request's
// arrival on its clock there rather than when it read it, so the real time the client and the
// loopback take per request (at the default scale, 100 µs are 50 simulated ms) does not spread a
// burst of arrivals. Real servers never see them: the keys go only to a simulated server.
const (
	DueField = "sim_due_ns"
	RunField = "sim_run"
)

// ParseTimeScale reads a value of EnvTimeScale: "" (or blanks) is DefaultTimeScale, anything
// else must be a finite number ≥ 0 (0 disables sleeping).
func ParseTimeScale(v string) (float64, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return DefaultTimeScale, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("%s=%q: want a non-negative number such as 0.002 (0 disables sleeping)", EnvTimeScale, v)
	}
	return f, nil
}

// TimeScale is the scale a simulator started with environ (KEY=VALUE, a later duplicate
// winning, as for exec) runs at: DefaultTimeScale when the variable is unset or bad, as the
// simulator itself refuses a bad one before it serves anything.
func TimeScale(environ []string) float64 {
	v := ""
	for _, kv := range environ {
		if k, val, ok := strings.Cut(kv, "="); ok && k == EnvTimeScale {
			v = val
		}
	}
	f, err := ParseTimeScale(v)
	if err != nil {
		return DefaultTimeScale
	}
	return f
}
