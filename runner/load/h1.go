package load

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"
)

// h1 is the client of a plain-HTTP load run: every worker owns one keep-alive HTTP/1.1
// connection and writes its request and reads the response on its own goroutine.
//
// Why not net/http's Transport: against a local handler, a Transport round trip hands the
// request to the connection's writeLoop goroutine and the response back from its readLoop
// goroutine. With 64 requests finishing within the same millisecond on 2 CPUs, those
// hand-offs (and the Transport's allocations per request) queue behind each other, and the
// client's p99 overhead was about twice this client's (BenchmarkClientOverheadRawServer*; the
// figures are in docs/performance.md). Responses are
// still parsed by net/http (http.ReadResponse), so status lines, Content-Length, chunked
// bodies and Connection: close behave as they do there.
type h1 struct {
	addr   string // host:port to dial
	host   string // Host header
	dialer net.Dialer
}

// newH1 returns the direct client for base, or nil when base is not plain http (https and
// anything unusual go through net/http).
func newH1(base string) *h1 {
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "http" || u.Host == "" || u.User != nil {
		return nil
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	return &h1{addr: addr, host: u.Host, dialer: net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}}
}

// h1conn is one worker's connection.
type h1conn struct {
	c      net.Conn
	lim    *boundedReader // c, as br reads it
	br     *bufio.Reader
	bw     *bufio.Writer
	reused bool // it has carried a response: the server may have closed it while idle
}

func (h *h1) dial(ctx context.Context) (*h1conn, error) {
	c, err := h.dialer.DialContext(ctx, "tcp", h.addr)
	if err != nil {
		return nil, err
	}
	lim := &boundedReader{r: c, left: MaxResponseHeader, err: errHeaderTooLong}
	return &h1conn{c: c, lim: lim, br: bufio.NewReaderSize(lim, 16<<10), bw: bufio.NewWriterSize(c, 16<<10)}, nil
}

// boundedReader reads the connection under a budget, as net/http's Transport bounds a
// response's headers: http.ReadResponse reads a status line and headers of any length (and a
// chunked body's trailers), so without it a server's endless header line would be held whole.
// The budget counts bytes off the wire, which br may have read ahead by up to its size.
type boundedReader struct {
	r    io.Reader
	left int64
	err  error // returned once the budget is spent
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, b.err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

// limit sets the budget of what follows.
func (b *boundedReader) limit(n int64, err error) { b.left, b.err = n, err }

var (
	errHeaderTooLong = fmt.Errorf("server sent response headers longer than %d MiB; not read further", MaxResponseHeader>>20)
	errBodyTooLong   = violationf("server sent more than %d MiB after the headers of one response (body, chunk framing, trailers); not read further", (MaxResponseBody+MaxResponseHeader)>>20)
)

// preconnect dials the workers' connections in parallel before the measured clock starts, so
// that no measured request pays for a TCP handshake (64 handshakes at once put milliseconds into
// the first wave of requests; docs/performance.md). A failed dial is left to the first request, which records it.
func (h *h1) preconnect(ctx context.Context, ws []*worker) {
	var wg sync.WaitGroup
	for _, w := range ws {
		if w.conn != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c, err := h.dial(ctx); err == nil {
				w.conn = c
			}
		}()
	}
	wg.Wait()
}

// errRetry marks a failure on a reused connection before any response byte arrived: the
// server closed the idle connection, and the request is sent again on a fresh one (what
// net/http's Transport does too).
var errRetry = errors.New("connection closed by the server before the response")

// roundTrip sends one request on w's connection (dialling one when needed) and returns the
// response with its body open (h1body): the connection is kept for the next request once
// the body has been read to its end, and closed otherwise.
func (h *h1) roundTrip(ctx context.Context, w *worker, method, path string, body []byte, stream bool) (*http.Response, error) {
	if method == "" {
		method = "GET" // as net/http reads an empty method
	}
	if path == "" {
		path = "/"
	}
	for attempt := 0; ; attempt++ {
		if w.conn == nil {
			c, err := h.dial(ctx)
			if err != nil {
				return nil, h.wrap(method, path, ctx, err)
			}
			w.conn = c
		}
		resp, err := h.once(ctx, w, method, path, body, stream)
		if err == nil {
			return resp, nil
		}
		w.close()
		if errors.Is(err, errRetry) && attempt == 0 && ctx.Err() == nil {
			continue
		}
		return nil, h.wrap(method, path, ctx, err)
	}
}

// wrap words an error as net/http's client does ("Post \"url\": ..."), with the context's
// error when the request was cancelled or timed out.
func (h *h1) wrap(method, path string, ctx context.Context, err error) error {
	m := method[:1] + toLower(method[1:])
	return fmt.Errorf("%s %q: %w", m, "http://"+h.host+path, ctxErr(ctx, err))
}

// ctxErr is the context's error when the request was cancelled or timed out, else err.
func ctxErr(ctx context.Context, err error) error {
	if ce := ctx.Err(); ce != nil && !errors.Is(err, ce) {
		return ce
	} else if _, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) {
		// The connection's deadline is the request's: it can fire before ctx's own timer.
		return context.DeadlineExceeded
	}
	return err
}

func toLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// aLongTimeAgo is a deadline that makes blocked reads and writes return at once.
var aLongTimeAgo = time.Unix(1, 0)

func (h *h1) once(ctx context.Context, w *worker, method, path string, body []byte, stream bool) (*http.Response, error) {
	cn := w.conn
	dl, _ := ctx.Deadline()
	if err := cn.c.SetDeadline(dl); err != nil {
		return nil, err
	}
	// Cancelling the request unblocks its reads and writes, the body's included: the stop
	// is the body's Close.
	stop := context.AfterFunc(ctx, func() { cn.c.SetDeadline(aLongTimeAgo) })
	bw := cn.bw
	bw.WriteString(method)
	bw.WriteByte(' ')
	bw.WriteString(path)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(h.host)
	bw.WriteString("\r\nUser-Agent: runner-load\r\n")
	if stream {
		bw.WriteString("Accept: text/event-stream\r\n")
	}
	if body != nil {
		bw.WriteString("Content-Type: application/json\r\nContent-Length: ")
		var nb [20]byte
		bw.Write(strconv.AppendInt(nb[:0], int64(len(body)), 10))
		bw.WriteString("\r\n")
	}
	bw.WriteString("\r\n")
	bw.Write(body)
	if err := bw.Flush(); err != nil {
		stop()
		if cn.reused {
			return nil, fmt.Errorf("%w: %v", errRetry, err)
		}
		return nil, err
	}
	// One header budget for the informational responses and the answer together, so an
	// endless run of 103s ends too.
	cn.lim.limit(MaxResponseHeader, errHeaderTooLong)
	if _, err := cn.br.Peek(1); err != nil {
		stop()
		if cn.reused && ctx.Err() == nil && (err == io.EOF || isReset(err)) {
			return nil, fmt.Errorf("%w: %v", errRetry, err)
		}
		return nil, err
	}
	resp, err := http.ReadResponse(cn.br, nil)
	for err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
		resp, err = http.ReadResponse(cn.br, nil) // informational (103 Early Hints): the answer follows
	}
	if err != nil {
		stop()
		if errors.Is(err, errHeaderTooLong) {
			return nil, errHeaderTooLong // as itself: not a closed idle connection to retry
		}
		return nil, err
	}
	if stream {
		// A stream is bounded per line (MaxLine) and by the request's timeout, not in total:
		// /generate repeats the text so far in every event.
		cn.lim.limit(math.MaxInt64, nil)
	} else {
		// The body (readBody stops at MaxResponseBody of it) with its chunk framing and
		// trailers, which net/http reads into memory as it reads headers.
		cn.lim.limit(MaxResponseBody+MaxResponseHeader, errBodyTooLong)
	}
	keep := !resp.Close && resp.StatusCode != http.StatusSwitchingProtocols
	resp.Body = &h1body{rc: resp.Body, ctx: ctx, w: w, cn: cn, keep: keep, stop: stop}
	return resp, nil
}

// h1body is a response body of the own client. A read that fails because the request was
// cancelled or timed out says so (as net/http's body does); its Close keeps the connection for the worker's next request when the body was read to its end
// on a keep-alive connection, and closes it otherwise, before anything else: net/http's body
// would read an unread rest to its end on Close, which a hostile server makes endless.
type h1body struct {
	rc        io.ReadCloser
	ctx       context.Context
	w         *worker
	cn        *h1conn
	keep, eof bool
	stop      func() bool
	closed    bool
}

func (b *h1body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.eof = true
	} else if err != nil {
		var v *violation
		if !errors.As(err, &v) {
			err = ctxErr(b.ctx, err)
		}
	}
	return n, err
}

func (b *h1body) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	b.stop()
	if !b.eof || !b.keep {
		if b.w.conn == b.cn {
			b.w.close()
		} else {
			b.cn.c.Close()
		}
	}
	b.rc.Close()
	if b.eof && b.keep {
		b.cn.reused = true
	}
	return nil
}

// isReset reports a connection reset by the peer.
func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "read"
}
