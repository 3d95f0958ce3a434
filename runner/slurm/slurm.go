// Package slurm hands a run's cells to Slurm, the scheduler GPU clusters already run: one batch
// script per run, submitted as a job array with one task per cell (`sbatch --array=0-N%max`),
// each task running `runner exec-cell RUN_DIR CELL_ID` on its node against the shared run
// directory. It polls the array with squeue, reads each finished task's state from sacct (or,
// where accounting is off, scontrol), cancels it with scancel, and says what a task's end means
// for its cell (a time limit, a node failure, a preemption, a cancellation).
//
// It only talks to the Slurm commands; which cells to submit and what a cell does are the
// runner's (runner/executor.go). Every command runs with the caller's environment, so
// SLURM_CONF and PATH choose the cluster.
package slurm

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Config is [executor.slurm] of a plan.
type Config struct {
	Partition   string
	Account     string
	QOS         string
	Time        string // sbatch --time, e.g. "01:00:00"
	GPUsPerTask int
	CPUsPerTask int
	Mem         string // sbatch --mem, e.g. "64G"
	Constraint  string
	MaxParallel int // the %N of --array; 0 = Slurm's own limit
	ExtraSbatch []string
	Setup       []string // shell lines run on the node before the cell
}

// Array is the job array of one run.
type Array struct {
	// Cells are the cell ids in array-index order: task i runs Cells[i].
	Cells []string
	// Runner is the argv prefix that runs the runner on a node (an absolute path to the same
	// binary, since nodes share the file system), e.g. ["/opt/bin/runner"].
	Runner []string
	// ExecArgs are added after `exec-cell` (e.g. --simulate).
	ExecArgs []string
	// RunDir is the run directory, absolute, on a file system the nodes share.
	RunDir string
	// Name is the job name (the plan's).
	Name string
}

// MarkerDir is where each task writes a marker when it starts (RunDir/slurm/started-<job>_<i>,
// see Marker), so
// the runner can tell a task that never reached the run directory from a slow one.
const MarkerDir = "slurm"

// Marker is the start marker of task index of job, relative to the run directory: a run that
// resubmits cells gets new markers, so an old array's cannot pass for a new one's.
func Marker(jobID string, index int) string {
	return MarkerDir + "/started-" + jobID + "_" + strconv.Itoa(index)
}

// Script returns the batch script of a run's job array. Cell ids and paths are quoted for the
// shell; the array index picks the cell.
func Script(cfg Config, a Array) string {
	var b strings.Builder
	b.WriteString("#!/bin/bash\n")
	fmt.Fprintf(&b, "#SBATCH --job-name=%s\n", sbatchValue("runner-"+a.Name))
	arr := fmt.Sprintf("0-%d", len(a.Cells)-1)
	if cfg.MaxParallel > 0 {
		arr += fmt.Sprintf("%%%d", cfg.MaxParallel)
	}
	fmt.Fprintf(&b, "#SBATCH --array=%s\n", arr)
	fmt.Fprintf(&b, "#SBATCH --output=%s\n", sbatchValue(a.RunDir+"/"+MarkerDir+"/task-%a.out"))
	opt := func(name, v string) {
		if v != "" {
			fmt.Fprintf(&b, "#SBATCH --%s=%s\n", name, sbatchValue(v))
		}
	}
	opt("partition", cfg.Partition)
	opt("account", cfg.Account)
	opt("qos", cfg.QOS)
	opt("time", cfg.Time)
	opt("mem", cfg.Mem)
	opt("constraint", cfg.Constraint)
	if cfg.GPUsPerTask > 0 {
		fmt.Fprintf(&b, "#SBATCH --gpus-per-task=%d\n", cfg.GPUsPerTask)
		b.WriteString("#SBATCH --ntasks=1\n")
	}
	if cfg.CPUsPerTask > 0 {
		fmt.Fprintf(&b, "#SBATCH --cpus-per-task=%d\n", cfg.CPUsPerTask)
	}
	for _, x := range cfg.ExtraSbatch {
		fmt.Fprintf(&b, "#SBATCH %s\n", strings.ReplaceAll(x, "\n", " "))
	}
	b.WriteString("set -u\n")
	b.WriteString("cells=(")
	for i, c := range a.Cells {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(Quote(c))
	}
	b.WriteString(")\n")
	b.WriteString("cell=${cells[$SLURM_ARRAY_TASK_ID]}\n")
	fmt.Fprintf(&b, "rundir=%s\n", Quote(a.RunDir))
	fmt.Fprintf(&b, "hostname > \"$rundir/%s/started-${SLURM_ARRAY_JOB_ID}_$SLURM_ARRAY_TASK_ID\" || exit 97\n", MarkerDir)
	for _, line := range cfg.Setup {
		b.WriteString(line)
		b.WriteByte('\n')
	}
	b.WriteString("exec")
	for _, w := range a.Runner {
		b.WriteByte(' ')
		b.WriteString(Quote(w))
	}
	b.WriteString(" exec-cell")
	for _, w := range a.ExecArgs {
		b.WriteByte(' ')
		b.WriteString(Quote(w))
	}
	b.WriteString(" \"$rundir\" \"$cell\"\n")
	return b.String()
}

// Quote quotes s for a POSIX shell.
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// sbatchValue keeps a #SBATCH value on one line.
func sbatchValue(s string) string { return strings.NewReplacer("\n", " ", "\r", " ").Replace(s) }

// Client runs the Slurm commands.
type Client struct {
	// Env is the environment of every Slurm command (PATH, SLURM_CONF).
	Env []string
	// Timeout bounds each command; 0 means 30 s.
	Timeout time.Duration
}

// CommandError is a Slurm command that failed: the command line and what it printed, so the
// user sees sbatch's own reason (no such partition, cluster unreachable).
type CommandError struct {
	Argv   []string
	Output string
	Err    error
}

func (e *CommandError) Error() string {
	out := strings.TrimSpace(e.Output)
	if out == "" {
		out = "(no output)"
	}
	return fmt.Sprintf("%s: %v: %s", strings.Join(e.Argv, " "), e.Err, out)
}

func (e *CommandError) Unwrap() error { return e.Err }

func (c Client) run(ctx context.Context, argv ...string) (string, error) {
	t := c.Timeout
	if t <= 0 {
		t = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, t)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = c.Env
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("timed out after %s", t)
		}
		return string(out), &CommandError{Argv: argv, Output: string(out), Err: err}
	}
	return string(out), nil
}

// Check runs `sbatch --version` and `scontrol ping` once, so a missing Slurm or an unreachable
// controller is found before anything is created or submitted. scontrol ping really contacts
// the controller (it exits 0 when the primary or a backup answers); a query such as
// `squeue -j 0` can fail on the client alone and prove nothing.
func (c Client) Check(ctx context.Context) error {
	if _, err := c.run(ctx, "sbatch", "--version"); err != nil {
		return err
	}
	_, err := c.run(ctx, "scontrol", "ping")
	return err
}

// Submit submits the script at path and returns the array's job id.
func (c Client) Submit(ctx context.Context, path string) (string, error) {
	out, err := c.run(ctx, "sbatch", "--parsable", path)
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(out)
	if i := strings.LastIndexByte(id, '\n'); i >= 0 {
		id = strings.TrimSpace(id[i+1:])
	}
	id, _, _ = strings.Cut(id, ";") // --parsable prints "ID[;CLUSTER]"
	if _, err := strconv.Atoi(id); err != nil {
		return "", fmt.Errorf("sbatch --parsable printed %q, not a job id", strings.TrimSpace(out))
	}
	return id, nil
}

// Cancel cancels the whole array (every task, pending or running).
func (c Client) Cancel(ctx context.Context, jobID string) error {
	_, err := c.run(ctx, "scancel", jobID)
	return err
}

// CancelTask cancels one task of the array.
func (c Client) CancelTask(ctx context.Context, jobID string, index int) error {
	_, err := c.run(ctx, "scancel", fmt.Sprintf("%s_%d", jobID, index))
	return err
}
