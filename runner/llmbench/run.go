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
}

// NewClient returns an HTTP client for conc requests in flight: net/http with enough idle
// connections that no request waits for a dial after warmup, and no overall timeout (each
// request carries its own deadline).
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
	}
	return &http.Client{Transport: t}
}

// Run sends the warmup and then the measured requests on the arrival schedule and returns every
// measured request's record with the benchmark's wall time (first send to last completion).
// Cancelling ctx stops sending and cancels the requests in flight; what completed is returned
// with ctx's error.
func Run(ctx context.Context, cfg Config) ([]Result, time.Duration, error) {
	b, err := newBench(cfg)
	if err != nil {
		return nil, 0, err
	}
	if err := b.warmup(ctx); err != nil {
		return nil, 0, err
	}
	return b.measure(ctx)
}

// bench is one checked Config with what every request needs: the URL, the client, the
// encoded bodies and the per-request timeout.
type bench struct {
	cfg     Config
	url     string
	client  *http.Client
	bodies  [][]byte
	timeout time.Duration
}

// newBench checks cfg and encodes the request bodies once.
func newBench(cfg Config) (*bench, error) {
	if len(cfg.Prompts) == 0 {
		return nil, errors.New("no prompts to send")
	}
	path := Path(cfg.API)
	if path == "" {
		return nil, fmt.Errorf("unknown LLM API %q (want generate, completions or chat)", cfg.API)
	}
	if cfg.Requests <= 0 && cfg.Duration <= 0 {
		return nil, errors.New("neither a request count nor a duration")
	}
	b := &bench{cfg: cfg, url: strings.TrimRight(cfg.BaseURL, "/") + path, client: cfg.Client, timeout: cfg.RequestTimeout}
	if b.client == nil {
		b.client = NewClient(cfg.MaxConcurrency)
	}
	if b.timeout <= 0 {
		b.timeout = 10 * time.Minute
	}
	b.bodies = make([][]byte, len(cfg.Prompts))
	for i, p := range cfg.Prompts {
		body, err := Body(cfg.API, cfg.Model, p)
		if err != nil {
			return nil, err
		}
		b.bodies[i] = body
	}
	return b, nil
}

// send sends request i (cycling through the prompts) into r, bounded by the request timeout.
func (b *bench) send(ctx context.Context, i int, r *Result) {
	rctx, cancel := context.WithTimeout(ctx, b.timeout)
	j := i % len(b.bodies)
	do(rctx, b.client, b.url, b.cfg.API, b.bodies[j], b.cfg.Prompts[j], r)
	cancel()
}

// warmup sends the warmup requests one at a time and records nothing.
func (b *bench) warmup(ctx context.Context) error {
	for i := range b.cfg.Warmup {
		var r Result
		b.send(ctx, i, &r)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// arrivals is the measured requests' send offsets: a fixed schedule of Requests offsets, or
// an open stream of arrivals cut at Duration.
type arrivals struct {
	cfg   *Config
	sched []time.Duration
	arr   *Arrivals
}

// at returns request i's send offset from the start, false when no request i is to be sent.
func (a *arrivals) at(i int) (time.Duration, bool, error) {
	if a.sched != nil {
		if i >= len(a.sched) {
			return 0, false, nil
		}
		return a.sched[i], true, nil
	}
	at := a.arr.Next()
	if i > 0 && at == 0 && !finiteRate(a.cfg.Rate) && a.cfg.MaxConcurrency == 0 {
		// An unbounded burst for a duration would open requests without end.
		return 0, false, errors.New("a duration-bounded benchmark needs a finite request_rate or a max_concurrency")
	}
	return at, at < a.cfg.Duration, nil
}

// measure sends the measured requests on the arrival schedule, at most MaxConcurrency in
// flight, and returns their records in index order with the wall time.
func (b *bench) measure(ctx context.Context) ([]Result, time.Duration, error) {
	cfg := &b.cfg
	a := &arrivals{cfg: cfg}
	if cfg.Requests > 0 {
		a.sched = Schedule(cfg.Requests, cfg.Rate, cfg.Burstiness, cfg.Seed)
	} else {
		a.arr = NewArrivals(cfg.Rate, cfg.Burstiness, cfg.Seed)
	}
	var sem chan struct{}
	if cfg.MaxConcurrency > 0 {
		sem = make(chan struct{}, cfg.MaxConcurrency)
	}
	var (
		mu      sync.Mutex
		results []Result
		wg      sync.WaitGroup
	)
	start := time.Now()
	for i := 0; ; i++ {
		at, more, err := a.at(i)
		if err != nil {
			return nil, 0, err
		}
		if !more || !sleepUntil(ctx, start.Add(at)) {
			break
		}
		if sem != nil {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
			}
			if ctx.Err() != nil {
				break
			}
		}
		if cfg.Duration > 0 && time.Since(start) >= cfg.Duration {
			if sem != nil {
				<-sem
			}
			break
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if sem != nil {
				defer func() { <-sem }()
			}
			r := Result{Index: i, Start: time.Since(start)}
			b.send(ctx, i, &r)
			mu.Lock()
			results = append(results, r)
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	wall := time.Since(start)
	sortByIndex(results)
	return results, wall, ctx.Err()
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
