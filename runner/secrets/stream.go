package secrets

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"

	"github.com/sglprof/runner/plans/infile"
)

// chunk is how much of a stream is redacted at once; maxCarry bounds how far a chunk is
// extended to hold a whole PEM block.
const (
	chunk    = 1 << 20
	maxCarry = 1 << 20
)

// Stream copies in to out, redacting it, for files too big to hold at once (full traces,
// long logs). It works on chunks cut at a line end (or, in a line longer than a chunk, after
// a byte no secret holds: a quote, a comma, a space), extended to hold a PEM block whole.
// Chunks are independent, so with more than one CPU they are redacted side by side (each
// worker a Clone) and written in order; the counts of every worker end up in r.
func (r *Redactor) Stream(out io.Writer, in io.Reader) error {
	return r.stream(out, in, min(runtime.GOMAXPROCS(0), maxStreamWorkers))
}

// stream is Stream on the given number of workers (1: in this goroutine).
func (r *Redactor) stream(out io.Writer, in io.Reader, workers int) error {
	if workers < 2 {
		return r.cutChunks(in, func(b []byte) error {
			r.scratch = r.appendRedacted(r.scratch[:0], b)
			_, err := out.Write(r.scratch)
			return err
		})
	}
	return r.streamParallel(out, in, workers)
}

// maxStreamWorkers bounds Stream's parallelism: past a few workers the reader and the writer
// are the bottleneck, and every worker holds two chunks.
const maxStreamWorkers = 4

// streamJob is one chunk on its way through streamParallel: the worker puts its redacted text
// on res, which the writer reads in submission order.
type streamJob struct {
	in  []byte
	res chan []byte
}

// streamParallel is Stream on workers goroutines. The cutter (this goroutine) hands chunks out
// in order, the writer writes their results in the same order; at most 2×workers chunks are in
// flight, so memory stays bounded whatever the size of the input.
func (r *Redactor) streamParallel(out io.Writer, in io.Reader, workers int) error {
	jobs := make(chan streamJob, workers)
	order := make(chan chan []byte, 2*workers)
	stop := make(chan struct{})
	clones := make([]*Redactor, workers)
	var wg sync.WaitGroup
	for i := range clones {
		c := r.Clone()
		clones[i] = c
		wg.Go(func() {
			for j := range jobs {
				j.res <- c.appendRedacted(getChunk(), j.in)
				putChunk(j.in)
			}
		})
	}
	werr := make(chan error, 1)
	go func() {
		var err error
		for res := range order {
			b := <-res
			if err == nil {
				if _, err = out.Write(b); err != nil {
					close(stop) // the cutter stops handing out chunks; the rest drain
				}
			}
			putChunk(b)
		}
		werr <- err
	}()
	cerr := r.cutChunks(in, func(b []byte) error {
		res := make(chan []byte, 1)
		select {
		case order <- res:
		case <-stop:
			return errStreamStopped
		}
		jobs <- streamJob{in: append(getChunk(), b...), res: res}
		return nil
	})
	close(jobs)
	close(order)
	err := <-werr
	wg.Wait()
	for _, c := range clones {
		for k, n := range c.counts {
			r.counts[k] += n
		}
	}
	if err != nil {
		return err
	}
	if cerr != nil && !errors.Is(cerr, errStreamStopped) {
		return cerr
	}
	return nil
}

// chunkPool recycles streamParallel's chunk buffers (the cutter's copies and the workers'
// output), so a long stream does not allocate a megabyte a chunk.
var chunkPool sync.Pool

func getChunk() []byte {
	if b, ok := chunkPool.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, chunk+maxCarry)
}

func putChunk(b []byte) {
	if cap(b) <= 4*(chunk+maxCarry) { // an unusually grown buffer is left to the collector
		chunkPool.Put(&b)
	}
}

// errStreamStopped ends the cutter of streamParallel after the writer failed (its error is
// the one returned).
var errStreamStopped = errors.New("stream stopped")

// cutChunks reads in and hands emit each chunk, in order, cut where Stream's doc says. emit
// must not keep b after it returns.
func (r *Redactor) cutChunks(in io.Reader, emit func(b []byte) error) error {
	buf := make([]byte, 0, chunk+maxCarry)
	eof := false
	for !eof || len(buf) > 0 {
		for !eof && len(buf) < chunk {
			n, err := in.Read(buf[len(buf):cap(buf)][:min(chunk, cap(buf)-len(buf))])
			buf = buf[:len(buf)+n]
			if err == io.EOF {
				eof = true
			} else if err != nil {
				return err
			}
		}
		cut := len(buf)
		if !eof {
			cut = cutPoint(buf)
			if cut > 0 && bytes.LastIndexByte(buf[:cut], '\n') < 0 {
				// No line end in the buffer: a line longer than a chunk is cut inside.
				cut = r.insideLineCut(buf, cut)
			}
			if cut < 0 { // an open PEM block: read on, up to maxCarry
				if len(buf) < chunk+maxCarry {
					n, err := in.Read(buf[len(buf):cap(buf)])
					buf = buf[:len(buf)+n]
					if err == io.EOF {
						eof = true
					} else if err != nil {
						return err
					}
					continue
				}
				cut = safeCut(buf)
			}
		}
		if err := emit(buf[:cut]); err != nil {
			return err
		}
		buf = append(buf[:0], buf[cut:]...)
	}
	return nil
}

// cutPoint is where a chunk can end: after its last newline, or after a byte no secret
// holds; -1 while a PEM block begun in it has not ended.
func cutPoint(b []byte) int {
	if !bytes.Contains(b, []byte("-----")) {
		return safeCut(b)
	}
	if beg := lastFold(b, "-----begin"); beg >= 0 && lastFold(b, "-----end") < beg {
		return -1
	}
	return safeCut(b)
}

func safeCut(b []byte) int {
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return i + 1
	}
	if i := bytes.LastIndexAny(b, "\", \t"); i >= 0 {
		return i + 1
	}
	return len(b)
}

// probeWindow is how much text on each side of a cut inside a line insideLineCut redacts to
// check that no secret crosses the cut: longer than any single-line secret the rules match.
const probeWindow = 8 << 10

// insideLineCut chooses where to cut b, which holds part of a line longer than a chunk, at
// or before the separator safeCut found (at cut). A cut there could split a secret from
// its name (`"api_key": "` | `value"`) or a token in two, and neither half would be
// redacted, so a candidate is kept only if the text around it redacts the same in one piece
// as in the two pieces the cut makes. Candidates are separators far enough from the end of
// b that the text after them is known. Probes use a clone, so they count nothing.
func (r *Redactor) insideLineCut(b []byte, cut int) int {
	probe := r.Clone()
	end := min(cut, len(b)-probeWindow)
	for tries := 0; tries < 256 && end > 0; tries++ {
		i := bytes.LastIndexAny(b[:end], "\", \t")
		if i < 0 {
			break
		}
		m := i + 1
		lo, hi := max(0, m-probeWindow), m+probeWindow
		whole := probe.appendRedacted(nil, b[lo:hi])
		split := probe.appendRedacted(probe.appendRedacted(nil, b[lo:m]), b[m:hi])
		if bytes.Equal(whole, split) {
			return m
		}
		end = i
	}
	return cut // no separator that keeps every secret whole: cut where safeCut said
}

// lastFold is the last index of the lower-case word k in b, in any case.
func lastFold(b []byte, k string) int {
	for end := len(b); ; {
		i := bytes.LastIndex(b[:end], []byte("-----"))
		if i < 0 {
			return -1
		}
		if len(b)-i >= len(k) && bytes.EqualFold(b[i:i+len(k)], []byte(k)) {
			return i
		}
		end = i + 4
	}
}

// Scan counts the secrets in a file without changing it or this redactor's counts.
func (r *Redactor) Scan(path string) (int, error) {
	f, err := infile.Open(path)
	if err != nil {
		return 0, fmt.Errorf("scan %s: %w", path, err)
	}
	defer f.Close()
	c := r.Clone()
	if err := c.Stream(io.Discard, f); err != nil {
		return 0, fmt.Errorf("scan %s: %w", path, err)
	}
	return c.Count(), nil
}

// JSON redacts an encoded JSON document. Every replacement lies inside a string, so the
// result is JSON still; if a rule ever matched across a string's end it would not be, and
// then each string of the decoded document is redacted on its own and the document encoded
// again (indented, as the run directory writes it).
func (r *Redactor) JSON(doc []byte) []byte {
	out := r.Bytes(doc)
	if json.Valid(out) || !json.Valid(doc) {
		return out
	}
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		return out
	}
	v = r.walk(v)
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return out
	}
	return append(b, '\n')
}

func (r *Redactor) walk(v any) any {
	switch x := v.(type) {
	case string:
		return r.String(x)
	case []any:
		for i := range x {
			x[i] = r.walk(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = r.walk(x[k])
		}
	}
	return v
}
