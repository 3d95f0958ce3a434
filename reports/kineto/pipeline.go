package kineto

import (
	"context"
	"io"
	"slices"
)

// The two-stage pipeline: one goroutine decompresses (when the input is gzip) and splits the
// document into element byte ranges, copying them into batches; the calling goroutine parses and
// stores the elements. On two free cores the splitter and gzip inflate hide behind the parse,
// so .json.gz costs what .json costs. Batches are recycled, so memory stays bounded
// (pipelineDepth batches of about batchBytes each).
//
// The parse costs more than the split, so the consumer would be the slower stage. While the
// consumer has a batch queued, the splitter decodes the plain events of its read buffer in
// place (bulk: fastEventAt finds an element's end as it decodes it, so such an event is
// scanned once, not split and then parsed) and sends the decoded fields along; the consumer
// then only stores them. While the consumer waits, the splitter only splits. When it finds
// the queue full, it runs the fast event scanner over what is left of the batch it holds
// (instead of only waiting). The work divides itself between the two cores by whoever is
// free, and the result is the same whichever goroutine scanned an event, since fastEvent
// keeps no state.

const (
	batchBytes    = 256 << 10
	batchSlack    = 64 << 10         // the last element's room past batchBytes before its append copies
	batchItems    = batchBytes / 200 // a batch's events, with room: a decode trace's average 250 bytes
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

// preparse runs the fast event scanner over every event of the batch that bulk did not
// decode already.
func (b *batch) preparse() {
	b.evs = slices.Grow(b.evs, len(b.items)-len(b.evs))[:len(b.items)]
	for i := range b.items {
		it := &b.items[i]
		if it.kind != itemEvent || it.pre != preNone {
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
	// fast allows pre-parsing with fastEvent (and bulk); always pre-parses every batch and
	// lets bulk work on any amount of buffered input (tests).
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
		return &batch{data: make([]byte, 0, batchBytes+batchSlack), items: make([]batchItem, 0, batchItems),
			evs: make([]rawEvent, 0, batchItems)}
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

// bulk decodes, in place, the whole events at the front of the scanner's buffer: it copies
// the buffered bytes into the current batch and runs fastEventAt over the copy, one element
// after another, each followed by its comma; the first element it cannot take that way (one
// the buffer holds only part of, one fastEventAt declines, the last one, anything unusual)
// is left to walkArray's ordinary path, which resumes where bulk stopped, after a comma. So
// the events are scanned once (by fastEventAt, which finds their end as it decodes them)
// instead of twice, and the consumer only stores them. It returns whether it took any.
func (c *collector) bulk(s *scanner) (bool, error) {
	avail := s.buf[s.pos:s.end]
	least := bulkMin
	if c.always {
		least = 1 // tests: small inputs too
	}
	if !c.fast || len(avail) < least {
		return false, nil
	}
	if len(c.out) == 0 && !c.always {
		// The consumer waits for input: only split (the ordinary path, about half the
		// cost per byte) and let it decode. Decoding everything here made this goroutine
		// the slower one (about 1.0 s against the consumer's 0.7 s of a 500 MB trace).
		return false, nil
	}
	if c.cur == nil {
		c.cur = c.next()
	}
	b := c.cur
	room := batchBytes + batchSlack - len(b.data)
	if room < least {
		return false, nil
	}
	base := len(b.data)
	b.data = append(b.data, avail[:min(len(avail), room)]...)
	data := b.data[base:]
	b.evs = slices.Grow(b.evs, len(b.items)-len(b.evs))[:len(b.items)]
	done := 0 // bytes of data taken: up to and including the last taken element's comma
	for {
		j := done
		for j < len(data) && wsByte[data[j]] {
			j++
		}
		if j >= len(data) || data[j] != '{' {
			break
		}
		b.evs = append(b.evs, rawEvent{})
		n, ok := fastEventAt(data[j:], &b.evs[len(b.evs)-1])
		if !ok {
			b.evs = b.evs[:len(b.evs)-1]
			break
		}
		k := j + n
		for k < len(data) && wsByte[data[k]] {
			k++
		}
		if k >= len(data) || data[k] != ',' {
			b.evs = b.evs[:len(b.evs)-1]
			break
		}
		b.items = append(b.items, batchItem{kind: itemEvent, off: s.base + int64(s.pos+j), lo: base + j, hi: base + j + n, pre: preOK})
		c.n++
		done = k + 1
	}
	b.data = b.data[:base+done]
	s.pos += done
	if len(b.data) >= batchBytes {
		if err := c.send(); err != nil {
			return done > 0, err
		}
	}
	return done > 0, nil
}

// bulkMin is the least buffered input bulk works on; less is left to the ordinary path.
const bulkMin = 4 << 10

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
