package nsysdb

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/sglprof/runner/reports/trace"
)

// DenoiseStepPattern returns the expression that matches the NVTX ranges of diffusion denoising steps
// ("denoising_step_12"); its first group is the step index.
var DenoiseStepPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^denoising_step_(\d+)`) })

// Step is one denoising step's interval, on the same clock as the window it is compared with.
type Step struct {
	Index      int   `json:"index"`
	Start, End int64 `json:"-"`
}

// StepsFromNVTX collects the steps marked by NVTX ranges matching re (DenoiseStepPattern when
// nil). The index is the first capture group when it is a number, else the order of
// appearance. Steps are sorted by start.
func StepsFromNVTX(t *trace.Trace, re *regexp.Regexp) []Step {
	if re == nil {
		re = DenoiseStepPattern()
	}
	var steps []Step
	for i := range t.Annotations {
		a := &t.Annotations[i]
		if a.GPU {
			continue
		}
		m := re.FindStringSubmatch(t.Name(a.Name))
		if m == nil {
			continue
		}
		idx := -1
		if len(m) > 1 {
			if n, err := strconv.Atoi(m[1]); err == nil {
				idx = n
			}
		}
		steps = append(steps, Step{Index: idx, Start: a.Start, End: a.End})
	}
	slices.SortFunc(steps, func(a, b Step) int { return cmp.Compare(a.Start, b.Start) })
	for i := range steps {
		if steps[i].Index < 0 {
			steps[i].Index = i
		}
	}
	return steps
}

// Coverage says which denoising steps a capture window covered.
type Coverage struct {
	WindowStartNS int64 `json:"window_start_ns"`
	WindowEndNS   int64 `json:"window_end_ns"`
	// Source is "nvtx" (steps seen as NVTX ranges inside the capture) or "timings" (step
	// timings from the run's perf dump compared with the window).
	Source string `json:"source"`
	// TotalSteps is the number of steps the run had, when known (0 when not).
	TotalSteps int   `json:"total_steps,omitempty"`
	Full       []int `json:"full"`    // steps entirely inside the window
	Partial    []int `json:"partial"` // steps cut by the window's start or end
	// Summary is one line for people, e.g. "steps 12-19 of 50 captured (8 full, 1 partial)".
	Summary  string   `json:"summary"`
	Warnings []string `json:"warnings,omitempty"`
}

// CoverFromNVTX reports the steps whose NVTX ranges the capture holds. Steps are inside the
// capture by construction (nsys records only what happened inside its window); a step range
// cut by the window's start or end is exported from where it was seen, so steps touching the
// window edges count as partial. totalSteps is the run's step count when known (0 if not).
func CoverFromNVTX(c *Capture, re *regexp.Regexp, totalSteps int) Coverage {
	steps := StepsFromNVTX(c.Trace, re)
	cov := Coverage{WindowStartNS: c.WindowStart, WindowEndNS: c.WindowEnd, Source: "nvtx", TotalSteps: totalSteps}
	for _, s := range steps {
		if s.Start <= c.WindowStart || s.End >= c.WindowEnd {
			cov.Partial = append(cov.Partial, s.Index)
		} else {
			cov.Full = append(cov.Full, s.Index)
		}
	}
	if len(steps) == 0 {
		pattern := DenoiseStepPattern().String()
		if re != nil {
			pattern = re.String()
		}
		if c.WindowEnd <= c.WindowStart {
			cov.Warnings = append(cov.Warnings, "the capture window missed the denoising stage entirely: the export holds no events at all (the application probably finished before `--delay` elapsed); shorten `--delay` so the window covers the denoising loop")
		} else {
			cov.Warnings = append(cov.Warnings, fmt.Sprintf("the capture window missed the denoising stage entirely: no NVTX range matches %s between %s and %s of the session; move `--delay`/`--duration` (or use --capture-range) so the window covers the denoising loop", pattern, fmtDur(c.WindowStart), fmtDur(c.WindowEnd)))
		}
	}
	cov.finish()
	return cov
}

// CoverFromTimings compares step timings (from the perf dump, Unix ns) with the capture window
// of c converted to Unix time through TARGET_INFO_SESSION_START_TIME. ok is false when the
// export has no session start, so the two clocks cannot be related.
func CoverFromTimings(c *Capture, steps []Step) (cov Coverage, ok bool) {
	if c.SessionStartUnixNs == 0 {
		return Coverage{Source: "timings"}, false
	}
	return CoverWindow(steps, c.SessionStartUnixNs+c.WindowStart, c.SessionStartUnixNs+c.WindowEnd), true
}

// CoverWindow classifies steps against a window [start, end] on the steps' own clock.
func CoverWindow(steps []Step, start, end int64) Coverage {
	cov := Coverage{WindowStartNS: start, WindowEndNS: end, Source: "timings", TotalSteps: len(steps)}
	for _, s := range steps {
		switch {
		case s.End <= start || s.Start >= end:
		case s.Start >= start && s.End <= end:
			cov.Full = append(cov.Full, s.Index)
		default:
			cov.Partial = append(cov.Partial, s.Index)
		}
	}
	if len(steps) > 0 && len(cov.Full)+len(cov.Partial) == 0 {
		first, last := steps[0].Start, steps[0].End
		for _, s := range steps {
			first, last = min(first, s.Start), max(last, s.End)
		}
		where := "before"
		if start >= last {
			where = "after"
		}
		cov.Warnings = append(cov.Warnings, fmt.Sprintf("the capture window missed the denoising stage entirely: it ran %s the %d steps (window %s long, steps span %s, %s from the window); adjust `--delay`/`--duration`", where, len(steps), fmtDur(end-start), fmtDur(last-first), fmtDur(gap(start, end, first, last))))
	}
	cov.finish()
	return cov
}

func gap(ws, we, s, e int64) int64 {
	if we <= s {
		return s - we
	}
	if ws >= e {
		return ws - e
	}
	return 0
}

func (c *Coverage) finish() {
	slices.Sort(c.Full)
	slices.Sort(c.Partial)
	all := append(slices.Clone(c.Full), c.Partial...)
	slices.Sort(all)
	if len(all) == 0 {
		c.Summary = "no denoising step captured"
		if c.TotalSteps > 0 {
			c.Summary += fmt.Sprintf(" (the run had %d)", c.TotalSteps)
		}
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "steps %s", spans(all))
	if c.TotalSteps > 0 {
		fmt.Fprintf(&b, " of %d", c.TotalSteps)
	}
	fmt.Fprintf(&b, " captured (%d full, %d partial)", len(c.Full), len(c.Partial))
	c.Summary = b.String()
}

// spans compresses sorted indices into "3-7,9".
func spans(xs []int) string {
	var parts []string
	for i := 0; i < len(xs); {
		j := i
		for j+1 < len(xs) && xs[j+1] <= xs[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.Itoa(xs[i]))
		} else {
			parts = append(parts, strconv.Itoa(xs[i])+"-"+strconv.Itoa(xs[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// Missed reports that the window captured no denoising step although the run had some (the
// coverage then carries a warning saying how to move the window).
func (c Coverage) Missed() bool { return len(c.Full)+len(c.Partial) == 0 && len(c.Warnings) > 0 }
