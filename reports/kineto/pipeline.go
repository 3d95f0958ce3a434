package kineto

import (
	"context"
	"io"
)

// The two-stage pipeline: one goroutine decompresses (when the input is gzip) and splits the
// document into element byte ranges, copying them into batches; the calling goroutine parses and
// stores the elements. On two free cores the splitter and gzip inflate hide behind the parse,
// so .json.gz costs what .json costs. Batches are recycled, so memory stays bounded
// (pipelineDepth batches of about batchBytes each).

const (
	batchBytes    = 256 << 10
	pipelineDepth = 4
)

// itemKind tells what a batch item is.
type itemKind uint8

const (
	itemEvent itemKind = iota
	itemTop
	itemMalformed
)

type batchItem struct {
	kind     itemKind
	off      int64 // input offset
	lo, hi   int   // element bytes in batch.data
	klo, khi int   // key bytes (itemTop)
}

type batch struct {
	data  []byte
	items []batchItem
}

// collector is the producer-side handler: it copies what the walker finds into batches.
type collector struct {
	ctx  context.Context
	cur  *batch
	out  chan<- *batch
	free chan *batch
	n    int64
}

func (c *collector) next() *batch {
	select {
	case b := <-c.free:
		b.data, b.items = b.data[:0], b.items[:0]
		return b
	default:
		return &batch{data: make([]byte, 0, 64<<10), items: make([]batchItem, 0, 256)}
	}
}

func (c *collector) send() error {
	if c.cur == nil || len(c.cur.items) == 0 {
		return nil
	}
	select {
	case c.out <- c.cur:
	case <-c.ctx.Done():
		return c.ctx.Err()
	}
	c.cur = nil
	return nil
}

func (c *collector) add(kind itemKind, off int64, key, raw []byte) error {
	if c.cur == nil {
		c.cur = c.next()
	}
	b := c.cur
	it := batchItem{kind: kind, off: off}
	if key != nil {
		it.klo = len(b.data)
		b.data = append(b.data, key...)
		it.khi = len(b.data)
	}
	it.lo = len(b.data)
	b.data = append(b.data, raw...)
	it.hi = len(b.data)
	b.items = append(b.items, it)
	if len(b.data) >= batchBytes {
		return c.send()
	}
	return nil
}

func (c *collector) top(key, raw []byte, off int64) { c.add(itemTop, off, key, raw) }
func (c *collector) event(raw []byte, off int64) error {
	c.n++
	return c.add(itemEvent, off, nil, raw)
}
func (c *collector) malformed(off int64) { c.add(itemMalformed, off, nil, nil) }
func (c *collector) startEvents()        {}
func (c *collector) endEvents() error    { return nil }

// pipelinedWalk runs walk over src on a second goroutine and feeds h on this one. It returns the
// walker's error and the scanner (for readErr and offsets) once everything sent was consumed.
func pipelinedWalk(ctx context.Context, src io.Reader, h handler) (*scanner, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := make(chan *batch, pipelineDepth)
	free := make(chan *batch, pipelineDepth+1)
	s := newScanner(src)
	var werr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		c := &collector{ctx: ctx, out: out, free: free}
		werr = walk(s, c, nil)
		if err := c.send(); err != nil && werr == nil {
			werr = err
		}
	}()
	var herr error
	for b := range out {
		if herr == nil {
			for _, it := range b.items {
				switch it.kind {
				case itemEvent:
					herr = h.event(b.data[it.lo:it.hi], it.off)
				case itemTop:
					h.top(b.data[it.klo:it.khi], b.data[it.lo:it.hi], it.off)
				case itemMalformed:
					h.malformed(it.off)
				}
				if herr != nil {
					cancel() // stop the producer; keep draining so it can exit
					break
				}
			}
		}
		select {
		case free <- b:
		default:
		}
	}
	<-done
	if herr != nil {
		return s, herr
	}
	return s, werr
}
