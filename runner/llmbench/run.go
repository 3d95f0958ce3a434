package llmbench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sglprof/runner/runner/load"
)

// Config is one cell's benchmark.
type Config struct {
	// BaseURL is the server, e.g. http://127.0.0.1:30000.
	BaseURL string
	// API is APIGenerate, APICompletions or APIChat.
	API string
	// Model is the "model" field of the OpenAI APIs.
	Model string
	// Prompts are sent in order, cycling when Duration asks for more requests than there are.
	Prompts []Prompt
	// Requests is how many measured requests to send; 0 with Duration > 0 sends until Duration
	// has passed.
	Requests int
	// Duration bounds a benchmark by time instead of count: no request is sent after it.
	Duration time.Duration
	// Rate is the request rate in requests/s; 0 or +Inf sends every request at once.
	Rate float64
	// Burstiness is the gamma shape of the inter-arrival times (1 = Poisson).
	Burstiness float64
	// MaxConcurrency caps the requests in flight; 0 means no cap.
	MaxConcurrency int
	// Seed fixes the arrival schedule.
	Seed uint64
	// Warmup requests are sent, one at a time, before the measured ones and not recorded.
	Warmup int
	// RequestTimeout bounds each request, streaming included; 0 means 10 minutes.
	RequestTimeout time.Duration
	// Client sends the requests; nil means one built by NewClient.
	Client *http.Client
	// SimClock measures on a simulated server's clock (runner run --simulate): the token times
	// are the ones its chunks report (SimElapsedField), the arrival schedule and the request
	// starts are simulated time, and the wall time Run returns is the last simulated completion.
	// The simulated costs are µs of real time at the default scale, far below the loopback and
	// scheduling noise a real clock would add, so without it the noise would be the measurement.
	SimClock bool
	// SimTimeScale is the simulator's real seconds per simulated second: with SimClock the
	// schedule is slept at this scale, so requests overlap on the server as they would in
	// simulated time (the server's batch, and so its decode cost, follows the real overlap).
	SimTimeScale float64
	// BeforeMeasured, when set, runs after the warmup and before the first measured request
	// (serve cells open their profiling window there); its error stops the benchmark.
	BeforeMeasured func() error
}

// NewClient returns an HTTP client for conc requests in flight: net/http with enough idle
// connections that no request waits for a dial after warmup, and no overall timeout (each
// request carries its own deadline). It follows no redirect (the request fails naming where
// it pointed: see do) and reads at most load.MaxResponseHeader bytes of response headers.
func NewClient(conc int) *http.Client {
	conc = max(conc, 1)
	t := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conc + 16,
		MaxIdleConnsPerHost: conc + 16,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		// The servers' headers are bounded as runner/load bounds them.
		MaxResponseHeaderBytes: load.MaxResponseHeader,
	}
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &http.Client{Transport: t, CheckRedirect: noRedirect}
}

// prepared is a configuration checked and turned into what the requests need.
type prepared struct {
	url     string
	c       *http.Client
	timeout time.Duration
	bodies  [][]byte
}

func prepare(cfg Config) (*prepared, error) {
	if len(cfg.Prompts) == 0 {
		return nil, errors.New("no prompts to send")
	}
	path := Path(cfg.API)
	if path == "" {
		return nil, fmt.Errorf("unknown LLM API %q (want generate, completions or chat)", cfg.API)
	}
	p := &prepared{url: strings.TrimRight(cfg.BaseURL, "/") + path, c: cfg.Client, timeout: cfg.RequestTimeout}
	if p.c == nil {
		p.c = NewClient(cfg.MaxConcurrency)
	}
	if p.timeout <= 0 {
		p.timeout = 10 * time.Minute
	}
	p.bodies = make([][]byte, len(cfg.Prompts))
	for i, pr := range cfg.Prompts {
		if pr.OutputLen < 1 {
			// Every count the server reports is checked against it (see stream).
			return nil, fmt.Errorf("prompt %d asks for %d output tokens; want at least 1", i, pr.OutputLen)
		}
		b, err := Body(cfg.API, cfg.Model, pr)
		if err != nil {
			return nil, err
		}
		p.bodies[i] = b
	}
	return p, nil
}

// warm sends cfg.Warmup requests one at a time and forgets them; it returns ctx's error, or
// the first request's error when every warmup request failed (a server that answers nothing
// should not be measured).
func (p *prepared) warm(ctx context.Context, cfg Config) error {
	failed, first := 0, ""
	for i := range cfg.Warmup {
		var r Result
		rctx, cancel := context.WithTimeout(ctx, p.timeout)
		j := i % len(p.bodies)
		do(rctx, p.c, p.url, cfg.API, p.bodies[j], cfg.Prompts[j], cfg.SimClock, &r)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !r.OK() {
			failed++
			if first == "" {
				first = r.Error
			}
		}
	}
	if cfg.Warmup > 0 && failed == cfg.Warmup {
		return fmt.Errorf("every warmup request failed; the first: %s", first)
	}
	return nil
}

// Warmup sends only cfg.Warmup unmeasured requests, for a caller that does something between
// the warmup and the measured requests (Run with Warmup 0 then sends those).
func Warmup(ctx context.Context, cfg Config) error {
	p, err := prepare(cfg)
	if err != nil {
		return err
	}
	return p.warm(ctx, cfg)
}

// Run sends the warmup and then the measured requests on the arrival schedule and returns every
// measured request's record with the benchmark's wall time (first send to last completion).
// Cancelling ctx stops sending and cancels the requests in flight; what completed is returned
// with ctx's error.
func Run(ctx context.Context, cfg Config) ([]Result, time.Duration, error) {
	if cfg.Requests <= 0 && cfg.Duration <= 0 {
		return nil, 0, errors.New("neither a request count nor a duration")
	}
	p, err := prepare(cfg)
	if err != nil {
		return nil, 0, err
	}
	if err := p.warm(ctx, cfg); err != nil {
		return nil, 0, err
	}
	if cfg.BeforeMeasured != nil {
		if err := cfg.BeforeMeasured(); err != nil {
			return nil, 0, err
		}
	}

	next := arrivalsOf(cfg)
	sem := slots(cfg.MaxConcurrency)
	var (
		mu      sync.Mutex
		results []Result
		wg      sync.WaitGroup
	)
	start := time.Now()
	for i := 0; ; i++ {
		at, more, err := next(i)
		if err != nil {
			return nil, 0, err
		}
		if !more || !sleepUntil(ctx, start.Add(cfg.realOffset(at))) {
			break
		}
		simStart, ok := acquire(ctx, sem, at)
		if !ok {
			break
		}
		late := time.Since(start) >= cfg.Duration
		if cfg.SimClock {
			late = simStart >= cfg.Duration
		}
		if cfg.Duration > 0 && late {
			if sem != nil {
				sem <- simStart
			}
			break
		}
		wg.Add(1)
		go func(i int, simStart time.Duration) {
			defer wg.Done()
			j := i % len(p.bodies)
			r := Result{Index: i, Start: time.Since(start)}
			if cfg.SimClock {
				r.Start = simStart
			}
			rctx, cancel := context.WithTimeout(ctx, p.timeout)
			do(rctx, p.c, p.url, cfg.API, p.bodies[j], cfg.Prompts[j], cfg.SimClock, &r)
			cancel()
			if sem != nil {
				sem <- r.Start + r.E2E
			}
			mu.Lock()
			results = append(results, r)
			mu.Unlock()
		}(i, simStart)
	}
	wg.Wait()
	wall := time.Since(start)
	if cfg.SimClock {
		// The benchmark's duration on the simulated clock: first start to last completion.
		wall = 0
		for _, r := range results {
			wall = max(wall, r.Start+r.E2E)
		}
	}
	sortByIndex(results)
	return results, wall, ctx.Err()
}

// arrivalsOf returns the arrival offset of request i: from the fixed schedule of cfg.Requests
// requests, or drawn for a duration-bounded run. more is false once the run has sent all it
// should.
func arrivalsOf(cfg Config) func(i int) (at time.Duration, more bool, err error) {
	if cfg.Requests > 0 {
		sched := Schedule(cfg.Requests, cfg.Rate, cfg.Burstiness, cfg.Seed)
		return func(i int) (time.Duration, bool, error) {
			if i >= len(sched) {
				return 0, false, nil
			}
			return sched[i], true, nil
		}
	}
	arr := NewArrivals(cfg.Rate, cfg.Burstiness, cfg.Seed)
	return func(i int) (time.Duration, bool, error) {
		at := arr.Next()
		if i > 0 && at == 0 && !finiteRate(cfg.Rate) && cfg.MaxConcurrency == 0 {
			// An unbounded burst for a duration would open requests without end.
			return 0, false, errors.New("a duration-bounded benchmark needs a finite request_rate or a max_concurrency")
		}
		return at, at < cfg.Duration, nil
	}
}

// slots holds the free concurrency slots (nil: no max_concurrency), each with the (simulated)
// time it became free, so that under SimClock a request that waited for a slot starts when its
// slot's last request ended on the simulated clock.
func slots(n int) chan time.Duration {
	if n <= 0 {
		return nil
	}
	sem := make(chan time.Duration, n)
	for range n {
		sem <- 0
	}
	return sem
}

// acquire takes a slot for a request due at at and returns when it starts: at, or later when
// its slot was freed later on the simulated clock. ok is false when ctx ended first.
func acquire(ctx context.Context, sem chan time.Duration, at time.Duration) (start time.Duration, ok bool) {
	if sem == nil {
		return at, true
	}
	select {
	case free := <-sem:
		if ctx.Err() != nil { // both were ready: a cancelled run starts nothing more
			return 0, false
		}
		return max(at, free), true
	case <-ctx.Done():
		return 0, false
	}
}

// realOffset maps a schedule offset to real time: the schedule itself, or under SimClock the
// simulated offset at the simulator's scale.
func (cfg Config) realOffset(at time.Duration) time.Duration {
	if cfg.SimClock {
		return time.Duration(float64(at) * max(cfg.SimTimeScale, 0))
	}
	return at
}

// sleepUntil waits for t or ctx; it reports whether t was reached.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func sortByIndex(rs []Result) {
	slices.SortFunc(rs, func(a, b Result) int { return a.Index - b.Index })
}
