package runner

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/exitcode"
	"github.com/sglprof/runner/runner/slurm"
)

// The Slurm executor hands the cells without a result to Slurm as one job array (one task per
// cell). Each task runs `runner exec-cell RUN_DIR CELL` on its node, which is runCell against
// the shared run directory; the runner polls the array, writes a result for every task that
// ended without one (from its Slurm state), then summarises exactly as a local run does.

// slurmPoll is how often the array is polled; tests shorten it through Options.
const slurmPoll = 2 * time.Second

// markerGrace is how long a running task's start marker may take to appear in the run
// directory before the runner warns that the nodes may not see it. The marker is the batch
// script's first command, so on a shared file system it is there within a poll or two; the
// margin is for attribute caching (NFS), and the warning comes long before the cell's end.
const markerGrace = 10 * time.Second

// markerWatch warns, once per array, when a task has been RUNNING for markerGrace (as the runner
// saw it) and its start marker is still missing: the run directory is probably not on a file
// system the nodes share, and every cell of the sweep will end without a result.
type markerWatch struct {
	running map[int]time.Time // when the runner first saw each task running
	warned  bool
}

func (m *markerWatch) check(dir string, job *rundir.SlurmJob, t slurm.Task, opts *Options) {
	if m.warned || t.State != "RUNNING" {
		return
	}
	now := opts.Now()
	if m.running == nil {
		m.running = map[int]time.Time{}
	}
	first, ok := m.running[t.Index]
	if !ok {
		m.running[t.Index] = now
		return
	}
	if now.Sub(first) < markerGrace {
		return
	}
	if _, err := os.Stat(filepath.Join(dir, slurm.Marker(job.JobID, t.Index))); err == nil {
		return
	}
	m.warned = true
	node := t.Node
	if node == "" {
		node = "its node"
	}
	opts.Logger.Warn(fmt.Sprintf("executor slurm: task %d of job %s has been running for %s on %s, but its start marker is not in the run directory; is %s on a file system the nodes share? Without it every cell will end without a result",
		t.Index, job.JobID, markerGrace, node, dir), "path", dir, "marker", slurm.Marker(job.JobID, t.Index))
}

func (o *Options) slurmClient() slurm.Client { return slurm.Client{Env: o.Env} }

// checkSlurm runs before anything is created: a missing sbatch or an unreachable controller
// ends the run with the failing command and its output.
func checkSlurm(ctx context.Context, opts *Options) error {
	if opts.Exe == "" || !filepath.IsAbs(opts.Exe) {
		return errors.New("the Slurm executor needs the runner's own absolute path, so that array tasks can run `runner exec-cell` on the nodes")
	}
	if err := opts.slurmClient().Check(ctx); err != nil {
		return fmt.Errorf("executor slurm: Slurm cannot be used from here: %w; install the Slurm client (sbatch, squeue, sacct, scancel), set SLURM_CONF, or run with --executor local", err)
	}
	return nil
}

// checkSlurmRunDir refuses, before anything is created or submitted, a run directory path (or
// the directory a new one goes under) that no batch script can name: slurm.CheckRunDir.
func checkSlurmRunDir(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	if err := slurm.CheckRunDir(abs); err != nil {
		return &exitcode.UsageError{Err: fmt.Errorf("executor slurm: %w (--output, or output_dir in the plan)", err)}
	}
	return nil
}

// runOnSlurm runs the cells recs[todo] as a job array and waits for it (unless opts.Detach),
// first dealing with the last array of a resumed run, found by its name (findOwnArray): one
// still active is waited for (its tasks are running cells, not leftovers), one that ended while
// no runner watched it (--detach, a killed runner) is collected, so that its tasks get their
// Slurm states. Only then are the processes the cells recorded reaped and the interrupted cells
// set aside. It reports whether the run was interrupted and whether the runner returned before
// the cells ended (detached).
func runOnSlurm(ctx context.Context, p *plans.Plan, dir string, recs []cellRecord, todo []int, man *rundir.Manifest, opts *Options) (interrupted, detached bool, err error) {
	if len(man.Slurm) > 0 || lastScript(dir) > 0 {
		again := fmt.Sprintf("nothing was killed or resubmitted: run runner run --resume %s again once Slurm answers", dir)
		if err := checkUnrecordedArray(ctx, dir, man.Slurm, opts); err != nil {
			return false, false, err
		}
		if len(man.Slurm) > 0 {
			last := &man.Slurm[len(man.Slurm)-1]
			recorded := last.JobID
			found, err := findOwnArray(ctx, dir, last, opts)
			if err != nil {
				return false, false, fmt.Errorf("%w; %s", err, again)
			}
			if last.JobID != recorded {
				if err := opts.writeRedactedJSON(filepath.Join(dir, rundir.ManifestFile), man); err != nil {
					opts.Logger.Warn("manifest.json", "err", err)
				}
			}
			var active bool
			if found {
				if active, err = arrayActive(ctx, *last, opts); err != nil {
					return false, false, fmt.Errorf("%w; %s", err, again)
				}
			}
			switch {
			case active && opts.Detach:
				fmt.Fprintf(opts.Out, "Slurm job %s of this run is still active; runner run --resume %s waits for it\n", last.JobID, dir)
				return false, true, nil
			case active:
				if interrupted := waitArray(ctx, dir, recs, last, opts); interrupted {
					return true, false, nil
				}
			case found:
				if err := collectArray(ctx, dir, recs, last, opts); err != nil {
					return false, false, err
				}
			}
		}
		// Slurm says no task of the run runs any more: what the cells recorded is a leftover.
		reapLeftovers(dir, opts)
		if todo, err = rerunInterrupted(dir, recs, opts); err != nil {
			return false, false, err
		}
	}
	if len(todo) == 0 {
		return false, false, nil
	}
	t0 := time.Now()
	if err := submitArray(ctx, p, dir, recs, todo, man, opts); err != nil {
		return false, false, err
	}
	job := &man.Slurm[len(man.Slurm)-1]
	job.OverheadNS = time.Since(t0).Nanoseconds()
	if err := opts.writeRedactedJSON(filepath.Join(dir, rundir.ManifestFile), man); err != nil {
		opts.Logger.Warn("manifest.json", "err", err)
	}
	if opts.Detach {
		fmt.Fprintf(opts.Out, "submitted Slurm job %s (%d cells); runner run --resume %s waits for it and writes the summary\n", job.JobID, len(job.Cells), dir)
		return false, true, nil
	}
	return waitArray(ctx, dir, recs, job, opts), false, nil
}

// slurmTag is the run's id in its arrays' job names: slurm.RunTag of the run directory's
// absolute path, symlinks resolved, so that a run resumed through another path to the same
// directory still finds its arrays.
func slurmTag(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("executor slurm: %w", err)
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	return slurm.RunTag(abs), nil
}

// findOwnArray finds the Slurm job of job, an array record of the run's manifest, by the one
// thing that ties a job to this run: its name, which must carry this run's id (slurm.JobName),
// and this user. The recorded job id is only a hint: a runner killed right after sbatch
// recorded none, and an edited manifest may name anybody's job. So only a job found this way is
// waited for, collected or cancelled; job.JobID is set to it. It reports false when Slurm knows
// no such job (the array was never submitted, or ended longer ago than Slurm remembers), and an
// error when Slurm cannot be asked or several jobs carry the name.
func findOwnArray(ctx context.Context, dir string, job *rundir.SlurmJob, opts *Options) (bool, error) {
	tag, err := slurmTag(dir)
	if err != nil {
		return false, err
	}
	if !slurm.IsJobNameOf(tag, job.Name) {
		opts.Logger.Warn(fmt.Sprintf("executor slurm: manifest.json records Slurm job %q under the name %q, which does not carry this run's id (job names of this run are %s<n>); that job is not waited for, collected or cancelled",
			job.JobID, job.Name, strings.TrimSuffix(slurm.JobName(tag, 0), "0")))
		return false, nil
	}
	jobs, err := opts.slurmClient().FindJobs(ctx, job.Name, os.Getuid(), job.Submitted.Add(-24*time.Hour))
	if err != nil {
		return false, fmt.Errorf("executor slurm: look for this run's job %s: %w", job.Name, err)
	}
	switch len(jobs) {
	case 0:
		if job.JobID != "" {
			opts.Logger.Warn(fmt.Sprintf("executor slurm: Slurm knows no job of this user named %s (it ended longer ago than Slurm remembers, or was never this run's); job %s that manifest.json records is left alone",
				job.Name, job.JobID))
		}
		return false, nil
	case 1:
		switch id := jobs[0].ID; {
		case job.JobID == "":
			opts.Logger.Warn(fmt.Sprintf("executor slurm: found Slurm job %s (%s), which the interrupted runner submitted without recording its id", id, job.Name))
		case job.JobID != id:
			opts.Logger.Warn(fmt.Sprintf("executor slurm: manifest.json records job %s for this run's array %s, but Slurm's job of that name is %s; job %s is left alone",
				job.JobID, job.Name, id, job.JobID))
		}
		job.JobID = jobs[0].ID
		return true, nil
	}
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return false, fmt.Errorf("executor slurm: %d Slurm jobs of this user are named %s (%s), the name of one of this run's arrays: scancel those that are not this run's (squeue -n %s)",
		len(jobs), job.Name, strings.Join(ids, ", "), job.Name)
}

// lastScript is the highest n of the run directory's slurm/job-<n>.sbatch, 0 when there is none.
func lastScript(dir string) int {
	names, _ := filepath.Glob(filepath.Join(dir, slurm.MarkerDir, "job-*.sbatch"))
	last := 0
	for _, name := range names {
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(name), "job-"), ".sbatch"))
		if err == nil && n > last {
			last = n
		}
	}
	return last
}

// checkUnrecordedArray refuses to go on while Slurm still runs an array of this run that the
// manifest does not record (manifest.json lost or rewritten): its cells are unknown, so nothing
// may be reaped or submitted beside it. Arrays are submitted one after another, each after the
// last ended, so only the newest batch script's can still run; it is looked up by its job name.
func checkUnrecordedArray(ctx context.Context, dir string, recorded []rundir.SlurmJob, opts *Options) error {
	n := lastScript(dir)
	if n == 0 {
		return nil
	}
	tag, err := slurmTag(dir)
	if err != nil {
		return err
	}
	name := slurm.JobName(tag, n)
	if slices.ContainsFunc(recorded, func(j rundir.SlurmJob) bool { return j.Name == name }) {
		return nil
	}
	script := filepath.Join(dir, slurm.MarkerDir, "job-"+strconv.Itoa(n)+".sbatch")
	since := time.Now()
	if st, err := os.Lstat(script); err == nil {
		since = st.ModTime()
	}
	jobs, err := opts.slurmClient().FindJobs(ctx, name, os.Getuid(), since.Add(-24*time.Hour))
	if err != nil {
		return fmt.Errorf("executor slurm: look for this run's job %s (%s): %w; nothing was killed or resubmitted: run runner run --resume %s again once Slurm answers", name, script, err, dir)
	}
	for _, j := range jobs {
		if j.Active {
			return fmt.Errorf("executor slurm: Slurm job %s (%s, submitted from %s) of this run is still active, but manifest.json does not record it, so which cells it runs is unknown; wait until it ends (squeue -j %s) or scancel %s, then resume again",
				j.ID, name, script, j.ID, j.ID)
		}
	}
	return nil
}

// collectArray collects every ended task of job, an array that ended while no runner waited for
// it: each cell gets the result its task's Slurm state means (collectTask), and the manifest
// record gets the task's node. A cell collected before keeps its result.
func collectArray(ctx context.Context, dir string, recs []cellRecord, job *rundir.SlurmJob, opts *Options) error {
	tasks, err := opts.slurmClient().Tasks(ctx, job.JobID, len(job.Cells))
	if err != nil {
		return fmt.Errorf("executor slurm: state of job %s: %w; run runner run --resume %s again once Slurm answers", job.JobID, err, dir)
	}
	byID := recordsByID(recs)
	for _, t := range tasks {
		if rec, ok := byID[job.Cells[t.Index]]; ok && t.Done() {
			noteNode(job, t.Index, collectTask(dir, rec, *job, t, opts), t)
		}
	}
	return nil
}

// recordsByID indexes recs by cell id.
func recordsByID(recs []cellRecord) map[string]cellRecord {
	m := make(map[string]cellRecord, len(recs))
	for _, r := range recs {
		m[r.Cell.ID] = r
	}
	return m
}

// noteNode records in job the node task i ran on: the one its cell's result names (exec-cell
// asks the node itself), else the one Slurm reported.
func noteNode(job *rundir.SlurmJob, i int, res *rundir.CellResult, t slurm.Task) {
	node := t.Node
	if res != nil && res.Slurm != nil && res.Slurm.Node != "" {
		node = res.Slurm.Node
	}
	if node == "" || i < 0 || i >= len(job.Cells) {
		return
	}
	if len(job.Nodes) != len(job.Cells) { // one per task (an edited manifest may say otherwise)
		nodes := make([]string, len(job.Cells))
		copy(nodes, job.Nodes)
		job.Nodes = nodes
	}
	job.Nodes[i] = node
}

// rerunInterrupted sets aside the cells an array left interrupted (scancel, preemption, node
// failure), as --resume does before it starts, and returns every cell without a result.
func rerunInterrupted(dir string, recs []cellRecord, opts *Options) ([]int, error) {
	for _, r := range recs {
		if err := setAside(dir, r.Cell, opts); err != nil {
			return nil, err
		}
		if err := makeCellDir(r.abs, r.Cell); err != nil {
			return nil, err
		}
	}
	return withoutResult(recs), nil
}

// withoutResult lists the indices of recs whose cell has no result.json.
func withoutResult(recs []cellRecord) []int {
	var todo []int
	for i, r := range recs {
		if _, err := os.Stat(filepath.Join(r.abs, rundir.ResultFile)); err != nil {
			todo = append(todo, i)
		}
	}
	return todo
}

// submitArray writes the batch script of the cells recs[todo] as slurm/job-<n>.sbatch (n counts
// the run's arrays from 1, and skips any script already there: an earlier array may still run
// from it, and its tasks' output is kept), records the array in the manifest (job id still
// empty), then submits it and sets the job id. The record before sbatch is what lets a
// runner killed in between be resumed: its job name finds the array (findOwnArray).
func submitArray(ctx context.Context, p *plans.Plan, dir string, recs []cellRecord, todo []int, man *rundir.Manifest, opts *Options) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	tag, err := slurmTag(dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(abs, slurm.MarkerDir), 0o755); err != nil {
		return fmt.Errorf("executor slurm: %w", err)
	}
	ids := make([]string, len(todo))
	for i, j := range todo {
		ids[i] = recs[j].Cell.ID
	}
	var rel, name string
	for n := len(man.Slurm) + 1; ; n++ {
		if n > len(man.Slurm)+10000 {
			return fmt.Errorf("executor slurm: no unused batch script name in %s", filepath.Join(abs, slurm.MarkerDir))
		}
		name = slurm.JobName(tag, n)
		script, err := slurmScript(p, ids, abs, name, opts)
		if err != nil {
			return &exitcode.UsageError{Err: fmt.Errorf("executor slurm: %w", err)}
		}
		rel = filepath.Join(slurm.MarkerDir, "job-"+strconv.Itoa(n)+".sbatch")
		err = rundir.WriteFileNew(filepath.Join(abs, rel), []byte(script))
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("executor slurm: %w", err)
		}
		break
	}
	man.Slurm = append(man.Slurm, rundir.SlurmJob{Name: name, Script: rel, Cells: ids, Submitted: opts.Now().UTC()})
	if err := opts.writeRedactedJSON(filepath.Join(dir, rundir.ManifestFile), man); err != nil {
		man.Slurm = man.Slurm[:len(man.Slurm)-1]
		return fmt.Errorf("executor slurm: the array must be recorded in manifest.json before it is submitted, and it cannot be (%w); nothing was submitted: free disk space and run runner run --resume %s", err, dir)
	}
	id, err := opts.slurmClient().Submit(ctx, filepath.Join(abs, rel))
	if err != nil {
		return fmt.Errorf("executor slurm: submit %s: %w", rel, err)
	}
	man.Slurm[len(man.Slurm)-1].JobID = id
	opts.Logger.Info("submitted Slurm job array", "job", id, "name", name, "cells", len(ids))
	return nil
}

// slurmScript is the batch script of the array that runs the cells ids of run directory abs
// (absolute) under the job name name: the one place that turns [executor.slurm] into
// slurm.Script's input, for submitArray and for runner plan (DescribeSlurm).
func slurmScript(p *plans.Plan, ids []string, abs, name string, opts *Options) (string, error) {
	var execArgs []string
	if opts.Simulate {
		execArgs = append(execArgs, "--simulate")
	}
	if opts.NoTriage {
		execArgs = append(execArgs, "--no-triage")
	}
	s := p.Executor.Slurm
	cfg := slurm.Config{Partition: s.Partition, Account: s.Account, QOS: s.QOS, Time: s.Time,
		GPUsPerTask: s.GPUsPerTask, CPUsPerTask: s.CPUsPerTask, Mem: s.Mem, Constraint: s.Constraint,
		MaxParallel: s.MaxParallel, ExtraSbatch: s.ExtraSbatch, Setup: s.Setup}
	return slurm.Script(cfg, slurm.Array{Cells: ids, Runner: []string{opts.Exe}, ExecArgs: execArgs, RunDir: abs, Name: name})
}

// arrayActive reports whether any task of job is still queued or running.
func arrayActive(ctx context.Context, job rundir.SlurmJob, opts *Options) (bool, error) {
	tasks, err := opts.slurmClient().Tasks(ctx, job.JobID, len(job.Cells))
	if err != nil {
		return false, fmt.Errorf("executor slurm: state of job %s: %w", job.JobID, err)
	}
	return slices.ContainsFunc(tasks, func(t slurm.Task) bool { return !t.Done() }), nil
}

// waitArray polls job until every task has ended, reporting starts and ends, and gives each
// task that ended without a result the verdict its Slurm state means. On Ctrl-C it cancels the
// array, waits for Slurm to take the tasks down and records the unfinished cells as
// interrupted. It reports whether the run was interrupted.
func waitArray(ctx context.Context, dir string, recs []cellRecord, job *rundir.SlurmJob, opts *Options) bool {
	byID := recordsByID(recs)
	poll := opts.SlurmPoll
	if poll <= 0 {
		poll = slurmPoll
	}
	started := map[int]bool{}
	ended := map[int]bool{}
	var markers markerWatch
	total := len(job.Cells)
	for {
		t0 := time.Now()
		tasks, err := opts.slurmClient().Tasks(context.WithoutCancel(ctx), job.JobID, total)
		if err != nil {
			opts.Logger.Warn("executor slurm: poll", "job", job.JobID, "err", err)
		}
		for _, t := range tasks {
			rec, ok := byID[job.Cells[t.Index]]
			if !ok || ended[t.Index] {
				continue
			}
			markers.check(dir, job, t, opts)
			if !started[t.Index] && (t.State == "RUNNING" || t.Done()) {
				started[t.Index] = true
				opts.Progress.CellStart(t.Index, total, rec.Cell)
			}
			if t.Done() {
				ended[t.Index] = true
				res := collectTask(dir, rec, *job, t, opts)
				noteNode(job, t.Index, res, t)
				opts.Progress.CellEnd(t.Index, total, rec.Cell, res)
			}
		}
		job.OverheadNS += time.Since(t0).Nanoseconds()
		if len(ended) == total {
			opts.Logger.Info("Slurm job array done", "job", job.JobID, "runner_overhead_per_cell", time.Duration(job.OverheadNS/int64(total)))
			return false
		}
		select {
		case <-ctx.Done():
			cancelArray(dir, recs, job, ended, opts)
			return true
		case <-time.After(poll):
		}
	}
}

// collectTask returns the result of an ended task's cell: the one exec-cell wrote, or one made
// from the task's Slurm state when the cell wrote none (time limit, node failure, scancel).
// When Slurm itself ended the task (slurm.Task.EndedBySlurm) and the cell is not ok, the Slurm
// outcome wins: exec-cell only saw SIGTERM and recorded "interrupted, stopped by the user",
// which is wrong for a time limit (failed: slurm-time-limit) and says nothing of who
// cancelled. Collecting a task twice (a resumed run collects its last array) changes nothing.
func collectTask(dir string, rec cellRecord, job rundir.SlurmJob, t slurm.Task, opts *Options) *rundir.CellResult {
	var res rundir.CellResult
	path := filepath.Join(rec.abs, rundir.ResultFile)
	o := slurm.OutcomeOf(t)
	if err := rundir.ReadJSON(path, &res); err == nil && res.Verdict != "" {
		if res.Verdict == plans.VerdictOK || !t.EndedBySlurm() {
			return &res
		}
		if len(res.Reasons) > 0 && res.Reasons[0].Code == o.Code {
			return &res // collected before
		}
		res.Verdict = plans.VerdictFailed
		if o.Interrupted {
			res.Verdict = plans.VerdictInterrupted // --resume runs it again
		}
		res.Reasons = append([]rundir.Reason{{Code: o.Code, Message: o.Message}}, res.Reasons...)
		if res.Slurm == nil {
			res.Slurm = &rundir.SlurmTask{JobID: job.JobID, Task: t.Index, Node: t.Node}
		}
		res.Slurm.State = t.State
	} else {
		if _, err := os.Stat(filepath.Join(dir, slurm.Marker(job.JobID, t.Index))); err != nil && t.State != "CANCELLED" {
			opts.Logger.Warn("executor slurm: the task left no start marker; is the run directory on a file system the nodes share?",
				"path", dir, "task", t.Index, "state", t.State)
		}
		res = rundir.CellResult{ID: rec.Cell.ID, Index: rec.Cell.Index, Key: rec.Cell.Key, Profiler: rec.Cell.Profiler,
			Verdict: plans.VerdictFailed, Reasons: []rundir.Reason{{Code: o.Code, Message: o.Message}},
			Start: job.Submitted, End: opts.Now().UTC(),
			Slurm: &rundir.SlurmTask{JobID: job.JobID, Task: t.Index, Node: t.Node, State: t.State}}
		if o.Interrupted {
			res.Verdict = plans.VerdictInterrupted
		}
	}
	if err := rundir.WriteJSON(path, &res, nil); err != nil {
		opts.Logger.Error("cannot write result", "cell", rec.Cell.ID, "err", err)
	}
	return &res
}

// cancelArray cancels the job after Ctrl-C, waits (bounded) until Slurm no longer runs any of
// its tasks, and records every cell that did not end as interrupted.
func cancelArray(dir string, recs []cellRecord, job *rundir.SlurmJob, ended map[int]bool, opts *Options) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := opts.slurmClient()
	if err := c.Cancel(ctx, job.JobID); err != nil {
		opts.Logger.Error("executor slurm: scancel", "job", job.JobID, "err", err)
	}
	for ctx.Err() == nil {
		active, err := arrayActive(ctx, *job, opts)
		if err != nil || !active {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	byID := recordsByID(recs)
	// Tasks that ended meanwhile are collected with their Slurm state (CANCELLED makes a cell
	// that died of scancel's signal interrupted); what Slurm cannot say is marked here.
	tasks, _ := c.Tasks(ctx, job.JobID, len(job.Cells))
	for i, id := range job.Cells {
		rec, ok := byID[id]
		if !ok || ended[i] {
			continue
		}
		if i < len(tasks) && tasks[i].Done() {
			noteNode(job, i, collectTask(dir, rec, *job, tasks[i], opts), tasks[i])
			continue
		}
		var res rundir.CellResult
		if rundir.ReadJSON(filepath.Join(rec.abs, rundir.ResultFile), &res) == nil && res.Verdict != "" {
			continue // it finished while the array was cancelled
		}
		res = rundir.CellResult{ID: rec.Cell.ID, Index: rec.Cell.Index, Key: rec.Cell.Key, Profiler: rec.Cell.Profiler,
			Verdict: plans.VerdictInterrupted, Start: job.Submitted, End: opts.Now().UTC(),
			Reasons: []rundir.Reason{{Code: "interrupted", Message: "Ctrl-C: the runner cancelled Slurm job " + job.JobID + " (scancel); runner run --resume " + dir + " runs the cell again"}},
			Slurm:   &rundir.SlurmTask{JobID: job.JobID, Task: i}}
		if err := rundir.WriteJSON(filepath.Join(rec.abs, rundir.ResultFile), &res, nil); err != nil {
			opts.Logger.Error("cannot write result", "cell", rec.Cell.ID, "err", err)
		}
	}
}

// ExecCell runs one cell of an existing run directory and writes its result.json: what a Slurm
// array task (or any other remote executor) runs on its node. The cell's launch is computed
// again from plan.toml (cells.json is redacted), so it is the one the run planned.
func ExecCell(ctx context.Context, dir, id string, opts Options) (*rundir.CellResult, error) {
	opts.defaults()
	p, _, err := rundir.ReadPlan(dir)
	if err != nil {
		return nil, &exitcode.UsageError{Err: fmt.Errorf("exec-cell %s: %w", dir, err)}
	}
	if err := opts.prepareRedactor(p); err != nil {
		return nil, fmt.Errorf("exec-cell %s: %w", dir, err)
	}
	if saved, err := rundir.ReadCells(dir); err == nil {
		warnDatasetChanged(ctx, saved.Dataset, &opts)
	}
	cells := p.Expand()
	i := slices.IndexFunc(cells, func(c plans.Cell) bool { return c.ID == id })
	if i < 0 {
		return nil, &exitcode.UsageError{Err: fmt.Errorf("exec-cell: the plan of %s has no cell %q", dir, id)}
	}
	c := cells[i]
	// An interrupted or unreadable result is set aside; any other result is a measurement,
	// which exec-cell never overwrites (a task submitted twice, a hand-run command).
	if err := setAside(dir, c, &opts); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(rundir.CellDir(dir, id), rundir.ResultFile)); err == nil {
		return nil, &exitcode.UsageError{Err: fmt.Errorf("exec-cell: cell %s of %s already has a result; it is not run again (runner run --resume runs only cells without one)", id, dir)}
	}
	recs, err := prepareCells(dir, []plans.Cell{c}, &opts)
	if err != nil {
		return nil, err
	}
	rec := recs[0]
	var res *cellResult
	if isServeCells(recs) {
		ss := newServeSession(dir, &opts)
		res = ss.runCell(ctx, rec)
		ss.close()
	} else {
		res = runCell(ctx, rec, &opts)
	}
	if job := envValue(opts.Env, "SLURM_ARRAY_JOB_ID"); job != "" {
		task, _ := strconv.Atoi(envValue(opts.Env, "SLURM_ARRAY_TASK_ID"))
		node := envValue(opts.Env, "SLURMD_NODENAME")
		if node == "" {
			node, _ = os.Hostname()
		}
		res.Slurm = &rundir.SlurmTask{JobID: job, Task: task, Node: node}
	}
	finishCell(0, 1, rec, res, &opts)
	return &res.CellResult, nil
}
