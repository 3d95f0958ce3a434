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
	rowids []int64
	vals   []sql.NullInt64 // len(rowids) rows of ncols columns
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
		send := func(b *kBatch) error {
			select {
			case out <- b:
				return nil
			case <-sctx.Done():
				return sctx.Err()
			}
		}
		b := get()
		ts := &tableScan{s: p.r.file, rowidAt: -1, ints: make([]sql.NullInt64, ncols)}
		ts.fnRow = func(rowid int64, v []sql.NullInt64) error {
			b.rowids = append(b.rowids, rowid)
			b.vals = append(b.vals, v...)
			if len(b.rowids) == size {
				if err := send(b); err != nil {
					return err
				}
				b = get()
			}
			return nil
		}
		err := ts.run(sctx, s.kernels.root, s.kernels.cols)
		if err == nil && len(b.rowids) > 0 {
			err = send(b)
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
