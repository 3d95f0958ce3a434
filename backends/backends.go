// Package backends turns a plan cell into the exact process the runner starts and judges what
// that process left behind. One sub-package per program we drive (backends/sglang,
// backends/vllmomni); backends/sim holds faithful simulators of sglang and nsys for tests and
// --simulate.
package backends

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
)

// Directories every cell has inside its directory: the profiler's traces and
// the generated images and videos.
const (
	TracesDir  = "traces"
	OutputsDir = "outputs"
)

// Artifacts are the files a cell produced, as absolute paths.
type Artifacts struct {
	Traces   []string `json:"traces,omitempty"`    // torch-profiler traces (.trace.json.gz)
	PerfDump string   `json:"perf_dump,omitempty"` // --perf-dump-path JSON
	Outputs  []string `json:"outputs,omitempty"`   // generated images/videos
}

// Assessment is a backend's judgement of one finished cell (before timeouts and interrupts,
// which the runner decides itself).
type Assessment struct {
	Verdict   string          `json:"verdict"` // plans.VerdictOK, VerdictInvalid or VerdictFailed
	Reasons   []rundir.Reason `json:"reasons,omitempty"`
	Warnings  []rundir.Reason `json:"warnings,omitempty"`
	Artifacts Artifacts       `json:"artifacts"`
}

// Watcher sees every log line of a cell as it is produced (stdout and stderr, '\r' progress
// frames split into lines, ANSI codes intact). It must be cheap: it runs on the log path.
type Watcher interface {
	Line(lineNo int, stream, text string)
}

// Selective is a Watcher that needs only the lines holding one of Needles (after ANSI codes
// are stripped) and the last TailLines lines. The process layer then finds those lines with a
// multi-substring scan over whole chunks of output and calls Line for them alone (and, once
// the process has exited, for the tail), instead of once per line: for a program that logs
// hundreds of megabytes this is what keeps the runner from competing with it for CPU time.
// Line numbers still count every line; the tail can arrive after later selected lines.
type Selective interface {
	Watcher
	Needles() []string
	TailLines() int
}

// Backend drives one external program.
type Backend interface {
	// Name is the plan's backend kind ("sglang").
	Name() string
	// Launch builds the process for cell c whose directory is cellDir (absolute, existing).
	Launch(c plans.Cell, cellDir string) (rundir.Launch, error)
	// NewWatcher returns the log watcher for one run of cell c.
	NewWatcher(c plans.Cell) Watcher
	// Assess judges the cell after its process ended: w is the watcher returned by NewWatcher
	// for this run, exit how it ended. It looks for the artifacts the cell asked for.
	Assess(c plans.Cell, cellDir string, w Watcher, exit rundir.Exit) Assessment
	// ValidateCell refuses, before anything runs, a cell whose plan this program cannot honour
	// (an nsys option its server has no way to bracket the runner's window with); nil when the
	// cell can run. The message says what to change in the plan; the runner reports it as a
	// usage error, as written. Rules every program shares are checked when the plan is parsed
	// (plans.Parse).
	ValidateCell(c plans.Cell) error
	// EnvProbes says how the run's manifest describes this program's environment (which
	// command's Python to ask, and whether check_env applies). It is pure: the runner runs
	// the probes, and lists them for `runner replay` before it does.
	EnvProbes(c plans.Cell) EnvProbes
}

// EnvProbes are the environment probes of a backend's program beyond the GPUs:
// the runner finds the Python beside Command's executable and asks it for the library
// versions (torch, CUDA runtime, triton, flashinfer, NCCL), and for `python -m
// sglang.check_env` when CheckEnv is set.
type EnvProbes struct {
	// Command is the plan's own argv prefix of the program, even under --simulate: the
	// simulator replaces the program's work, not the machine the user wants described.
	Command []string
	// CheckEnv says that `python -m sglang.check_env` describes this program's environment.
	// It is sglang's report; another program's interpreter need not have sglang at all.
	CheckEnv bool
	// Version are the arguments after the program's command that print its version
	// (`sglang version`, `vllm --version`); the manifest records the answer under the backend's
	// Name.
	Version []string
}

// MakeCellDirs creates a cell's traces and outputs directories (TracesDir, OutputsDir) under
// dir, where every backend's program writes; what names the backend in an error (e.g. "sglang
// serve") says which launch failed.
func MakeCellDirs(what, dir string) error {
	for _, d := range []string{TracesDir, OutputsDir} {
		p := filepath.Join(dir, d)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("%s: create %s: %w; check that the run directory is writable", what, p, err)
		}
	}
	return nil
}
