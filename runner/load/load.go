// Package load is the client phase of a serve cell: it sends unmeasured warmup requests, then
// the measured requests at a fixed concurrency, records every request (status, latency, bytes,
// the server-reported inference time and peak memory, the error body) and summarises them
// (mean, p50, p90, p99 by numpy's linear interpolation as bench_serving reports them, throughput in requests, images and tokens per second).
//
// Request bodies follow the server APIs of ref-sglang-interfaces.md §A.8 (diffusion images
// and videos) and §B (SGLang /generate, OpenAI /v1/completions). The client must never be the
// bottleneck: it reuses keep-alive connections (one idle connection per worker) and decodes
// only the few response fields it records.
package load

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/valyala/fastjson"

	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/reports/stats"
)

// APIs a cell can drive.
const (
	APIImages      = "images"      // POST /v1/images/generations
	APIVideos      = "videos"      // POST /v1/videos, then GET /v1/videos/{id} until completed|failed
	APIGenerate    = "generate"    // SGLang POST /generate
	APICompletions = "completions" // OpenAI POST /v1/completions
)

// MaxErrorBody bounds the error body kept per request.
const MaxErrorBody = 2048

// Bounds on what a server's response may make a client read (docs/serve.md). A response
// beyond them fails its request, marked as a protocol violation, without being read further.
const (
	// MaxResponseHeader bounds a response's status line and headers (and a chunked body's
	// trailers): real servers send well under a kilobyte.
	MaxResponseHeader = 1 << 20
	// MaxResponseBody bounds a response body. The body is held whole while it is parsed, so a
	// worker holds at most this much; an image response carries its images base64-encoded,
	// which 64 MiB allows up to about 48 MB of PNG.
	MaxResponseBody = 64 << 20
)

// violation is a response that breaks the API's contract or the bounds above: the request
// fails with it and its record is marked (Record.Violation).
type violation struct{ msg string }

func (v *violation) Error() string { return v.msg }

func violationf(format string, args ...any) error {
	return &violation{msg: fmt.Sprintf(format, args...)}
}

// redirectError is the error of a 3xx response: the client follows no redirect, since a 307 to
// another port would measure another server.
func redirectError(resp *http.Response) error {
	loc, err := resp.Location()
	if err != nil {
		return violationf("server answered %d redirect without a usable Location; not followed", resp.StatusCode)
	}
	return violationf("server answered %d redirect to %s; not followed", resp.StatusCode, clip([]byte(loc.String())))
}

// Spec describes the requests of one cell.
type Spec struct {
	API    string
	Model  string
	Prompt string
	// Diffusion.
	Width, Height int
	Steps         int
	Seed          int64
	N             int // images per request; 0 = 1
	// LLM.
	InputLen, OutputLen int
	// PerfDumpDir, when set, asks the diffusion server for a perf dump per measured request
	// (the perf_dump_path field) at PerfDumpDir/request-<i>.json.
	PerfDumpDir string
}

// PerfDumpPath is the perf dump of measured request i under dir.
func PerfDumpPath(dir string, i int) string {
	return filepath.Join(dir, fmt.Sprintf("request-%03d.json", i))
}

// Request is one HTTP request of the load.
type Request struct {
	Method string
	Path   string
	Body   []byte
	// Images and Tokens are what a successful response counts for throughput when the
	// response itself does not say (images: n; tokens: max_new_tokens).
	Images, Tokens int
	// Poll marks a videos job: the response carries an id to poll.
	Poll bool
}

// BuildIndexed is Build for measured request i: it also names the request's perf dump.
func BuildIndexed(spec Spec, i int, measured bool) (Request, error) {
	if !measured || spec.PerfDumpDir == "" || (spec.API != APIImages && spec.API != APIVideos) {
		return Build(spec, measured)
	}
	r, err := Build(spec, measured)
	if err != nil {
		return r, err
	}
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		return r, err
	}
	m["perf_dump_path"] = PerfDumpPath(spec.PerfDumpDir, i)
	r.Body, _ = json.Marshal(m)
	return r, nil
}

// Build returns the request for spec; measured says whether per-request profiling fields are
// sent (warmup requests are never profiled).
func Build(spec Spec, measured bool) (Request, error) {
	switch spec.API {
	case APIImages, APIVideos:
		body := map[string]any{"prompt": spec.Prompt, "seed": spec.Seed, "n": max(spec.N, 1)}
		if spec.Model != "" {
			body["model"] = spec.Model
		}
		if spec.Width > 0 && spec.Height > 0 {
			body["size"] = fmt.Sprintf("%dx%d", spec.Width, spec.Height)
			body["width"], body["height"] = spec.Width, spec.Height
		}
		if spec.Steps > 0 {
			body["num_inference_steps"] = spec.Steps
		}
		if spec.API == APIImages {
			body["response_format"] = "b64_json"
		}
		// No per-request profiling fields: upstream's image handler forwards none, so the
		// runner profiles diffusion servers with a /start_profile window instead.
		b, _ := json.Marshal(body)
		if spec.API == APIVideos {
			return Request{Method: "POST", Path: "/v1/videos", Body: b, Images: max(spec.N, 1), Poll: true}, nil
		}
		return Request{Method: "POST", Path: "/v1/images/generations", Body: b, Images: max(spec.N, 1)}, nil
	case APIGenerate, APICompletions:
		if spec.OutputLen <= 0 {
			return Request{}, fmt.Errorf("load: api %q needs output_len > 0 (matrix.output_len)", spec.API)
		}
		prompt := SyntheticPrompt(spec.Prompt, spec.InputLen)
		var b []byte
		if spec.API == APIGenerate {
			b, _ = json.Marshal(map[string]any{"text": prompt, "sampling_params": map[string]any{"max_new_tokens": spec.OutputLen, "temperature": 0, "ignore_eos": true}})
			return Request{Method: "POST", Path: "/generate", Body: b, Tokens: spec.OutputLen}, nil
		}
		body := map[string]any{"prompt": prompt, "max_tokens": spec.OutputLen, "temperature": 0, "ignore_eos": true}
		if spec.Model != "" {
			body["model"] = spec.Model
		}
		b, _ = json.Marshal(body)
		return Request{Method: "POST", Path: "/v1/completions", Body: b, Tokens: spec.OutputLen}, nil
	}
	return Request{}, fmt.Errorf("load: unknown api %q; use images, videos, generate or completions", spec.API)
}

// SyntheticPrompt returns a prompt of about n tokens: the given prompt's words repeated (or a
// fixed word when there is none). Word count approximates tokens, which is what bench_serving's
// random dataset does too; the exact count is what the server reports back.
func SyntheticPrompt(prompt string, n int) string {
	if n <= 0 {
		if prompt == "" {
			return "Hello"
		}
		return prompt
	}
	words := strings.Fields(prompt)
	if len(words) == 0 {
		words = []string{"hello"}
	}
	out := make([]string, n)
	for i := range out {
		out[i] = words[i%len(words)]
	}
	return strings.Join(out, " ")
}

// Config is one load run.
type Config struct {
	BaseURL     string // http://127.0.0.1:PORT
	Warmup      int
	Requests    int
	Concurrency int
	Timeout     time.Duration // per request (a video: until its job ends); 0 = 10m
	PollEvery   time.Duration // videos; 0 = 200ms
	// Build returns request i; measured is false for warmup requests.
	Build func(i int, measured bool) (Request, error)
	// Client, when set, sends every request through its Do (its redirect policy and
	// connection management apply). Otherwise a plain-http BaseURL gets the package's own
	// HTTP/1.1 client (one connection per worker, preconnected) and any other a Client on
	// NewTransport.
	Client *http.Client
	// Records receives every record as JSON Lines (requests.jsonl) when set.
	Records io.Writer
}

// Record is one request.
type Record struct {
	Index          int     `json:"index"`
	Warmup         bool    `json:"warmup,omitempty"`
	Status         int     `json:"status"`   // 0: no HTTP response (connection error, timeout)
	StartNS        int64   `json:"start_ns"` // since the start of the measured phase (warmup: of the warmup)
	LatencyNS      int64   `json:"latency_ns"`
	Bytes          int64   `json:"bytes"`
	ID             string  `json:"id,omitempty"`
	InferenceTimeS float64 `json:"inference_time_s,omitempty"`
	PeakMemoryMB   float64 `json:"peak_memory_mb,omitempty"`
	Images         int     `json:"images,omitempty"`
	Tokens         int     `json:"tokens,omitempty"`
	Error          string  `json:"error,omitempty"`
	Body           string  `json:"body,omitempty"` // error responses: the first MaxErrorBody bytes
	// Violation marks an Error that is the server breaking the API's contract (a count beyond
	// what was asked or negative, a response over the bounds, a redirect): its numbers cannot
	// be trusted, so such a request fails its cell whatever max_error_rate allows.
	Violation bool `json:"protocol_violation,omitempty"`
}

// OK reports whether the request succeeded.
func (r *Record) OK() bool { return r.Error == "" && r.Status >= 200 && r.Status < 300 }

// Summary summarises the measured requests. It is recorded in the run directory (load.json,
// result.json), whose types the rundir package owns.
type Summary = rundir.LoadSummary

// NewTransport returns a transport tuned for load: one idle keep-alive connection per worker
// kept between requests, no proxy, no compression. Run uses it for https servers; plain-http
// runs use the package's own client.
func NewTransport(concurrency int) *http.Transport {
	c := max(concurrency, 1)
	return &http.Transport{
		Proxy:               nil, // never route loopback load through a proxy from the environment
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        c * 2,
		MaxIdleConnsPerHost: c,
		MaxConnsPerHost:     0,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		// Headers are bounded as the package's own client bounds them.
		MaxResponseHeaderBytes: MaxResponseHeader,
	}
}

// newClient is the net/http client of a run without Config.Client: it follows no redirect
// (the response comes back as the 3xx it is, and send fails it).
func newClient(concurrency int) *http.Client {
	return &http.Client{Transport: NewTransport(concurrency),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// Run sends the warmup requests (sequentially), then the measured requests with
// cfg.Concurrency workers, and returns the measured records and their summary. Records of
// warmup requests are written to cfg.Records too, marked warmup. Run returns an error only for
// a bad configuration or a cancelled ctx (with the records so far).
func Run(ctx context.Context, cfg Config) (Summary, []Record, error) {
	if cfg.Build == nil || cfg.BaseURL == "" {
		return Summary{}, nil, errors.New("load: BaseURL and Build are required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Minute
	}
	if cfg.PollEvery <= 0 {
		cfg.PollEvery = 200 * time.Millisecond
	}
	conc := max(cfg.Concurrency, 1)
	l := &loader{cfg: cfg, client: cfg.Client}
	if l.client == nil {
		l.h1 = newH1(cfg.BaseURL)
	}
	if l.client == nil && l.h1 == nil {
		l.client = newClient(conc)
		defer l.client.CloseIdleConnections()
	}
	var enc *json.Encoder
	var encMu sync.Mutex
	if cfg.Records != nil {
		enc = json.NewEncoder(cfg.Records)
	}
	emit := func(r *Record) {
		if enc != nil {
			encMu.Lock()
			enc.Encode(r)
			encMu.Unlock()
		}
	}
	nw := min(conc, max(cfg.Requests, 1))
	workers := make([]*worker, nw)
	for i := range workers {
		workers[i] = &worker{}
	}
	defer closeWorkers(workers)
	wstart := time.Now()
	for i := 0; i < cfg.Warmup; i++ {
		if err := ctx.Err(); err != nil {
			return Summary{}, nil, err
		}
		req, err := cfg.Build(i, false)
		if err != nil {
			return Summary{}, nil, err
		}
		r := l.do(ctx, workers[0], req, wstart)
		r.Index, r.Warmup = i, true
		emit(&r)
	}
	recs := make([]Record, cfg.Requests)
	reqs := make([]Request, cfg.Requests)
	for i := range reqs {
		var err error
		if reqs[i], err = cfg.Build(i, true); err != nil {
			return Summary{}, nil, err
		}
	}
	if l.h1 != nil && cfg.Requests > 0 {
		l.h1.preconnect(ctx, workers)
	}
	next := make(chan int, cfg.Requests)
	for i := range cfg.Requests {
		next <- i
	}
	close(next)
	start := time.Now()
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if ctx.Err() != nil {
					recs[i] = Record{Index: i, Error: "not sent: " + ctx.Err().Error()}
					continue
				}
				recs[i] = l.do(ctx, w, reqs[i], start)
				recs[i].Index = i
				emit(&recs[i])
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	sum := Summarize(recs, wall)
	return sum, recs, ctx.Err()
}

type loader struct {
	cfg    Config
	client *http.Client // nil when h1 is set
	h1     *h1
	pp     fastjson.ParserPool
	urls   sync.Map // path -> *url.URL, parsed once: URL parsing showed in the client profile
}

func (l *loader) url(path string) (*url.URL, error) {
	if u, ok := l.urls.Load(path); ok {
		return u.(*url.URL), nil
	}
	u, err := url.Parse(l.cfg.BaseURL + path)
	if err != nil {
		return nil, err
	}
	l.urls.Store(path, u)
	return u, nil
}

// do sends one request (and polls a video job) and records it.
func (l *loader) do(ctx context.Context, w *worker, req Request, base time.Time) Record {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	defer cancel()
	t0 := time.Now()
	rec := Record{StartNS: t0.Sub(base).Nanoseconds()}
	defer func() {
		if cap(w.buf) > 1<<20 { // an image response may be megabytes: do not keep those around
			w.buf = nil
		}
	}()
	status, body, n, err := l.send(ctx, w, req.Method, req.Path, req.Body)
	rec.Status, rec.Bytes = status, n
	if err == nil && status >= 200 && status < 300 && req.Poll {
		id := fastjson.GetString(body, "id")
		if id == "" {
			err = errors.New("video job response without an id")
		}
		for err == nil {
			st := fastjson.GetString(body, "status")
			if st == "completed" || st == "failed" {
				if st == "failed" {
					err = fmt.Errorf("video job %s failed: %s", id, fastjson.GetString(body, "error", "message"))
					rec.Body = clip(body)
				}
				break
			}
			select {
			case <-ctx.Done():
				err = fmt.Errorf("video job %s: %w", id, ctx.Err())
				continue
			case <-time.After(l.cfg.PollEvery):
			}
			var pn int64
			status, body, pn, err = l.send(ctx, w, "GET", "/v1/videos/"+id, nil)
			rec.Bytes += pn
			rec.Status = status
			if err == nil && (status < 200 || status >= 300) {
				break
			}
		}
	}
	rec.LatencyNS = time.Since(t0).Nanoseconds()
	if err != nil {
		var v *violation
		rec.Error, rec.Violation = err.Error(), errors.As(err, &v)
		return rec
	}
	if status < 200 || status >= 300 {
		rec.Error = fmt.Sprintf("HTTP %d", status)
		rec.Body = clip(body)
		return rec
	}
	p := l.pp.Get()
	parseResponse(&rec, body, p)
	l.pp.Put(p)
	if msg := checkReported(&rec, req); msg != "" {
		rec.Error, rec.Violation = msg, true
		return rec
	}
	if rec.Images == 0 {
		rec.Images = req.Images
	}
	if rec.Tokens == 0 {
		rec.Tokens = req.Tokens
	}
	return rec
}

// checkReported checks what a successful response reported against what its request asked:
// no count or time below zero, no more images than n, no more tokens than max_tokens. It says
// what is wrong, or "".
func checkReported(rec *Record, req Request) string {
	switch {
	case rec.Tokens < 0:
		return fmt.Sprintf("server reported %d completion tokens; a count cannot be negative", rec.Tokens)
	case req.Tokens > 0 && rec.Tokens > req.Tokens:
		return fmt.Sprintf("server reported %d completion tokens for a request of max_tokens %d", rec.Tokens, req.Tokens)
	case req.Images > 0 && rec.Images > req.Images:
		return fmt.Sprintf("server returned %d images for a request of n = %d", rec.Images, req.Images)
	case rec.InferenceTimeS < 0:
		return fmt.Sprintf("server reported inference_time_s %g; a time cannot be negative", rec.InferenceTimeS)
	case rec.PeakMemoryMB < 0:
		return fmt.Sprintf("server reported peak_memory_mb %g; a memory size cannot be negative", rec.PeakMemoryMB)
	}
	return ""
}

// parseResponse records what a successful response says about itself: its id (images,
// videos, /v1/completions: "id"; /generate: meta_info.id), the server-reported inference time
// and peak memory, the number of images and of generated tokens. A body that is not JSON
// leaves the record as it is.
func parseResponse(rec *Record, body []byte, p *fastjson.Parser) {
	v, err := p.ParseBytes(body)
	if err != nil {
		return
	}
	rec.ID = string(v.GetStringBytes("id"))
	if rec.ID == "" {
		rec.ID = string(v.GetStringBytes("meta_info", "id"))
	}
	rec.InferenceTimeS = finite(v.GetFloat64("inference_time_s"))
	rec.PeakMemoryMB = finite(v.GetFloat64("peak_memory_mb"))
	if d := v.GetArray("data"); d != nil {
		rec.Images = len(d)
	}
	rec.Tokens = v.GetInt("meta_info", "completion_tokens")
	if rec.Tokens == 0 {
		rec.Tokens = v.GetInt("usage", "completion_tokens")
	}
}

// finite maps NaN and ±Inf (1e999 in a response) to 0: they cannot be written as JSON.
func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}

// clip keeps the first MaxErrorBody bytes of a server's text, printable: invalid UTF-8 and
// control characters (NUL, ESC, ...) become '?', so a hostile answer cannot drive a terminal
// that shows the cell's reasons.
func clip(b []byte) string {
	if len(b) > MaxErrorBody {
		b = b[:MaxErrorBody]
	}
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || unicode.IsControl(r) && r != '\n' && r != '\t' {
			return '?'
		}
		return r
	}, string(b)) // an invalid byte reads as utf8.RuneError
}

// send sends one request and reads the response into w.buf, which the worker reuses (a fresh
// io.ReadAll buffer per response was the largest single allocation of the client). The body
// returned aliases w.buf.
func (l *loader) send(ctx context.Context, w *worker, method, path string, body []byte) (int, []byte, int64, error) {
	if l.h1 != nil {
		return l.h1.roundTrip(ctx, w, method, path, body)
	}
	u, err := l.url(path)
	if err != nil {
		return 0, nil, 0, err
	}
	hr := (&http.Request{Method: method, URL: u, Host: u.Host, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}}).WithContext(ctx)
	if body != nil {
		hr.Body = io.NopCloser(bytes.NewReader(body))
		hr.ContentLength = int64(len(body))
		hr.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		hr.Header["Content-Type"] = jsonContentType
	}
	resp, err := l.client.Do(hr)
	if err != nil {
		return 0, nil, 0, err
	}
	defer resp.Body.Close()
	b, err := readBody(resp.Body, w.buf[:0])
	w.buf = b
	if err != nil {
		return resp.StatusCode, b, int64(len(b)), err
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return resp.StatusCode, b, int64(len(b)), redirectError(resp)
	}
	return resp.StatusCode, b, int64(len(b)), nil
}

var jsonContentType = []string{"application/json"}

// readBody appends the body r to b until EOF. A body longer than MaxResponseBody is a
// violation, and nothing more of it is read.
func readBody(r io.Reader, b []byte) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		// One byte past the bound tells a body of exactly MaxResponseBody from a longer one.
		m, err := r.Read(b[len(b):min(cap(b), MaxResponseBody+1)])
		b = b[:len(b)+m]
		if len(b) > MaxResponseBody {
			return b[:MaxResponseBody], violationf("server sent a response body longer than %d MiB; not read further", MaxResponseBody>>20)
		}
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, fmt.Errorf("reading the response: %w", err)
		}
	}
}

// Summarize computes the summary of measured records over wall.
func Summarize(recs []Record, wall time.Duration) Summary {
	s := Summary{Count: len(recs), WallNS: wall.Nanoseconds(), Statuses: map[string]int{}}
	var lat []int64
	var sum int64
	var images, tokens int
	var inf float64
	for i := range recs {
		r := &recs[i]
		key := fmt.Sprint(r.Status)
		if r.Status == 0 {
			key = "error"
		}
		s.Statuses[key]++
		if !r.OK() {
			s.Errors++
			if r.Violation {
				if s.ProtocolViolations++; s.FirstViolation == "" {
					s.FirstViolation = r.Error
				}
			}
			continue
		}
		lat = append(lat, r.LatencyNS)
		sum += r.LatencyNS
		images += r.Images
		tokens += r.Tokens
		inf += r.InferenceTimeS
		s.MaxPeakMemoryMB = max(s.MaxPeakMemoryMB, r.PeakMemoryMB)
	}
	if s.Count > 0 {
		s.ErrorRate = float64(s.Errors) / float64(s.Count)
	}
	if len(lat) > 0 {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		s.MeanNS = sum / int64(len(lat))
		s.P50NS, s.P90NS, s.P99NS = percentileNS(lat, 50), percentileNS(lat, 90), percentileNS(lat, 99)
		s.MaxNS = lat[len(lat)-1]
		s.MeanInferenceTimeS = inf / float64(len(lat))
	}
	if secs := wall.Seconds(); secs > 0 {
		s.RequestsPerS = float64(len(lat)) / secs
		s.ImagesPerS = float64(images) / secs
		s.TokensPerS = float64(tokens) / secs
	}
	return s
}

// percentileNS is a latency percentile of sorted nanoseconds as bench_serving computes it
// (numpy's linear interpolation, reports/stats), rounded to the nanosecond; 0 for no samples.
func percentileNS(sorted []int64, p float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	return int64(math.Round(stats.Percentile(sorted, p)))
}
