// Package slurm hands a run's cells to Slurm, the scheduler GPU clusters already run: one batch
// script per run, submitted as a job array with one task per cell (`sbatch --array=0-N%max`),
// each task running `runner exec-cell RUN_DIR CELL_ID` on its node against the shared run
// directory. It names each array after the run (JobName) so that a run finds its own arrays by
// name and never takes another job for one (FindJobs), polls the array with squeue, reads each
// finished task's state from sacct (or, where accounting is off, scontrol), cancels it with
// scancel, and says what a task's end means for its cell (a time limit, a node failure, a
// preemption, a cancellation).
//
// It only talks to the Slurm commands; which cells to submit and what a cell does are the
// runner's (runner/executor.go). Every command runs with the caller's environment, so
// SLURM_CONF and PATH choose the cluster.
package slurm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sglprof/runner/runner/proc"
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
	// Name is the job name (JobName: it carries the run's id, and --resume finds the array by it).
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

// TaskOutput is the file Slurm writes task index's stdout and stderr to, relative to the run
// directory. It is named by the array's job id like the markers, so an array submitted again
// for the same cells never overwrites an earlier one's output.
func TaskOutput(jobID string, index int) string {
	return MarkerDir + "/task-" + jobID + "_" + strconv.Itoa(index) + ".out"
}

// JobName is the name of the run's array number n (its slurm/job-<n>.sbatch): "runner-", the
// run's id (RunTag) and n. The name is what ties a Slurm job to a run: `runner run --resume`
// finds the array by it (the job id may not have been recorded when the runner was killed right
// after sbatch, and the recorded one may have been edited), and acts on no job without it.
func JobName(tag string, n int) string { return jobNamePrefix + tag + "-" + strconv.Itoa(n) }

const jobNamePrefix = "runner-"

// RunTag is the id of the run whose run directory is at path dir (absolute, symlinks resolved):
// 12 hex digits of its SHA-256. It is derived from the directory's path rather than recorded
// in it, so that neither an edited record nor a copy of the directory elsewhere can claim
// another run's jobs, and it still exists when the manifest does not.
func RunTag(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return hex.EncodeToString(sum[:6])
}

// IsJobNameOf reports whether name is one of JobName(tag, n).
func IsJobNameOf(tag, name string) bool {
	rest, ok := strings.CutPrefix(name, jobNamePrefix+tag+"-")
	if !ok || rest == "" || len(rest) > 9 {
		return false
	}
	return strings.Trim(rest, "0123456789") == ""
}

// Script returns the batch script of a run's job array. It refuses (rather than writes) a
// directive sbatch would read differently from what is meant; the plan's values are validated
// earlier (package plans, with the key's name), so an error here means a caller bypassed that.
//
// How sbatch reads the #SBATCH lines (Slurm's src/sbatch/opt.c, _get_argument; checked against
// sbatch 22.05): every such line before the first command is split into arguments at
// whitespace; single or double quotes group characters, whitespace included; a backslash makes
// the next character literal, inside quotes too; an unquoted '#' ends the line. The arguments
// of all lines form one argv, parsed like the command line's. So each value is written inside
// double quotes with '\' and '"' escaped, and a line break, which would end the line, is
// refused. Older sbatch versions also take the words "hetjob" and "packjob" anywhere on an
// #SBATCH line for the separator of a heterogeneous job's components, so those are refused too.
//
// The --output path is then a Slurm filename pattern (%A, %a, %j... are replaced): a '%' of
// the run directory is written as "%%", and a backslash is refused, because a backslash
// anywhere in the path makes Slurm replace no pattern at all (every task would write one file
// literally named task-%A_%a.out).
//
// Cell ids and paths are quoted for the shell; the array index picks the cell.
func Script(cfg Config, a Array) (string, error) {
	if err := CheckRunDir(a.RunDir); err != nil {
		return "", err
	}
	var b strings.Builder
	var errs []error
	b.WriteString("#!/bin/bash\n")
	directive := func(name, v string) {
		if v == "" {
			return
		}
		if msg := directiveProblem(v); msg != "" {
			errs = append(errs, fmt.Errorf("sbatch --%s=%q: %s", name, v, msg))
			return
		}
		fmt.Fprintf(&b, "#SBATCH --%s=%s\n", name, directiveQuote(v))
	}
	directive("job-name", a.Name)
	arr := fmt.Sprintf("0-%d", len(a.Cells)-1)
	if cfg.MaxParallel > 0 {
		arr += fmt.Sprintf("%%%d", cfg.MaxParallel)
	}
	fmt.Fprintf(&b, "#SBATCH --array=%s\n", arr)
	directive("output", strings.ReplaceAll(a.RunDir, "%", "%%")+"/"+MarkerDir+"/task-%A_%a.out")
	directive("partition", cfg.Partition)
	directive("account", cfg.Account)
	directive("qos", cfg.QOS)
	directive("time", cfg.Time)
	directive("mem", cfg.Mem)
	directive("constraint", cfg.Constraint)
	if cfg.GPUsPerTask > 0 {
		fmt.Fprintf(&b, "#SBATCH --gpus-per-task=%d\n", cfg.GPUsPerTask)
		b.WriteString("#SBATCH --ntasks=1\n")
	}
	if cfg.CPUsPerTask > 0 {
		fmt.Fprintf(&b, "#SBATCH --cpus-per-task=%d\n", cfg.CPUsPerTask)
	}
	for _, x := range cfg.ExtraSbatch {
		opt, v, hasValue := strings.Cut(x, "=")
		switch {
		case !extraOptionRE().MatchString(opt):
			errs = append(errs, fmt.Errorf("extra sbatch option %q: not one option (--name or --name=value)", x))
		case hasValue && directiveProblem(v) != "":
			errs = append(errs, fmt.Errorf("extra sbatch option %q: %s", x, directiveProblem(v)))
		case hasValue:
			fmt.Fprintf(&b, "#SBATCH %s=%s\n", opt, directiveQuote(v))
		default:
			fmt.Fprintf(&b, "#SBATCH %s\n", opt)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return "", err
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
	return b.String(), nil
}

// extraOptionRE is one sbatch option as extra_sbatch gives it, before any "=value": a long
// option, or a short one (which then takes no value here: "-N2" or "-N 2" would be one
// argument or two, so values go with the long form).
var extraOptionRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(--[A-Za-z0-9][A-Za-z0-9-]*|-[A-Za-z])$`) })

// CheckRunDir says why a run directory at path dir (or under it) cannot be named in a batch
// script's directives (its --output), or nil. A space, quotes, '#' and '%' are fine (quoted,
// and '%' doubled); see Script for what is not.
func CheckRunDir(dir string) error {
	if msg := directiveProblem(dir); msg != "" {
		return fmt.Errorf("the path %q cannot hold a Slurm run's directory: it %s; choose another output directory", dir, msg)
	}
	if strings.ContainsRune(dir, '\\') {
		return fmt.Errorf("the path %q cannot hold a Slurm run's directory: it contains a backslash, and a backslash anywhere in sbatch's --output path turns off Slurm's %%A/%%a replacement, so every task would write to one file; choose another output directory", dir)
	}
	return nil
}

// directiveProblem says why v cannot be the value of an #SBATCH directive even quoted, or "".
func directiveProblem(v string) string {
	if strings.ContainsAny(v, "\n\r\x00") {
		return "contains a line break or a NUL byte, which ends an #SBATCH line"
	}
	lower := strings.ToLower(v)
	for _, w := range []string{"hetjob", "packjob"} {
		if strings.Contains(lower, w) {
			return fmt.Sprintf("contains %q, which sbatch may take for the separator of a heterogeneous job's components", w)
		}
	}
	return ""
}

// directiveQuote quotes v for an #SBATCH line: inside double quotes, with '\' and '"'
// escaped by a backslash (see Script).
func directiveQuote(v string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v) + `"`
}

// Quote quotes s for a POSIX shell.
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

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

// maxOutput bounds what one Slurm command's answer may hold: squeue and sacct are asked about
// one run's arrays, so even a large cluster answers in KiBs; more is no answer of theirs.
const maxOutput = 16 << 20

// run runs one Slurm client command through the runner's process owner (runner/proc), like
// every child of the runner: under the supervisor, in a process group of its own that ctx's end
// or the timeout stops, and with its answer bounded (maxOutput). It returns stdout and stderr
// together, as the messages quote them.
func (c Client) run(ctx context.Context, argv ...string) (string, error) {
	t := c.Timeout
	if t <= 0 {
		t = 30 * time.Second
	}
	out, res := proc.Probe(ctx, proc.Spec{
		Argv: argv, Env: c.Env, Timeout: t,
		InterruptGrace: 200 * time.Millisecond, TerminateGrace: time.Second, LeftoverGrace: 500 * time.Millisecond,
	}, maxOutput, nil)
	text := string(out.Stdout) + string(out.Stderr)
	var err error
	switch {
	case out.Cut:
		err = fmt.Errorf("printed more than %d bytes; not read further", maxOutput)
	case res.StartErr != nil && !res.Interrupted:
		err = res.StartErr
	case res.TimedOut:
		err = fmt.Errorf("timed out after %s", t)
	case res.Interrupted:
		err = ctx.Err()
	case res.Signal != "":
		err = fmt.Errorf("killed by %s", res.Signal)
	case res.ExitCode != 0:
		err = fmt.Errorf("exit status %d", res.ExitCode)
	}
	if err != nil {
		return text, &CommandError{Argv: argv, Output: text, Err: err}
	}
	return string(out.Stdout), nil
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
