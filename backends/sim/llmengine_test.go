package sim

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"
)

// driveLLM runs n requests (in prompt tokens, out output tokens) through an engine without
// sleeping: request i arrives at i*gapNS, or later when conc requests are already in the
// server (a closed loop: it arrives when one ends), as the load client sends them. It returns
// each request's TTFT and end-to-end time in simulated ms, in arrival order, and the engine.
func driveLLM(t *testing.T, cost llmCost, n, conc, in, out int, gapNS int64) (ttft, e2e []float64, e *llmEngine) {
	t.Helper()
	e = newLLMEngine(cost, nil, nil)
	jobs := make([]*llmJob, 0, n)
	inFlight := func() int {
		k := 0
		for _, j := range jobs {
			if !j.end {
				k++
			}
		}
		return k
	}
	for steps := 0; ; steps++ {
		if steps > 1_000_000 {
			t.Fatal("the engine does not finish")
		}
		// Admit every arrival due by now that a concurrency slot allows.
		for len(jobs) < n && inFlight() < conc {
			at := int64(len(jobs)) * gapNS
			if at > e.now && inFlight() > 0 {
				break
			}
			e.now = max(e.now, at) // an idle engine waits for the arrival
			j := &llmJob{in: in, out: out}
			e.enqueue(j, e.now)
			jobs = append(jobs, j)
		}
		if e.step() == nil && len(jobs) == n {
			break
		}
	}
	for _, j := range jobs {
		if !j.end || len(j.times) != out {
			t.Fatalf("job %+v did not finish with %d tokens", j, out)
		}
		ttft = append(ttft, float64(j.times[0])/1e6)
		e2e = append(e2e, float64(j.total)/1e6)
	}
	return ttft, e2e, e
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// At concurrency 64 with every request sent at once (request rate inf), the prompts queue for
// prefill, so TTFT's median is well above concurrency 1's, where each prompt finds the server
// idle; the decode steps of the larger batch are slower too.
func TestLLMEngineTTFTRisesWithLoad(t *testing.T) {
	cost := llmCost{}.withDefaults()
	ttft1, e2e1, _ := driveLLM(t, cost, 64, 1, 1024, 128, 0)
	ttft64, e2e64, e := driveLLM(t, cost, 64, 64, 1024, 128, 0)
	if want := cost.prefillMS(1024); ttft1[0] != want || median(ttft1) != want {
		t.Errorf("concurrency 1: TTFT %v, want one prefill (%v ms) each", ttft1[:3], want)
	}
	if !(median(ttft64) > 2*median(ttft1)) {
		t.Errorf("TTFT p50 at concurrency 64 %.1f ms vs 1 %.1f ms: the prefill queue does not show", median(ttft64), median(ttft1))
	}
	if !(ttft64[63] > ttft64[0]) {
		t.Errorf("the last prompt of the burst (%.1f ms) waited no longer than the first (%.1f ms)", ttft64[63], ttft64[0])
	}
	tpot := func(ttft, e2e []float64) float64 { return (median(e2e) - median(ttft)) / 127 }
	if !(tpot(ttft64, e2e64) > tpot(ttft1, e2e1)) {
		t.Errorf("TPOT at concurrency 64 %.2f ms is not above 1's %.2f ms", tpot(ttft64, e2e64), tpot(ttft1, e2e1))
	}
	st := e.snapshot()
	if st.GeneratedTokens != 64*128 || st.Finished != 64 || st.Running != 0 || st.Queued != 0 || st.KVUsedTokens != 0 || st.PeakRunning != 64 {
		t.Errorf("stats %+v", st)
	}
}

// A KV cache that holds three requests bounds the batch at three; the rest wait in the queue,
// and the engine is deterministic: the same arrivals give the same times.
func TestLLMEngineKVBoundsBatch(t *testing.T) {
	cost := llmCost{KVTokens: 3 * (100 + 10)}.withDefaults()
	ttft, e2e, e := driveLLM(t, cost, 8, 8, 100, 10, 0)
	st := e.snapshot()
	if st.PeakRunning != 3 || st.PeakQueued != 8 || st.Finished != 8 || st.KVCapTokens != 330 || st.KVUsedTokens != 0 {
		t.Errorf("stats %+v: want a batch of at most 3 (KV 330 tokens), all 8 queued at first, all finished", st)
	}
	if !(ttft[7] > e2e[0]) {
		t.Errorf("request 8's TTFT %.1f ms is not after request 1's end %.1f ms: it did not wait for KV", ttft[7], e2e[0])
	}
	ttft2, e2e2, _ := driveLLM(t, cost, 8, 8, 100, 10, 0)
	if !reflect.DeepEqual(ttft, ttft2) || !reflect.DeepEqual(e2e, e2e2) {
		t.Error("the same arrivals gave different times")
	}
}

// Mixed steps (vLLM's scheduler) keep decoding while a prompt prefills; alternating steps
// (SGLang's) stall the decodes for the prefill, so a late arrival costs the running requests
// more there.
func TestLLMEngineMixedSteps(t *testing.T) {
	e := newLLMEngine(llmCost{Mixed: true, ChunkTokens: 600}, nil, nil)
	a := &llmJob{in: 500, out: 5}
	e.enqueue(a, 0)
	if p := e.step(); p.stage != "EXTEND" || len(p.decode) != 0 || len(a.times) != 1 {
		t.Fatalf("first step %+v", p)
	}
	b := &llmJob{in: 1000, out: 5}
	e.enqueue(b, e.now)
	p := e.step()
	if p.stage != "EXTEND" || len(p.decode) != 1 || len(p.prefill) != 1 || p.prefill[0].tokens != 599 || len(a.times) != 2 {
		t.Errorf("mixed step %+v: want a's decode and 599 of b's prompt tokens (the budget less one decode)", p)
	}
	s := newLLMEngine(llmCost{ChunkTokens: 600}, nil, nil)
	a = &llmJob{in: 500, out: 5}
	s.enqueue(a, 0)
	s.step()
	s.enqueue(&llmJob{in: 1000, out: 5}, s.now)
	if p := s.step(); len(p.decode) != 0 || p.prefill[0].tokens != 600 || len(a.times) != 1 {
		t.Errorf("alternating step %+v: want a prefill of 600 tokens only", p)
	}
}

// A request with a cached prompt prefills only the rest, and the counters say so.
func TestLLMEngineCachedPrompt(t *testing.T) {
	e := newLLMEngine(llmCost{}, nil, nil)
	e.enqueue(&llmJob{in: 1000, out: 2, cached: 800}, 0)
	if p := e.step(); p.prefill[0].tokens != 200 {
		t.Errorf("prefill %+v: want the 200 uncached tokens", p.prefill)
	}
	e.enqueue(&llmJob{in: 10, out: 0, cached: 10}, e.now)
	for e.step() != nil {
	}
	if st := e.snapshot(); st.PromptTokens != 1010 || st.CachedTokens != 809 || st.GeneratedTokens != 2 || st.Finished != 2 {
		t.Errorf("stats %+v: want 1010 prompt tokens, 809 cached (a whole cached prompt still runs its last token)", st)
	}
}

// A request sent on its load run's schedule arrives where the schedule puts it relative to the
// run's first such request, however late it came in real time, unless the engine's clock has
// passed that time already (then it arrives now); a request without a due time, or of a new
// run, arrives now.
func TestLLMEngineScheduledArrivals(t *testing.T) {
	clk := &clock{ctx: context.Background(), scale: 0.001}
	e := newLLMEngine(llmCost{}, clk, nil)
	e.origin = time.Now().Add(-time.Second) // real time says the engine is at ~1000 s (less the slack)
	first := e.arrivalAt(&simDue{run: "a", ns: 2e9})
	if first < 990e9 || first > 1000e9 {
		t.Fatalf("first arrival at %v s, want about 1000 s less the slack", float64(first)/1e9)
	}
	if got := e.arrivalAt(&simDue{run: "a", ns: 7e9}); got != first+5e9 {
		t.Errorf("a request due 5 s after the first arrives at +%v s, want +5 s", float64(got-first)/1e9)
	}
	e.now = first + 60e9 // the engine ran past the schedule
	if got := e.arrivalAt(&simDue{run: "a", ns: 9e9}); got != e.now {
		t.Errorf("a late request arrives at %v, want the engine's now %v", got, e.now)
	}
	if got := e.arrivalAt(nil); got != e.now {
		t.Errorf("an unscheduled request arrives at %v, want now %v", got, e.now)
	}
	if got := e.arrivalAt(&simDue{run: "b", ns: 3e9}); got != e.now {
		t.Errorf("a new run's first request arrives at %v, want now %v", got, e.now)
	}
}
