package load

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// Transport names the HTTP client of a run.
type Transport string

const (
	// TransportAuto is the measured choice (docs/decisions.md, "Load client"): the package's
	// own HTTP/1.1 client for whole-body requests to an http:// server, where net/http missed
	// the client-overhead target at concurrency 64, and net/http for streams (its client parsed
	// above the streaming target) and for everything else (https, a Config.Client).
	TransportAuto Transport = ""
	// TransportH1 sends every request through the package's own HTTP/1.1 client (h1.go): one
	// keep-alive connection per request slot, dialled before the measured requests. http://
	// only.
	TransportH1 Transport = "h1"
	// TransportNetHTTP sends every request through net/http: Config.Client, or one on
	// NewTransport that follows no redirect.
	TransportNetHTTP Transport = "net/http"
)

// MaxErrorBody bounds the error body kept per request.
const MaxErrorBody = 2048

// Bounds on what a server's response may make a client read (docs/serve.md). A response
// beyond them fails its request, marked as a protocol violation, without being read further.
const (
	// MaxResponseHeader bounds a response's status line and headers (and a chunked body's
	// trailers): real servers send well under a kilobyte.
	MaxResponseHeader = 1 << 20
	// MaxResponseBody bounds a whole-body response. The body is held whole while it is parsed,
	// so a request in flight holds at most this much; an image response carries its images
	// base64-encoded, which 64 MiB allows up to about 48 MB of PNG. A stream is bounded per
	// line instead (MaxLine).
	MaxResponseBody = 64 << 20
)

// transport sends one request on w's slot and returns the response with its body unread:
// the caller reads it within its bounds and closes it. stream says that the body is
// server-sent events, read line by line for as long as the request lasts, rather than one
// document of at most MaxResponseBody.
type transport interface {
	roundTrip(ctx context.Context, w *worker, method, path string, body []byte, stream bool) (*http.Response, error)
}

// transport is the client of req: see Transport.
func (l *loader) transport(req Request) transport {
	if l.h1 != nil && (l.cfg.Transport == TransportH1 || !req.Stream) {
		return l.h1
	}
	return l.net
}

// NewTransport returns a net/http transport tuned for load: enough idle keep-alive
// connections for concurrency requests in flight that no request waits for a dial after the
// warmup, no proxy, no compression, headers bounded as the own client bounds them.
func NewTransport(concurrency int) *http.Transport {
	c := max(concurrency, 1)
	return &http.Transport{
		Proxy:               nil, // never route loopback load through a proxy from the environment
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        c + 16,
		MaxIdleConnsPerHost: c + 16,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		// Headers are bounded as the package's own client bounds them.
		MaxResponseHeaderBytes: MaxResponseHeader,
	}
}

// NewClient returns the net/http client of a run without Config.Client: NewTransport's, with
// no overall timeout (each request carries its own deadline), following no redirect (the
// response comes back as the 3xx it is, and the request fails naming where it pointed: the
// runner measures the server it was pointed at or none).
func NewClient(concurrency int) *http.Client {
	return &http.Client{Transport: NewTransport(concurrency),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// netTransport sends requests through a net/http client.
type netTransport struct {
	base string
	c    *http.Client
	own  bool     // c is NewClient's: its idle connections are closed with the run
	urls sync.Map // path -> *url.URL, parsed once: URL parsing showed in the client profile
}

func newNetTransport(base string, c *http.Client, concurrency int) *netTransport {
	t := &netTransport{base: strings.TrimRight(base, "/"), c: c}
	if t.c == nil {
		t.c, t.own = NewClient(concurrency), true
	}
	return t
}

func (t *netTransport) close() {
	if t.own {
		t.c.CloseIdleConnections()
	}
}

func (t *netTransport) url(path string) (*url.URL, error) {
	if u, ok := t.urls.Load(path); ok {
		return u.(*url.URL), nil
	}
	u, err := url.Parse(t.base + path)
	if err != nil {
		return nil, err
	}
	t.urls.Store(path, u)
	return u, nil
}

var (
	jsonContentType = []string{"application/json"}
	eventStream     = []string{"text/event-stream"}
)

func (t *netTransport) roundTrip(ctx context.Context, _ *worker, method, path string, body []byte, stream bool) (*http.Response, error) {
	u, err := t.url(path)
	if err != nil {
		return nil, err
	}
	hr := (&http.Request{Method: method, URL: u, Host: u.Host, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}}).WithContext(ctx)
	if body != nil {
		hr.Body = io.NopCloser(bytes.NewReader(body))
		hr.ContentLength = int64(len(body))
		hr.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		hr.Header["Content-Type"] = jsonContentType
	}
	if stream {
		hr.Header["Accept"] = eventStream
	}
	resp, err := t.c.Do(hr)
	if err == nil && resp.Request != nil && resp.Request.URL != nil && resp.Request.URL.String() != u.String() {
		// A caller's client followed a redirect: the answer is another server's.
		resp.Body.Close()
		return nil, violationf("the request was redirected to %s; redirects are not measured", clip(resp.Request.URL.String()))
	}
	return resp, err
}

// violation is a response that breaks the API's contract or the bounds above: the request
// fails with it and its record is marked (Record.Violation).
type violation struct{ msg string }

func (v *violation) Error() string { return v.msg }

func violationf(format string, args ...any) error {
	return &violation{msg: fmt.Sprintf(format, args...)}
}

// redirected says why a response is not the asked server's answer: a redirect, which neither
// client follows (a 307 to another port would measure another server; a caller's own net/http
// client that follows one fails in netTransport.roundTrip).
func redirected(resp *http.Response) error {
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		loc, err := resp.Location()
		if err != nil {
			return violationf("server answered %d redirect without a usable Location; not followed", resp.StatusCode)
		}
		return violationf("server answered %d redirect to %s; not followed", resp.StatusCode, clip(loc.String()))
	}
	return nil
}

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

// httpError is the error of a response with an error status: its status and the start of
// its body on one line.
func httpError(status int, body []byte) error {
	if s := strings.TrimSpace(string(body)); s != "" {
		return fmt.Errorf("HTTP %d: %s", status, clip(s))
	}
	return fmt.Errorf("HTTP %d", status)
}

// clip shortens a server's text for an error message and makes it printable: invalid UTF-8
// and control characters (NUL, ESC, newlines, ...) become '?', so a hostile answer cannot
// drive a terminal that shows the cell's reasons.
func clip(s string) string {
	cut := len(s) > 300
	if cut {
		s = s[:300]
	}
	s = printable(s, false)
	if cut {
		s += "…"
	}
	return s
}

// clipBody keeps the first MaxErrorBody bytes of a server's answer for the record, printable
// as clip makes it but keeping its lines.
func clipBody(b []byte) string {
	if len(b) > MaxErrorBody {
		b = b[:MaxErrorBody]
	}
	return printable(string(b), true)
}

func printable(s string, lines bool) string {
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || unicode.IsControl(r) && !(lines && (r == '\n' || r == '\t')) {
			return '?'
		}
		return r
	}, s) // an invalid byte reads as utf8.RuneError
}
