package runner

import (
	"context"
	"errors"
	"fmt"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/compare"
	"github.com/sglprof/runner/reports/history"
	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/runner/exitcode"
)

// BaselineHistory is the baseline that compares with the rolling median of the history
// database instead of a run directory.
const BaselineHistory = "history"

// ErrNoHistory is returned by CompareBaseline for the history baseline when no history
// database is open; each caller says where it looked.
var ErrNoHistory = errors.New("the history baseline needs a history database")

// noBaselineYet wraps compare.ErrNothingInCommon from a history that holds no earlier run of
// the configurations compared: the first runs build the baseline.
type noBaselineYet struct{ err error }

func (e *noBaselineYet) Error() string { return e.err.Error() }
func (e *noBaselineYet) Unwrap() error { return e.err }

// NoBaselineYet reports whether err (from CompareBaseline) says the history has no earlier run
// to compare with. A run or a report goes on without a comparison; `runner compare`, asked for
// one explicitly, fails.
func NoBaselineYet(err error) bool {
	var nb *noBaselineYet
	return errors.As(err, &nb)
}

// CompareBaseline is the one place that resolves a baseline and compares cur with it, for
// `runner run --baseline`, `runner compare` and `runner report`. n.Baseline "" means no
// comparison (nil, nil, nil); BaselineHistory compares with the rolling median of db (nil:
// ErrNoHistory); anything else is a run directory, cell directory or perf dump, read with the
// profilers of n and returned as base. The plan p gives the [compare] rules; n's flags
// override them. The result records the profilers compared, and every regressed configuration
// carries its kernel diff (attachKernelDiffs).
//
// A baseline that cannot be read, or shares no configuration with cur, is a *exitcode.UsageError (exit
// 2); a history without an earlier run of cur's configurations is NoBaselineYet; other history
// errors are returned as they are.
func (n NightlyOptions) CompareBaseline(ctx context.Context, cur *perf.Set, p *plans.Plan, db *history.DB) (res *compare.Result, base *perf.Set, err error) {
	co, bo := n.CompareOptions(p)
	switch n.Baseline {
	case "":
		return nil, nil, nil
	case BaselineHistory:
		if db == nil {
			return nil, nil, ErrNoHistory
		}
		res, err = db.CompareHistory(ctx, cur, bo)
		if errors.Is(err, compare.ErrNothingInCommon) {
			return nil, nil, &noBaselineYet{err}
		}
		if err != nil {
			return nil, nil, err
		}
	default:
		base, err = perf.Load(n.Baseline, perf.LoadOptions{Profilers: n.Profilers})
		if err != nil {
			return nil, nil, &exitcode.UsageError{Err: fmt.Errorf("baseline %s: %w", n.Baseline, err)}
		}
		if res, err = compare.Compare(base, cur, co); err != nil {
			return nil, base, &exitcode.UsageError{Err: err}
		}
		applyEnvDiff(res, base.Source, cur.Source, n.IgnoreEnv)
	}
	res.Profilers = n.Profilers
	if len(res.Profilers) == 0 {
		res.Profilers = perf.DefaultProfilers
	}
	attachKernelDiffs(ctx, res, base, cur, db)
	return res, base, nil
}
