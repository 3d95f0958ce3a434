// Package bisect finds the first commit of a backend's history at which a plan's measurement
// changes: the engine of `runner bisect`. It walks an ordered list of commits (good first, bad
// last), asks an injected Measure for each commit it visits and judges what was measured with
// an injected Judge, which the runner gives as the comparison of `runner compare` (reports/compare)
// so that a bisection step is called by the same test, tolerances and minimum detectable change
// as any other comparison. Runs (repeats) are the samples, never the steps inside one run.
//
// A commit is bad when it is a regression against the good endpoint and the bad endpoint is
// no regression against it; good when the bad endpoint is a regression against it and it is
// none against the good endpoint. Anything else is undecided: the commit gets another batch of
// repeats, up to a cap, and a commit still undecided at the cap is set aside like a commit that
// could not be built or run (`git bisect skip`), so the answer may then be a list of candidates
// rather than one commit. The git side (worktrees, the install command) lives in git.go; the
// runs, the cache and the kernel diff in the orchestrator (package runner).
package bisect

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/sglprof/runner/reports/compare"
	"github.com/sglprof/runner/reports/perf"
)

// Verdicts of a step.
const (
	Good      = "good"
	Bad       = "bad"
	Skip      = "skip"      // could not be built or run
	Undecided = "undecided" // measured up to the repeat cap without a verdict; set aside like a skip
)

// Commit is one commit of the range.
type Commit struct {
	Hash    string    `json:"commit"`
	Subject string    `json:"subject"`
	Date    time.Time `json:"author_date,omitzero"`
}

// Short is the commit's abbreviated hash.
func (c Commit) Short() string {
	if len(c.Hash) > 12 {
		return c.Hash[:12]
	}
	return c.Hash
}

// Measured is what Measure returns for one commit: every run measured there so far (this
// bisection's and the cache's), or why the commit could not be measured.
type Measured struct {
	// Set pools the runs of the commit; nil when Skipped.
	Set *perf.Set
	// RunDirs are the run directories Set was read from, oldest first.
	RunDirs []string
	// Repeats is how many repeats Set holds.
	Repeats int
	// New is how many of them this call measured (0: all came from the cache).
	New int
	// Skipped says why the commit could not be built or run ("" when it was measured).
	Skipped string
	// Tried is true when this call tried something (an install, a run) even though it
	// measured nothing: a skip found now rather than read from the cache.
	Tried bool
}

// Measure makes sure commit c has at least repeats repeats measured and returns all of them.
type Measure func(ctx context.Context, c Commit, repeats int) (Measured, error)

// Judge compares cur with base: the comparison of `runner compare`.
type Judge func(base, cur *perf.Set) (*compare.Result, error)

// Options configure a bisection.
type Options struct {
	// Repeats is the first batch of repeats of every commit (at least 2: one run a side has
	// no run-to-run spread to test); MaxRepeats the cap an undecided commit may reach.
	Repeats, MaxRepeats int
	Measure             Measure
	Judge               Judge
	// Progress, when set, hears of every verdict as it is reached.
	Progress func(Step)
}

// Step is one commit the bisection visited.
type Step struct {
	Commit  Commit `json:"-"`
	Index   int    `json:"index"`
	Verdict string `json:"verdict"`
	// Cached is true when the step measured nothing new (every repeat came from the cache).
	Cached  bool     `json:"cached"`
	Repeats int      `json:"repeats"`
	Reason  string   `json:"reason,omitempty"`
	RunDirs []string `json:"run_dirs,omitempty"`
	// Row is the judged metric of this commit against the good endpoint (nil for skips).
	Row *compare.Row `json:"change,omitempty"`
}

// Result is the outcome of a bisection.
type Result struct {
	Good, Bad Commit
	// Differ is false when the endpoints do not differ: then no commit is named.
	Differ bool
	// Endpoints is the comparison of the bad endpoint with the good one.
	Endpoints *compare.Result
	// Targets are the (configuration, metric) rows that regressed between the endpoints: the
	// rows every step is judged by.
	Targets []compare.Row
	// FirstBad is the first bad commit; nil when the endpoints do not differ or skipped
	// commits leave several candidates.
	FirstBad *Commit
	// LastGood is the commit before FirstBad (or before Candidates).
	LastGood *Commit
	// Candidates are the commits that may be the first bad one when skips left more than one.
	Candidates []Commit
	// Change is FirstBad's target row against the good endpoint.
	Change *compare.Row
	// Steps in the order they were taken; Skipped the commits set aside (skips and undecided).
	Steps   []Step
	Skipped []Commit
	// Measured counts the steps that measured something new.
	Measured                   int
	lastGoodStep, firstBadStep int
}

// LastGoodStep and FirstBadStep are the indices in Steps of the last good and first bad
// commit's steps (-1 when there is none), for the kernel diff of their profiled cells.
func (r *Result) LastGoodStep() int { return r.lastGoodStep }

// FirstBadStep: see LastGoodStep.
func (r *Result) FirstBadStep() int { return r.firstBadStep }

type engine struct {
	ctx     context.Context
	commits []Commit
	opts    Options
	res     *Result
	sets    map[int]*perf.Set
	steps   map[int]int  // commit index → index in res.Steps
	counted map[int]bool // commits counted in res.Measured
}

// Run bisects commits (the good endpoint first, the bad one last, each the parent of the next
// on the first-parent chain). It fails when an endpoint cannot be measured or ctx ends.
func Run(ctx context.Context, commits []Commit, opts Options) (*Result, error) {
	if len(commits) < 2 {
		return nil, fmt.Errorf("bisect needs two commits, a good and a bad one; got %d", len(commits))
	}
	if opts.Repeats < 2 {
		opts.Repeats = 2
	}
	if opts.MaxRepeats < opts.Repeats {
		opts.MaxRepeats = opts.Repeats
	}
	e := &engine{ctx: ctx, commits: commits, opts: opts, sets: map[int]*perf.Set{}, steps: map[int]int{}, counted: map[int]bool{},
		res: &Result{Good: commits[0], Bad: commits[len(commits)-1], lastGoodStep: -1, firstBadStep: -1}}
	if err := e.endpoints(); err != nil {
		return e.res, err
	}
	if !e.res.Differ {
		return e.res, nil
	}
	return e.res, e.search()
}

// endpoints measures both ends, adding repeats while the comparison could not have seen a
// change of the size its tolerances allow, and sets the target rows.
func (e *engine) endpoints() error {
	last := len(e.commits) - 1
	for reps := e.opts.Repeats; ; reps = min(e.opts.MaxRepeats, reps+e.opts.Repeats) {
		for _, i := range []int{0, last} {
			m, err := e.measure(i, reps)
			if err != nil {
				return err
			}
			if m.Skipped != "" {
				which := "good"
				if i == last {
					which = "bad"
				}
				return fmt.Errorf("the %s endpoint %s could not be measured: %s; pick another %s commit", which, e.commits[i].Short(), m.Skipped, which)
			}
		}
		res, err := e.opts.Judge(e.sets[0], e.sets[last])
		if err != nil {
			return fmt.Errorf("compare the endpoints: %w", err)
		}
		e.res.Endpoints = res
		e.res.Targets = nil
		for _, r := range res.Rows {
			if r.Status == compare.StatusRegression {
				e.res.Targets = append(e.res.Targets, r)
			}
		}
		if len(e.res.Targets) > 0 {
			e.res.Differ = true
			break
		}
		if reps >= e.opts.MaxRepeats || !blind(res) {
			break
		}
	}
	e.note(0, Good, nil)
	e.note(last, Bad, e.target(e.res.Endpoints))
	if !e.res.Differ {
		e.res.Steps[e.steps[last]].Verdict = Good // the bad endpoint measures like the good one
	}
	return nil
}

// blind reports whether some row of res could not have detected a change as large as its
// tolerance (no test, or a minimum detectable change above the tolerance): then more repeats
// can still tell the endpoints apart.
func blind(res *compare.Result) bool {
	for _, r := range res.Rows {
		if r.Significant {
			continue
		}
		if r.MDCPct < 0 || r.Base.Median == 0 || r.MDCPct > TolerancePct(r) {
			return true
		}
	}
	return false
}

// TolerancePct is a row's tolerance as a percentage of its base median.
func TolerancePct(r compare.Row) float64 {
	if r.Base.Median == 0 {
		return math.Inf(1)
	}
	return r.Limit / math.Abs(r.Base.Median) * 100
}

// search bisects between the endpoints.
func (e *engine) search() error {
	lo, hi := 0, len(e.commits)-1
	skipped := map[int]bool{}
	for {
		mid := -1
		for i := lo + 1; i < hi; i++ {
			if skipped[i] {
				continue
			}
			if mid < 0 || abs2(i, lo+hi) < abs2(mid, lo+hi) {
				mid = i
			}
		}
		if mid < 0 {
			break
		}
		v, err := e.classify(mid)
		if err != nil {
			return err
		}
		switch v {
		case Bad:
			hi = mid
		case Good:
			lo = mid
		default:
			skipped[mid] = true
		}
	}
	e.res.lastGoodStep, e.res.firstBadStep = e.steps[lo], e.steps[hi]
	lg := e.commits[lo]
	e.res.LastGood = &lg
	for i := lo + 1; i < hi; i++ {
		e.res.Candidates = append(e.res.Candidates, e.commits[i])
	}
	if len(e.res.Candidates) == 0 {
		fb := e.commits[hi]
		e.res.FirstBad = &fb
		e.res.Change = e.res.Steps[e.steps[hi]].Row
	} else {
		e.res.Candidates = append(e.res.Candidates, e.commits[hi])
	}
	return nil
}

// abs2 is |2i − sum|: the distance of i from the middle of the interval, doubled.
func abs2(i, sum int) int {
	d := 2*i - sum
	if d < 0 {
		return -d
	}
	return d
}

// classify measures commit i until it is good or bad, or the repeat cap is reached.
func (e *engine) classify(i int) (string, error) {
	last := len(e.commits) - 1
	for reps := e.opts.Repeats; ; reps = min(e.opts.MaxRepeats, reps+e.opts.Repeats) {
		if reps > e.opts.Repeats {
			// Every step is judged against the endpoints: a commit that looks like neither
			// may be judged against an endpoint whose few repeats drew high or low, so they
			// get the repeats the commit gets (kept for every later step).
			for _, j := range []int{0, last} {
				if _, err := e.measure(j, reps); err != nil {
					return "", err
				}
			}
		}
		m, err := e.measure(i, reps)
		if err != nil {
			return "", err
		}
		if m.Skipped != "" {
			e.note(i, Skip, nil)
			e.res.Steps[e.steps[i]].Reason = m.Skipped
			e.res.Skipped = append(e.res.Skipped, e.commits[i])
			return Skip, nil
		}
		vsGood, err := e.opts.Judge(e.sets[0], e.sets[i])
		if err != nil {
			return "", fmt.Errorf("compare %s with the good endpoint: %w", e.commits[i].Short(), err)
		}
		vsBad, err := e.opts.Judge(e.sets[i], e.sets[last])
		if err != nil {
			return "", fmt.Errorf("compare the bad endpoint with %s: %w", e.commits[i].Short(), err)
		}
		worse, better := e.regressed(vsGood), e.regressed(vsBad)
		row := e.target(vsGood)
		switch {
		case worse && !better:
			e.note(i, Bad, row)
			return Bad, nil
		case better && !worse:
			e.note(i, Good, row)
			return Good, nil
		}
		if reps >= e.opts.MaxRepeats {
			e.note(i, Undecided, row)
			e.res.Steps[e.steps[i]].Reason = fmt.Sprintf("no verdict after %d repeats: neither like the good nor like the bad endpoint", reps)
			e.res.Skipped = append(e.res.Skipped, e.commits[i])
			return Undecided, nil
		}
	}
}

// regressed reports whether any target row regressed in res.
func (e *engine) regressed(res *compare.Result) bool {
	for _, r := range res.Rows {
		if r.Status == compare.StatusRegression && e.isTarget(r) {
			return true
		}
	}
	return false
}

func (e *engine) isTarget(r compare.Row) bool {
	return slices.ContainsFunc(e.res.Targets, func(t compare.Row) bool { return t.Config == r.Config && t.Metric == r.Metric })
}

// target is res's row of the first target (the endpoints' largest regression), or nil.
func (e *engine) target(res *compare.Result) *compare.Row {
	if res == nil || len(e.res.Targets) == 0 {
		return nil
	}
	t := e.res.Targets[0]
	for _, c := range e.res.Targets[1:] {
		if c.DeltaPct > t.DeltaPct {
			t = c
		}
	}
	for _, r := range res.Rows {
		if r.Config == t.Config && r.Metric == t.Metric {
			return &r
		}
	}
	return nil
}

// measure asks Measure for commit i and records the step's repeats and cache state.
func (e *engine) measure(i, reps int) (Measured, error) {
	if err := e.ctx.Err(); err != nil {
		return Measured{}, e.ctx.Err()
	}
	m, err := e.opts.Measure(e.ctx, e.commits[i], reps)
	if err != nil {
		return m, err
	}
	k, ok := e.steps[i]
	if !ok {
		k = len(e.res.Steps)
		e.steps[i] = k
		e.res.Steps = append(e.res.Steps, Step{Commit: e.commits[i], Index: i, Cached: true})
	}
	st := &e.res.Steps[k]
	if m.New > 0 || m.Tried {
		st.Cached = false
	}
	if m.New > 0 && !e.counted[i] {
		e.counted[i] = true
		e.res.Measured++
	}
	if m.Skipped == "" {
		st.Repeats, st.RunDirs = m.Repeats, m.RunDirs
		e.sets[i] = m.Set
	}
	return m, nil
}

// note sets the verdict of commit i's step and reports it.
func (e *engine) note(i int, verdict string, row *compare.Row) {
	st := &e.res.Steps[e.steps[i]]
	st.Verdict, st.Row = verdict, row
	if e.opts.Progress != nil {
		e.opts.Progress(*st)
	}
}
