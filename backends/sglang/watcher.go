package sglang

import (
	"cmp"
	"slices"
	"strings"
	"sync"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/reports/rundir"
)

// Finding names what a log line showed. They are the keys of Watcher.Evidence.
type Finding string

// The findings the watcher records. Each maps to fixed, case-sensitive substrings of sglang's
// log (ref-sglang-interfaces.md §A.3, §A.6, §A.7) matched after ANSI codes are stripped.
const (
	// FindingFallback: sglang ran the vanilla diffusers pipeline instead of its native engine.
	FindingFallback Finding = "diffusers-fallback"
	// FindingOOM: a CUDA out-of-memory error.
	FindingOOM Finding = "cuda-oom"
	// FindingTraceSave: the torch profiler failed to write or verify its trace.
	FindingTraceSave Finding = "trace-save-failed"
	// FindingUnrecognized: argparse rejected a flag (usually an extra_args typo or a flag this
	// sglang build does not know).
	FindingUnrecognized Finding = "unrecognized-arguments"
	// FindingWorkerDead: a diffusion worker (scheduler) process died.
	FindingWorkerDead Finding = "worker-dead"
	// FindingGenerateFailed: sglang reported that a prompt produced no output.
	FindingGenerateFailed Finding = "generate-failed"
)

// patterns lists the substrings per finding. The fallback markers are exactly the three that
// sglang's own CI gate uses; "Falling back to default kernels" (deep_gemm without CUDA_HOME)
// and "falling back to float32" (a dtype retry) contain "Falling back"/"falling back" but are
// not diffusers fallbacks, which is why no broader pattern is used.
var patterns = []struct {
	finding Finding
	subs    []string
}{
	{FindingFallback, []string{"Falling back to diffusers backend", "Using diffusers backend", "Loaded diffusers pipeline"}},
	{FindingOOM, []string{"CUDA out of memory", "OutOfMemoryError"}}, // also covers torch.OutOfMemoryError
	{FindingTraceSave, []string{"Failed to save trace:", "Trace file may be corrupted:", "Failed to export trace:", "Multiple gzip headers detected"}},
	{FindingUnrecognized, []string{"error: unrecognized arguments:"}},
	{FindingWorkerDead, []string{"scheduler is dead"}},
	{FindingGenerateFailed, []string{"Failed to generate output"}},
}

// Path-carrying lines. The trace line changed wording (and gained colour codes) across
// versions; the oldest metrics line is prefixed with "[Performance] ", which the substring
// match covers.
var (
	tracePrefixes   = []string{"Saved profiler traces to:", "Saving profiler traces to:"}
	metricsPrefixes = []string{"Metrics dumped to:"}
)

// anchors are byte pairs, one per needle above (each occurs in its needle), that let Line
// skip the substring searches for the vast majority of lines (tqdm progress frames, stage
// timings) with one table lookup per byte: a line without any anchor pair cannot contain a
// needle. TestAnchorsCoverNeedles keeps this list in step with the needles.
var anchors = []string{
	"ff", // Falling back to diffusers backend, Using diffusers backend, Loaded diffusers pipeline
	"CU", // CUDA out of memory
	"yE", // OutOfMemoryError
	"Fa", // Failed to save trace:, Failed to export trace:, Failed to generate output
	"Tr", // Trace file may be corrupted:
	"zi", // Multiple gzip headers detected
	"gn", // error: unrecognized arguments:
	"ea", // scheduler is dead
	"Sa", // Saved profiler traces to:, Saving profiler traces to:
	"Me", // Metrics dumped to:
}

// anchorSet has bit a<<8|b set for every anchor pair ab.
var anchorSet = func() (set [1 << 16 / 64]uint64) {
	for _, a := range anchors {
		k := uint16(a[0])<<8 | uint16(a[1])
		set[k>>6] |= 1 << (k & 63)
	}
	return set
}()

// mayMatch reports whether s contains any anchor pair.
func mayMatch(s string) bool {
	for i := 0; i+1 < len(s); i++ {
		k := uint16(s[i])<<8 | uint16(s[i+1])
		if anchorSet[k>>6]&(1<<(k&63)) != 0 {
			return true
		}
	}
	return false
}

// Bounds that keep a watcher's memory constant however long or hostile the log is.
const (
	// MaxEvidence is how many lines are kept per finding; the first ones are kept because
	// the first OOM or fallback line names the cause, later ones repeat it.
	MaxEvidence = 5
	// TailLines is how many of the last log lines are kept for context.
	TailLines = 40
	// MaxLineBytes caps the stored text of one line (evidence and tail).
	MaxLineBytes = 2048
	// MaxPaths caps how many trace or metrics paths are remembered.
	MaxPaths = 64
)

// Watcher is the sglang log watcher. It is safe for concurrent use because the process layer
// may feed stdout and stderr from different goroutines.
type Watcher struct {
	mu       sync.Mutex
	lines    int
	evidence map[Finding][]rundir.Evidence
	counts   map[Finding]int
	traces   []string
	metrics  []string
	tail     [TailLines]rundir.Evidence
	tailN    int // number of lines ever added to tail
}

// NewWatcher returns an empty watcher.
func NewWatcher() *Watcher {
	return &Watcher{evidence: map[Finding][]rundir.Evidence{}, counts: map[Finding]int{}}
}

// Line implements backends.Watcher. text may contain ANSI colour codes and '\r' progress
// frames; each '\r'-separated frame is matched on its own so that a path printed after a
// progress bar ends where the line ends.
func (w *Watcher) Line(lineNo int, stream, text string) {
	clean := StripANSI(text)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lines++
	w.tail[w.tailN%TailLines] = rundir.Evidence{Line: lineNo, Text: clip(strings.TrimRight(clean, "\r\n")), Stream: stream}
	w.tailN++
	if !mayMatch(clean) {
		return
	}
	for frame := range strings.SplitSeq(clean, "\r") {
		w.match(lineNo, stream, frame)
	}
}

func (w *Watcher) match(lineNo int, stream, frame string) {
	if frame == "" {
		return
	}
	for _, p := range patterns {
		for _, s := range p.subs {
			if strings.Contains(frame, s) {
				w.counts[p.finding]++
				if len(w.evidence[p.finding]) < MaxEvidence {
					w.evidence[p.finding] = append(w.evidence[p.finding], rundir.Evidence{Line: lineNo, Text: clip(frame), Stream: stream})
				}
				break
			}
		}
	}
	if p, ok := pathAfter(frame, tracePrefixes); ok {
		w.traces = addPath(w.traces, p)
	}
	if p, ok := pathAfter(frame, metricsPrefixes); ok {
		w.metrics = addPath(w.metrics, p)
	}
}

// pathAfter returns the text after the first of prefixes found in frame, trimmed.
func pathAfter(frame string, prefixes []string) (string, bool) {
	for _, pre := range prefixes {
		if i := strings.Index(frame, pre); i >= 0 {
			p := strings.TrimSpace(frame[i+len(pre):])
			if p == "" || len(p) > 4096 {
				return "", false
			}
			return p, true
		}
	}
	return "", false
}

func addPath(list []string, p string) []string {
	for _, q := range list {
		if q == p {
			return list
		}
	}
	if len(list) >= MaxPaths {
		return list
	}
	return append(list, p)
}

// clip bounds one stored line, cutting on a UTF-8 boundary.
func clip(s string) string {
	if len(s) <= MaxLineBytes {
		return s
	}
	cut := MaxLineBytes
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…[truncated]"
}

// Evidence returns the first MaxEvidence lines that showed finding f.
func (w *Watcher) Evidence(f Finding) []rundir.Evidence {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]rundir.Evidence(nil), w.evidence[f]...)
}

// Count is how many lines showed finding f (not bounded by MaxEvidence).
func (w *Watcher) Count(f Finding) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.counts[f]
}

// TracePaths are the trace files sglang said it saved, in log order, without duplicates.
func (w *Watcher) TracePaths() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.traces...)
}

// MetricsPaths are the perf-dump files sglang said it wrote, in log order.
func (w *Watcher) MetricsPaths() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.metrics...)
}

// Needles implements backends.Selective: every substring the watcher looks for. A line holding
// none of them (after ANSI codes are stripped) can only matter as part of the tail.
func (w *Watcher) Needles() []string {
	var out []string
	for _, p := range patterns {
		out = append(out, p.subs...)
	}
	out = append(out, tracePrefixes...)
	return append(out, metricsPrefixes...)
}

// TailLines implements backends.Selective.
func (w *Watcher) TailLines() int { return TailLines }

// Lines is how many lines the watcher has seen (under a selective process layer, the lines it
// was given, not all lines of the log).
func (w *Watcher) Lines() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lines
}

// Tail returns up to n of the last lines seen (n ≤ TailLines), oldest first, ANSI stripped.
func (w *Watcher) Tail(n int) []rundir.Evidence {
	w.mu.Lock()
	defer w.mu.Unlock()
	n = min(n, TailLines, w.tailN)
	if n <= 0 {
		return nil
	}
	k := min(TailLines, w.tailN)
	all := make([]rundir.Evidence, 0, k)
	for i := w.tailN - k; i < w.tailN; i++ {
		all = append(all, w.tail[i%TailLines])
	}
	// A selective process layer hands over the last lines after the child exited, behind any
	// selected line among them, so arrival order is not log order; line numbers are.
	slices.SortStableFunc(all, func(a, b rundir.Evidence) int { return cmp.Compare(a.Line, b.Line) })
	return all[len(all)-n:]
}

// StripANSI removes terminal escape sequences (backends.StripANSI): sglang colours paths and
// timings, so matching must not depend on them.
func StripANSI(s string) string { return backends.StripANSI(s) }
