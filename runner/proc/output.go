package proc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// chunkSize is how much of a pipe is read at once; up to queueLen chunks
// may wait for the line dispatcher and as many for the log writer. Together
// they bound the memory the output path holds (about 8 MiB plus one pending
// line per stream) whatever the child prints.
const (
	chunkSize = 256 << 10
	queueLen  = 16
)

// After a read shorter than batchMin we wait batchWait before reading again,
// but only when the pipe could be enlarged to pipeSize: 1 ms of output of
// even a very fast child (1 GB/s) still fits in the pipe, so the child never
// blocks on us, and we read it in a few large chunks instead of many small
// ones.
const (
	batchMin  = 64 << 10
	batchWait = time.Millisecond
)

var chunkPool = sync.Pool{New: func() any { b := make([]byte, chunkSize); return &b }}

// output is the pipeline behind the two stream writers. Three stages run in
// parallel so that a fast child is limited by the slowest of them rather
// than by their sum: the pipe readers (os/exec's copy goroutines, one per
// stream, in stream.ReadFrom), one dispatcher that cuts lines and calls
// OnLine (so OnLine always runs on the same goroutine, in arrival order),
// and one log writer.
type output struct {
	onLine func(Line)
	stdout *stream
	stderr *stream
	// file mode: the child writes straight to the log file, and follow
	// reads it back; combined is then the only stream.
	combined   *stream
	followStop chan struct{}
	followDone chan struct{}
	// noMap and busyFollower are Spec's test switches of the follower.
	noMap, busyFollower bool

	// sel narrows OnLine to the lines holding a needle or an escape byte
	// (Spec.Select); nil delivers every line. tail holds the last lines for
	// the catch-up at the end (Spec.Tail).
	sel  *needles
	tail tailRing

	lineQ        chan piece
	dispatchDone chan struct{}
	lines        int // dispatcher (or follower) only, read after it finished

	logW     io.Writer
	stall    time.Duration
	logQ     chan logChunk
	logDone  chan struct{} // writer goroutine finished
	logDead  chan struct{} // closed by failLog: stop queueing
	failed   atomic.Bool
	failOnce sync.Once
	errMu    sync.Mutex
	err      error
	finished bool
}

// piece is one chunk read from a stream (eof: the stream ended).
type piece struct {
	s   *stream
	b   *[]byte
	n   int
	str string // string((*b)[:n]) when there is an OnLine
	eof bool
}

type logChunk struct {
	b *[]byte
	n int
}

// newOutput starts the pipe pipeline: the child's stdout and stderr are
// pipes that os/exec copies into o.stdout and o.stderr.
func newOutput(s Spec, log *slog.Logger) *output {
	o := newLines(s)
	o.logW = s.Log
	o.stdout = &stream{o: o, name: Stdout, limit: MaxLine}
	o.stderr = &stream{o: o, name: Stderr, limit: MaxLine}
	o.lineQ = make(chan piece, queueLen)
	o.dispatchDone = make(chan struct{})
	if o.logW != nil {
		o.logQ = make(chan logChunk, queueLen)
		o.logDone = make(chan struct{})
		o.logDead = make(chan struct{})
		go o.writeLog(log)
	}
	go o.dispatch()
	return o
}

// newLines sets up what both modes share: the selection and the tail.
func newLines(s Spec) *output {
	o := &output{onLine: s.OnLine, stall: s.LogStall}
	if s.OnLine != nil {
		o.sel = newNeedles(s.Select)
		if s.Select != nil && o.sel == nil {
			o.sel = &needles{} // Select set but empty: only escapes and the tail
		}
		if o.sel != nil {
			o.tail.init(s.Tail)
		}
	}
	return o
}

// dispatch is the line stage: lines in arrival order, then the chunk goes
// on to the log. A slow OnLine fills lineQ and so, in the end, slows the
// child down; a slow log writer does not hold up OnLine beyond LogStall.
func (o *output) dispatch() {
	defer close(o.dispatchDone)
	for pc := range o.lineQ {
		if pc.eof {
			pc.s.flush()
			continue
		}
		pc.s.take((*pc.b)[:pc.n], pc.str)
		o.toLog(pc.b, pc.n)
	}
}

// writeLog is the only goroutine that touches Spec.Log, so a slow disk
// delays the log, not the reading of the pipes (up to the queue and
// LogStall), and a failed write never reaches os/exec, which would close the
// pipe and kill the child with SIGPIPE.
func (o *output) writeLog(log *slog.Logger) {
	defer close(o.logDone)
	for c := range o.logQ {
		if !o.failed.Load() {
			n, err := o.logW.Write((*c.b)[:c.n])
			if err == nil && n < c.n {
				err = io.ErrShortWrite
			}
			if err != nil {
				o.failLog(fmt.Errorf("write log: %w; the rest of the output is missing from the log", err))
				log.Warn("writing the log failed; the child keeps running", "err", err)
			}
		}
		chunkPool.Put(c.b)
	}
}

func (o *output) failLog(err error) {
	o.failOnce.Do(func() {
		o.errMu.Lock()
		o.err = err
		o.errMu.Unlock()
		o.failed.Store(true)
		if o.logDead != nil { // pipe mode's log writer only
			close(o.logDead)
		}
	})
}

func (o *output) logErr() error {
	o.errMu.Lock()
	defer o.errMu.Unlock()
	return o.err
}

// toLog hands a chunk to the log writer, taking ownership of b.
func (o *output) toLog(b *[]byte, n int) {
	if o.logW == nil || o.failed.Load() {
		chunkPool.Put(b)
		return
	}
	c := logChunk{b, n}
	select {
	case o.logQ <- c:
		return
	default:
	}
	t := time.NewTimer(o.stall)
	defer t.Stop()
	select {
	case o.logQ <- c:
	case <-o.logDead:
		chunkPool.Put(b)
	case <-t.C:
		o.failLog(fmt.Errorf("log writer blocked for more than %s; the rest of the output is missing from the log", o.stall))
		chunkPool.Put(b)
	}
}

// finish delivers unterminated last lines and waits (up to LogStall) for
// the log writer to drain. It must run after both streams stopped.
func (o *output) finish() {
	if o.finished {
		return
	}
	o.finished = true
	if o.followStop != nil {
		close(o.followStop)
		<-o.followDone
	} else {
		close(o.lineQ)
		<-o.dispatchDone
	}
	for _, s := range []*stream{o.stdout, o.stderr, o.combined} {
		if s != nil {
			s.flush()
		}
	}
	o.tail.catchUp(o.onLine)
	if o.logW == nil {
		return
	}
	close(o.logQ)
	t := time.NewTimer(o.stall)
	defer t.Stop()
	select {
	case <-o.logDone:
	case <-t.C:
		o.failLog(fmt.Errorf("log writer still blocked %s after the process ended; the log is incomplete", o.stall))
	}
}

// stream is what os/exec copies one of the child's pipes into. It
// implements io.ReaderFrom so that io.Copy hands it the pipe itself: we read
// in large chunks straight into pooled buffers that then go to the
// dispatcher and the log without another copy. pend and afterCR belong to
// the dispatcher.
type stream struct {
	o       *output
	name    string
	limit   int    // MaxLine; smaller in tests
	pend    []byte // unterminated line so far, at most limit
	afterCR bool   // last byte seen was '\r': a following '\n' is not a new line
}

// ReadFrom never returns an error of its own: an error here would make
// os/exec close the pipe, and the child would die of SIGPIPE.
func (s *stream) ReadFrom(r io.Reader) (int64, error) {
	big := growPipe(r)
	var total int64
	defer func() { s.o.lineQ <- piece{s: s, eof: true} }()
	for {
		b := chunkPool.Get().(*[]byte)
		n, err := r.Read(*b)
		if n > 0 {
			total += int64(n)
			s.o.lineQ <- piece{s: s, b: b, n: n, str: s.o.asString((*b)[:n])}
		} else {
			chunkPool.Put(b)
		}
		if err != nil {
			if err == io.EOF || errors.Is(err, os.ErrClosed) {
				return total, nil
			}
			return total, err
		}
		if big && n < batchMin {
			// A child that writes in small pieces (bufio's 4 KiB) would
			// otherwise wake us, and pay for the wake-up, on every write.
			// The enlarged pipe holds what it writes meanwhile; a line
			// reaches OnLine at most batchWait late.
			time.Sleep(batchWait)
		}
	}
}

// Write lets stream be used as a plain io.Writer too.
func (s *stream) Write(p []byte) (int, error) {
	for q := p; len(q) > 0; {
		b := chunkPool.Get().(*[]byte)
		n := copy(*b, q)
		q = q[n:]
		s.o.lineQ <- piece{s: s, b: b, n: n, str: s.o.asString((*b)[:n])}
	}
	return len(p), nil
}

// asString copies a chunk into a string for its lines to share (one
// allocation per chunk instead of one per line), or returns "" when nobody
// receives lines. It runs on the reader, off the dispatcher's path.
func (o *output) asString(p []byte) string {
	if o.onLine == nil || o.sel != nil {
		return "" // selective: only the few selected lines become strings
	}
	return string(p)
}

// consume splits one chunk into lines (dispatcher only). ps is string(p)
// when there is an OnLine to feed: lines inside the chunk become substrings
// of it.
func (s *stream) consume(p []byte, ps string) {
	// nl and cr: index of the next '\n' / '\r' at or after off, len(p) if
	// none. Each is searched again only once passed, so a log without '\r'
	// costs one scan per chunk for it, and a '\r' flood (a progress bar)
	// does not rescan the rest of the chunk for '\n' at every update.
	off, nl, cr := 0, -1, -1
	for off < len(p) {
		if s.afterCR {
			s.afterCR = false
			if p[off] == '\n' {
				off++
				continue
			}
		}
		if nl < off {
			nl = nextByte(p, off, '\n')
		}
		if cr < off {
			cr = nextByte(p, off, '\r')
		}
		end, isCR := nl, false
		if cr < nl {
			end, isCR = cr, true
		}
		if end == len(p) {
			s.appendPending(p[off:])
			return
		}
		var str string
		if ps != "" {
			str = ps[off:end]
		}
		s.endLine(p[off:end], str, isCR)
		off = end + 1
		s.afterCR = isCR
	}
}

func nextByte(p []byte, off int, c byte) int {
	if i := bytes.IndexByte(p[off:], c); i >= 0 {
		return off + i
	}
	return len(p)
}

// appendPending adds bytes to the unterminated line, delivering limit-sized
// pieces as Partial lines once more bytes follow them.
func (s *stream) appendPending(b []byte) {
	for len(b) > 0 {
		room := s.limit - len(s.pend)
		if len(b) <= room {
			s.pend = append(s.pend, b...)
			return
		}
		s.pend = append(s.pend, b[:room]...)
		b = b[room:]
		s.deliver(s.pend, "", true)
		// The next piece starts with this one's last bytes (see Overlap).
		s.pend = s.pend[:copy(s.pend, s.pend[len(s.pend)-s.overlap():])]
	}
}

// overlap is how many bytes a continuation piece repeats of the piece
// before it: Overlap, or less when a test's limit is smaller.
func (s *stream) overlap() int { return min(Overlap, s.limit/2) }

// endLine finishes a line whose last bytes are seg (str is seg as a string,
// or "" to allocate one if needed). An empty line ended by '\r' is dropped:
// it is the '\r' a progress bar prints before each update and carries
// nothing.
func (s *stream) endLine(seg []byte, str string, cr bool) {
	if len(s.pend) == 0 {
		if len(seg) == 0 && cr {
			return
		}
		next := s.limit - s.overlap() // where the next piece starts
		for len(seg) > s.limit {
			piece := ""
			if str != "" {
				piece, str = str[:s.limit], str[next:]
			}
			s.deliver(seg[:s.limit], piece, true)
			seg = seg[next:]
		}
		s.deliver(seg, str, false)
		return
	}
	s.appendPending(seg)
	s.deliver(s.pend, "", false)
	if cap(s.pend) > 64<<10 {
		s.pend = nil // do not keep a megabyte per stream after one long line
	} else {
		s.pend = s.pend[:0]
	}
}

// flush delivers an unterminated last line (dispatcher only, or after it
// stopped).
func (s *stream) flush() {
	if len(s.pend) > 0 {
		s.deliver(s.pend, "", false)
		s.pend = nil
	}
	s.afterCR = false
}

// deliver counts a line and hands it to OnLine; text is the line, str the
// same as a string when the caller already has one.
func (s *stream) deliver(text []byte, str string, partial bool) {
	s.o.lines++
	if s.o.onLine == nil {
		return
	}
	if s.o.sel != nil {
		picked := s.o.sel.selects(text)
		s.o.tail.push(s.o.lines, s.name, text, partial, picked)
		if !picked {
			return
		}
	}
	if str == "" && len(text) > 0 {
		str = string(text)
	}
	s.o.onLine(Line{No: s.o.lines, Stream: s.name, Text: str, Partial: partial})
}
