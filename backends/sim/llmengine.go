package sim

import (
	"slices"
	"sync"
	"time"
)

// llmEngine is a simulated LLM server's continuous-batching scheduler, on the simulated clock:
// requests wait in a queue until the KV cache and the running-batch limit admit them, are
// prefilled in chunks (so a burst of prompts makes later ones wait, and TTFT rises with load),
// then decode one token a step together with every other running request (so a step takes
// longer as the batch grows). One goroutine runs the steps while there is work; each request's
// goroutine waits for its tokens. The scheduling itself (plan, apply) is deterministic: given
// the order and the simulated times of the arrivals, the same tokens come out at the same
// simulated times, which the package's tests drive without any goroutine or sleep.
type llmEngine struct {
	cost llmCost
	// clk sleeps each step at the simulator's time scale; nil: no sleeping and no loop
	// goroutine (tests call step themselves).
	clk *clock
	// onStep, when set, is told of each forward step after it ran (stage EXTEND or DECODE,
	// start and end on clk): the profiler's step counter and kernel records.
	onStep func(stage string, start, end int64)

	mu      sync.Mutex
	waiting []*llmJob // FIFO queue
	running []*llmJob // admitted: prefilling or decoding
	kvUsed  int       // KV tokens reserved by the running requests
	now     int64     // simulated ns since the engine started (advances only while it works)
	looping bool      // the step goroutine is running
	// origin is the real time of the engine's simulated time 0: simulated time t is due at
	// origin + t·scale (+ engineSlack).
	origin time.Time
	// the step in flight: its real start and simulated length, to stamp an arrival during it
	stepReal time.Time
	stepNS   int64
	// run and runBase map the current load run's schedule to engine time (arrivalAt).
	runID   string
	runBase int64
	stats   llmStats
}

// llmJob is one request inside the engine.
type llmJob struct {
	in, out   int   // prompt tokens, tokens to generate
	cached    int   // prompt tokens the prefix cache already holds (not prefilled again)
	arrive    int64 // engine time at arrival
	prefilled int   // prompt tokens prefilled so far
	gen       int   // tokens generated so far
	// what the request's goroutine reads (under the engine's mu)
	times []int64 // simulated ns from arrival to each generated token
	total int64   // simulated ns from arrival to the end
	end   bool
	err   error
	sig   chan struct{} // capacity 1: something new in times/end/err
}

// need is the prompt tokens a job's prefill computes: at least one, since a prompt found whole
// in the cache still runs its last token to get the first output token.
func (j *llmJob) need() int { return max(j.in, 1) }

// kv is the KV-cache tokens a job holds while it runs: its prompt and its whole output,
// reserved at admission so a running request is never preempted.
func (j *llmJob) kv() int { return j.in + j.out }

// llmStats is the engine's state and counters, as a server's /metrics page reports them
// (running and queued requests, KV token usage, token counters).
type llmStats struct {
	Running, Queued int   // requests in the batch, in the queue
	KVUsedTokens    int   // KV tokens reserved by the running requests
	KVCapTokens     int   // KV capacity in tokens
	PromptTokens    int64 // prompt tokens of admitted requests
	CachedTokens    int64 // of those, found in the prefix cache
	GeneratedTokens int64 // output tokens produced
	Finished        int64 // requests completed
	Steps           int64 // forward steps run
	PeakQueued      int   // most requests ever waiting at once
	PeakRunning     int   // largest running batch
}

func newLLMEngine(cost llmCost, clk *clock, onStep func(stage string, start, end int64)) *llmEngine {
	return &llmEngine{cost: cost.withDefaults(), clk: clk, onStep: onStep, origin: time.Now()}
}

// snapshot is the engine's state now: what a /metrics page serves.
func (e *llmEngine) snapshot() llmStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.stats
	st.Running, st.Queued, st.KVUsedTokens, st.KVCapTokens = len(e.running), len(e.waiting), e.kvUsed, e.cost.KVTokens
	return st
}

// run submits a request of in prompt tokens (cached of them in the prefix cache) that
// generates out tokens, and calls emit (may be nil) with the cumulative token count and the
// request's simulated time so far in ms as each token is produced. It returns the request's
// simulated latency in seconds, or the error that stopped the engine (a signal).
func (e *llmEngine) run(in, out, cached int, due *simDue, emit func(n int, simMS float64)) (float64, error) {
	j := &llmJob{in: max(in, 0), out: max(out, 0), cached: min(max(cached, 0), max(in, 0)), sig: make(chan struct{}, 1)}
	e.mu.Lock()
	e.enqueue(j, e.arrivalAt(due))
	if !e.looping && e.clk != nil {
		e.looping = true
		go e.loop()
	}
	e.mu.Unlock()
	sent := 0
	for range j.sig {
		e.mu.Lock()
		times, end, total, err := j.times[sent:], j.end, j.total, j.err
		e.mu.Unlock()
		for _, t := range times {
			sent++
			if emit != nil {
				emit(sent, float64(t)/1e6)
			}
		}
		if err != nil {
			return 0, err
		}
		if end {
			return float64(total) / 1e9, nil
		}
	}
	return 0, nil // unreachable: sig is never closed
}

// simDue is where a request was due on its load run's schedule (simclock.DueField): ns from
// the run's start, and the run.
type simDue struct {
	run string
	ns  int64
}

// engineSlack is how far, in real time, the engine's clock keeps behind the real time at its
// scale, so that a request sent on its schedule reaches the engine before the engine's clock
// passes its due time (the client and loopback take some real time per request).
const engineSlack = 2 * time.Millisecond

// arrivalAt is the engine time a request arriving now starts at. A request placed on its load
// run's schedule (due) arrives where the schedule says, relative to the run's first such
// request, so a burst stays a burst whatever real time the requests took to come in; others
// (a request that waited for a concurrency slot, any other client) arrive at the engine's
// time now: during a step, its start plus the real time since at the clock's scale. Without
// sleeping (scale 0, tests) it is the engine's time.
func (e *llmEngine) arrivalAt(due *simDue) int64 {
	if e.clk == nil || e.clk.scale <= 0 {
		return e.now
	}
	now := e.now
	if e.looping {
		now += min(max(int64(float64(time.Since(e.stepReal))/e.clk.scale), 0), e.stepNS)
	} else {
		// Idle: the engine's clock has stood still; it is where real time says.
		now = max(now, int64(float64(time.Since(e.origin)-engineSlack)/e.clk.scale))
	}
	if due == nil {
		return now
	}
	if due.run != e.runID {
		// The run's first scheduled request: its schedule starts here.
		e.runID, e.runBase = due.run, now-due.ns
	}
	// A request later than its due time (the client could not keep up at this time scale, or
	// the engine passed it) arrives now: the lateness is the client's, not the server's queue.
	return max(e.runBase+due.ns, now)
}

// enqueue adds j to the queue, arrived at engine time at (callers hold mu).
func (e *llmEngine) enqueue(j *llmJob, at int64) {
	if j.sig == nil {
		j.sig = make(chan struct{}, 1)
	}
	j.arrive = at
	// In arrival order: scheduled requests may come in a little out of order.
	i := len(e.waiting)
	for i > 0 && e.waiting[i-1].arrive > at {
		i--
	}
	e.waiting = slices.Insert(e.waiting, i, j)
	e.stats.PeakQueued = max(e.stats.PeakQueued, len(e.waiting))
}

// loop runs steps until no request is left, sleeping until each step's end is due on the
// engine's origin; a step whose end is past already (the engine runs behind) does not sleep,
// so the engine catches up, and its simulated times do not depend on how busy the machine is.
func (e *llmEngine) loop() {
	for {
		e.mu.Lock()
		p := e.plan()
		if p == nil {
			e.looping = false
			e.mu.Unlock()
			return
		}
		ns := int64(p.ms * 1e6)
		due := e.origin.Add(time.Duration(float64(e.now+ns)*e.clk.scale) + engineSlack)
		e.stepReal, e.stepNS = time.Now(), ns
		e.mu.Unlock()
		t0 := e.clk.now()
		err := e.clk.sleepTo(ns, due)
		e.mu.Lock()
		if err != nil {
			e.failAll(err)
			e.looping = false
			e.mu.Unlock()
			return
		}
		e.apply(p, ns)
		e.mu.Unlock()
		if e.onStep != nil {
			e.onStep(p.stage, t0, e.clk.now())
		}
	}
}

// step plans and applies one step without sleeping (clk nil): the tests' driver. It reports
// the step run (nil: nothing to do).
func (e *llmEngine) step() *llmStep {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.plan()
	if p != nil {
		e.apply(p, int64(p.ms*1e6))
	}
	return p
}

// llmStep is one forward step: the prompt chunks it prefills and the requests it decodes.
type llmStep struct {
	stage   string // EXTEND (prefills, maybe with decodes in a mixed step) or DECODE
	ms      float64
	prefill []llmChunk
	decode  []*llmJob
}

type llmChunk struct {
	j      *llmJob
	tokens int
}

// plan admits what the queue's head allows and picks the next step (callers hold mu); nil when
// there is nothing to run. Admission is first come, first served: the head waits until the
// KV cache holds its prompt and output and the batch has room (a request larger than the
// whole cache runs alone rather than never).
func (e *llmEngine) plan() *llmStep {
	if len(e.running) == 0 && len(e.waiting) > 0 {
		e.now = max(e.now, e.waiting[0].arrive) // idle until the next arrival
	}
	for len(e.waiting) > 0 && len(e.running) < e.cost.MaxRunning {
		j := e.waiting[0]
		if j.arrive > e.now || e.kvUsed+j.kv() > e.cost.KVTokens && len(e.running) > 0 {
			break // not arrived yet on the simulated clock, or no room
		}
		e.waiting = e.waiting[1:]
		e.kvUsed += j.kv()
		j.prefilled = min(j.cached, j.need()-1)
		e.stats.PromptTokens += int64(j.in)
		e.stats.CachedTokens += int64(j.prefilled)
		e.running = append(e.running, j)
	}
	if len(e.running) == 0 {
		return nil
	}
	e.stats.PeakRunning = max(e.stats.PeakRunning, len(e.running))
	p := &llmStep{}
	var prefilling []*llmJob
	for _, j := range e.running {
		if j.prefilled < j.need() {
			prefilling = append(prefilling, j)
		} else {
			p.decode = append(p.decode, j)
		}
	}
	budget := e.cost.ChunkTokens
	if e.cost.Mixed {
		budget = max(budget-len(p.decode), 0) // a decode is one token of the step's budget
	} else if len(prefilling) > 0 {
		p.decode = nil // prefill first; the decodes wait a step
	}
	tokens := 0
	for _, j := range prefilling {
		if budget <= 0 {
			break
		}
		n := min(j.need()-j.prefilled, budget)
		p.prefill = append(p.prefill, llmChunk{j, n})
		budget -= n
		tokens += n
	}
	switch {
	case len(p.prefill) > 0:
		p.stage, p.ms = "EXTEND", e.cost.mixedMS(len(p.decode), tokens)
	case len(p.decode) > 0:
		p.stage, p.ms = "DECODE", e.cost.decodeMS(len(p.decode))
	default:
		return nil // cannot happen: a running job either prefills or decodes
	}
	return p
}

// apply ends step p, ns long: prompts advance, finished prefills give their first token,
// decodes one token each, and the requests done leave the batch (callers hold mu).
func (e *llmEngine) apply(p *llmStep, ns int64) {
	e.now += ns
	e.stats.Steps++
	for _, c := range p.prefill {
		c.j.prefilled += c.tokens
		if c.j.prefilled >= c.j.need() {
			e.token(c.j)
		}
	}
	for _, j := range p.decode {
		e.token(j)
	}
	kept := e.running[:0]
	for _, j := range e.running {
		if j.prefilled >= j.need() && j.gen >= j.out {
			e.kvUsed -= j.kv()
			e.stats.Finished++
			j.end, j.total = true, e.now-j.arrive
			notify(j)
			continue
		}
		kept = append(kept, j)
	}
	clear(e.running[len(kept):])
	e.running = kept
}

// token gives j its next output token now (none when it wants no output).
func (e *llmEngine) token(j *llmJob) {
	if j.gen >= j.out {
		return
	}
	j.gen++
	e.stats.GeneratedTokens++
	j.times = append(j.times, e.now-j.arrive)
	notify(j)
}

// failAll ends every request with err (the engine stopped: a signal).
func (e *llmEngine) failAll(err error) {
	for _, j := range append(e.running, e.waiting...) {
		j.err = err
		notify(j)
	}
	e.running, e.waiting, e.kvUsed = nil, nil, 0
}

func notify(j *llmJob) {
	select {
	case j.sig <- struct{}{}:
	default:
	}
}
