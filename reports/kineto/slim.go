package kineto

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/klauspost/compress/gzip"

	"github.com/sglprof/runner/plans/infile"
)

// SlimOptions choose the time window Slim keeps.
type SlimOptions struct {
	// Steps keeps the first Steps step annotations (user annotations named ProfilerStep#N,
	// denoising_step_*, or step[...]); when the trace has several of these families, the one
	// with the most annotations counts. 0 means use Window.
	Steps int
	// Window is [start, end) in nanoseconds relative to the earliest event of the trace, used
	// when Steps is 0.
	Window [2]int64
	// Gzip compresses the output (SlimFile sets it from the output name).
	Gzip bool
	// TempDir is where a non-seekable input is spooled for the second pass ("" = os.TempDir).
	TempDir string
}

// SlimStats says what Slim kept.
type SlimStats struct {
	Events, Kept int64
	// WindowStart and WindowEnd are the kept window in the trace's own clock (ns).
	WindowStart, WindowEnd int64
	// Steps is the number of step annotations the window covers (0 for an explicit window).
	Steps int
	// StepFamily is the annotation family used ("ProfilerStep", "denoising_step", "step[...]").
	StepFamily string
	Warnings   []string
}

// Slim copies the part of a trace that falls in a time window, plus all metadata events and the
// top-level keys, so that a multi-gigabyte trace opens in Perfetto. Duration events are kept when
// they overlap the window, other timed events when they fall inside it, untimed events always.
// It reads the input twice (first to find the window), seeking back when in is an io.Seeker and
// spooling the raw (still compressed) bytes to a temporary file otherwise; memory stays bounded.
func Slim(ctx context.Context, in io.Reader, out io.Writer, opts SlimOptions) (SlimStats, error) {
	var st SlimStats
	if opts.Steps < 0 {
		return st, errors.New("trace slim: --steps must be positive")
	}
	if opts.Steps == 0 && opts.Window[1] <= opts.Window[0] {
		return st, fmt.Errorf("trace slim: give --steps N or a window START:END with END > START (got %d:%d ns)", opts.Window[0], opts.Window[1])
	}
	// Pass 1: the earliest timestamp and the step annotations.
	rp, err := newReplay(in, opts.TempDir)
	if err != nil {
		return st, fmt.Errorf("trace slim: %w", err)
	}
	defer rp.close()
	pass1, second := rp.first, rp.second
	sc := &stepScanner{ctx: ctx, minTS: 1<<63 - 1, fam: map[string][][2]int64{}}
	src, closeFn, err := openMaybeGzip(pass1, 0)
	if err != nil {
		return st, fmt.Errorf("trace slim: %w", err)
	}
	werr := walk(newScanner(src), sc, nil)
	closeFn()
	if sc.ctxErr != nil {
		return st, fmt.Errorf("trace slim: %w", sc.ctxErr)
	}
	if werr != nil {
		st.Warnings = append(st.Warnings, fmt.Sprintf("first pass: %v", werr))
	}
	if err := rp.finishFirst(); err != nil {
		return st, fmt.Errorf("trace slim: %w", err)
	}
	if sc.minTS == 1<<63-1 {
		return st, errors.New("trace slim: the trace has no timed events")
	}
	if opts.Steps > 0 {
		best := ""
		for name, ws := range sc.fam {
			if len(ws) > len(sc.fam[best]) || len(ws) == len(sc.fam[best]) && name < best {
				best = name
			}
		}
		ws := sc.fam[best]
		if len(ws) == 0 {
			return st, errors.New("trace slim: no step annotations (ProfilerStep#N, denoising_step_*, step[...]) in the trace; use a window START:END instead")
		}
		slices.SortFunc(ws, func(a, b [2]int64) int { return cmpInt64(a[0], b[0]) })
		n := min(opts.Steps, len(ws))
		st.WindowStart = ws[0][0]
		st.WindowEnd = ws[0][1]
		for _, w := range ws[:n] {
			st.WindowEnd = max(st.WindowEnd, w[1])
		}
		st.Steps, st.StepFamily = n, best
		if n < opts.Steps {
			st.Warnings = append(st.Warnings, fmt.Sprintf("asked for %d steps, the trace has %d", opts.Steps, n))
		}
	} else {
		st.WindowStart = sc.minTS + opts.Window[0]
		st.WindowEnd = sc.minTS + opts.Window[1]
	}

	// Pass 2: copy.
	var w io.Writer = out
	var zw *gzip.Writer
	if opts.Gzip {
		zw, _ = gzip.NewWriterLevel(out, gzip.DefaultCompression)
		w = zw
	}
	src2, closeFn2, err := openMaybeGzip(second, 0)
	if err != nil {
		return st, fmt.Errorf("trace slim: second pass: %w", err)
	}
	defer closeFn2()
	sl := &slimmer{rewriter: newRewriter(ctx, w), lo: st.WindowStart, hi: st.WindowEnd}
	var bare bareArrayDetector
	werr = walk(newScanner(src2), sl, bare.wrap(sl.emit))
	if err := sl.finishDoc(werr, sl.endEvents, &bare.bare); err != nil {
		return st, fmt.Errorf("trace slim: %w", err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return st, fmt.Errorf("trace slim: %w", err)
		}
	}
	st.Events, st.Kept = sl.events, sl.written
	st.Warnings = append(st.Warnings, sl.warnings...)
	return st, nil
}

// SlimFile is Slim from a file to a file; the output is gzip-compressed when its name ends in .gz.
// An existing outPath is replaced only with force (see createOut).
func SlimFile(ctx context.Context, inPath, outPath string, opts SlimOptions, force bool) (SlimStats, error) {
	in, err := infile.Open(inPath)
	if err != nil {
		return SlimStats{}, fmt.Errorf("trace slim: %w", err)
	}
	defer in.Close()
	out, err := createOut(inPath, outPath, force)
	if err != nil {
		return SlimStats{}, fmt.Errorf("trace slim: %w", err)
	}
	// Slim compresses itself (opts.Gzip); the output writes the file as it is.
	if out.zw != nil {
		out.zw, out.w = nil, out.f
	}
	opts.Gzip = strings.HasSuffix(outPath, ".gz")
	st, err := Slim(ctx, in, out.w, opts)
	if ferr := out.finish(err); err == nil && ferr != nil {
		err = fmt.Errorf("trace slim: write %s: %w", outPath, ferr)
	}
	return st, err
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// stepFamily names the step-annotation family of an annotation name, or "".
func stepFamily(name []byte) string {
	switch {
	case bytes.HasPrefix(name, []byte("ProfilerStep#")):
		return "ProfilerStep"
	case bytes.HasPrefix(name, []byte("denoising_step_")):
		return "denoising_step"
	case bytes.HasPrefix(name, []byte("step[")):
		return "step[...]"
	}
	return ""
}

// stepScanner is Slim's first-pass handler.
type stepScanner struct {
	ctx    context.Context
	ctxErr error
	r      rewriter // only its parser and field decoding are used
	ev     eventFields
	n      int64
	minTS  int64
	fam    map[string][][2]int64
}

func (s *stepScanner) top(key, raw []byte, off int64) {}
func (s *stepScanner) malformed(off int64)            {}
func (s *stepScanner) startEvents()                   {}
func (s *stepScanner) endEvents() error               { return nil }

func (s *stepScanner) event(raw []byte, off int64) error {
	s.n++
	if s.n&4095 == 0 {
		if err := s.ctx.Err(); err != nil {
			s.ctxErr = err
			return err
		}
	}
	ev := &s.ev
	if _, ok := s.r.fields(raw, ev); !ok || !ev.hasTS || len(ev.ph) != 1 || ev.ph[0] == 'M' {
		return nil
	}
	s.minTS = min(s.minTS, ev.ts)
	if ev.ph[0] == 'X' && ev.hasDur && (string(ev.cat) == "user_annotation" || string(ev.cat) == "gpu_user_annotation") {
		if f := stepFamily(ev.name); f != "" {
			// CPU and GPU projections of one step are separate families so they never mix.
			if string(ev.cat) == "gpu_user_annotation" {
				f += " (gpu)"
			}
			s.fam[f] = append(s.fam[f], [2]int64{ev.ts, ev.ts + ev.dur})
		}
	}
	return nil
}

// slimmer is Slim's second-pass handler.
type slimmer struct {
	*rewriter
	lo, hi int64
	ev     eventFields
}

func (s *slimmer) startEvents() { s.inEvents = true }
func (s *slimmer) endEvents() error {
	if !s.done {
		s.done = true
		s.w.WriteString("\n")
	}
	return nil
}

func (s *slimmer) event(raw []byte, off int64) error {
	if err := s.tick(); err != nil {
		return err
	}
	ev := &s.ev
	if _, ok := s.fields(raw, ev); !ok {
		return nil
	}
	keep := true
	switch {
	case len(ev.ph) == 1 && ev.ph[0] == 'M', !ev.hasTS:
	case ev.hasDur:
		end := ev.ts + ev.dur
		keep = ev.ts < s.hi && (end > s.lo || ev.dur == 0 && ev.ts >= s.lo)
	default:
		keep = ev.ts >= s.lo && ev.ts < s.hi
	}
	if keep {
		s.writeEvent(raw)
	}
	return nil
}
