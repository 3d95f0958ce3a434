package backends

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

var testPatterns = []Pattern{
	{Finding: "bad-args", Subs: []string{"error: unrecognized arguments:"}, Fatal: true},
	{Finding: "oom", Subs: []string{"CUDA out of memory", "OutOfMemoryError"}, Fatal: true},
	{Finding: "slow", Subs: []string{"slow step"}},
}

func TestLogWatcherFindingsFatalAndMark(t *testing.T) {
	w := NewLogWatcher(testPatterns)
	w.Line(1, "stdout", "loading\rslow step 3")
	if _, _, ok := w.Fatal(); ok {
		t.Fatal("a non-fatal finding is fatal")
	}
	mark := w.Mark()
	// Colour codes inside a marker do not hide it.
	w.Line(2, "stderr", "torch.\x1b[31mOutOfMemoryError\x1b[0m: CUDA out of memory")
	for i := 3; i < 3+LogEvidence+2; i++ {
		w.Line(i, "stderr", "RuntimeError: CUDA out of memory "+strconv.Itoa(i))
	}
	f, ev, ok := w.Fatal()
	if !ok || f != "oom" || ev.Line != 2 || ev.Text != "torch.OutOfMemoryError: CUDA out of memory" {
		t.Fatalf("Fatal = %q %+v %v", f, ev, ok)
	}
	now := w.Mark()
	if mark["oom"] != 0 || now["oom"] != LogEvidence+3 || now["slow"] != 1 {
		t.Fatalf("marks %v then %v", mark, now)
	}
	if got := len(w.Evidence("oom")); got != LogEvidence {
		t.Fatalf("%d evidence lines kept, want %d", got, LogEvidence)
	}
	w.Line(100, "stdout", "usage: vllm serve\nvllm serve: error: unrecognized arguments: --bogus")
	if f, _, _ := w.Fatal(); f != "bad-args" {
		t.Fatalf("Fatal = %q; the first fatal pattern in table order wins", f)
	}
}

func TestLogWatcherTail(t *testing.T) {
	w := NewLogWatcher(nil)
	if w.Tail(5) != nil {
		t.Fatal("tail of an empty log")
	}
	for i := 1; i <= LogTail+10; i++ {
		w.Line(i, "stdout", "line "+strconv.Itoa(i)+"\r\n")
	}
	tail := w.Tail(3)
	if len(tail) != 3 || tail[0].Line != LogTail+8 || tail[2].Text != "line "+strconv.Itoa(LogTail+10) {
		t.Fatalf("tail %+v", tail)
	}
	if n := len(w.Tail(1000)); n != LogTail {
		t.Fatalf("tail of %d lines, want at most %d", n, LogTail)
	}
}

func FuzzLogWatcherLine(f *testing.F) {
	f.Add("CUDA out of memory", 1)
	f.Add("\x1b[1mOutOfMemoryError\x1b]8;;x\x07\r\rerror: unrecognized arguments: x", 7)
	f.Add(strings.Repeat("é", LogLineBytes), 2)
	f.Fuzz(func(t *testing.T, text string, n int) {
		w := NewLogWatcher(testPatterns)
		for i := range 3 {
			w.Line(n+i, "stdout", text)
		}
		for _, p := range testPatterns {
			if len(w.Evidence(p.Finding)) > LogEvidence {
				t.Fatal("evidence not bounded")
			}
		}
		for _, e := range w.Tail(LogTail) {
			if len(e.Text) > LogLineBytes+len("…[truncated]") || (utf8.ValidString(text) && !utf8.ValidString(e.Text)) {
				t.Fatalf("stored line %q", e.Text)
			}
		}
	})
}
