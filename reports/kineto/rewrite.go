package kineto

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/klauspost/compress/gzip"
	"github.com/valyala/fastjson"

	"github.com/sglprof/runner/reports/rundir"
)

// rewriter is the part of Fix and Slim that copies a document: the skeleton verbatim, the
// events it is given with ",\n" separators.
type rewriter struct {
	ctx      context.Context
	w        *bufio.Writer
	first    bool
	inEvents bool
	done     bool // the event array was closed
	events   int64
	written  int64
	p        fastjson.Parser
	num      []byte
	warnings []string
}

func newRewriter(ctx context.Context, out io.Writer) *rewriter {
	return &rewriter{ctx: ctx, w: bufio.NewWriterSize(out, 1<<20), first: true}
}

func (r *rewriter) emit(b []byte) { r.w.Write(b) }

func (r *rewriter) writeEvent(raw []byte) {
	if r.first {
		r.w.WriteString("\n")
		r.first = false
	} else {
		r.w.WriteString(",\n")
	}
	r.w.Write(raw)
	r.written++
}

func (r *rewriter) top(key, raw []byte, off int64) {}
func (r *rewriter) malformed(off int64) {
	r.events++
	r.warnings = append(r.warnings, fmt.Sprintf("dropped a malformed event near byte %d (unescaped quote?)", off))
}

// tick counts an event and checks for cancellation now and then.
func (r *rewriter) tick() error {
	r.events++
	if r.events&4095 == 0 {
		return r.ctx.Err()
	}
	return nil
}

// eventFields are the fields Fix and Slim look at.
type eventFields struct {
	ph, cat, name []byte
	pid, tid      []byte // raw JSON text
	ts, dur       int64
	hasTS, hasDur bool
	args          *fastjson.Value
}

// fields parses raw into f; ok is false when raw is not a JSON object.
func (r *rewriter) fields(raw []byte, f *eventFields) (*fastjson.Value, bool) {
	*f = eventFields{}
	v, err := r.p.ParseBytes(raw)
	if err != nil {
		return nil, false
	}
	o, err := v.Object()
	if err != nil {
		return nil, false
	}
	o.Visit(func(k []byte, v *fastjson.Value) {
		switch string(k) {
		case "ph":
			f.ph, _ = v.StringBytes()
		case "cat":
			f.cat, _ = v.StringBytes()
		case "name":
			f.name, _ = v.StringBytes()
		case "pid":
			f.pid = v.MarshalTo(f.pid[:0])
		case "tid":
			f.tid = v.MarshalTo(f.tid[:0])
		case "ts":
			if v.Type() == fastjson.TypeNumber {
				r.num = v.MarshalTo(r.num[:0])
				f.ts, f.hasTS = parseMicrosNS(r.num)
			}
		case "dur":
			if v.Type() == fastjson.TypeNumber {
				r.num = v.MarshalTo(r.num[:0])
				f.dur, f.hasDur = parseMicrosNS(r.num)
			}
		case "args":
			f.args = v
		}
	})
	return v, true
}

// finishDoc handles the walker's result: on input cut inside the event array the rewriter closes
// the array and the document so the output stays valid JSON. Input broken anywhere else is an
// error, and what was written to the writer by then is not a trace: the callers discard it
// (trace fix and slim never rename it into place, a bundle leaves the trace out).
func (r *rewriter) finishDoc(werr error, closeEvents func() error, bareArray *bool) error {
	if werr != nil {
		var se *syntaxError
		if !errors.As(werr, &se) {
			return werr
		}
		if !r.inEvents || r.done {
			return fmt.Errorf("input is malformed or truncated outside traceEvents (%v); it cannot be rewritten", werr)
		}
		r.warnings = append(r.warnings, fmt.Sprintf("input is truncated or malformed at byte %d (%v); closed the event array there", se.Offset, se.Err))
		if err := closeEvents(); err != nil {
			return err
		}
		if *bareArray {
			r.w.WriteString("\n]\n")
		} else {
			r.w.WriteString("\n]}\n")
		}
	}
	return r.w.Flush()
}

// bareArrayDetector records whether the document is a bare array (its first skeleton byte).
type bareArrayDetector struct {
	seen, bare bool
}

func (b *bareArrayDetector) wrap(emit func([]byte)) func([]byte) {
	return func(p []byte) {
		if !b.seen {
			for _, c := range p {
				if c == ' ' || c == '\n' || c == '\r' || c == '\t' {
					continue
				}
				b.seen, b.bare = true, c == '['
				break
			}
		}
		emit(p)
	}
}

// isGPUCat reports whether a category is a GPU op Perfetto draws on a stream track.
func isGPUCat(cat []byte) bool {
	switch string(cat) {
	case "kernel", "gpu_memcpy", "gpu_memset":
		return true
	}
	return false
}

// ErrSameFile is returned when a rewrite's output is its input (by device and inode, so
// ./IN, a symlink or a hard link count too): writing it would destroy the trace being read.
var ErrSameFile = errors.New("the output is the input file")

// output is a rewrite's destination: rundir's Output (a temporary file beside the output path,
// renamed over it only when the rewrite succeeded), gzip-compressed when the name ends in .gz.
type output struct {
	w  io.Writer
	f  *rundir.Output
	zw *gzip.Writer
}

// createOut opens the output of a rewrite of inPath. OUT must not be the input, must be a
// regular file or not exist (an existing one only with force), and its directory must exist
// (rundir.CheckOutput, the check bundle -o makes too).
func createOut(inPath, path string, force bool) (*output, error) {
	if ist, err := os.Stat(inPath); err == nil {
		if ost, err := os.Stat(path); err == nil && os.SameFile(ist, ost) {
			return nil, fmt.Errorf("%s and %s: %w; write to another path", inPath, path, ErrSameFile)
		}
	}
	if err := rundir.CheckOutput(path, force); err != nil {
		return nil, err
	}
	f, err := rundir.CreateOutput(path)
	if err != nil {
		return nil, err
	}
	o := &output{w: f, f: f}
	if strings.HasSuffix(path, ".gz") {
		o.zw, _ = gzip.NewWriterLevel(f, gzip.DefaultCompression)
		o.w = o.zw
	}
	return o, nil
}

// finish completes the output: on success (failed == nil) it is flushed and renamed into
// place; otherwise, or if that fails, the temporary file is removed.
func (o *output) finish(failed error) error {
	err := failed
	if err == nil && o.zw != nil {
		err = o.zw.Close()
	}
	if err != nil {
		o.f.Abort()
		return err
	}
	return o.f.Commit()
}

// replay lets a rewriter read its input twice: by seeking back when the input is an io.Seeker
// (a file), otherwise by spooling the raw (still compressed) bytes to a temporary file during
// the first pass.
type replay struct {
	first, second io.Reader
	tmp           *os.File
}

func newReplay(in io.Reader, dir string) (*replay, error) {
	if rs, ok := in.(io.ReadSeeker); ok {
		if pos, err := rs.Seek(0, io.SeekCurrent); err == nil {
			return &replay{first: in, second: &seekBack{rs: rs, pos: pos}}, nil
		}
	}
	tmp, err := os.CreateTemp(dir, "trace-*.spool")
	if err != nil {
		return nil, fmt.Errorf("spool the input for a second pass: %w (set a writable temporary directory)", err)
	}
	return &replay{first: io.TeeReader(in, tmp), second: &seekBack{rs: tmp}, tmp: tmp}, nil
}

// finishFirst drains the first pass so the spool holds the whole input even when the first
// walk stopped early.
func (r *replay) finishFirst() error {
	if r.tmp == nil {
		return nil
	}
	if _, err := io.Copy(io.Discard, r.first); err != nil {
		return fmt.Errorf("spool the input: %w", err)
	}
	return nil
}

func (r *replay) close() {
	if r.tmp != nil {
		r.tmp.Close()
		os.Remove(r.tmp.Name())
	}
}

// seekBack reads rs from pos once the first read happens.
type seekBack struct {
	rs     io.ReadSeeker
	pos    int64
	sought bool
}

func (s *seekBack) Read(p []byte) (int, error) {
	if !s.sought {
		if _, err := s.rs.Seek(s.pos, io.SeekStart); err != nil {
			return 0, err
		}
		s.sought = true
	}
	return s.rs.Read(p)
}
