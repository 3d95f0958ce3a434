package load

// The arrival schedule of a run, as bench_serving draws it.

import (
	"math"
	"math/rand/v2"
	"time"
)

// Schedule returns the send time of each of n requests as an offset from the benchmark's start.
// rate is in requests per second; +Inf (or 0) sends everything at once. Intervals are drawn
// from a gamma distribution of shape burstiness and mean 1/rate, as bench_serving draws them
// (burstiness 1 is a Poisson process; larger is more regular, smaller burstier; +Inf is a fixed
// interval), from a PCG seeded with seed, so the same plan sends the same schedule. Like
// current bench_serving, the drawn times are then scaled so the last request goes out at
// n/rate after the start: a short run keeps the asked-for mean rate instead of
// whatever its few draws add up to.
func Schedule(n int, rate, burstiness float64, seed uint64) []time.Duration {
	out := make([]time.Duration, n)
	if n == 0 || !finiteRate(rate) {
		return out
	}
	a := NewArrivals(rate, burstiness, seed)
	cum := make([]float64, n)
	t := 0.0
	for i := range cum {
		t += a.interval()
		cum[i] = t
	}
	scale := 1.0
	if t > 0 {
		scale = float64(n) / rate / t
	}
	for i := range out {
		out[i] = time.Duration(cum[i] * scale * float64(time.Second))
	}
	return out
}

func finiteRate(rate float64) bool { return rate > 0 && !math.IsInf(rate, 1) && !math.IsNaN(rate) }

// Arrivals draws an open-ended arrival process (for a benchmark bounded by duration rather than
// a request count): each Next is the offset of the next request from the start.
type Arrivals struct {
	rng              *rand.Rand
	rate, burstiness float64
	t                float64
}

// NewArrivals starts an arrival process of the given rate (requests/s; +Inf = all at once) and
// burstiness (gamma shape), seeded.
func NewArrivals(rate, burstiness float64, seed uint64) *Arrivals {
	if burstiness <= 0 || math.IsNaN(burstiness) {
		burstiness = 1
	}
	return &Arrivals{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), rate: rate, burstiness: burstiness}
}

// Next returns the next request's send offset.
func (a *Arrivals) Next() time.Duration {
	a.t += a.interval()
	return time.Duration(a.t * float64(time.Second))
}

func (a *Arrivals) interval() float64 {
	switch {
	case !finiteRate(a.rate):
		return 0
	case math.IsInf(a.burstiness, 1):
		return 1 / a.rate
	}
	return gamma(a.rng, a.burstiness) / (a.rate * a.burstiness)
}

// gamma draws from Gamma(shape, 1) by Marsaglia and Tsang's method (2000); shapes below 1 use
// the boost Gamma(a) = Gamma(a+1)·U^(1/a).
func gamma(rng *rand.Rand, shape float64) float64 {
	if shape < 1 {
		u := rng.Float64()
		for u == 0 {
			u = rng.Float64()
		}
		return gamma(rng, shape+1) * math.Pow(u, 1/shape)
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := rng.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}

// Ramp-up strategies (vLLM bench serve's --ramp-up-strategy).
const (
	RampLinear      = "linear"
	RampExponential = "exponential"
)

// RampUp makes the request rate grow over a run, as vLLM bench serve's --ramp-up-strategy,
// --ramp-up-start-rps and --ramp-up-end-rps do: request i of n is sent at rate
// StartRPS + (EndRPS − StartRPS)·p (linear) or StartRPS·(EndRPS/StartRPS)^p (exponential),
// p = i/(n−1).
type RampUp struct {
	Strategy         string
	StartRPS, EndRPS float64
}

// rate is request i's rate of n.
func (r RampUp) rate(i, n int) float64 {
	p := float64(i) / float64(max(n-1, 1))
	if r.Strategy == RampExponential {
		return r.StartRPS * math.Pow(r.EndRPS/r.StartRPS, p)
	}
	return r.StartRPS + (r.EndRPS-r.StartRPS)*p
}

// RampSchedule returns the send times of n requests whose rate ramps up: request i's interval
// is drawn as Schedule draws one (gamma of shape burstiness, seeded), at request i's rate. As in
// vLLM, the drawn times are not rescaled: the ramp decides the run's length. A rate of 0 (a
// linear ramp from 0) sends its request with no wait.
func RampSchedule(n int, r RampUp, burstiness float64, seed uint64) []time.Duration {
	out := make([]time.Duration, n)
	a := NewArrivals(1, burstiness, seed)
	t := 0.0
	for i := range out {
		if rate := r.rate(i, n); finiteRate(rate) {
			a.rate = rate
			t += a.interval()
		}
		out[i] = time.Duration(t * float64(time.Second))
	}
	return out
}
