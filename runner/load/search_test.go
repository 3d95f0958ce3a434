package load

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/sglprof/runner/reports/rundir"
)

// hockey is a fake server: p99 TTFT base/(1 - v/capacity) below its capacity and a queue that
// grows without bound past it (as a simulated or real server saturates); TPOT flat. It counts
// the probes it served.
type hockey struct {
	capacity, base float64
	calls          int
}

func (h *hockey) measure(_ context.Context, v float64) (rundir.LLMProbe, error) {
	h.calls++
	ttft := h.base * 100 * v / h.capacity
	if v < h.capacity {
		ttft = min(ttft, h.base/(1-v/h.capacity))
	}
	return rundir.LLMProbe{TTFTP99: ttft, TPOTP99: 10, Sustained: min(v, h.capacity)}, nil
}

// check asserts the search's contract: at most MaxProbes probes, all within the bounds; the
// best probe passes and the smallest probe above it fails.
func check(t *testing.T, s SearchSpec, got rundir.LLMSearch) {
	t.Helper()
	if len(got.Probes) == 0 || len(got.Probes) > s.MaxProbes {
		t.Fatalf("%d probes, want 1..%d", len(got.Probes), s.MaxProbes)
	}
	above := math.Inf(1)
	for _, p := range got.Probes {
		if p.Value < s.Min || p.Value > s.Max {
			t.Errorf("probe %v outside [%v, %v]", p.Value, s.Min, s.Max)
		}
		if p.Value > got.Best && p.Value < above {
			above = p.Value
			if p.Pass {
				t.Errorf("probe %v passed above the best %v", p.Value, got.Best)
			}
		}
	}
	if got.Best > 0 && (!got.Probes[got.BestProbe].Pass || got.Probes[got.BestProbe].Value != got.Best) {
		t.Errorf("best %v is not probe %d %+v", got.Best, got.BestProbe, got.Probes[got.BestProbe])
	}
}

// The rate search finds a passing rate whose next probe above fails, within 10 probes and a few
// percent of the true frontier, over servers of very different capacity.
func TestSearchRateFindsFrontier(t *testing.T) {
	for _, capacity := range []float64{0.7, 3, 17, 60, 250} {
		h := &hockey{capacity: capacity, base: 50}
		s := SearchSpec{Axis: rundir.SearchRequestRate, Min: 0.5, Max: 256, MaxProbes: 10, SLOTTFTP99: 200}
		got, err := Search(context.Background(), s, h.measure)
		if err != nil {
			t.Fatal(err)
		}
		check(t, s, got)
		truth := capacity * (1 - 50.0/200) // where base/(1-v/c) = 200
		if got.Best == 0 || got.Best > truth || got.Best < 0.9*truth {
			t.Errorf("capacity %v: best %v, want within 10%% below the frontier %.3g; probes %+v", capacity, got.Best, truth, got.Probes)
		}
	}
}

// A search whose upper bound passes stops there; one whose lower bound fails finds nothing.
func TestSearchBounds(t *testing.T) {
	s := SearchSpec{Axis: rundir.SearchRequestRate, Min: 1, Max: 8, MaxProbes: 10, SLOTTFTP99: 200}
	h := &hockey{capacity: 100, base: 50}
	got, _ := Search(context.Background(), s, h.measure)
	if got.Best != 8 || len(got.Probes) != 1 {
		t.Errorf("max passes: best %v after %d probes, want 8 after 1", got.Best, len(got.Probes))
	}
	h = &hockey{capacity: 0.5, base: 50}
	got, _ = Search(context.Background(), s, h.measure)
	check(t, s, got)
	if got.Best != 0 || got.Probes[len(got.Probes)-1].Value != 1 {
		t.Errorf("nothing passes: best %v, probes %+v; want 0 and min probed last", got.Best, got.Probes)
	}
	// Two probes: max, then min.
	s.MaxProbes = 2
	h = &hockey{capacity: 4, base: 50}
	got, _ = Search(context.Background(), s, h.measure)
	if len(got.Probes) != 2 || got.Probes[1].Value != 1 || got.Best != 1 {
		t.Errorf("2 probes: %+v, want max then min", got.Probes)
	}
	if _, err := Search(context.Background(), SearchSpec{Axis: rundir.SearchRequestRate, Min: 2, Max: 1, MaxProbes: 3, SLOTTFTP99: 1}, h.measure); err == nil {
		t.Error("min > max accepted")
	}
}

// Failed requests fail a probe whatever its p99s, and a measure error ends the search with the
// probes so far.
func TestSearchFailuresAndErrors(t *testing.T) {
	s := SearchSpec{Axis: rundir.SearchConcurrency, Min: 1, Max: 64, MaxProbes: 10, SLOTTFTP99: 200, SLOTPOTP99: 50}
	got, _ := Search(context.Background(), s, func(_ context.Context, v float64) (rundir.LLMProbe, error) {
		p := rundir.LLMProbe{TTFTP99: 10, TPOTP99: 10}
		if v > 20 {
			p.Failed = 1
		}
		return p, nil
	})
	check(t, s, got)
	if got.Best != 20 {
		t.Errorf("best %v, want 20 (failed requests above it); probes %+v", got.Best, got.Probes)
	}
	stop := errors.New("interrupted")
	n := 0
	got, err := Search(context.Background(), s, func(_ context.Context, v float64) (rundir.LLMProbe, error) {
		n++
		if n == 3 {
			return rundir.LLMProbe{}, stop
		}
		return rundir.LLMProbe{TTFTP99: v * 10, TPOTP99: 1}, nil
	})
	if !errors.Is(err, stop) || len(got.Probes) != 2 {
		t.Errorf("err %v after %d probes, want the measure's error after 2", err, len(got.Probes))
	}
}

// vllmSLA is vLLM's serve_sla search on an integer axis, as a yardstick, cut off after maxp
// probes: one probe at the "infinite" value, a start from the throughput it measured,
// doubling while the SLOs hold, then bisection from 0 until the passing and failing values are
// adjacent. It returns the largest passing value and the probes it ran.
func vllmSLA(h *hockey, inf int, slo float64, maxp int) (float64, int) {
	pass := func(v int) bool {
		p, _ := h.measure(context.Background(), float64(v))
		return p.TTFTP99 <= slo
	}
	p, _ := h.measure(context.Background(), float64(inf))
	val := int(math.Ceil(p.Sustained))
	left, right := 0, inf
	for h.calls < maxp {
		if !pass(val) {
			right = val
			break
		}
		left = val
		val *= 2
		if val >= inf {
			break
		}
	}
	for right-left > 1 && h.calls < maxp {
		mid := (left + right) / 2
		if pass(mid) {
			left = mid
		} else {
			right = mid
		}
	}
	return float64(left), h.calls
}

// On an integer axis, over servers of many capacities and unloaded latencies, the search is
// never farther from the frontier after 10 probes than vLLM's serve_sla, and with probes to
// spare reaches the exact frontier in fewer probes than it in all (integer splits can cost
// one probe more in a case).
func TestSearchBeatsBisection(t *testing.T) {
	ours, theirs := 0, 0
	for capacity := 3.0; capacity < 1000; capacity *= 1.37 {
		for _, base := range []float64{20, 50, 120} {
			truth := math.Floor(capacity * (1 - base/200))
			s := SearchSpec{Axis: rundir.SearchConcurrency, Min: 1, Max: 1024, MaxProbes: 10, SLOTTFTP99: 200}
			got, err := Search(context.Background(), s, (&hockey{capacity: capacity, base: base}).measure)
			if err != nil {
				t.Fatal(err)
			}
			check(t, s, got)
			ref, _ := vllmSLA(&hockey{capacity: capacity, base: base}, 1024, 200, 10)
			if got.Best > truth || truth-got.Best > truth-ref {
				t.Errorf("capacity %.1f, base %v ms: best %v after 10 probes, vLLM's %v, frontier %v", capacity, base, got.Best, ref, truth)
			}
			s.MaxProbes = 40
			got, _ = Search(context.Background(), s, (&hockey{capacity: capacity, base: base}).measure)
			_, refN := vllmSLA(&hockey{capacity: capacity, base: base}, 1024, 200, 40)
			ours, theirs = ours+len(got.Probes), theirs+refN
			if got.Best != truth || len(got.Probes) > refN+1 {
				t.Errorf("capacity %.1f, base %v ms: best %v (frontier %v) in %d probes, vLLM's search needs %d", capacity, base, got.Best, truth, len(got.Probes), refN)
			}
		}
	}
	if ours >= theirs {
		t.Errorf("%d probes in all to the exact frontiers, vLLM's search %d", ours, theirs)
	}
	t.Logf("probes to the exact frontiers: %d, vLLM's serve_sla: %d", ours, theirs)
}

// A ramp's intervals shrink as its rate grows: linear from 1 to 9 requests/s over 9 requests at
// a fixed interval (burstiness +Inf) sends at 1/1, 1/2, … 1/9 s apart; exponential from 1 to 16
// over 5 requests doubles the rate each request; the same seed gives the same schedule.
func TestRampSchedule(t *testing.T) {
	inf := math.Inf(1)
	lin := RampSchedule(9, RampUp{Strategy: RampLinear, StartRPS: 1, EndRPS: 9}, inf, 1)
	prev := time.Duration(0)
	for i, at := range lin {
		want := time.Duration(float64(time.Second) / float64(i+1))
		if d := at - prev; d < want-time.Microsecond || d > want+time.Microsecond {
			t.Errorf("linear interval %d = %v, want %v", i, d, want)
		}
		prev = at
	}
	exp := RampSchedule(5, RampUp{Strategy: RampExponential, StartRPS: 1, EndRPS: 16}, inf, 1)
	if d := exp[4] - exp[3]; d < time.Second/16-time.Microsecond || d > time.Second/16+time.Microsecond {
		t.Errorf("exponential last interval %v, want 1/16 s", d)
	}
	a := RampSchedule(50, RampUp{Strategy: RampLinear, StartRPS: 2, EndRPS: 20}, 1, 7)
	b := RampSchedule(50, RampUp{Strategy: RampLinear, StartRPS: 2, EndRPS: 20}, 1, 7)
	if !slices.Equal(a, b) || a[49] <= a[0] {
		t.Errorf("seeded ramp differs or does not advance: %v ... %v", a[:3], a[47:])
	}
	if z := RampSchedule(3, RampUp{Strategy: RampLinear, StartRPS: 0, EndRPS: 4}, inf, 1); z[0] != 0 || z[1] != time.Second/2 {
		t.Errorf("ramp from 0: %v, want the first at once, then 1/2 s", z)
	}
}
