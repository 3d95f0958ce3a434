// Package sglang drives `sglang generate` (offline diffusion, one process per cell): it builds
// the exact argv and environment for a cell, watches the log for the lines that decide whether
// the run measured what it claims (diffusers fallback, CUDA OOM, trace and perf-dump paths,
// profiler failures), and judges the finished cell from the log, the exit status and the files
// left in the cell directory.
//
// Facts about sglang's flags, log lines and files come from ref-sglang-interfaces.md §A.
package sglang

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
)

// Kind and Mode are the plan values this backend serves.
const (
	Kind = "sglang"
	Mode = "generate"
)

// PerfDumpFile is the perf dump sglang writes inside the cell's directory; the traces and
// outputs directories are the ones every backend uses (backends.TracesDir, OutputsDir).
const PerfDumpFile = "perf.json"

// Environment variables through which sglang picks its torch-profiler directory: newer builds
// read the diffusion-specific one first, older builds only the generic one, the oldest always
// write ./logs relative to the worker's cwd (which is why Launch also sets Dir to the cell).
const (
	EnvProfilerDir          = "SGLANG_TORCH_PROFILER_DIR"
	EnvDiffusionProfilerDir = "SGLANG_DIFFUSION_TORCH_PROFILER_DIR"
)

// presets maps sglang's resolution preset flags to their sizes (ref §A.2).
var presets = map[string][2]int{
	"720p":  {1280, 720},
	"1080p": {1920, 1080},
	"2k":    {2560, 1440},
	"4k":    {3840, 2160},
}

// Backend is the sglang generate backend. The zero value is ready to use.
type Backend struct{}

// New returns the sglang backend. The runner picks a backend by cell.Backend.Kind; the
// registry lives there because package backends cannot import its sub-packages.
func New() backends.Backend { return Backend{} }

// Name implements backends.Backend.
func (Backend) Name() string { return Kind }

// ValidateCell implements backends.Backend: a generate cell runs whole under nsys (no window
// to bracket), so every [nsys] option the plan accepts applies.
func (Backend) ValidateCell(plans.Cell) error { return nil }

// EnvProbes implements backends.Backend: backend.command's Python, with check_env.
func (Backend) EnvProbes(c plans.Cell) backends.EnvProbes { return envProbes(c) }

// envProbes are the environment probes of both sglang backends: sglang's own check_env
// describes its environment, and backend.command is its program.
func envProbes(c plans.Cell) backends.EnvProbes {
	return backends.EnvProbes{Command: c.Backend.Command, CheckEnv: true, Version: []string{"version"}}
}

// Launch implements backends.Backend: it builds the command (see Command) and creates the
// cell's traces/ and outputs/ directories.
func (b Backend) Launch(c plans.Cell, cellDir string) (rundir.Launch, error) {
	l, err := b.Command(c, cellDir)
	if err != nil {
		return rundir.Launch{}, err
	}
	if err := backends.MakeCellDirs("sglang", l.Dir); err != nil {
		return rundir.Launch{}, err
	}
	return l, nil
}

// Command builds the argv, environment and working directory for cell c without touching the
// file system, so that `runner plan` can print exactly what a run would start.
//
// argv = command + generate --model-path M --prompt=P [--width W --height H]
// [--num-inference-steps N] --seed S --perf-dump-path <cell>/perf.json --output-path
// <cell>/outputs [--profile [--num-profiled-timesteps K] [--profile-all-stages]] extra_args...
//
// The prompt is one argv element exactly as written in the plan; nothing goes through a shell.
// It is attached with "=": argparse reads a separate token that starts with '-' (and has no
// space, or starts like a registered short option, "-h...") as an option, so `--prompt -x`
// fails and `--prompt "-hello"` asks for help, while "--prompt=TEXT" hands any text over.
func (Backend) Command(c plans.Cell, cellDir string) (rundir.Launch, error) {
	if c.Backend.Kind != "" && c.Backend.Kind != Kind {
		return rundir.Launch{}, fmt.Errorf("sglang: cell %s has backend kind %q; this backend only runs %q", c.ID, c.Backend.Kind, Kind)
	}
	if c.Backend.Mode != "" && c.Backend.Mode != Mode {
		return rundir.Launch{}, fmt.Errorf("sglang: cell %s has backend mode %q; only %q is implemented (one process per cell)", c.ID, c.Backend.Mode, Mode)
	}
	if len(c.Backend.Command) == 0 || c.Backend.Command[0] == "" {
		return rundir.Launch{}, fmt.Errorf("sglang: cell %s has an empty backend.command; set it to [\"sglang\"] or the path of the sglang executable", c.ID)
	}
	if c.Model == "" {
		return rundir.Launch{}, fmt.Errorf("sglang: cell %s has no model; add one to matrix.model", c.ID)
	}
	if cellDir == "" {
		return rundir.Launch{}, errors.New("sglang: empty cell directory")
	}
	dir, err := filepath.Abs(cellDir)
	if err != nil {
		return rundir.Launch{}, fmt.Errorf("sglang: cell directory %s: %w", cellDir, err)
	}

	argv := append([]string(nil), c.Backend.Command...)
	argv = append(argv, "generate", "--model-path", c.Model, "--prompt="+c.Prompt)

	// Resolution: a preset is passed as --width/--height, not as its --1080p style flag. The
	// preset flags are store_true switches that only some builds accept, whereas
	// --width/--height exist in every build, and explicit sizes make the argv say exactly what
	// was generated, so two cells (or two runs) with the same size have the same argv.
	w, h := c.Resolution.Width, c.Resolution.Height
	if (w == 0 || h == 0) && c.Resolution.Preset != "" {
		size, ok := presets[c.Resolution.Preset]
		if !ok {
			return rundir.Launch{}, fmt.Errorf("sglang: cell %s has unknown resolution preset %q; use 720p, 1080p, 2k, 4k or WxH", c.ID, c.Resolution.Preset)
		}
		w, h = size[0], size[1]
	}
	if w < 0 || h < 0 || (w == 0) != (h == 0) {
		return rundir.Launch{}, fmt.Errorf("sglang: cell %s has resolution %dx%d; both sides must be positive (or both 0 for the model default)", c.ID, w, h)
	}
	if w > 0 {
		argv = append(argv, "--width", strconv.Itoa(w), "--height", strconv.Itoa(h))
	}
	if c.Steps < 0 {
		return rundir.Launch{}, fmt.Errorf("sglang: cell %s has %d inference steps; use a positive number (or 0 for the model default)", c.ID, c.Steps)
	}
	if c.Steps > 0 {
		argv = append(argv, "--num-inference-steps", strconv.Itoa(c.Steps))
	}
	argv = append(argv,
		"--seed", strconv.FormatInt(c.Seed, 10),
		"--perf-dump-path", filepath.Join(dir, PerfDumpFile),
		"--output-path", filepath.Join(dir, backends.OutputsDir),
	)
	if c.Profiler == plans.ProfilerTorch {
		argv = append(argv, "--profile")
		// 0 means "not set" in the plan; sglang's own default (5) then applies. -1 is passed
		// through: sglang reads it as "all denoising steps".
		if k := c.Profile.NumProfiledTimesteps; k != 0 {
			argv = append(argv, "--num-profiled-timesteps", strconv.Itoa(k))
		}
		if c.Profile.ProfileAllStages {
			argv = append(argv, "--profile-all-stages")
		}
	}
	argv = append(argv, c.Backend.ExtraArgs...)

	env := make(map[string]string, len(c.Backend.Env)+2)
	for k, v := range c.Backend.Env {
		env[k] = v
	}
	// Always set, also for cells without the torch profiler: a stray --profile in extra_args
	// then still writes into the cell instead of ./logs, and the plan cannot point the traces
	// somewhere Assess does not look.
	traces := filepath.Join(dir, backends.TracesDir)
	env[EnvProfilerDir] = traces
	env[EnvDiffusionProfilerDir] = traces

	return rundir.Launch{Argv: argv, Env: env, Dir: dir}, nil
}

// NewWatcher implements backends.Backend: every run of a cell gets a fresh *Watcher, which
// Assess expects back.
func (Backend) NewWatcher(plans.Cell) backends.Watcher { return NewWatcher() }
