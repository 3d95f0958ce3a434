//go:build race

package main

// raceEnabled: this test binary has the race detector, so the runner the scripts run gets it too.
const raceEnabled = true
