package kineto

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/valyala/fastjson"
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

// gpuRec is one buffered GPU op of Fix.
type gpuRec struct {
	off, n     int64 // bytes in the arena
	start, end int64
	track      int32
	seq        int32
	lane       int32
}

// fixer is Fix's handler.
type fixer struct {
	*rewriter
	arena     []byte
	recs      []gpuRec
	tracks    map[string]int32 // pid "\x00" tid (raw JSON) -> track
	trackKeys []string
	used      map[string]struct{} // every pid "\x00" tid seen
	threadNm  map[string]string   // thread_name of a pid/tid
	ev        eventFields
	key       []byte
	stats     *FixStats
	arenaJSON fastjson.Arena
}

// Fix rewrites a Kineto trace so that Perfetto shows every GPU op (kernels, memcpys, memsets)
// even where ops overlap on one stream: Perfetto drops overlapping slices of one track, so each
// op that starts before an earlier op of its track has ended (compared in integer nanoseconds,
// so back-to-back ops are not moved) goes to an extra lane, a new tid of the same pid announced
// by a thread_name metadata event. Lanes are reused greedily, so k-deep overlap costs k-1 lanes.
// Every other event is copied byte for byte, as are unmoved GPU ops; GPU ops are written after
// the other events (Perfetto does not care about order), which is why Fix keeps the GPU ops of
// the trace in memory while everything else streams. Gzip input is detected; the output is
// plain JSON (see FixFile for gzip output).
func Fix(ctx context.Context, in io.Reader, out io.Writer) (FixStats, error) {
	var st FixStats
	src, closeFn, err := openMaybeGzip(in)
	if err != nil {
		return st, fmt.Errorf("trace fix: %w", err)
	}
	defer closeFn()
	f := &fixer{rewriter: newRewriter(ctx, out), tracks: map[string]int32{}, used: map[string]struct{}{},
		threadNm: map[string]string{}, stats: &st}
	var bare bareArrayDetector
	s := newScanner(src)
	werr := walk(s, f, bare.wrap(f.emit))
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
func FixFile(ctx context.Context, inPath, outPath string) (FixStats, error) {
	in, err := os.Open(inPath)
	if err != nil {
		return FixStats{}, fmt.Errorf("trace fix: %w", err)
	}
	defer in.Close()
	w, closeOut, err := createOut(outPath)
	if err != nil {
		return FixStats{}, fmt.Errorf("trace fix: %w", err)
	}
	st, err := Fix(ctx, in, w)
	if cerr := closeOut(); err == nil && cerr != nil {
		err = fmt.Errorf("trace fix: write %s: %w", outPath, cerr)
	}
	return st, err
}

func (f *fixer) startEvents() { f.inEvents = true }

func (f *fixer) event(raw []byte, off int64) error {
	if err := f.tick(); err != nil {
		return err
	}
	ev := &f.ev
	if _, ok := f.fields(raw, ev); !ok {
		f.warnings = append(f.warnings, fmt.Sprintf("dropped an event at byte %d that is not valid JSON", off))
		return nil
	}
	f.key = append(append(append(f.key[:0], ev.pid...), 0), ev.tid...)
	if _, ok := f.used[string(f.key)]; !ok {
		f.used[string(f.key)] = struct{}{}
	}
	if len(ev.ph) == 1 && ev.ph[0] == 'M' && string(ev.name) == "thread_name" && ev.args != nil {
		f.threadNm[string(f.key)] = string(ev.args.GetStringBytes("name"))
	}
	if len(ev.ph) == 1 && ev.ph[0] == 'X' && isGPUCat(ev.cat) && ev.hasTS && ev.hasDur && ev.dur >= 0 {
		tr, ok := f.tracks[string(f.key)]
		if !ok {
			tr = int32(len(f.trackKeys))
			f.tracks[string(f.key)] = tr
			f.trackKeys = append(f.trackKeys, string(f.key))
		}
		f.recs = append(f.recs, gpuRec{off: int64(len(f.arena)), n: int64(len(raw)), start: ev.ts, end: ev.ts + ev.dur,
			track: tr, seq: int32(len(f.recs))})
		f.arena = append(f.arena, raw...)
		return nil
	}
	f.writeEvent(raw)
	return nil
}

// endEvents assigns lanes and writes the buffered GPU ops and the new thread_name events.
func (f *fixer) endEvents() error {
	if f.done {
		return nil
	}
	f.done = true
	st := f.stats
	st.GPUOps = int64(len(f.recs))
	st.Tracks = len(f.trackKeys)
	order := make([]int32, len(f.recs))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		x, y := &f.recs[a], &f.recs[b]
		if c := cmp.Compare(x.track, y.track); c != 0 {
			return c
		}
		if c := cmp.Compare(x.start, y.start); c != 0 {
			return c
		}
		if c := cmp.Compare(x.end, y.end); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	var laneEnd []int64
	cur := int32(-1)
	type laneKey struct{ track, lane int32 }
	maxLane := map[int32]int32{}
	for _, i := range order {
		r := &f.recs[i]
		if r.track != cur {
			cur = r.track
			laneEnd = laneEnd[:0]
		}
		lane := -1
		for l, e := range laneEnd {
			if e <= r.start { // touching is not overlapping
				lane = l
				break
			}
		}
		if lane < 0 {
			lane = len(laneEnd)
			laneEnd = append(laneEnd, r.end)
		} else {
			laneEnd[lane] = max(laneEnd[lane], r.end)
		}
		r.lane = int32(lane)
		if lane > 0 {
			st.Moved++
			if int32(lane) > maxLane[r.track] {
				maxLane[r.track] = int32(lane)
			}
		}
	}
	// New tids per (track, lane).
	newTID := map[laneKey][]byte{}
	type laneMeta struct {
		pid, tid []byte
		name     string
	}
	var metas []laneMeta
	for tr := int32(0); tr < int32(len(f.trackKeys)); tr++ {
		ml := maxLane[tr]
		if ml == 0 {
			continue
		}
		key := f.trackKeys[tr]
		sep := indexByte(key, 0)
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
	// Write the GPU ops in their original order.
	var buf []byte
	for i := range f.recs {
		r := &f.recs[i]
		raw := f.arena[r.off : r.off+r.n]
		if r.lane == 0 {
			f.writeEvent(raw)
			continue
		}
		v, err := f.p.ParseBytes(raw)
		if err != nil {
			f.writeEvent(raw)
			continue
		}
		f.arenaJSON.Reset()
		tid := newTID[laneKey{r.track, r.lane}]
		var tv *fastjson.Value
		if tid[0] == '"' {
			var s string
			_ = json.Unmarshal(tid, &s)
			tv = f.arenaJSON.NewString(s)
		} else {
			tv = f.arenaJSON.NewNumberString(string(tid))
		}
		v.Set("tid", tv)
		buf = v.MarshalTo(buf[:0])
		f.writeEvent(buf)
		if i&4095 == 0 {
			if err := f.ctx.Err(); err != nil {
				return err
			}
		}
	}
	for _, m := range metas {
		buf = buf[:0]
		buf = append(buf, `{"name": "thread_name", "ph": "M", "ts": 0, "pid": `...)
		buf = append(buf, m.pid...)
		buf = append(buf, `, "tid": `...)
		buf = append(buf, m.tid...)
		buf = append(buf, `, "args": {"name": `...)
		buf = jsonQuote(buf, m.name)
		buf = append(buf, `}}`...)
		f.writeEvent(buf)
	}
	f.arena = nil
	f.w.WriteString("\n")
	return nil
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
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
