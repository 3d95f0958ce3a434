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
	h, err := ReadHeader(ctx, r)
	if err != nil {
		return -1, false, err
	}
	return h.Rank, h.Rank >= 0, nil
}

// Header is what a trace's distributedInfo says about its job; -1 marks an absent field.
type Header struct {
	Rank, WorldSize int
}

// ReadHeaderFile is ReadHeader of the trace file at path (plain or gzip-compressed).
func ReadHeaderFile(ctx context.Context, path string) (Header, error) {
	f, err := infile.Open(path)
	if err != nil {
		return Header{-1, -1}, fmt.Errorf("open Kineto trace: %w", err)
	}
	defer f.Close()
	return ReadHeader(ctx, f)
}

// ReadHeader returns the trace's distributedInfo rank and world_size the way ReadRank does:
// from the header only, stopping at the first event. err is set only when the input cannot
// be read at all.
func ReadHeader(ctx context.Context, r io.Reader) (Header, error) {
	in, closeFn, err := openMaybeGzip(r, 0)
	if err != nil {
		return Header{-1, -1}, fmt.Errorf("read Kineto trace header: %w", err)
	}
	defer closeFn()
	h := &rankHandler{ctx: ctx, rank: -1, world: -1}
	werr := walk(newScanner(in), h, nil)
	if errors.Is(werr, context.Canceled) || errors.Is(werr, context.DeadlineExceeded) {
		return Header{-1, -1}, werr
	}
	// errStopRank, a syntax error or the end of the document: the header is what was read.
	return Header{Rank: h.rank, WorldSize: h.world}, nil
}

// errStopRank ends the walk at the first event: the header is over.
var errStopRank = errors.New("kineto: header read")

// rankHandler is the walk handler of ReadRank: it reads distributedInfo and stops at the
// first event.
type rankHandler struct {
	ctx   context.Context
	p     fastjson.Parser
	rank  int
	world int
}

func (h *rankHandler) top(key, raw []byte, _ int64) {
	if string(key) != "distributedInfo" {
		return
	}
	v, err := h.p.ParseBytes(raw)
	if err != nil {
		return
	}
	if x := v.Get("rank"); x != nil {
		if r, err := x.Int(); err == nil && r >= 0 {
			h.rank = r
		}
	}
	if x := v.Get("world_size"); x != nil {
		if w, err := x.Int(); err == nil && w > 0 {
			h.world = w
		}
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
