package slurm

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Task is one array task's state as Slurm reports it.
type Task struct {
	// JobID is the array's job id (Tasks fills it in).
	JobID    string `json:"job_id,omitempty"`
	Index    int    `json:"index"`
	State    string `json:"state"` // PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ...
	Node     string `json:"node,omitempty"`
	ExitCode string `json:"exit_code,omitempty"` // "code:signal"
	Reason   string `json:"reason,omitempty"`
}

// Done reports whether the task has ended (Slurm will not run it again by itself).
func (t Task) Done() bool {
	switch t.State {
	case "", "PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED", "STAGE_OUT", "SIGNALING", "REQUEUE_HOLD", "REQUEUE_FED":
		return false
	}
	return true
}

// EndedBySlurm reports whether Slurm itself ended the task: a cancellation, a preemption, a
// node failure, its time or memory limit. The cell then saw only a signal (exec-cell records
// that as "interrupted"), so the task's outcome (OutcomeOf) is what the cell's verdict must say.
func (t Task) EndedBySlurm() bool {
	switch t.State {
	case "CANCELLED", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL", "TIMEOUT", "DEADLINE", "OUT_OF_MEMORY":
		return true
	}
	return false
}

// Tasks returns the state of every task 0..n-1 of the array: squeue for the tasks still queued
// or running, then sacct for the ended ones, or scontrol where the cluster keeps no accounting
// (a one-node test cluster, a small lab). A task no command knows any more is "UNKNOWN".
func (c Client) Tasks(ctx context.Context, jobID string, n int) ([]Task, error) {
	tasks := make([]Task, n)
	for i := range tasks {
		tasks[i] = Task{JobID: jobID, Index: i}
	}
	out, err := c.run(ctx, "squeue", "-h", "-r", "-j", jobID, "-o", "%K|%T|%N|%r")
	if err != nil && !strings.Contains(err.Error(), "Invalid job id") {
		return nil, err
	}
	for i, t := range parseSqueue(out, n) {
		t.JobID = jobID
		tasks[i] = t
	}
	var missing bool
	for _, t := range tasks {
		if t.State == "" {
			missing = true
		}
	}
	if !missing {
		return tasks, nil
	}
	ended, err := c.sacct(ctx, jobID, n)
	if err != nil {
		ended, err = c.scontrol(ctx, jobID, n)
		if err != nil {
			return nil, err
		}
	}
	for i := range tasks {
		if tasks[i].State != "" {
			continue
		}
		if t, ok := ended[i]; ok {
			t.JobID = jobID
			tasks[i] = t
		} else {
			tasks[i].State = "UNKNOWN"
		}
	}
	return tasks, nil
}

// sacct reads ended tasks from the accounting database.
func (c Client) sacct(ctx context.Context, jobID string, n int) (map[int]Task, error) {
	out, err := c.run(ctx, "sacct", "-n", "-P", "-X", "-j", jobID, "-o", "JobID,State,NodeList,ExitCode,Reason")
	if err != nil {
		return nil, err
	}
	if strings.Contains(out, "accounting storage is disabled") {
		return nil, errors.New("sacct: accounting storage is disabled")
	}
	return parseSacct(out, n), nil
}

// parseSqueue reads `squeue -h -r -o %K|%T|%N|%r` output: the tasks still queued or running,
// by array index (indices at or beyond n are dropped).
func parseSqueue(out string, n int) map[int]Task {
	res := map[int]Task{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(strings.TrimSpace(line), "|")
		if len(f) != 4 {
			continue
		}
		for _, i := range indices(f[0], n) {
			res[i] = Task{Index: i, State: f[1], Node: f[2], Reason: none(f[3])}
		}
	}
	return res
}

// parseSacct reads `sacct -n -P -X -o JobID,State,NodeList,ExitCode,Reason` output: the ended
// tasks by array index.
func parseSacct(out string, n int) map[int]Task {
	res := map[int]Task{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(strings.TrimSpace(line), "|")
		if len(f) < 4 {
			continue
		}
		_, idx, ok := strings.Cut(f[0], "_")
		if !ok {
			continue
		}
		idx = strings.Trim(idx, "[]")
		state, _, _ := strings.Cut(f[1], " ") // "CANCELLED by 0"
		reason := ""
		if len(f) > 4 {
			reason = none(f[4])
		}
		for _, i := range indices(idx, n) {
			res[i] = Task{Index: i, State: state, Node: none(f[2]), ExitCode: f[3], Reason: reason}
		}
	}
	return res
}

// scontrol reads ended tasks from the controller's memory (kept for MinJobAge after the end).
func (c Client) scontrol(ctx context.Context, jobID string, n int) (map[int]Task, error) {
	out, err := c.run(ctx, "scontrol", "show", "job", "-o", jobID)
	if err != nil {
		return nil, err
	}
	return parseScontrol(out, n), nil
}

// parseScontrol reads `scontrol show job -o` output (one record a line, KEY=VALUE words): the
// tasks the controller still remembers, by array index.
func parseScontrol(out string, n int) map[int]Task {
	res := map[int]Task{}
	for _, line := range strings.Split(out, "\n") {
		kv := fields(line)
		if kv["JobId"] == "" {
			continue
		}
		t := Task{State: kv["JobState"], Node: none(kv["NodeList"]), ExitCode: kv["ExitCode"], Reason: none(kv["Reason"])}
		for _, i := range indices(kv["ArrayTaskId"], n) {
			t.Index = i
			res[i] = t
		}
	}
	return res
}

// fields splits one `scontrol show job -o` record into its KEY=VALUE pairs.
func fields(line string) map[string]string {
	m := map[string]string{}
	for _, w := range strings.Fields(line) {
		if k, v, ok := strings.Cut(w, "="); ok {
			if _, seen := m[k]; !seen {
				m[k] = v
			}
		}
	}
	return m
}

// indices expands an array-task field: "3", "0-5", "4-5%2", "[1,3-4]", "0,2".
func indices(s string, n int) []int {
	s = strings.Trim(s, "[]")
	s, _, _ = strings.Cut(s, "%")
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(strings.TrimSpace(lo))
		if err != nil {
			continue
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(strings.TrimSpace(hi)); err != nil {
				continue
			}
		}
		for i := max(a, 0); i <= b && i < n; i++ {
			out = append(out, i)
		}
	}
	return out
}

func none(s string) string {
	if s == "None" || s == "(null)" || s == "(None)" {
		return ""
	}
	return s
}

// Outcome is what an ended task without a cell result means for its cell.
type Outcome struct {
	// Interrupted is set for ends that are not the cell's doing (a cancellation, a
	// preemption, a node failure): `runner run --resume` runs such a cell again. Otherwise the
	// cell failed (its time limit, out of memory, the task's own failure).
	Interrupted bool
	Code        string
	Message     string
}

// OutcomeOf explains an ended task whose cell wrote no result.json.
func OutcomeOf(t Task) Outcome {
	where := ""
	if t.Node != "" {
		where = " on node " + t.Node
	}
	switch t.State {
	case "CANCELLED":
		return Outcome{true, "slurm-cancelled", "the Slurm task was cancelled (scancel)" + where + "; runner run --resume runs the cell again"}
	case "PREEMPTED":
		return Outcome{true, "slurm-preempted", "a higher-priority job preempted the Slurm task" + where + "; runner run --resume runs the cell again"}
	case "NODE_FAIL", "BOOT_FAIL":
		return Outcome{true, "slurm-node-failure", "the node failed under the Slurm task" + where + " (" + t.State + "); runner run --resume runs the cell again"}
	case "TIMEOUT", "DEADLINE":
		return Outcome{false, "slurm-time-limit", "Slurm killed the task" + where + " at its time limit; raise [executor.slurm] time or split the cell"}
	case "OUT_OF_MEMORY":
		return Outcome{false, "slurm-out-of-memory", "Slurm killed the task" + where + " for exceeding its memory; raise [executor.slurm] mem"}
	case "UNKNOWN":
		return Outcome{true, "slurm-unknown", "Slurm no longer knows the task (it ended longer ago than the controller keeps records); runner run --resume runs the cell again"}
	}
	return Outcome{false, "slurm-task-failed", fmt.Sprintf("the Slurm task ended %s%s (exit %s) without writing the cell's result; see %s in the run directory", t.State, where, t.ExitCode, TaskOutput(t.JobID, t.Index))}
}

// Job is a Slurm job FindJobs found: an array's job id, and whether any of its tasks is still
// queued or running.
type Job struct {
	ID     string
	Active bool
}

// FindJobs returns the jobs named name that belong to the user uid, each array once: squeue
// for the jobs the controller still holds (queued, running, and ended within its MinJobAge),
// then, when it holds none, sacct for jobs that ended since since (where accounting is off,
// sacct fails and nothing more is found). A job of another user is never returned, whatever
// its name. The error is squeue's: without it nobody can say whether such a job runs.
func (c Client) FindJobs(ctx context.Context, name string, uid int, since time.Time) ([]Job, error) {
	out, err := c.run(ctx, "squeue", "-h", "-t", "all", "-n", name, "-o", "%F|%j|%U|%T")
	if err != nil {
		return nil, err
	}
	if jobs := parseFound(out, name, uid, true); len(jobs) > 0 {
		return jobs, nil
	}
	out, err = c.run(ctx, "sacct", "-n", "-X", "-P", "--name", name, "-S", since.Local().Format("2006-01-02T15:04:05"), "-E", "now",
		"-o", "JobID,JobName,UID,State")
	if err != nil || strings.Contains(out, "accounting storage is disabled") {
		return nil, nil
	}
	return parseFound(out, name, uid, false), nil
}

// parseFound reads `squeue -o %F|%j|%U|%T` (squeue true) or `sacct -P -o
// JobID,JobName,UID,State` lines: the jobs named name of user uid, by array job id (sacct's
// "12_3", "12_[4-5]" and "12+0" are job 12), in the order first seen. A job squeue lists with
// a task not yet ended is active; what only sacct knows has ended.
func parseFound(out, name string, uid int, squeue bool) []Job {
	var jobs []Job
	seen := map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(strings.TrimSpace(line), "|")
		if len(f) != 4 || f[1] != name || f[2] != strconv.Itoa(uid) {
			continue
		}
		id := f[0]
		if i := strings.IndexAny(id, "_+."); i >= 0 {
			id = id[:i]
		}
		if id == "" || strings.Trim(id, "0123456789") != "" || len(id) > 18 {
			continue
		}
		state, _, _ := strings.Cut(f[3], " ") // "CANCELLED by 0"
		active := squeue && !(Task{State: state}).Done()
		if i, ok := seen[id]; ok {
			jobs[i].Active = jobs[i].Active || active
			continue
		}
		seen[id] = len(jobs)
		jobs = append(jobs, Job{ID: id, Active: active})
	}
	return jobs
}
