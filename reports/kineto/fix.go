package kineto

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/valyala/fastjson"

	"github.com/sglprof/runner/plans/infile"
)

// FixStats says what Fix changed.
type FixStats struct {
	Events   int64 // traceEvents elements read
	GPUOps   int64 // kernels, memcpys and memsets seen
	Tracks   int   // GPU tracks (pid, tid pairs) holding them
	Moved    int64 // GPU ops moved to an overlap lane
	Lanes    int   // lanes (new tids) added
	Warnings []string
}

// laneTIDStep separates the tid of an overlap lane from its stream's tid (lane k of tid T is
// T + k*laneTIDStep, bumped past any tid already in use). Kineto itself uses T+1,000,000 for
// its "(sync)" rows, so lanes stay clear of those.
const laneTIDStep = 10_000_000

// gpuRec is one GPU op seen by Fix's first pass (24 bytes; the op's bytes are not kept).
type gpuRec struct {
	start, end int64
	track      int32
	seq        int32
}

// laneKey names one lane of one track.
type laneKey struct{ track, lane int32 }

// lanePlan is the first pass's result: per GPU op in file order its lane (0 = unchanged) and
// track (8 bytes per op), the raw tid of each new lane, and the lanes' thread_name events.
type lanePlan struct {
	lane, track []int32
	tid         map[laneKey][]byte
	metas       []laneMeta
}

// Fix rewrites a Kineto trace so that Perfetto shows every GPU op (kernels, memcpys, memsets)
// even where ops overlap on one stream. Perfetto drops overlapping slices of one track, so each
// op that starts before an earlier op of its track (pid, tid) has ended — compared in integer
// nanoseconds, so back-to-back ops are not moved — goes to an extra lane: a new tid of the same
// pid, announced by a thread_name metadata event appended to the event array. Lanes are reused
// greedily, so k-deep overlap costs k-1 lanes.
//
// Every other event, and every unmoved GPU op, is copied byte for byte and in its original
// order; a moved op is re-serialised with only its tid changed. Fix reads the input twice (the
// first pass assigns lanes, keeping 32 bytes per GPU op), seeking back when in is a file and
// spooling the raw input to a temporary file otherwise. Gzip input is detected; the output is
// plain JSON (FixFile gzips by output name). A truncated input gives a valid, closed output
// plus a warning.
func Fix(ctx context.Context, in io.Reader, out io.Writer) (FixStats, error) {
	var st FixStats
	rp, err := newReplay(in, "")
	if err != nil {
		return st, fmt.Errorf("trace fix: %w", err)
	}
	defer rp.close()

	// Pass 1: GPU op intervals per track, tids in use, thread names.
	p1 := &fixScan{rewriter: rewriter{ctx: ctx}, tracks: map[string]int32{}, used: map[string]struct{}{}, threadNm: map[string]string{}}
	src, closeFn, err := openMaybeGzip(rp.first, 0)
	if err != nil {
		return st, fmt.Errorf("trace fix: %w", err)
	}
	werr := walk(newScanner(src), p1, nil)
	closeFn()
	if p1.ctxErr != nil {
		return st, fmt.Errorf("trace fix: %w", p1.ctxErr)
	}
	_ = werr // the second pass meets the same damage and reports it
	if err := rp.finishFirst(); err != nil {
		return st, fmt.Errorf("trace fix: %w", err)
	}
	plan := p1.assignLanes(&st)

	// Pass 2: copy, moving the ops that need a lane.
	src2, closeFn2, err := openMaybeGzip(rp.second, 0)
	if err != nil {
		return st, fmt.Errorf("trace fix: second pass: %w", err)
	}
	defer closeFn2()
	f := &fixer{rewriter: newRewriter(ctx, out), plan: plan}
	var bare bareArrayDetector
	s := newScanner(src2)
	werr = walk(s, f, bare.wrap(f.emit))
	if err := f.finishDoc(werr, f.endEvents, &bare.bare); err != nil {
		return st, fmt.Errorf("trace fix: %w", err)
	}
	st.Events = f.events
	st.Warnings = append(st.Warnings, f.warnings...)
	if s.readErr != nil && werr == nil {
		st.Warnings = append(st.Warnings, fmt.Sprintf("input ended early: %v", s.readErr))
	}
	return st, nil
}

// FixFile is Fix from a file to a file; the output is gzip-compressed when its name ends in .gz.
// An existing outPath is replaced only with force (see createOut).
func FixFile(ctx context.Context, inPath, outPath string, force bool) (FixStats, error) {
	in, err := infile.Open(inPath)
	if err != nil {
		return FixStats{}, fmt.Errorf("trace fix: %w", err)
	}
	defer in.Close()
	out, err := createOut(inPath, outPath, force)
	if err != nil {
		return FixStats{}, fmt.Errorf("trace fix: %w", err)
	}
	st, err := Fix(ctx, in, out.w)
	if ferr := out.finish(err); err == nil && ferr != nil {
		err = fmt.Errorf("trace fix: write %s: %w", outPath, ferr)
	}
	return st, err
}

// isFixable reports whether an event is a GPU op Fix places on lanes.
func isFixable(ev *eventFields) bool {
	return len(ev.ph) == 1 && ev.ph[0] == 'X' && isGPUCat(ev.cat) && ev.hasTS && ev.hasDur && ev.dur >= 0
}

// fixScan is Fix's first-pass handler.
type fixScan struct {
	rewriter
	ctxErr    error
	recs      []gpuRec
	tracks    map[string]int32 // pid "\x00" tid (raw JSON) -> track
	trackKeys []string
	used      map[string]struct{} // every pid "\x00" tid seen
	threadNm  map[string]string   // thread_name of a pid/tid
	ev        eventFields
	key       []byte
}

func (f *fixScan) startEvents()     {}
func (f *fixScan) endEvents() error { return nil }

func (f *fixScan) event(raw []byte, off int64) error {
	if err := f.tick(); err != nil {
		f.ctxErr = err
		return err
	}
	ev := &f.ev
	if _, ok := f.fields(raw, ev); !ok {
		return nil
	}
	f.key = append(append(append(f.key[:0], ev.pid...), 0), ev.tid...)
	if _, ok := f.used[string(f.key)]; !ok {
		f.used[string(f.key)] = struct{}{}
	}
	if len(ev.ph) == 1 && ev.ph[0] == 'M' && string(ev.name) == "thread_name" && ev.args != nil {
		f.threadNm[string(f.key)] = string(ev.args.GetStringBytes("name"))
	}
	if isFixable(ev) {
		tr, ok := f.tracks[string(f.key)]
		if !ok {
			tr = int32(len(f.trackKeys))
			f.tracks[string(f.key)] = tr
			f.trackKeys = append(f.trackKeys, string(f.key))
		}
		f.recs = append(f.recs, gpuRec{start: ev.ts, end: ev.ts + ev.dur, track: tr, seq: int32(len(f.recs))})
	}
	return nil
}

// laneMeta is a thread_name event to add for a new lane.
type laneMeta struct {
	pid, tid []byte
	name     string
}

// assignLanes gives each GPU op a lane (0 = its own tid) by a greedy sweep per track.
func (f *fixScan) assignLanes(st *FixStats) *lanePlan {
	st.GPUOps = int64(len(f.recs))
	st.Tracks = len(f.trackKeys)
	slices.SortFunc(f.recs, func(x, y gpuRec) int {
		if c := cmp.Compare(x.track, y.track); c != 0 {
			return c
		}
		if c := cmp.Compare(x.start, y.start); c != 0 {
			return c
		}
		if c := cmp.Compare(x.end, y.end); c != 0 {
			return c
		}
		return cmp.Compare(x.seq, y.seq)
	})
	lane := make([]int32, len(f.recs)) // by seq
	maxLane := map[int32]int32{}
	var laneEnd []int64
	cur := int32(-1)
	for i := range f.recs {
		r := &f.recs[i]
		if r.track != cur {
			cur = r.track
			laneEnd = laneEnd[:0]
		}
		l := -1
		for k, e := range laneEnd {
			if e <= r.start { // touching is not overlapping
				l = k
				break
			}
		}
		if l < 0 {
			l = len(laneEnd)
			laneEnd = append(laneEnd, r.end)
		} else {
			laneEnd[l] = max(laneEnd[l], r.end)
		}
		lane[r.seq] = int32(l)
		if l > 0 {
			st.Moved++
			maxLane[r.track] = max(maxLane[r.track], int32(l))
		}
	}
	trackOf := make([]int32, len(f.recs))
	for i := range f.recs {
		trackOf[f.recs[i].seq] = f.recs[i].track
	}
	f.recs = nil
	newTID := map[laneKey][]byte{}
	var metas []laneMeta
	for tr := int32(0); tr < int32(len(f.trackKeys)); tr++ {
		ml := maxLane[tr]
		if ml == 0 {
			continue
		}
		key := f.trackKeys[tr]
		sep := strings.IndexByte(key, 0)
		pid, tid := key[:sep], key[sep+1:]
		base := strings.TrimSpace(f.threadNm[key])
		if base == "" {
			if _, err := strconv.ParseInt(tid, 10, 64); err == nil {
				base = "stream " + tid
			} else {
				base = trimQuotes(tid)
			}
		}
		for l := int32(1); l <= ml; l++ {
			var cand []byte
			if n, err := strconv.ParseInt(tid, 10, 64); err == nil {
				c := n + int64(l)*laneTIDStep
				for {
					cand = strconv.AppendInt(nil, c, 10)
					if _, used := f.used[pid+"\x00"+string(cand)]; !used {
						break
					}
					c++
				}
			} else {
				suffix := fmt.Sprintf(" lane %d", l)
				for {
					cand = jsonQuote(nil, trimQuotes(tid)+suffix)
					if _, used := f.used[pid+"\x00"+string(cand)]; !used {
						break
					}
					suffix += "'"
				}
			}
			f.used[pid+"\x00"+string(cand)] = struct{}{}
			newTID[laneKey{tr, l}] = cand
			metas = append(metas, laneMeta{pid: []byte(pid), tid: cand, name: fmt.Sprintf("%s (overlap lane %d)", base, l)})
			st.Lanes++
		}
	}
	return &lanePlan{lane: lane, track: trackOf, tid: newTID, metas: metas}
}

// fixer is Fix's second-pass handler.
type fixer struct {
	*rewriter
	plan  *lanePlan
	seq   int
	ev    eventFields
	arena fastjson.Arena
	buf   []byte
}

func (f *fixer) startEvents() { f.inEvents = true }

func (f *fixer) event(raw []byte, off int64) error {
	if err := f.tick(); err != nil {
		return err
	}
	ev := &f.ev
	v, ok := f.fields(raw, ev)
	if !ok {
		f.warnings = append(f.warnings, fmt.Sprintf("dropped an event at byte %d that is not valid JSON", off))
		return nil
	}
	if !isFixable(ev) {
		f.writeEvent(raw)
		return nil
	}
	var tid []byte
	if p := f.plan; f.seq < len(p.lane) && p.lane[f.seq] > 0 {
		tid = p.tid[laneKey{p.track[f.seq], p.lane[f.seq]}]
	}
	f.seq++
	if tid == nil {
		f.writeEvent(raw)
		return nil
	}
	f.arena.Reset()
	var tv *fastjson.Value
	if tid[0] == '"' {
		var s string
		_ = json.Unmarshal(tid, &s)
		tv = f.arena.NewString(s)
	} else {
		tv = f.arena.NewNumberString(string(tid))
	}
	v.Set("tid", tv)
	f.buf = v.MarshalTo(f.buf[:0])
	f.writeEvent(f.buf)
	return nil
}

// endEvents appends the thread_name events of the new lanes.
func (f *fixer) endEvents() error {
	if f.done {
		return nil
	}
	f.done = true
	for _, m := range f.plan.metas {
		b := f.buf[:0]
		b = append(b, `{"name": "thread_name", "ph": "M", "ts": 0, "pid": `...)
		b = append(b, m.pid...)
		b = append(b, `, "tid": `...)
		b = append(b, m.tid...)
		b = append(b, `, "args": {"name": `...)
		b = jsonQuote(b, m.name)
		b = append(b, `}}`...)
		f.writeEvent(b)
		f.buf = b
	}
	f.w.WriteString("\n")
	return nil
}

// trimQuotes returns the text of a raw JSON string, or s itself when it is not one.
func trimQuotes(s string) string {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		var u string
		if err := json.Unmarshal([]byte(s), &u); err == nil {
			return u
		}
	}
	return s
}

// jsonQuote appends s as a JSON string.
func jsonQuote(dst []byte, s string) []byte {
	b, _ := json.Marshal(s)
	return append(dst, b...)
}
