package proc

import (
	"log/slog"
	"strings"
	"testing"
	"time"
)

// refSplit is the specification of line splitting, written the slow and
// obvious way: '\n', '\r' and "\r\n" end a line; an empty line ended by a
// bare '\r' is dropped; a line longer than limit comes in limit-sized
// pieces, all but the last marked partial, each starting with the previous
// piece's last overlap bytes; an unterminated tail is a line.
func refSplit(in string, limit int) []Line {
	var out []Line
	emit := func(text string, cr bool) {
		if text == "" && cr {
			return
		}
		for len(text) > limit {
			out = append(out, Line{Text: text[:limit], Partial: true})
			text = text[limit-min(Overlap, limit/2):]
		}
		out = append(out, Line{Text: text})
	}
	var cur strings.Builder
	for i := 0; i < len(in); i++ {
		switch in[i] {
		case '\n':
			emit(cur.String(), false)
			cur.Reset()
		case '\r':
			emit(cur.String(), true)
			cur.Reset()
			if i+1 < len(in) && in[i+1] == '\n' {
				i++
			}
		default:
			cur.WriteByte(in[i])
		}
	}
	if cur.Len() > 0 {
		emit(cur.String(), false)
	}
	return out
}

// split runs the real splitter over in, fed in chunks of the given sizes
// (cycled), and returns what OnLine received.
func split(in string, limit int, chunks []int) []Line {
	var got []Line
	o := &output{onLine: func(l Line) { got = append(got, l) }}
	s := &stream{o: o, name: Stdout, limit: limit}
	for i, k := 0, 0; i < len(in); k++ {
		n := len(in) - i
		if len(chunks) > 0 {
			n = min(max(chunks[k%len(chunks)], 1), len(in)-i)
		}
		s.consume([]byte(in[i:i+n]), in[i:i+n])
		i += n
	}
	s.flush()
	for i := range got {
		got[i].No, got[i].Stream = 0, ""
	}
	return got
}

func sameLines(a, b []Line) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSplitLines(t *testing.T) {
	cases := []struct {
		name  string
		in    string
		limit int
		want  []string // "+" suffix marks a partial line
	}{
		{"plain", "a\nb\n", 100, []string{"a", "b"}},
		{"no final newline", "a\nb", 100, []string{"a", "b"}},
		{"crlf is one end", "a\r\nb\r\n", 100, []string{"a", "b"}},
		{"empty lines kept", "a\n\n\nb\n", 100, []string{"a", "", "", "b"}},
		{"progress bar", "\r 10%\r 20%\r100%\n", 100, []string{" 10%", " 20%", "100%"}},
		{"newline then progress", "start\n\r 1/3\r 2/3\r 3/3\ndone\n", 100, []string{"start", " 1/3", " 2/3", " 3/3", "done"}},
		{"cr cr", "a\r\rb", 100, []string{"a", "b"}},
		{"cr then lf lf", "a\r\n\nb", 100, []string{"a", "", "b"}},
		{"long line cut", "abcdefghij\n", 4, []string{"abcd+", "cdef+", "efgh+", "ghij"}},
		{"exact limit", "abcd\nefgh", 4, []string{"abcd", "efgh"}},
		{"twice the limit", "abcdefgh\n", 4, []string{"abcd+", "cdef+", "efgh"}},
		{"odd limit", "abcdefgh\n", 5, []string{"abcde+", "defgh"}},
		{"only newlines", "\n\n", 100, []string{"", ""}},
		{"only crs", "\r\r\r", 100, nil},
		{"empty", "", 100, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var want []Line
			for _, w := range tc.want {
				l := Line{Text: strings.TrimSuffix(w, "+"), Partial: strings.HasSuffix(w, "+")}
				want = append(want, l)
			}
			if ref := refSplit(tc.in, tc.limit); !sameLines(ref, want) {
				t.Fatalf("reference splitter disagrees with the table: %+v", ref)
			}
			// Whole, byte by byte, and in uneven chunks: same lines.
			for _, chunks := range [][]int{nil, {1}, {2, 3}, {5, 1, 7}} {
				if got := split(tc.in, tc.limit, chunks); !sameLines(got, want) {
					t.Errorf("chunks %v: got %+v, want %+v", chunks, got, want)
				}
			}
		})
	}
}

func TestLineNumbersAcrossStreams(t *testing.T) {
	var got []Line
	o := &output{onLine: func(l Line) { got = append(got, l) }}
	o.stdout = &stream{o: o, name: Stdout, limit: MaxLine}
	o.stderr = &stream{o: o, name: Stderr, limit: MaxLine}
	o.stdout.consume([]byte("o1\no2"), "o1\no2")
	o.stderr.consume([]byte("e1\n"), "")
	o.stdout.consume([]byte("\n"), "\n")
	want := []Line{{1, Stdout, "o1", false}, {2, Stderr, "e1", false}, {3, Stdout, "o2", false}}
	if !sameLines(got, want) || o.lines != 3 {
		t.Errorf("got %+v (count %d), want %+v", got, o.lines, want)
	}
}

// FuzzSplitLines checks the chunked splitter against the reference for any
// input and chunking: the line path must never lose, merge or reorder bytes.
func FuzzSplitLines(f *testing.F) {
	for _, s := range []string{"a\nb", "\r 1\r 2\n", "a\r\n\r\nb\r", strings.Repeat("x", 40) + "\n", "\n\r\n\r"} {
		f.Add(s, uint8(7), uint8(3))
	}
	f.Fuzz(func(t *testing.T, in string, limit, chunk uint8) {
		lim := int(limit%32) + 1
		want := refSplit(in, lim)
		for _, chunks := range [][]int{nil, {int(chunk%16) + 1}, {1}} {
			if got := split(in, lim, chunks); !sameLines(got, want) {
				t.Fatalf("limit %d chunks %v: got %+v, want %+v", lim, chunks, got, want)
			}
		}
	})
}

func TestStreamWriteFeedsLinesAndLog(t *testing.T) {
	var log strings.Builder
	var got []string
	o := newOutput(Spec{Log: &log, LogStall: time.Second, OnLine: func(l Line) { got = append(got, l.Stream+":"+l.Text) }}, slog.New(slog.DiscardHandler))
	big := strings.Repeat("y", chunkSize+10) // spans two chunks
	for _, w := range []struct {
		s   *stream
		txt string
	}{{o.stdout, "a\r\nb"}, {o.stdout, "c\n"}, {o.stderr, "\r 1%\r 2%\n"}, {o.stdout, big + "\n"}} {
		if n, err := w.s.Write([]byte(w.txt)); n != len(w.txt) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	o.finish()
	want := []string{"stdout:a", "stdout:bc", "stderr: 1%", "stderr: 2%", "stdout:" + big}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("lines %q, want %q", got, want)
	}
	if want := "a\r\nbc\n\r 1%\r 2%\n" + big + "\n"; log.String() != want {
		t.Errorf("log is not the raw bytes in order (%d bytes, want %d)", log.Len(), len(want))
	}
	if o.lines != len(want) || o.logErr() != nil {
		t.Errorf("lines=%d logErr=%v", o.lines, o.logErr())
	}
}
