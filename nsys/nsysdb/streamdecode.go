package nsysdb

import (
	"context"
	"database/sql"

	"github.com/sglprof/runner/reports/trace"
)

// A pass has three goroutines where the process may use two CPUs: the runtime scan
// (scanRuntime), the kernel table's page reads and record decoding (kernelsDecoded's
// producer), and the consumer, which takes the decoded kernel rows in table order (names, the
// join, the reorder window, the caller's fn). Before, the consumer decoded the kernel pages
// itself and was the pass's critical path: about 55 % of the CPU of the streamed triage of a
// 1M-kernel export of four processes with NVTX ranges, against 35 % for the runtime scan, so
// one of two cores idled for part of the pass. The producer hands over decoded integers only;
// everything that touches the reader's state (names, processes) stays on the consumer, so the
// consumer sees the rows exactly as the one-goroutine scan gave them, errors included: the
// scan's error is returned only after every row before it was consumed, and a consumer error
// stops the scan.

// kernelBatch is how many kernel rows one hand-over carries by default (streamLimits.kbatch;
// about 150 KB of columns with the nine a kernel row may have): a thousand hand-overs at 1M
// kernels.
const kernelBatch = 1024

// kernelBatches is how many hand-overs the producer may have decoded ahead of the consumer.
const kernelBatches = 8

// kBatch is a hand-over of decoded kernel rows: their rowids and, per row, the plan's columns.
type kBatch struct {
	_      cacheLinePad // its lengths are written per row by the decoding goroutine
	rowids []int64
	vals   []sql.NullInt64 // len(rowids) rows of ncols columns
	_      cacheLinePad
}

// handOver sends batch b to the consuming goroutine, or returns ctx's error once the pass is
// stopped (the consumer failed or the caller cancelled) so the producer never blocks on a
// consumer that has gone. The three producers of a pass (runtime calls, kernel rows, NVTX
// rows) hand over through it.
func handOver[B any](ctx context.Context, out chan<- B, b B) error {
	select {
	case out <- b:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// kernelsDecoded scans the kernel table on a goroutine of its own and takes its rows into the
// pass (pass.kernel) on this one, in table order. It returns the first error in row order:
// the consumer's, or the scan's (errFileLayout, ctx's) once the rows before it are taken.
func (p *pass) kernelsDecoded(ctx context.Context) error {
	s := p.s
	ncols, size := len(s.kernels.cols), p.lim.kbatch
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := make(chan *kBatch, kernelBatches)
	spare := make(chan *kBatch, kernelBatches+2)
	var scanErr error // written before out is closed
	go func() {
		defer close(out)
		get := func() *kBatch {
			select {
			case b := <-spare:
				b.rowids, b.vals = b.rowids[:0], b.vals[:0]
				return b
			default:
				// A new hand-over's columns (150 KB by default) are mapped in at once rather
				// than a page fault per page as the rows go in.
				b := &kBatch{rowids: make([]int64, 0, size), vals: make([]sql.NullInt64, 0, size*ncols)}
				trace.Prefault(b.vals, 0, cap(b.vals))
				return b
			}
		}
		send := func(b *kBatch) error { return handOver(sctx, out, b) }
		b := get()
		// The scan decodes each row straight into the batch's next row (ts.ints points
		// there; recordInts writes every column of it), so the row is not copied again: the
		// batch's length takes it in once decoded.
		ts := &tableScan{s: p.r.file, rowidAt: -1, ints: b.vals[:ncols:ncols]}
		ts.fnRow = func(rowid int64, _ []sql.NullInt64) error {
			b.rowids = append(b.rowids, rowid)
			n := len(b.vals) + ncols
			b.vals = b.vals[:n]
			if len(b.rowids) == size {
				if err := send(b); err != nil {
					return err
				}
				b = get()
				n = 0
			}
			ts.ints = b.vals[n : n+ncols : n+ncols]
			return nil
		}
		err := ts.run(sctx, s.kernels.root, s.kernels.cols)
		// The rows before an error are taken before it, as on one goroutine.
		if len(b.rowids) > 0 && sctx.Err() == nil {
			if serr := send(b); serr != nil && err == nil {
				err = serr
			}
		}
		scanErr = err
	}()
	for b := range out {
		for i, rowid := range b.rowids {
			k := i * ncols
			if err := p.kernel(rowid, b.vals[k:k+ncols:k+ncols]); err != nil {
				cancel()
				for range out {
				}
				return err
			}
		}
		select {
		case spare <- b:
		default:
		}
	}
	return scanErr
}

// nvRow is one row of the NVTX table as nvtxRows takes it: the integer columns by position
// (the text column's, 3, unused) and the text.
type nvRow struct {
	ints [7]sql.NullInt64
	text sql.NullString
}

// nvtxBatch is how many NVTX rows one hand-over of nvtxAhead carries (about 40 KB; a variable
// so that tests can make a small table span several).
var nvtxBatch = 256

// nvtxAhead is nvtxRows' direct scan of plan p with the page reads and record decoding (conv)
// on a goroutine of their own and take, which builds the index, on this one, row by row in
// table order. A streamed pass reads the NVTX table whole at open, before its goroutines
// start, so that read is on the critical path with one of two cores idle (about 24 ms of a 1M
// four-process export's triage, half of it reading and decoding). Errors come in row order, as
// from the one-goroutine scan: conv's or the scan's once the rows before it are taken, take's
// at once (the scan is then stopped).
func (r *reader) nvtxAhead(p *directPlan, conv func([]sqlValue, *nvRow) error, take func(*nvRow) error) error {
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	out := make(chan []nvRow, 4)
	spare := make(chan []nvRow, 6)
	var scanErr error // written before out is closed
	go func() {
		defer close(out)
		get := func() []nvRow {
			select {
			case b := <-spare:
				return b[:0]
			default:
				return make([]nvRow, 0, nvtxBatch)
			}
		}
		send := func(b []nvRow) error { return handOver(ctx, out, b) }
		b := get()
		err := r.file.scan(ctx, p.root, p.cols, -1, func(_ int64, v []sqlValue) error {
			b = append(b, nvRow{})
			if err := conv(v, &b[len(b)-1]); err != nil {
				b = b[:len(b)-1]
				return err
			}
			if len(b) == nvtxBatch {
				if err := send(b); err != nil {
					return err
				}
				b = get()
			}
			return nil
		})
		// The rows before an error are taken before it.
		if len(b) > 0 && ctx.Err() == nil {
			if serr := send(b); serr != nil && err == nil {
				err = serr
			}
		}
		scanErr = err
	}()
	for b := range out {
		for i := range b {
			if err := take(&b[i]); err != nil {
				cancel()
				for range out {
				}
				return err
			}
		}
		clear(b) // the texts
		select {
		case spare <- b:
		default:
		}
	}
	return scanErr
}
