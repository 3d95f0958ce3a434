// Package exitcode holds the runner's exit codes and the error that maps to a usage exit, so
// that every command (run, compare, triage, replay, bundle, ...) and every package that judges
// a command line or a plan says "the user can fix this" the same way. It is a leaf.
package exitcode

// The runner's exit codes, as the README lists them. summary.json records the one a run ended
// with.
const (
	// OK: everything ran and was judged ok (or a replay reproduced).
	OK = 0
	// Error: something outside the plan failed (I/O, an unexpected error).
	Error = 1
	// Usage: the command line or the plan is wrong; nothing was run.
	Usage = 2
	// CellsFailed: at least one cell is not ok (failed, invalid, crashed, ...).
	CellsFailed = 3
	// Regression: a comparison found a regression.
	Regression = 4
	// Interrupted: stopped by Ctrl-C (SIGINT), 128+2 as shells report it.
	Interrupted = 130
	// Terminated: stopped by SIGTERM, 128+15 as shells report it.
	Terminated = 143
)

// UsageError marks an error the user can fix by changing the command line or the plan; the
// CLI maps it to exit code Usage.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }
