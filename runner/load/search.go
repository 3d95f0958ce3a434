package load

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/sglprof/runner/reports/rundir"
)

// SearchSpec is an SLA search: the largest value of Axis in [Min, Max] whose p99 TTFT and TPOT
// stay within the SLOs (0: unbounded), in at most MaxProbes measurements.
type SearchSpec struct {
	Axis       string  // rundir.SearchRequestRate or rundir.SearchConcurrency (integer values)
	Min, Max   float64 // the axis's bounds, 0 < Min <= Max
	MaxProbes  int     // >= 1
	SLOTTFTP99 float64 // ms
	SLOTPOTP99 float64 // ms
}

// SearchResolution is when a request-rate search stops early: once the passing and the failing
// value are within this fraction of the failing one (a concurrency search stops at adjacent
// integers).
const SearchResolution = 0.02

// Measure runs one probe at value v of the axis and returns its p99s (and its throughput and
// failed requests, which fail the probe).
type Measure func(ctx context.Context, v float64) (rundir.LLMProbe, error)

// Search finds the largest value of the axis that meets the SLOs, assuming the latencies grow
// with the load, and records every probe. It first measures Max (if that passes, it is the
// answer). A failing probe past saturation (the server sustained less load than it was given)
// sends the next probe to the load it sustained, as vLLM's serve_sla starts from the
// throughput it measured. Then it keeps a bracket [largest pass, smallest fail], its passing
// end at first Min, assumed (measured only when the bracket closes on it, or with the last
// probe when nothing passed), and bisects it, doubling up from a pass below a saturated end
// as serve_sla does; near the frontier (both ends within 2x of the SLOs) it interpolates the
// log of the SLO ratio instead (regula falsi with the Illinois rule), where that curve is close
// to linear, returning to the midpoint whenever a probe did not halve the bracket. Every probe
// lies strictly inside the bracket, so the best value passed and the smallest failing probe
// above it is the bracket's other end. A concurrency search ends at adjacent integers, a rate
// search within SearchResolution; either stops at MaxProbes, or on an error from measure
// (ctx cancelled), returning what it has with the error.
func Search(ctx context.Context, s SearchSpec, measure Measure) (rundir.LLMSearch, error) {
	out := rundir.LLMSearch{Axis: s.Axis, SLOTTFTP99: s.SLOTTFTP99, SLOTPOTP99: s.SLOTPOTP99, Min: s.Min, Max: s.Max}
	if !(s.Min > 0 && s.Max >= s.Min) || s.MaxProbes < 1 || !(s.SLOTTFTP99 > 0 || s.SLOTPOTP99 > 0) {
		return out, fmt.Errorf("SLA search over %s: bounds [%v, %v], %d probes, SLOs %v/%v ms: want 0 < min <= max, probes >= 1 and an SLO", s.Axis, s.Min, s.Max, s.MaxProbes, s.SLOTTFTP99, s.SLOTPOTP99)
	}
	integer := s.Axis == rundir.SearchConcurrency
	round := func(v float64) float64 {
		if integer {
			return math.Floor(v) // as vLLM's integer bisection
		}
		f, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 3, 64), 64)
		return f
	}
	run := func(v float64) (rundir.LLMProbe, float64, error) {
		p, err := measure(ctx, v)
		if err != nil {
			return p, 0, err
		}
		p.Value = v
		m := s.margin(p)
		p.Pass = m <= 0 && p.Failed == 0
		if p.Failed > 0 {
			m = max(m, math.Log(2)) // failed requests: clearly over, whatever the p99s say
		}
		out.Probes = append(out.Probes, p)
		return p, m, nil
	}
	best := func(v float64) {
		out.Best = v
		out.BestProbe = len(out.Probes) - 1
	}

	// The upper bound first: the capacity the server shows there places the next probes.
	hi, mhi, err := run(round(s.Max))
	if err != nil {
		return out, err
	}
	if hi.Pass {
		best(hi.Value)
		return out, nil
	}
	fail, mfail := hi.Value, mhi
	saturated := func(p rundir.LLMProbe) bool { return p.Sustained > 0 && p.Sustained < 0.95*p.Value }
	satFail := saturated(hi)
	// The bracket's passing end starts at Min, assumed and not measured (as vLLM's bisection
	// starts from 0): measured only when the bracket closes on it.
	pass, mpass, passKnown := round(s.Min), 0.0, false
	if satFail && len(out.Probes) < s.MaxProbes-1 {
		// Past saturation: what the server sustained is the next probe, as vLLM's serve_sla
		// starts from it; loads above it only queue.
		if g := round(math.Ceil(hi.Sustained)); g > pass && g < fail {
			p, m, err := run(g)
			if err != nil {
				return out, err
			}
			if p.Pass {
				pass, mpass, passKnown = g, m, true
				best(g)
			} else {
				fail, mfail, satFail = g, m, saturated(p)
			}
		}
	}
	// Bisection guided by interpolation: near the frontier (both ends within 2x of the SLOs,
	// the failing end not saturated) the log SLO ratio is close to linear in the load and
	// regula falsi (with the Illinois rule: an end kept twice has its margin halved) lands
	// next to the frontier; elsewhere, or when the last probe did not halve the bracket, the
	// midpoint. Every probe lies strictly inside the bracket.
	bisect, side := false, 0
	for len(out.Probes) < s.MaxProbes {
		gap := fail - pass
		x := (pass + fail) / 2
		if passKnown && !bisect && !satFail && mfail > mpass && mfail < math.Log(2) && mpass > -math.Log(2) {
			x = pass + gap*(-mpass)/(mfail-mpass)
			x = min(max(x, pass+0.1*gap), fail-0.1*gap)
		}
		if satFail && passKnown {
			x = min(x, 2*pass) // up from a pass by doubling, as vLLM's serve_sla, below a saturated end
		}
		if x = round(x); x <= pass || x >= fail {
			x = round((pass + fail) / 2)
		}
		resolved := integer && gap <= 1 || !integer && gap <= SearchResolution*fail
		if !passKnown && (resolved || x <= pass || len(out.Probes) == s.MaxProbes-1) {
			// The bracket closed on the unmeasured Min, or one probe is left and none passed:
			// is anything within the SLOs at all?
			if pass >= fail {
				break
			}
			x = pass
		} else if resolved || x <= pass || x >= fail {
			break
		}
		p, m, err := run(x)
		if err != nil {
			return out, err
		}
		if p.Pass {
			pass, mpass, passKnown = x, m, true
			best(x)
			if side == 1 {
				mfail /= 2
			}
			side = 1
		} else {
			fail, mfail, satFail = x, m, saturated(p)
			if side == -1 {
				mpass /= 2
			}
			side = -1
		}
		bisect = fail-pass > gap/2 // the bracket did not halve: bisect next
	}
	return out, nil
}

// margin is how far a probe is from the SLOs: the log of its largest p99/SLO ratio (≤ 0:
// within every SLO). The log makes the latency's steep rise past saturation closer to linear
// in the load, which is what the interpolation assumes.
func (s SearchSpec) margin(p rundir.LLMProbe) float64 {
	r := 0.0
	if s.SLOTTFTP99 > 0 {
		r = max(r, p.TTFTP99/s.SLOTTFTP99)
	}
	if s.SLOTPOTP99 > 0 {
		r = max(r, p.TPOTP99/s.SLOTPOTP99)
	}
	if r <= 0 || math.IsNaN(r) {
		return math.Log(2) // no latency measured (every request failed): over
	}
	return math.Log(r)
}
