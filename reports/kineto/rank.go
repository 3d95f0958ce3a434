package kineto

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/valyala/fastjson"

	"github.com/sglprof/runner/plans/infile"
)

// ReadRankFile is ReadRank of the trace file at path (plain or gzip-compressed).
func ReadRankFile(ctx context.Context, path string) (rank int, ok bool, err error) {
	f, err := infile.Open(path)
	if err != nil {
		return -1, false, fmt.Errorf("open Kineto trace: %w", err)
	}
	defer f.Close()
	return ReadRank(ctx, f)
}

// ReadRank returns the trace's distributedInfo.rank, the rank the PyTorch profiler records
// for a distributed job, without reading the trace: Kineto writes distributedInfo in the header,
// before traceEvents, so reading stops at the first event (a trace that puts it after its events
// is treated as having none). ok is false when the header has no rank; err is set only when the
// input cannot be read at all.
func ReadRank(ctx context.Context, r io.Reader) (rank int, ok bool, err error) {
	in, closeFn, err := openMaybeGzip(r)
	if err != nil {
		return -1, false, fmt.Errorf("read Kineto trace header: %w", err)
	}
	defer closeFn()
	h := &rankHandler{ctx: ctx, rank: -1}
	werr := walk(newScanner(in), h, nil)
	if errors.Is(werr, context.Canceled) || errors.Is(werr, context.DeadlineExceeded) {
		return -1, false, werr
	}
	// errStopRank, a syntax error or the end of the document: the header is what was read.
	return h.rank, h.ok, nil
}

// errStopRank ends the walk at the first event: the header is over.
var errStopRank = errors.New("kineto: header read")

// rankHandler is the walk handler of ReadRank: it reads distributedInfo and stops at the
// first event.
type rankHandler struct {
	ctx  context.Context
	p    fastjson.Parser
	rank int
	ok   bool
}

func (h *rankHandler) top(key, raw []byte, _ int64) {
	if string(key) != "distributedInfo" {
		return
	}
	v, err := h.p.ParseBytes(raw)
	if err != nil || v.Get("rank") == nil {
		return
	}
	if r, err := v.Get("rank").Int(); err == nil && r >= 0 {
		h.rank, h.ok = r, true
	}
}

func (h *rankHandler) event([]byte, int64) error {
	if err := h.ctx.Err(); err != nil {
		return err
	}
	return errStopRank
}

func (h *rankHandler) malformed(int64)  {}
func (h *rankHandler) startEvents()     {}
func (h *rankHandler) endEvents() error { return nil }
