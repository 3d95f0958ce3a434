// Package load is the client phase of a serve cell: it sends unmeasured warmup requests, then
// the measured requests on an arrival schedule (a request rate and burstiness, seeded, or all at
// once) with at most a given number in flight, for a request count or a duration. It records
// every request in one Record, whatever it asked for, and summarises the records.
//
// Two kinds of request go through the same loop:
//
//   - whole-body requests (client_diffusion.go): the diffusion server's images and videos
//     (a videos job is polled until it ends) and non-streamed LLM requests, following the
//     server APIs of ref-sglang-interfaces.md §A.8 and §B. The record keeps the status,
//     latency, bytes, the server-reported inference time and peak memory, and the error body.
//   - streamed LLM requests (client_llm.go): SGLang's /generate and the OpenAI-compatible
//     /v1/completions and /v1/chat/completions, measured as SGLang's bench_serving measures
//     them: time to first token, every inter-token latency, the end-to-end latency and the
//     token counts the server reports.
//
// Summarize gives every serve cell's load summary (mean, p50, p90, p99 by numpy's linear
// interpolation, throughput); SummarizeLLM gives bench_serving's summary of streamed requests
// with its definitions and field names (metrics.go, export.go).
//
// Two things are parameters rather than choices made inside the loop: the HTTP client
// (Transport: the package's own HTTP/1.1 client, h1.go, or net/http; transport.go) and the
// clock the times are stamped on (Clock: this machine's, or a simulated server's; clock.go).
// The client must never be the bottleneck: connections are kept alive, the measured ones
// opened before the clock starts, and only the few response fields a record keeps are decoded.
package load

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fastjson"
)

// Request is one HTTP request of the load.
type Request struct {
	Method string
	Path   string
	Body   []byte
	// Images and Tokens are what was asked for: images (n) and output tokens (max_tokens, or
	// max_new_tokens on /generate). Every count a server reports is checked against them, and a
	// whole-body response that reports none counts them for throughput.
	Images, Tokens int
	// InputTokens is the prompt's length asked for: the record's input tokens until the server
	// reports its own count.
	InputTokens int
	// Poll marks a videos job: the response carries an id to poll.
	Poll bool
	// Stream marks a streamed LLM request of API (APIGenerate, APICompletions or APIChat): its
	// response is server-sent events, read as they come (client_llm.go).
	Stream bool
	API    string
}

// Config is one load run.
type Config struct {
	// BaseURL is the server, e.g. http://127.0.0.1:30000.
	BaseURL string
	// Build returns request i; measured is false for warmup requests.
	Build func(i int, measured bool) (Request, error)
	// Warmup requests are sent one at a time before the measured ones, unmeasured.
	Warmup int
	// Requests is how many measured requests to send; 0 with Duration > 0 sends until Duration
	// has passed.
	Requests int
	// Duration bounds a run by time instead of count: no request starts after it.
	Duration time.Duration
	// Rate is the request rate in requests/s; 0 or +Inf sends every request at once.
	Rate float64
	// Burstiness is the gamma shape of the inter-arrival times (1 = Poisson; 0 means 1).
	Burstiness float64
	// RampUp, when set, replaces Rate by a rate growing over the Requests (RampSchedule).
	RampUp *RampUp
	// Seed fixes the arrival schedule.
	Seed uint64
	// Concurrency caps the requests in flight; 0 means no cap.
	Concurrency int
	// Timeout bounds each request, a stream or a videos job included; 0 means 10 minutes.
	Timeout time.Duration
	// PollEvery is the videos job polling interval; 0 means 200 ms.
	PollEvery time.Duration
	// Transport picks the HTTP client (transport.go); Client, when set, is the net/http client
	// (its redirect policy and connection management apply) and implies TransportNetHTTP.
	Transport Transport
	Client    *http.Client
	// Clock stamps the times; nil is RealClock.
	Clock Clock
	// Records receives every record as JSON Lines when set, warmup ones marked, as each
	// request ends.
	Records io.Writer
	// BeforeMeasured, when set, runs after the warmup and before the first measured request
	// (serve cells open their profiling window there); its error stops the run.
	BeforeMeasured func() error
	// Arrivals, when set, is the arrival schedule (a trace's times) instead of Rate and
	// Burstiness: request i is due at Arrivals[i]; the run ends with the schedule.
	Arrivals []time.Duration
	// Shards > 1 makes this run one of Shards client processes sharing one arrival schedule:
	// it sends only the requests i with i % Shards == Shard, each at its time in the whole
	// schedule, and returns only their records (MergeShards joins the clients' records).
	Shard, Shards int
}

// owns reports whether request i is this client's (every request without sharding).
func (c Config) owns(i int) bool { return c.Shards <= 1 || i%c.Shards == c.Shard }

// Record is one request, of either kind. Times are offsets on the run's clock: Start from the
// start of the measured phase (a warmup request: of the warmup), the others from the request's
// own start. Token counts are the server's; when it reported none, a whole-body request counts
// what it asked for and a stream the chunks that carried text.
type Record struct {
	Index   int           `json:"index"`
	Warmup  bool          `json:"warmup,omitempty"`
	Status  int           `json:"status"` // 0: no HTTP response (connection error, timeout)
	Start   time.Duration `json:"start_ns"`
	Latency time.Duration `json:"latency_ns"` // end to end
	// TTFT and ITL are a stream's time to first token and inter-token latencies.
	TTFT           time.Duration   `json:"ttft_ns,omitempty"`
	ITL            []time.Duration `json:"itl_ns,omitempty"`
	Bytes          int64           `json:"bytes"`
	ID             string          `json:"id,omitempty"`
	InferenceTimeS float64         `json:"inference_time_s,omitempty"`
	PeakMemoryMB   float64         `json:"peak_memory_mb,omitempty"`
	Images         int             `json:"images,omitempty"`
	InputTokens    int             `json:"input_tokens,omitempty"`
	OutputTokens   int             `json:"output_tokens,omitempty"`
	Error          string          `json:"error,omitempty"`
	Body           string          `json:"body,omitempty"` // error responses: the first MaxErrorBody bytes, printable
	// Violation marks an Error that is the server breaking the API's contract (a count beyond
	// what was asked or negative, a response or line over the bounds, a redirect): its numbers
	// cannot be trusted, so such a request fails its cell whatever max_error_rate allows.
	Violation bool `json:"protocol_violation,omitempty"`
	// firstAt is when the first token was parsed (real time), for the benchmark of the
	// client's own delay.
	firstAt time.Time
}

// OK reports whether the request succeeded.
func (r *Record) OK() bool { return r.Error == "" && r.Status >= 200 && r.Status < 300 }

// TPOT is (latency − TTFT)/(output tokens − 1), bench_serving's time per output token after
// the first; ok is false for requests of one token or less.
func (r *Record) TPOT() (time.Duration, bool) {
	if r.OutputTokens <= 1 {
		return 0, false
	}
	return (r.Latency - r.TTFT) / time.Duration(r.OutputTokens-1), true
}

// Warmup sends only cfg.Warmup unmeasured requests, one at a time, for a caller that does
// something between the warmup and the measured requests (Run with Warmup 0 then sends
// those). It returns ctx's error, or the first request's error when every warmup request
// failed: a server that answers nothing should not be measured.
func Warmup(ctx context.Context, cfg Config) error {
	l, err := newLoader(cfg)
	if err != nil {
		return err
	}
	defer l.close()
	return l.warm(ctx)
}

// Run sends the warmup requests (one at a time), then the measured requests on the arrival
// schedule, and returns every measured request's record in index order with the run's wall
// time on its clock (the schedule's start to the last completion). A count-bounded run returns
// a record for each of its requests: the ones not sent when ctx ended say so. Run returns an
// error for a bad configuration, a failed warmup or BeforeMeasured, or a cancelled ctx (with
// the records so far).
func Run(ctx context.Context, cfg Config) ([]Record, time.Duration, error) {
	if cfg.Requests <= 0 && cfg.Duration <= 0 {
		return nil, 0, errors.New("load: neither a request count nor a duration")
	}
	if cfg.Requests <= 0 && cfg.Arrivals == nil && !finiteRate(cfg.Rate) && cfg.Concurrency <= 0 {
		// An unbounded burst for a duration would open requests without end.
		return nil, 0, errors.New("load: a duration-bounded run needs a finite request_rate or a max_concurrency")
	}
	if cfg.Arrivals != nil && cfg.Requests > len(cfg.Arrivals) {
		return nil, 0, fmt.Errorf("load: %d requests but a schedule of %d", cfg.Requests, len(cfg.Arrivals))
	}
	l, err := newLoader(cfg)
	if err != nil {
		return nil, 0, err
	}
	defer l.close()
	if err := l.warm(ctx); err != nil {
		return nil, 0, err
	}
	if cfg.BeforeMeasured != nil {
		if err := cfg.BeforeMeasured(); err != nil {
			return nil, 0, err
		}
	}
	// A counted run's requests are built before its clock starts; a timed one's as they go.
	var reqs []Request
	if cfg.Requests > 0 {
		reqs = make([]Request, cfg.Requests)
		for i := range reqs {
			if reqs[i], err = cfg.Build(i, true); err != nil {
				return nil, 0, err
			}
		}
	}
	request := func(i int) (Request, error) {
		if reqs != nil {
			return reqs[i], nil
		}
		return cfg.Build(i, true)
	}
	first, err := request(0)
	if err != nil {
		return nil, 0, err
	}
	slots := cfg.Concurrency
	if cfg.Requests > 0 && slots > 0 {
		slots = min(slots, cfg.Requests)
	}
	p := newPool(slots)
	defer p.close()
	if l.h1 != nil && l.transport(first) == transport(l.h1) {
		l.h1.preconnect(ctx, p.all)
	}
	next := arrivalsOf(cfg)
	var (
		mu       sync.Mutex
		recs     []Record
		lastEnd  time.Duration
		wg       sync.WaitGroup
		buildErr error
		sent     = make([]bool, max(cfg.Requests, 0))
	)
	start := time.Now()
	run := strconv.FormatInt(start.UnixNano(), 36) // tells this run's schedule from the warmup's and the next run's
	for i := 0; ; i++ {
		at, more := next(i)
		if !more {
			break
		}
		if !cfg.owns(i) {
			continue // another client's request: its arrival is drawn all the same
		}
		if !sleepUntil(ctx, start.Add(l.clock.Pace(at))) {
			break
		}
		w, ok := p.acquire(ctx)
		if !ok {
			break
		}
		stamp := l.clock.Start(time.Since(start), max(at, w.free))
		if cfg.Duration > 0 && stamp >= cfg.Duration {
			p.release(w)
			break
		}
		req := first
		if i > 0 {
			if req, err = request(i); err != nil {
				p.release(w)
				buildErr = err
				break
			}
		}
		if t, ok := l.clock.(tagger); ok && at >= w.free {
			// Sent on its schedule: the simulator places its arrival there (SimClock.Tag).
			req.Body = t.Tag(req.Body, run, at)
		}
		if reqs != nil {
			sent[i] = true
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := l.do(ctx, w, req)
			r.Index, r.Start = i, stamp
			// On the simulated clock, the request that waits for this slot starts when this
			// one ended there (SimClock.Start).
			w.free = r.Start + r.Latency
			p.release(w)
			l.emit(&r)
			mu.Lock()
			recs = append(recs, r)
			lastEnd = max(lastEnd, r.Start+r.Latency)
			mu.Unlock()
		}()
	}
	wg.Wait()
	wall := l.clock.End(time.Since(start), lastEnd)
	if ctx.Err() != nil {
		for i, s := range sent {
			if !s && cfg.owns(i) {
				recs = append(recs, Record{Index: i, Error: "not sent: " + ctx.Err().Error()})
			}
		}
	}
	slices.SortFunc(recs, func(a, b Record) int { return a.Index - b.Index })
	if buildErr != nil {
		return recs, wall, buildErr
	}
	return recs, wall, ctx.Err()
}

// arrivalsOf returns the arrival offset of request i: from the fixed schedule of cfg.Requests
// requests, or drawn for a duration-bounded run. more is false once the run has sent all it
// should.
func arrivalsOf(cfg Config) func(i int) (at time.Duration, more bool) {
	if cfg.Arrivals != nil {
		return func(i int) (time.Duration, bool) {
			if i >= len(cfg.Arrivals) || (cfg.Requests > 0 && i >= cfg.Requests) {
				return 0, false
			}
			at := cfg.Arrivals[i]
			return at, cfg.Duration <= 0 || at < cfg.Duration
		}
	}
	if cfg.Requests > 0 {
		sched := Schedule(cfg.Requests, cfg.Rate, cfg.Burstiness, cfg.Seed)
		if cfg.RampUp != nil {
			sched = RampSchedule(cfg.Requests, *cfg.RampUp, cfg.Burstiness, cfg.Seed)
		}
		return func(i int) (time.Duration, bool) {
			if i >= len(sched) {
				return 0, false
			}
			return sched[i], true
		}
	}
	arr := NewArrivals(cfg.Rate, cfg.Burstiness, cfg.Seed)
	return func(i int) (time.Duration, bool) {
		at := arr.Next()
		return at, at < cfg.Duration
	}
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

// loader is one run's configuration made ready: its transports, clock and record writer.
type loader struct {
	cfg     Config
	timeout time.Duration
	poll    time.Duration
	clock   Clock
	h1      *h1           // the own client, when BaseURL is plain http and the transport allows it
	net     *netTransport // net/http
	pp      fastjson.ParserPool
	encMu   sync.Mutex
	enc     *json.Encoder
}

func newLoader(cfg Config) (*loader, error) {
	if cfg.Build == nil || cfg.BaseURL == "" {
		return nil, errors.New("load: BaseURL and Build are required")
	}
	switch cfg.Transport {
	case TransportAuto, TransportH1, TransportNetHTTP:
	default:
		return nil, fmt.Errorf("load: unknown transport %q (want %q or %q)", cfg.Transport, TransportH1, TransportNetHTTP)
	}
	l := &loader{cfg: cfg, timeout: cfg.Timeout, poll: cfg.PollEvery, clock: cfg.Clock}
	if l.timeout <= 0 {
		l.timeout = 10 * time.Minute
	}
	if l.poll <= 0 {
		l.poll = 200 * time.Millisecond
	}
	if l.clock == nil {
		l.clock = RealClock{}
	}
	if cfg.Client == nil && cfg.Transport != TransportNetHTTP {
		l.h1 = newH1(cfg.BaseURL)
	}
	if cfg.Transport == TransportH1 && l.h1 == nil {
		return nil, fmt.Errorf("load: the %s transport speaks plain http:// only, not %s", TransportH1, cfg.BaseURL)
	}
	l.net = newNetTransport(cfg.BaseURL, cfg.Client, cfg.Concurrency)
	if cfg.Records != nil {
		l.enc = json.NewEncoder(cfg.Records)
	}
	return l, nil
}

func (l *loader) close() { l.net.close() }

// emit writes r to cfg.Records.
func (l *loader) emit(r *Record) {
	if l.enc != nil {
		l.encMu.Lock()
		l.enc.Encode(r)
		l.encMu.Unlock()
	}
}

// warm sends cfg.Warmup requests one at a time (see Warmup).
func (l *loader) warm(ctx context.Context) error {
	if l.cfg.Warmup <= 0 {
		return nil
	}
	w := &worker{}
	defer w.close()
	failed, firstErr := 0, ""
	start := time.Now()
	var end time.Duration
	for i := range l.cfg.Warmup {
		if err := ctx.Err(); err != nil {
			return err
		}
		req, err := l.cfg.Build(i, false)
		if err != nil {
			return err
		}
		stamp := l.clock.Start(time.Since(start), end)
		r := l.do(ctx, w, req)
		r.Index, r.Warmup, r.Start = i, true, stamp
		end = stamp + r.Latency
		if ctx.Err() != nil {
			return ctx.Err()
		}
		l.emit(&r)
		if !r.OK() {
			failed++
			if firstErr == "" {
				firstErr = r.Error
			}
		}
	}
	if failed == l.cfg.Warmup {
		return fmt.Errorf("every warmup request failed; the first: %s", firstErr)
	}
	return nil
}

// worker is the state one request in flight holds and the next request on its slot reuses:
// the own client's connection and the response buffer.
type worker struct {
	conn *h1conn
	buf  []byte // response body buffer
	// free is when the slot's last request ended, on the run's clock.
	free time.Duration
}

func (w *worker) close() {
	if w.conn != nil {
		w.conn.c.Close()
		w.conn = nil
	}
}

// pool holds the workers: n slots when the run caps its concurrency (a request waits for a
// free one), else as many as are in flight at once, reused.
type pool struct {
	slots chan *worker // nil without a cap
	mu    sync.Mutex
	idle  []*worker // without a cap
	all   []*worker
}

func newPool(n int) *pool {
	p := &pool{}
	if n > 0 {
		p.slots = make(chan *worker, n)
		for range n {
			w := &worker{}
			p.all = append(p.all, w)
			p.slots <- w
		}
	}
	return p
}

// acquire takes a worker, waiting for a free slot under a cap; ok is false when ctx ended
// first.
func (p *pool) acquire(ctx context.Context) (*worker, bool) {
	if p.slots == nil {
		if ctx.Err() != nil {
			return nil, false
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if k := len(p.idle); k > 0 {
			w := p.idle[k-1]
			p.idle = p.idle[:k-1]
			w.free = 0 // no slot to wait for: a request starts when it is due
			return w, true
		}
		w := &worker{}
		p.all = append(p.all, w)
		return w, true
	}
	select {
	case w := <-p.slots:
		if ctx.Err() != nil { // both were ready: a cancelled run starts nothing more
			p.slots <- w
			return nil, false
		}
		return w, true
	case <-ctx.Done():
		return nil, false
	}
}

func (p *pool) release(w *worker) {
	if p.slots != nil {
		p.slots <- w
		return
	}
	p.mu.Lock()
	p.idle = append(p.idle, w)
	p.mu.Unlock()
}

// close closes the workers' connections; every request has ended.
func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.all {
		w.close()
	}
}

// do sends one request (a stream read to its end, a videos job polled until it ends) and
// records it. The request's context carries the per-request timeout, so a server that stalls
// ends the request as an error, never a hang.
func (l *loader) do(ctx context.Context, w *worker, req Request) Record {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	defer func() {
		if cap(w.buf) > 1<<20 { // an image response may be megabytes: do not keep those around
			w.buf = nil
		}
	}()
	rec := Record{InputTokens: req.InputTokens}
	t0 := time.Now()
	var err error
	if req.Stream {
		err = l.doStream(ctx, w, req, t0, &rec)
	} else {
		err = l.doWhole(ctx, w, req, t0, &rec)
	}
	if err != nil {
		rec.Error = reqError(ctx, err)
		var v *violation
		rec.Violation = errors.As(err, &v)
	}
	return rec
}

// reqError words a request's error, saying so when the request timed out.
func reqError(ctx context.Context, err error) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return "request timed out (request_timeout): " + err.Error()
	}
	return err.Error()
}
