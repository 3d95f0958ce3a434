package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/compare"
	"github.com/sglprof/runner/reports/history"
	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/bisect"
	"github.com/sglprof/runner/runner/exitcode"
)

// WorktreePlaceholder in a value of [backend] env or an argument of backend.command is replaced,
// in each step of `runner bisect`, by the path of the step's worktree.
const WorktreePlaceholder = "{worktree}"

// DefaultInstallTimeout bounds the install command of a bisection step.
const DefaultInstallTimeout = 30 * time.Minute

// BisectOptions configure `runner bisect`.
type BisectOptions struct {
	// Repo is the backend's git repository; Good and Bad the endpoints (Bad "" means HEAD).
	Repo, Good, Bad string
	// FromHistory takes the endpoints (and the configuration) from the history: the backend
	// commits of the runs on each side of the change point the latest regression names.
	FromHistory bool
	// Install is the command (sh -c) that builds the backend in the step's worktree; "" runs
	// none. InstallTimeout bounds it (0: DefaultInstallTimeout).
	Install        string
	InstallTimeout time.Duration
	// Cell (a cell ID) or Config (a configuration key) chooses what every step runs; neither
	// means the plan's one configuration, else the one the history's latest regression names.
	Cell, Config string
	// Repeats is the first batch of repeats per commit (0: the plan's, at least 2); MaxRepeats
	// the cap an undecided commit may reach (0: three batches).
	Repeats, MaxRepeats int
	// Run are the options of each step's run (simulation, executor, environment, output).
	Run Options
	// Nightly gives the history path (the cache; "off" keeps none), the comparison's overrides
	// and the profilers compared, as for `runner compare`.
	Nightly NightlyOptions
	// RetrySkipped tries again the commits the cache holds as skipped (an install or a run
	// that failed for a reason since fixed).
	RetrySkipped bool
	// Note, when set, hears one line per step as the bisection goes.
	Note func(string)
}

// Bisect finds the first commit of the backend repository at which plan p's chosen
// configuration regressed (runner/bisect has the method). Each step checks the commit out in
// a worktree of its own, runs the install command, runs the configuration's cells through the
// configured executor (RunCells) into a run directory under
// <output>/<plan>/bisect/<fingerprint>/<commit>, and records the step in the history, which is
// also the cache a later bisection reads. The worktree is removed on every path out.
func Bisect(ctx context.Context, p *plans.Plan, bo BisectOptions) (*bisect.Report, error) {
	opts := bo.Run
	opts.defaults()
	output := p.OutputDir
	if opts.OutputDir != "" {
		output = opts.OutputDir
	}
	// Absolute: the history records the steps' run directories, and a later bisection may
	// start in another directory.
	output, err := filepath.Abs(output)
	if err != nil {
		return nil, fmt.Errorf("output directory: %w", err)
	}
	var db *history.DB
	if bo.Nightly.History != "off" {
		path := bo.Nightly.History
		if path == "" {
			path = filepath.Join(output, history.FileName)
		}
		h, err := history.Open(ctx, path)
		if err != nil {
			return nil, err
		}
		db = h
		defer db.Close()
	}
	if bo.FromHistory {
		if db == nil {
			return nil, &exitcode.UsageError{Err: errors.New("--from-history needs the history database; drop --no-history")}
		}
		good, bad, key, err := endpointsFromHistory(ctx, db, p)
		if err != nil {
			return nil, err
		}
		bo.Good, bo.Bad = good, bad
		if bo.Config == "" && bo.Cell == "" {
			bo.Config = key
		}
	}
	if bo.Good == "" {
		return nil, &exitcode.UsageError{Err: errors.New("name the good commit with --good REV, or use --from-history")}
	}
	if bo.Bad == "" {
		bo.Bad = "HEAD"
	}
	key, err := bisectConfig(ctx, p, bo, db)
	if err != nil {
		return nil, err
	}
	repo := bisect.Repo{Dir: bo.Repo, Env: opts.Env, Logger: opts.Logger}
	commits, err := repo.Range(ctx, bo.Good, bo.Bad)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, &exitcode.UsageError{Err: err}
	}
	repeats := bo.Repeats
	if repeats <= 0 {
		repeats = max(2, p.Matrix.Repeats)
	}
	maxRepeats := bo.MaxRepeats
	if maxRepeats <= 0 {
		maxRepeats = 3 * repeats
	}
	m := &stepper{p: p, key: key, bo: bo, opts: opts, db: db, repo: repo,
		fp:  fingerprint(p, key, bo.Install, opts.Simulate),
		dir: filepath.Join(output, p.Name, "bisect")}
	co, _ := bo.Nightly.CompareOptions(p)
	judge := func(base, cur *perf.Set) (*compare.Result, error) { return compare.Compare(base, cur, co) }
	res, err := bisect.Run(ctx, commits, bisect.Options{Repeats: repeats, MaxRepeats: maxRepeats, Measure: m.measure, Judge: judge,
		Progress: func(s bisect.Step) {
			if bo.Note != nil {
				bo.Note(stepLine(s))
			}
		}})
	if err != nil {
		return nil, err
	}
	rep := &bisect.Report{Result: res, Config: key, StepsDir: filepath.Join(m.dir, m.fp)}
	if res.FirstBad != nil && res.LastGood != nil {
		rep.Compare = m.explain(ctx, res, judge)
	}
	return rep, nil
}

// stepLine is the progress line of one verdict.
func stepLine(s bisect.Step) string {
	src := "measured"
	if s.Cached {
		src = "from the cache"
	}
	line := fmt.Sprintf("bisect: %s %s: %s (%d repeats, %s)", s.Commit.Short(), s.Commit.Subject, s.Verdict, s.Repeats, src)
	if s.Reason != "" {
		line += ": " + s.Reason
	}
	return line
}

// explain is the comparison that called the first bad commit bad (its repeats against the good
// endpoint's) with the kernel diff of the profiled cells of the last good and the first bad
// commit attached: the diff of the two builds either side of the change, which is the one
// runner compare attaches to a regressed configuration.
func (m *stepper) explain(ctx context.Context, res *bisect.Result, judge bisect.Judge) *compare.Result {
	good, err0 := m.measure(ctx, res.Good, 0)
	lg, err1 := m.measure(ctx, *res.LastGood, 0)
	fb, err2 := m.measure(ctx, *res.FirstBad, 0)
	if err := errors.Join(err0, err1, err2); err != nil || good.Set == nil || fb.Set == nil || len(lg.RunDirs) == 0 || len(fb.RunDirs) == 0 {
		return nil
	}
	cmp, err := judge(good.Set, fb.Set)
	if err != nil {
		return nil
	}
	cmp.Base, cmp.New = res.Good.Hash, res.FirstBad.Hash
	cmp.Profilers = m.bo.Nightly.Profilers
	if len(cmp.Profilers) == 0 {
		cmp.Profilers = perf.DefaultProfilers
	}
	// The profiled cells ran in each commit's first batch.
	attachKernelDiffs(ctx, cmp, &perf.Set{Source: lg.RunDirs[0], Kind: "run"}, &perf.Set{Source: fb.RunDirs[0], Kind: "run"}, nil)
	return cmp
}

// bisectConfig is the configuration every step runs: --config, the key of --cell, the plan's
// only configuration, or the one the history's latest regression names.
func bisectConfig(ctx context.Context, p *plans.Plan, bo BisectOptions, db *history.DB) (string, error) {
	cells := p.Expand()
	var keys []string
	for _, c := range cells {
		if !slices.Contains(keys, c.Key) {
			keys = append(keys, c.Key)
		}
	}
	switch {
	case bo.Cell != "":
		i := slices.IndexFunc(cells, func(c plans.Cell) bool { return c.ID == bo.Cell })
		if i < 0 {
			return "", &exitcode.UsageError{Err: fmt.Errorf("the plan has no cell %s; `runner plan %s` lists its cells", bo.Cell, p.Path)}
		}
		return cells[i].Key, nil
	case bo.Config != "":
		if !slices.Contains(keys, bo.Config) {
			return "", &exitcode.UsageError{Err: fmt.Errorf("the plan has no configuration %s; its configurations are: %s", bo.Config, strings.Join(keys, ", "))}
		}
		return bo.Config, nil
	case len(keys) == 1:
		return keys[0], nil
	}
	if db != nil {
		if row, _, err := latestRegression(ctx, db, p); err == nil && slices.Contains(keys, row.Config) {
			return row.Config, nil
		}
	}
	return "", &exitcode.UsageError{Err: fmt.Errorf("the plan has %d configurations and the history names no regression of one; choose with --config KEY (one of: %s) or --cell ID", len(keys), strings.Join(keys, ", "))}
}

// latestRegression is the first regressed row of the comparison the plan's latest run left
// (compare.json of `runner run --baseline`), preferring one that names where its change began.
func latestRegression(ctx context.Context, db *history.DB, p *plans.Plan) (compare.Row, history.RunRef, error) {
	run, ok, err := db.LatestRun(ctx, p.Name)
	if err != nil {
		return compare.Row{}, run, err
	}
	if !ok {
		return compare.Row{}, run, fmt.Errorf("the history %s has no run of plan %q", db.Path(), p.Name)
	}
	var res compare.Result
	if err := rundir.ReadJSON(filepath.Join(run.RunDir, rundir.CompareFile), &res); err != nil {
		return compare.Row{}, run, fmt.Errorf("the latest run of plan %q (%s) has no comparison to start from: %v; run it with --baseline history", p.Name, run.RunDir, err)
	}
	var found *compare.Row
	for _, r := range res.Rows {
		if r.Status != compare.StatusRegression && r.Status != compare.StatusWarning {
			continue
		}
		if r.Change != nil {
			return r, run, nil
		}
		if found == nil {
			found = &r
		}
	}
	if found == nil {
		return compare.Row{}, run, fmt.Errorf("the latest run of plan %q (%s) has no regression", p.Name, run.RunID)
	}
	return *found, run, nil
}

// endpointsFromHistory takes the good and bad commits from the runs around the change point
// that the latest regression names: the backend commit of the run where the change began
// (bad) and of the run before it (good).
func endpointsFromHistory(ctx context.Context, db *history.DB, p *plans.Plan) (good, bad, key string, err error) {
	row, _, err := latestRegression(ctx, db, p)
	if err != nil {
		return "", "", "", &exitcode.UsageError{Err: fmt.Errorf("--from-history: %w", err)}
	}
	if row.Change == nil {
		return "", "", "", &exitcode.UsageError{Err: fmt.Errorf("--from-history: the regression of %s %s names no run where it began; pass --good and --bad", row.Config, row.Metric)}
	}
	runs, err := db.Runs(ctx, p.Name, row.Config)
	if err != nil {
		return "", "", "", err
	}
	i := slices.IndexFunc(runs, func(r history.RunRef) bool { return r.RunID == row.Change.RunID })
	if i <= 0 {
		return "", "", "", &exitcode.UsageError{Err: fmt.Errorf("--from-history: the change of %s %s began at run %s, which has no earlier run of the configuration in the history; pass --good and --bad", row.Config, row.Metric, row.Change.RunID)}
	}
	before, at := runs[i-1], runs[i]
	if before.Commit == "" || at.Commit == "" {
		return "", "", "", &exitcode.UsageError{Err: fmt.Errorf("--from-history: runs %s and %s record no backend commit (their perf dumps had no commit_hash); pass --good and --bad", before.RunID, at.RunID)}
	}
	if before.Commit == at.Commit {
		return "", "", "", &exitcode.UsageError{Err: fmt.Errorf("--from-history: runs %s and %s measured the same backend commit %.12s: the change is not the backend's (the machine, the driver, the plan?)", before.RunID, at.RunID, at.Commit)}
	}
	return before.Commit, at.Commit, row.Config, nil
}

// fingerprint names what a step measures apart from the commit: the plan's bytes, the
// configuration, the install command and whether it was simulated. A cached step is reused
// only under the same fingerprint.
func fingerprint(p *plans.Plan, key, install string, simulate bool) string {
	h := sha256.New()
	for _, s := range []string{string(p.Source), key, install, strconv.FormatBool(simulate)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// stepper measures commits for the engine: from the cache, or by running a batch.
type stepper struct {
	p       *plans.Plan
	key     string
	bo      BisectOptions
	opts    Options
	db      *history.DB
	repo    bisect.Repo
	fp, dir string
}

// measure returns every repeat of commit c (cached and new), running a batch when fewer than
// repeats are there.
func (m *stepper) measure(ctx context.Context, c bisect.Commit, repeats int) (bisect.Measured, error) {
	var steps []history.BisectStep
	if m.db != nil {
		var err error
		if steps, err = m.db.BisectSteps(ctx, m.fp, c.Hash); err != nil {
			return bisect.Measured{}, err
		}
	}
	var out bisect.Measured
	var sets []*perf.Set
	batch := 0
	skipped := "" // why the commit was skipped, when the cache says it was
	for _, s := range steps {
		batch = max(batch, s.Batch+1)
		if s.Outcome == history.StepSkipped {
			if !m.bo.RetrySkipped && skipped == "" {
				skipped = s.Reason + " (cached; --retry-skipped tries it again)"
			}
			continue
		}
		set, err := perf.Load(s.RunDir, perf.LoadOptions{Profilers: m.bo.Nightly.Profilers})
		if err != nil || set.Configs[m.key] == nil {
			m.opts.Logger.Warn("a cached bisection step is unreadable; it is measured again", "commit", c.Hash, "run_dir", s.RunDir, "err", err)
			continue
		}
		sets = append(sets, set)
		out.RunDirs = append(out.RunDirs, s.RunDir)
		out.Repeats += len(set.Configs[m.key].Cells)
	}
	if skipped != "" && len(sets) == 0 {
		return bisect.Measured{Skipped: skipped}, nil
	}
	// A commit measured before whose later batch failed keeps what it measured (an endpoint
	// asked for more repeats stays an endpoint); it is not asked again in this bisection.
	if out.Repeats < repeats && skipped == "" {
		set, dir, why, err := m.runBatch(ctx, c, batch, repeats-out.Repeats)
		if err != nil {
			return bisect.Measured{}, err
		}
		switch {
		case why != "" && len(sets) == 0:
			return bisect.Measured{Skipped: why, Tried: true}, nil
		case why != "":
			m.opts.Logger.Warn("more repeats of a commit failed; it keeps the repeats it has", "commit", c.Hash, "reason", why)
			out.Tried = true
		default:
			n := len(set.Configs[m.key].Cells)
			sets = append(sets, set)
			out.RunDirs = append(out.RunDirs, dir)
			out.Repeats += n
			out.New = n
		}
	}
	out.Set = mergeSets(sets, m.key)
	return out, nil
}

// runBatch checks c out, installs it and runs n repeats of the configuration's cells. A commit
// that cannot be installed or whose cells fail is recorded as skipped (the reason returned);
// an error ends the bisection (Ctrl-C, a plan the runner refuses, a history it cannot write).
func (m *stepper) runBatch(ctx context.Context, c bisect.Commit, batch, n int) (set *perf.Set, dir, skipped string, err error) {
	stepDir := filepath.Join(m.dir, m.fp, c.Hash)
	wt, err := m.repo.Checkout(ctx, filepath.Join(m.dir, "worktrees"), c.Hash)
	if err != nil {
		if ctx.Err() != nil {
			return nil, "", "", ctx.Err()
		}
		return nil, "", "", err
	}
	defer func() {
		if rerr := wt.Remove(); rerr != nil {
			m.opts.Logger.Warn("worktree not removed", "dir", wt.Dir, "err", rerr)
			if err == nil {
				err = rerr
			}
		}
	}()
	record := func(outcome, reason, runDir string, repeats int) error {
		if m.db == nil {
			return nil
		}
		return m.db.AppendBisectStep(context.WithoutCancel(ctx), history.BisectStep{Fingerprint: m.fp, Commit: c.Hash, Batch: batch,
			Time: m.opts.Now(), Plan: m.p.Name, RunDir: runDir, Repeats: repeats, Outcome: outcome, Reason: reason})
	}
	if m.bo.Install != "" {
		timeout := m.bo.InstallTimeout
		if timeout <= 0 {
			timeout = DefaultInstallTimeout
		}
		ir, err := bisect.Install(ctx, wt, m.bo.Install, filepath.Join(stepDir, fmt.Sprintf("install-%d.log", batch)), m.opts.Env, timeout, m.opts.Logger)
		if err != nil {
			return nil, "", "", err
		}
		if ir.Failed != "" {
			return nil, "", ir.Failed, record(history.StepSkipped, ir.Failed, "", 0)
		}
	}
	sp, ids := stepPlan(m.p, m.key, wt.Dir, n, batch == 0)
	o := m.opts
	o.OutputDir = stepDir
	o.Nightly = NightlyOptions{History: "off"} // a step is no nightly run: the cache row is its record
	o.Out = io.Discard
	o.Detach = false
	o.Env = slices.Clone(o.Env)
	if o.Simulate {
		o.Env = append(o.Env, "RUNNER_SIM_JITTER_SEED="+stepSeed(o.Env, c.Hash, batch))
	}
	sum, err := RunCells(ctx, sp, ids, o)
	if err != nil {
		return nil, "", "", err
	}
	if sum.Interrupted || ctx.Err() != nil {
		return nil, "", "", ctx.Err()
	}
	if sum.ExitCode != exitcode.OK {
		why := fmt.Sprintf("the cells failed (exit %d; see %s)", sum.ExitCode, sum.RunDir)
		for _, r := range sum.Cells {
			if r.Cause != "" {
				why = fmt.Sprintf("cell %s: %s (see %s)", r.ID, r.Cause, sum.RunDir)
				break
			}
		}
		return nil, "", why, record(history.StepSkipped, why, sum.RunDir, 0)
	}
	set, err = perf.Load(sum.RunDir, perf.LoadOptions{Profilers: m.bo.Nightly.Profilers})
	if err != nil {
		return nil, "", "", fmt.Errorf("read step %s: %w", sum.RunDir, err)
	}
	if set.Configs[m.key] == nil {
		why := fmt.Sprintf("no cell of %s measured anything comparable (see %s)", m.key, sum.RunDir)
		return nil, "", why, record(history.StepSkipped, why, sum.RunDir, 0)
	}
	reps := len(set.Configs[m.key].Cells)
	return set, sum.RunDir, "", record(history.StepMeasured, "", sum.RunDir, reps)
}

// stepPlan is p for one batch of a step: n repeats, the worktree placeholder expanded, and the
// IDs of the configuration's cells to run: every unprofiled repeat, and the first repeat of
// each profiler only in a commit's first batch (the kernel diff reads one profiled cell a side).
func stepPlan(p *plans.Plan, key, worktree string, n int, first bool) (*plans.Plan, []string) {
	sp := *p
	sp.Matrix.Repeats = n
	sp.Backend.Env = maps.Clone(p.Backend.Env)
	for k, v := range sp.Backend.Env {
		sp.Backend.Env[k] = strings.ReplaceAll(v, WorktreePlaceholder, worktree)
	}
	sp.Backend.Command = slices.Clone(p.Backend.Command)
	for i, a := range sp.Backend.Command {
		sp.Backend.Command[i] = strings.ReplaceAll(a, WorktreePlaceholder, worktree)
	}
	var ids []string
	for _, c := range sp.Expand() {
		if c.Key != key {
			continue
		}
		if c.Profiler == plans.ProfilerNone || (first && c.Repeat == 1) {
			ids = append(ids, c.ID)
		}
	}
	return &sp, ids
}

// stepSeed is the simulator's jitter seed of one batch at one commit: the user's seed mixed
// with the commit and the batch, so that every repeat of every commit draws its own noise, as
// separate runs on a GPU do, and a rerun reproduces it.
func stepSeed(env []string, commit string, batch int) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s\x00%d", envValue(env, "RUNNER_SIM_JITTER_SEED"), commit, batch)
	return strconv.FormatUint(h.Sum64()>>20, 10)
}

// mergeSets pools the runs of one configuration over several run directories: the repeats of
// every batch of a commit are one sample.
func mergeSets(sets []*perf.Set, key string) *perf.Set {
	if len(sets) == 0 {
		return nil
	}
	out := &perf.Set{Source: sets[0].Source, Kind: "run", RunID: sets[0].RunID, Plan: sets[0].Plan, Start: sets[0].Start,
		GPU: sets[0].GPU, Driver: sets[0].Driver, Commit: sets[0].Commit, Configs: map[string]*perf.Config{}}
	c := &perf.Config{Key: key, Metrics: map[string][]float64{}, Runs: map[string][]float64{}}
	for _, s := range sets {
		sc := s.Configs[key]
		if sc == nil {
			continue
		}
		c.Cells = append(c.Cells, sc.Cells...)
		for metric, v := range sc.Metrics {
			c.Metrics[metric] = append(c.Metrics[metric], v...)
			c.Runs[metric] = append(c.Runs[metric], sc.RunValues(metric)...)
		}
		c.Notes = append(c.Notes, sc.Notes...)
		if c.TopKernels == nil {
			c.TopKernels = sc.TopKernels
		}
		out.Skipped = append(out.Skipped, s.Skipped...)
	}
	out.Configs[key] = c
	return out
}
