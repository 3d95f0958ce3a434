package sim

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
)

// The nsys simulator learns what "ran on the GPU" from the simulated application itself, the
// way real nsys learns it from the CUPTI library it injects: it sets EnvNSysActivity to a file
// path for its child, and the sglang simulator appends one JSON object per line to that file
// as the run progresses (so an interrupted run still leaves the activity up to that point).
//
// Record kinds ("k"):
//
//	proc    pid, name                      the process, once
//	gpu     dev, name                      a device, once
//	name    id, v                          a string table entry, before its first use
//	kernel  s, e, dev, str, corr, n, g, b  a kernel (n = name id, g/b = grid/block)
//	mem     s, e, dev, str, corr, bytes, ck  a memcpy (ck: 1 HtoD, 2 DtoH)
//	rt      s, e, pid, tid, corr, n        a CUDA runtime call (unversioned name)
//	nvtx    s, e, pid, tid, text           a push/pop range
//	cap     s, v                           cudaProfilerStart (v "start") or cudaProfilerStop ("stop")
//
// Times are absolute Unix nanoseconds on the simulated clock (see clock): the unscaled
// timeline a real run would have, so windows given to nsys in real seconds map onto it.
type actRec struct {
	K     string   `json:"k"`
	S     int64    `json:"s,omitempty"`
	E     int64    `json:"e,omitempty"`
	PID   int32    `json:"pid,omitempty"`
	TID   int32    `json:"tid,omitempty"`
	Dev   int32    `json:"dev,omitempty"`
	Str   int32    `json:"str,omitempty"`
	Corr  int64    `json:"corr,omitempty"`
	N     int32    `json:"n,omitempty"`
	ID    int32    `json:"id,omitempty"`
	V     string   `json:"v,omitempty"`
	Name  string   `json:"name,omitempty"`
	Text  string   `json:"text,omitempty"`
	G     [3]int32 `json:"g,omitzero"`
	B     [3]int32 `json:"b,omitzero"`
	Bytes int64    `json:"bytes,omitempty"`
	CK    int32    `json:"ck,omitempty"`
}

// activityWriter appends records to the activity file; errors are sticky and reported once,
// because losing profiler data must not kill the simulated application (nor does it in CUPTI).
type activityWriter struct {
	f     *os.File
	bw    *bufio.Writer
	line  []byte // put's buffer
	names map[string]int32
	err   error
}

func openActivity(path string) (*activityWriter, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open nsys activity file: %w", err)
	}
	bw := bufio.NewWriterSize(f, 1<<16)
	return &activityWriter{f: f, bw: bw, names: map[string]int32{}}, nil
}

func (a *activityWriter) put(r *actRec) {
	if a == nil || a.err != nil {
		return
	}
	a.line = appendActRec(a.line[:0], r)
	_, a.err = a.bw.Write(a.line)
}

// name returns the string-table id of s, writing the entry the first time.
func (a *activityWriter) name(s string) int32 {
	if id, ok := a.names[s]; ok {
		return id
	}
	id := int32(len(a.names) + 1)
	a.names[s] = id
	a.put(&actRec{K: "name", ID: id, V: s})
	return id
}

// cudaProfiler records a cudaProfilerStart (start) or cudaProfilerStop at simulated time at:
// what opens and closes an nsys --capture-range=cudaProfilerApi range.
func (a *activityWriter) cudaProfiler(start bool, at int64) {
	v := "stop"
	if start {
		v = "start"
	}
	a.put(&actRec{K: "cap", S: at, V: v})
	a.flush()
}

// captureRanges pairs the cudaProfilerStart/Stop calls into ranges; a range still open at the
// end runs to the end (math.MaxInt64). With repeat false only the first range counts (nsys
// --capture-range-end=stop), else every one (repeat).
func captureRanges(caps []actRec, repeat bool) [][2]int64 {
	var out [][2]int64
	open := int64(-1)
	for _, c := range caps {
		switch {
		case c.V == "start" && open < 0:
			open = c.S
		case c.V == "stop" && open >= 0:
			out = append(out, [2]int64{open, c.S})
			open = -1
		}
		if len(out) > 0 && !repeat {
			return out
		}
	}
	if open >= 0 {
		out = append(out, [2]int64{open, math.MaxInt64})
	}
	return out
}

func (a *activityWriter) flush() {
	if a == nil || a.err != nil {
		return
	}
	a.err = a.bw.Flush()
}

func (a *activityWriter) close() error {
	if a == nil {
		return nil
	}
	a.flush()
	if err := a.f.Close(); a.err == nil {
		a.err = err
	}
	return a.err
}

// activity is everything read back from an activity file, names resolved.
type activity struct {
	Procs   []actRec
	GPUs    []actRec
	Kernels []actRec
	Mems    []actRec
	RT      []actRec
	NVTX    []actRec
	Caps    []actRec // cudaProfilerStart/Stop calls, in order
}

// readActivity parses an activity file; a truncated last line (the app was killed while
// writing) is ignored, as CUPTI drops an unfinished buffer.
func readActivity(r io.Reader) (*activity, error) {
	a := &activity{}
	names := map[int32]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<24)
	line := 0
	for sc.Scan() {
		line++
		var rec actRec
		if !parseActLine(sc.Bytes(), &rec) {
			rec = actRec{}
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				continue
			}
		}
		if rec.N != 0 {
			rec.Name = names[rec.N]
		}
		switch rec.K {
		case "name":
			names[rec.ID] = rec.V
		case "proc":
			a.Procs = append(a.Procs, rec)
		case "gpu":
			a.GPUs = append(a.GPUs, rec)
		case "kernel":
			a.Kernels = append(a.Kernels, rec)
		case "mem":
			a.Mems = append(a.Mems, rec)
		case "rt":
			a.RT = append(a.RT, rec)
		case "nvtx":
			a.NVTX = append(a.NVTX, rec)
		case "cap":
			a.Caps = append(a.Caps, rec)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read activity line %d: %w", line+1, err)
	}
	return a, nil
}
