package runner

import (
	"fmt"
	"path/filepath"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/nsys"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/exitcode"
	"github.com/sglprof/runner/runner/secrets"
	"github.com/sglprof/runner/runner/slurm"
)

// CellLaunch is what `runner plan` shows for one cell: the cell and the exact process it would
// run. Paths point into a placeholder run directory, because the real one is named when the
// run starts.
type CellLaunch struct {
	Cell plans.Cell        `json:"cell"`
	Argv []string          `json:"argv"`
	Env  map[string]string `json:"env"`
	Dir  string            `json:"dir"`
}

// PlaceholderRunID stands for the run directory's "<UTC time>-<id>" in `runner plan` output.
const PlaceholderRunID = "RUN"

// Describe computes every cell's launch without creating or starting anything.
func Describe(p *plans.Plan, opts Options) ([]CellLaunch, error) {
	output := p.OutputDir
	if opts.OutputDir != "" {
		output = opts.OutputDir
	}
	abs, err := filepath.Abs(filepath.Join(output, p.Name, PlaceholderRunID))
	if err != nil {
		return nil, err
	}
	if p.Executor.Kind == plans.ExecutorSlurm {
		if err := checkSlurmRunDir(filepath.Join(output, p.Name)); err != nil {
			return nil, err
		}
	}
	var out []CellLaunch
	for _, c := range p.Expand() {
		be, err := backendFor(c)
		if err != nil {
			return nil, err
		}
		cellDir := filepath.Join(abs, rundir.CellsDir, c.ID)
		lc := c
		lc.Backend.Command = opts.sglangCommand(c)
		// A backend that can compute its launch without touching the disk says so; Launch
		// itself may create the cell's directories, which a dry listing must not.
		launch := be.Launch
		if pl, ok := be.(interface {
			Command(plans.Cell, string) (rundir.Launch, error)
		}); ok {
			launch = pl.Command
		}
		l, err := launch(lc, cellDir)
		if err != nil {
			return nil, fmt.Errorf("cell %s: %w", c.ID, err)
		}
		argv := l.Argv
		if c.Profiler == plans.ProfilerNsys {
			report := filepath.Join(cellDir, "nsys", "report")
			if srv, ok := be.(backends.Server); ok && c.Backend.Mode == backends.ModeServe {
				argv, _ = wrapServerNSys(&opts, srv, c, "<session>", report, argv)
			} else {
				argv = nsys.Wrap(opts.nsysCommand(), c.NSys, report, argv)
			}
		}
		c.Backend.Env = redactEnvMap(c.Backend.Env)
		out = append(out, CellLaunch{Cell: c, Argv: redactArgs(argv), Env: redactEnvMap(l.Env), Dir: l.Dir})
	}
	return out, nil
}

// DescribeSlurm is the batch script a run of a Slurm plan would submit first
// (slurm/job-1.sbatch: every cell of the plan, in order), with PlaceholderRunID for the run's
// directory and a placeholder job name, so `runner plan` shows the #SBATCH lines and the
// node's setup before anything is queued. It is "" for a plan of another executor.
func DescribeSlurm(p *plans.Plan, opts Options) (string, error) {
	if p.Executor.Kind != plans.ExecutorSlurm {
		return "", nil
	}
	output := p.OutputDir
	if opts.OutputDir != "" {
		output = opts.OutputDir
	}
	abs, err := filepath.Abs(filepath.Join(output, p.Name, PlaceholderRunID))
	if err != nil {
		return "", err
	}
	var ids []string
	for _, c := range p.Expand() {
		ids = append(ids, c.ID)
	}
	script, err := slurmScript(p, ids, abs, slurm.JobName(PlaceholderRunID, 1), &opts)
	if err != nil {
		return "", &exitcode.UsageError{Err: fmt.Errorf("executor slurm: %w", err)}
	}
	// Setup lines are the user's own, but what runner plan prints may be pasted into an issue.
	r, err := secrets.Default()
	if err != nil {
		return "", err
	}
	return r.String(script), nil
}
