//go:build !race

package main

// raceEnabled: this test binary has no race detector.
const raceEnabled = false
