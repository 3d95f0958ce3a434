package plans

import (
	"fmt"
	"math"

	"github.com/BurntSushi/toml"
)

// The SLA search of [load.search]: instead of measuring one load, an LLM cell looks for the
// largest request rate or concurrency that meets p99 latency SLOs (runner/load.Search runs it;
// docs/plan.md and docs/llm-benchmark.md describe it).

// Values of load.search.axis.
const (
	SearchRequestRate = "request_rate"
	SearchConcurrency = "concurrency"
)

// SearchAxes lists the values of load.search.axis.
var SearchAxes = []string{SearchRequestRate, SearchConcurrency}

// Defaults and limits of [load.search].
const (
	MaxSearchProbes        = 10 // each probe is a whole measurement; more is a grid, not a search
	DefaultSearchMinRate   = 0.5
	DefaultSearchMaxRate   = 64.0
	DefaultSearchMinConc   = 1
	DefaultSearchMaxConc   = 256
	DefaultSearchMaxProbes = MaxSearchProbes
)

// LoadSearch is [load.search].
type LoadSearch struct {
	Axis       string   `toml:"axis" json:"axis"`
	SLOTTFTP99 Duration `toml:"slo_ttft_p99" json:"slo_ttft_p99,omitzero"`
	SLOTPOTP99 Duration `toml:"slo_tpot_p99" json:"slo_tpot_p99,omitzero"`
	MaxProbes  int      `toml:"max_probes" json:"max_probes"`
	// Min and Max bound the axis (requests/s, or requests in flight).
	Min float64 `toml:"min" json:"min"`
	Max float64 `toml:"max" json:"max"`
}

// searchKeys is the schema of [load.search].
var searchKeys = []string{"axis", "slo_ttft_p99", "slo_tpot_p99", "max_probes", "min", "max"}

type rawSearch struct {
	Axis       toml.Primitive `toml:"axis"`
	SLOTTFTP99 toml.Primitive `toml:"slo_ttft_p99"`
	SLOTPOTP99 toml.Primitive `toml:"slo_tpot_p99"`
	MaxProbes  toml.Primitive `toml:"max_probes"`
	Min        toml.Primitive `toml:"min"`
	Max        toml.Primitive `toml:"max"`
}

// decodeSearch decodes [load.search] (prim is its value in [load]).
func (d *decoder) decodeSearch(prim toml.Primitive, l *LoadSpec) {
	k := path("load", "search")
	if !d.present(k) {
		return
	}
	var rs rawSearch
	if !d.decodeTable(k, prim, &rs) {
		return
	}
	s := &LoadSearch{}
	key := func(name string) []string { return path("load", "search", name) }
	decodeField(d, key("axis"), rs.Axis, &s.Axis, `a string: "request_rate" or "concurrency"`)
	decodeField(d, key("slo_ttft_p99"), rs.SLOTTFTP99, &s.SLOTTFTP99, `a duration string such as "200ms"`)
	decodeField(d, key("slo_tpot_p99"), rs.SLOTPOTP99, &s.SLOTPOTP99, `a duration string such as "50ms"`)
	decodeField(d, key("max_probes"), rs.MaxProbes, &s.MaxProbes, `an integer from 1 to 10`)
	d.decodeFloat(key("min"), rs.Min, &s.Min, `a number > 0 such as 1`)
	d.decodeFloat(key("max"), rs.Max, &s.Max, `a number > 0 such as 64`)
	l.Search = s
}

// applySearchDefaults fills the bounds and probe count [load.search] left out.
func applySearchDefaults(p *Plan, set func(k ...string) bool) {
	s := p.Load.Search
	if s == nil {
		return
	}
	if !set("load", "search", "max_probes") {
		s.MaxProbes = DefaultSearchMaxProbes
	}
	lo, hi := DefaultSearchMinRate, DefaultSearchMaxRate
	if s.Axis == SearchConcurrency {
		lo, hi = DefaultSearchMinConc, DefaultSearchMaxConc
	}
	if !set("load", "search", "min") {
		s.Min = min(lo, s.Max)
		if s.Max <= 0 {
			s.Min = lo
		}
	}
	if !set("load", "search", "max") {
		s.Max = max(hi, s.Min)
	}
	// A rate search needs room for the requests a high rate keeps in flight: at the default
	// concurrency of 1 every rate is the same closed loop. bench_serving leaves concurrency
	// unbounded; the search caps it at the concurrency search's default maximum.
	if s.Axis == SearchRequestRate && !set("load", "concurrency") && !set("load", "max_concurrency") && !set("matrix", "concurrency") {
		p.Load.MaxConcurrency = DefaultSearchMaxConc
	}
}

// validateSearch checks [load.search]: an LLM serve plan's, with an axis, an SLO, 1..10 probes,
// bounds 0 < min <= max (integers for concurrency), and no other setting of the axis it moves.
func (d *decoder) validateSearch(p *Plan, llm bool) {
	s := p.Load.Search
	k := path("load", "search")
	if s == nil || !d.check(k...) {
		return
	}
	if !llm {
		d.addKey(k, `an SLA search needs an LLM serve plan (backend.mode = "serve", backend.model_type = "llm"); drop [load.search]`)
		return
	}
	key := func(name string) []string { return path("load", "search", name) }
	if ka := key("axis"); d.check(ka...) {
		switch {
		case !d.md.IsDefined(ka...):
			d.missing(ka, `[load.search] needs axis: "request_rate" or "concurrency", the load it raises`)
		case !oneOf(s.Axis, SearchAxes):
			d.addKey(ka, fmt.Sprintf("unknown axis %q; use %s", s.Axis, quoteList(SearchAxes)))
		}
	}
	ttft, tpot := key("slo_ttft_p99"), key("slo_tpot_p99")
	if !d.md.IsDefined(ttft...) && !d.md.IsDefined(tpot...) && d.check(ttft...) && d.check(tpot...) {
		d.missing(ttft, `[load.search] needs an SLO to meet: slo_ttft_p99 = "200ms" and/or slo_tpot_p99 = "50ms"`)
	}
	for _, kk := range [][]string{ttft, tpot} {
		if d.md.IsDefined(kk...) {
			v := s.SLOTTFTP99
			if kk[2] == "slo_tpot_p99" {
				v = s.SLOTPOTP99
			}
			d.positiveDuration(kk, v, `"200ms"`)
		}
	}
	if kp := key("max_probes"); d.check(kp...) && (s.MaxProbes < 1 || s.MaxProbes > MaxSearchProbes) {
		d.addKey(kp, fmt.Sprintf("%d: a search runs 1 to %d probes (each a whole measurement); for more points use a request_rate or concurrency axis in [matrix]", s.MaxProbes, MaxSearchProbes))
	}
	kmin, kmax := key("min"), key("max")
	boundsOK := true
	for _, b := range []struct {
		k []string
		v float64
	}{{kmin, s.Min}, {kmax, s.Max}} {
		if !d.check(b.k...) {
			boundsOK = false
			continue
		}
		switch {
		case !(b.v > 0) || math.IsInf(b.v, 0):
			d.addKey(b.k, fmt.Sprintf("%v: a bound must be a number > 0", b.v))
			boundsOK = false
		case s.Axis == SearchConcurrency && b.v != math.Trunc(b.v):
			d.addKey(b.k, fmt.Sprintf("%v: a concurrency is a whole number of requests; write %v", b.v, math.Round(b.v)))
			boundsOK = false
		}
	}
	if boundsOK && s.Min > s.Max {
		d.addKey(kmin, fmt.Sprintf("min %v is above max %v; the search looks between them", s.Min, s.Max))
	}
	// The axis the search moves is set by the search alone (vLLM's serve_sla refuses it too).
	var others [][]string
	switch s.Axis {
	case SearchRequestRate:
		others = [][]string{path("matrix", "request_rate"), path("load", "request_rate")}
	case SearchConcurrency:
		others = [][]string{path("matrix", "concurrency"), path("load", "concurrency"), path("load", "max_concurrency")}
	}
	for _, o := range others {
		if d.check(o...) && d.md.IsDefined(o...) {
			d.addKey(o, fmt.Sprintf(`[load.search] sets %s (axis = %q); drop %s, or search the other axis`, s.Axis, s.Axis, toml.Key(o)))
		}
	}
}

// Values of load.ramp_up_strategy (vLLM bench serve's --ramp-up-strategy).
const (
	RampLinear      = "linear"
	RampExponential = "exponential"
)

// RampStrategies lists the values of load.ramp_up_strategy.
var RampStrategies = []string{RampLinear, RampExponential}

// validateRampUp checks [load] ramp_up_strategy, ramp_up_start_rps and ramp_up_end_rps as vLLM
// bench serve checks its flags: both rates with a strategy, >= 0, start <= end, an exponential
// ramp not from 0; and the ramp replaces the request rate, so neither request_rate nor a rate
// search goes with it, and it counts requests, so duration does not either.
func (d *decoder) validateRampUp(p *Plan) {
	l := &p.Load
	ks, kstart, kend := path("load", "ramp_up_strategy"), path("load", "ramp_up_start_rps"), path("load", "ramp_up_end_rps")
	if !d.md.IsDefined(ks...) {
		for _, k := range [][]string{kstart, kend} {
			if d.check(k...) && d.md.IsDefined(k...) {
				d.addKey(k, `only used with ramp_up_strategy ("linear" or "exponential"); set it or drop this key`)
			}
		}
		return
	}
	if !d.check(ks...) {
		return
	}
	if !oneOf(l.RampUpStrategy, RampStrategies) {
		d.addKey(ks, fmt.Sprintf("unknown ramp-up strategy %q; use %s", l.RampUpStrategy, quoteList(RampStrategies)))
	}
	ok := true
	for _, b := range []struct {
		k []string
		v float64
	}{{kstart, l.RampUpStartRPS}, {kend, l.RampUpEndRPS}} {
		switch {
		case !d.check(b.k...):
			ok = false
		case !d.md.IsDefined(b.k...):
			d.missing(b.k, "a ramp-up needs ramp_up_start_rps and ramp_up_end_rps (requests/s)")
			ok = false
		case !(b.v >= 0) || math.IsInf(b.v, 0):
			d.addKey(b.k, fmt.Sprintf("%v: a rate must be a number >= 0", b.v))
			ok = false
		}
	}
	if ok && l.RampUpStartRPS > l.RampUpEndRPS {
		d.addKey(kstart, fmt.Sprintf("%v is above ramp_up_end_rps %v; a ramp goes up", l.RampUpStartRPS, l.RampUpEndRPS))
	}
	if ok && l.RampUpStrategy == RampExponential && l.RampUpStartRPS == 0 {
		d.addKey(kstart, "an exponential ramp cannot start at 0 requests/s; start above 0 or use \"linear\"")
	}
	for _, o := range [][]string{path("load", "request_rate"), path("matrix", "request_rate"), path("load", "duration")} {
		if d.check(o...) && d.md.IsDefined(o...) {
			d.addKey(o, fmt.Sprintf("a ramp-up (load.ramp_up_strategy) sets the request rate over a counted run; drop %s", toml.Key(o)))
		}
	}
	if s := l.Search; s != nil && s.Axis == SearchRequestRate {
		d.addKey(ks, `a ramp-up and a request_rate search both set the rate; drop one (a concurrency search can ramp)`)
	}
}
