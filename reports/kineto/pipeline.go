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
//
// The parse costs more than the split, so the consumer is usually the slower stage. When the
// splitter finds the queue full, it runs the fast event scanner over the batch it holds
// (instead of only waiting) and sends the decoded fields along; the consumer then only stores
// them. The work divides itself between the two cores by whoever is free, and the result is
// the same whichever goroutine scanned an event, since fastEvent keeps no state.

const (
	batchBytes    = 256 << 10
	batchSlack    = 64 << 10 // the last element's room past batchBytes before its append copies
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
	pre      uint8 // for itemEvent: preNone, preOK (evs holds the fields), preDeclined
}

const (
	preNone uint8 = iota
	preOK
	preDeclined
)

type batch struct {
	data  []byte
	items []batchItem
	evs   []rawEvent // per item when the splitter pre-parsed the batch; aliases data
}

// preparse runs the fast event scanner over every event of the batch.
func (b *batch) preparse() {
	if cap(b.evs) < len(b.items) {
		b.evs = make([]rawEvent, len(b.items))
	}
	b.evs = b.evs[:len(b.items)]
	for i := range b.items {
		it := &b.items[i]
		if it.kind != itemEvent {
			continue
		}
		if fastEvent(b.data[it.lo:it.hi], &b.evs[i]) {
			it.pre = preOK
		} else {
			it.pre = preDeclined
		}
	}
}

// collector is the producer-side handler: it copies what the walker finds into batches.
type collector struct {
	ctx  context.Context
	cur  *batch
	out  chan<- *batch
	free chan *batch
	n    int64
	// fast allows pre-parsing with fastEvent; always pre-parses every batch (tests).
	fast, always bool
}

func (c *collector) next() *batch {
	select {
	case b := <-c.free:
		b.data, b.items, b.evs = b.data[:0], b.items[:0], b.evs[:0]
		return b
	default:
		// Room for a full batch and the element that crosses batchBytes, so that filling it
		// never copies (growing from a small buffer cost a tenth of the read's CPU).
		return &batch{data: make([]byte, 0, batchBytes+batchSlack), items: make([]batchItem, 0, batchBytes/256)}
	}
}

func (c *collector) send() error {
	if c.cur == nil || len(c.cur.items) == 0 {
		return nil
	}
	if c.fast && !c.always {
		select {
		case c.out <- c.cur:
			c.cur = nil
			return nil
		default: // the consumer is behind: help it
		}
	}
	if c.fast {
		c.cur.preparse()
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
// fast lets the producer pre-parse batches when the consumer is behind (h must then be a
// *decoder); always makes it pre-parse every batch.
func pipelinedWalk(ctx context.Context, src io.Reader, h handler, fast, always bool) (*scanner, error) {
	d, _ := h.(*decoder)
	fast = fast && d != nil
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
		c := &collector{ctx: ctx, out: out, free: free, fast: fast, always: always}
		werr = walk(s, c, nil)
		if err := c.send(); err != nil && werr == nil {
			werr = err
		}
	}()
	var herr error
	for b := range out {
		if herr == nil {
			for k, it := range b.items {
				switch it.kind {
				case itemEvent:
					switch it.pre {
					case preNone:
						herr = h.event(b.data[it.lo:it.hi], it.off)
					case preOK:
						herr = d.eventPre(b.data[it.lo:it.hi], it.off, &b.evs[k], false)
					default:
						herr = d.eventPre(b.data[it.lo:it.hi], it.off, nil, true)
					}
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
