//go:build !race

package triage

// raceEnabled: the race detector instruments the build, and allocations and timings are its own.
const raceEnabled = false
