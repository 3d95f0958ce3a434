package backends

import (
	"cmp"
	"slices"
	"strings"
	"sync"

	"github.com/sglprof/runner/reports/rundir"
)

// Bounds that keep a LogWatcher's memory constant however long or hostile the log is.
const (
	// LogEvidence is how many lines are kept per finding: the first ones, which name the cause.
	LogEvidence = 5
	// LogTail is how many of the last lines are kept for context.
	LogTail = 40
	// LogLineBytes caps the stored text of one line.
	LogLineBytes = 2048
)

// Pattern is one finding of a LogWatcher: fixed, case-sensitive substrings of a program's log,
// matched after ANSI codes are stripped. Fatal findings end a server's start at once.
type Pattern struct {
	Finding string
	Subs    []string
	Fatal   bool
}

// LogWatcher is a ServerWatcher driven by a table of patterns, for programs whose gates are
// plain substrings (sglang's watcher adds an anchor prefilter and path capture for the
// hundreds of megabytes `sglang generate` logs). It is safe for concurrent use.
type LogWatcher struct {
	patterns []Pattern
	mu       sync.Mutex
	evidence map[string][]rundir.Evidence
	counts   map[string]int
	tail     [LogTail]rundir.Evidence
	tailN    int
}

// NewLogWatcher returns a watcher for patterns.
func NewLogWatcher(patterns []Pattern) *LogWatcher {
	return &LogWatcher{patterns: patterns, evidence: map[string][]rundir.Evidence{}, counts: map[string]int{}}
}

// Line implements Watcher; '\r'-separated progress frames are matched one by one.
func (w *LogWatcher) Line(lineNo int, stream, text string) {
	clean := StripANSI(text)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tail[w.tailN%LogTail] = rundir.Evidence{Line: lineNo, Text: clipLine(strings.TrimRight(clean, "\r\n")), Stream: stream}
	w.tailN++
	for frame := range strings.SplitSeq(clean, "\r") {
		for _, p := range w.patterns {
			if !slices.ContainsFunc(p.Subs, func(s string) bool { return strings.Contains(frame, s) }) {
				continue
			}
			w.counts[p.Finding]++
			if len(w.evidence[p.Finding]) < LogEvidence {
				w.evidence[p.Finding] = append(w.evidence[p.Finding], rundir.Evidence{Line: lineNo, Text: clipLine(frame), Stream: stream})
			}
		}
	}
}

// Needles implements Selective.
func (w *LogWatcher) Needles() []string {
	var out []string
	for _, p := range w.patterns {
		out = append(out, p.Subs...)
	}
	return out
}

// TailLines implements Selective.
func (w *LogWatcher) TailLines() int { return LogTail }

// Evidence returns the first LogEvidence lines that showed finding f.
func (w *LogWatcher) Evidence(f string) []rundir.Evidence {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.evidence[f])
}

// Tail implements ServerWatcher.
func (w *LogWatcher) Tail(n int) []rundir.Evidence {
	w.mu.Lock()
	defer w.mu.Unlock()
	n = min(n, LogTail, w.tailN)
	if n <= 0 {
		return nil
	}
	k := min(LogTail, w.tailN)
	all := make([]rundir.Evidence, 0, k)
	for i := w.tailN - k; i < w.tailN; i++ {
		all = append(all, w.tail[i%LogTail])
	}
	slices.SortStableFunc(all, func(a, b rundir.Evidence) int { return cmp.Compare(a.Line, b.Line) })
	return all[len(all)-n:]
}

// Fatal implements ServerWatcher: the first fatal pattern, in table order, that matched.
func (w *LogWatcher) Fatal() (string, rundir.Evidence, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.patterns {
		if ev := w.evidence[p.Finding]; p.Fatal && len(ev) > 0 {
			return p.Finding, ev[0], true
		}
	}
	return "", rundir.Evidence{}, false
}

// Mark implements ServerWatcher.
func (w *LogWatcher) Mark() Mark {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := make(Mark, len(w.counts))
	for k, v := range w.counts {
		m[k] = v
	}
	return m
}

// clipLine bounds one stored line, cutting on a UTF-8 boundary.
func clipLine(s string) string {
	if len(s) <= LogLineBytes {
		return s
	}
	cut := LogLineBytes
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…[truncated]"
}

// StripANSI removes terminal escape sequences: CSI sequences (ESC '[' parameters intermediates
// final, e.g. "\x1b[1;36m", "\x1b[0;0m", "\x1b[2K"), OSC sequences (ESC ']' ... BEL or ESC '\')
// and other escapes (ESC ( B, ESC =). Servers colour paths and timings, so log matching must
// not depend on them.
func StripANSI(s string) string {
	i := strings.IndexByte(s, 0x1b)
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i >= 0 {
		b.WriteString(s[:i])
		s = s[i+1:]
		switch {
		case s == "":
		case s[0] == '[':
			j := 1
			for j < len(s) && s[j] >= 0x30 && s[j] <= 0x3f { // parameter bytes
				j++
			}
			for j < len(s) && s[j] >= 0x20 && s[j] <= 0x2f { // intermediate bytes
				j++
			}
			if j < len(s) && s[j] >= 0x40 && s[j] <= 0x7e { // final byte
				j++
			}
			s = s[j:]
		case s[0] == ']':
			j := 1
			for j < len(s) {
				if s[j] == 0x07 {
					j++
					break
				}
				if s[j] == 0x1b && j+1 < len(s) && s[j+1] == '\\' {
					j += 2
					break
				}
				j++
			}
			s = s[j:]
		default: // nF escapes such as ESC ( B: intermediates 0x20-0x2f, then one final byte
			j := 0
			for j < len(s) && s[j] >= 0x20 && s[j] <= 0x2f {
				j++
			}
			if j < len(s) {
				j++
			}
			s = s[j:]
		}
		i = strings.IndexByte(s, 0x1b)
	}
	b.WriteString(s)
	return b.String()
}
