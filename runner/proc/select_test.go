package proc

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// refSelect is the specification of Spec.Select: the reference lines,
// numbered, of which OnLine gets those holding a needle or an escape byte
// as they come, then the rest of the last tail lines in order, cut to
// TailBytes.
func refSelect(in string, limit int, sel []string, tail int) []Line {
	all := refSplit(in, limit)
	picks := func(s string) bool {
		if strings.IndexByte(s, esc) >= 0 {
			return true
		}
		for _, n := range sel {
			if n != "" && strings.Contains(s, n) {
				return true
			}
		}
		return false
	}
	var out []Line
	for i, l := range all {
		l.No = i + 1
		all[i] = l
		if picks(l.Text) {
			out = append(out, l)
		}
	}
	for _, l := range all[max(0, len(all)-tail):] {
		if !picks(l.Text) {
			l.Text = l.Text[:min(len(l.Text), TailBytes)]
			out = append(out, l)
		}
	}
	return out
}

// splitSelect runs the real selective path over in, fed in chunks of the
// given sizes (cycled) as the dispatcher would.
func splitSelect(in string, limit int, sel []string, tail int, chunks []int) ([]Line, int) {
	var got []Line
	o := &output{onLine: func(l Line) { l.Stream = ""; got = append(got, l) }}
	o.sel = newNeedles(sel)
	if o.sel == nil {
		o.sel = &needles{}
	}
	o.tail.init(tail)
	s := &stream{o: o, name: Stdout, limit: limit}
	for i, k := 0, 0; i < len(in); k++ {
		n := len(in) - i
		if len(chunks) > 0 {
			n = min(max(chunks[k%len(chunks)], 1), len(in)-i)
		}
		s.take([]byte(in[i:i+n]), "")
		i += n
	}
	s.flush()
	o.tail.catchUp(o.onLine)
	return got, o.lines
}

func TestSelectMatchesReference(t *testing.T) {
	sel := []string{"OutOfMemoryError", "Saved profiler traces to:", "ab"}
	rng := rand.New(rand.NewPCG(3, 4))
	pieces := []string{"step 1/50 took 90 ms", "torch.OutOfMemoryError: CUDA", "\x1b[1mSaved\x1b[0m", "Saved profiler traces to: /t/x.json.gz",
		"\n", "\n", "\n", "\r", "\r\n", "ab", "a", "b", "", strings.Repeat("w", 70)}
	for trial := 0; trial < 2000; trial++ {
		var b strings.Builder
		for k := rng.IntN(60); k > 0; k-- {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		in := b.String()
		limit := []int{MaxLine, 64, 300}[trial%3]
		tail := []int{0, 1, 3, 40}[trial%4]
		want := refSelect(in, limit, sel, tail)
		for _, chunks := range [][]int{nil, {1}, {7, 3}, {200}, {rng.IntN(500) + 1}} {
			got, n := splitSelect(in, limit, sel, tail, chunks)
			if !sameLines(got, want) || n != len(refSplit(in, limit)) {
				t.Fatalf("input %q limit %d tail %d chunks %v:\n got %+v (%d lines)\nwant %+v", in, limit, tail, chunks, got, n, want)
			}
		}
	}
}

// A log line longer than TailBytes reaches the catch-up cut, and an empty
// Select still delivers escapes and the tail.
func TestSelectTailCutAndEmptySet(t *testing.T) {
	long := strings.Repeat("x", TailBytes+100)
	got, n := splitSelect("a\n\x1b[31mred\n"+long+"\n", MaxLine, []string{}, 1, nil)
	want := []Line{{No: 2, Text: "\x1b[31mred"}, {No: 3, Text: long[:TailBytes]}}
	if !sameLines(got, want) || n != 3 {
		t.Errorf("got %+v (%d lines), want %+v", got, n, want)
	}
}

func FuzzSelect(f *testing.F) {
	f.Add("a\nSaved x\nb\r\nc", uint8(5), uint8(2), uint8(3))
	f.Add("\x1b[0m\n\n\rSaved\r", uint8(1), uint8(9), uint8(0))
	f.Fuzz(func(t *testing.T, in string, limit, chunk, tail uint8) {
		sel := []string{"Saved", "OOM"}
		lim := int(limit%64) + 1
		want := refSelect(in, lim, sel, int(tail%8))
		for _, chunks := range [][]int{nil, {int(chunk%32) + 1}} {
			if got, _ := splitSelect(in, lim, sel, int(tail%8), chunks); !sameLines(got, want) {
				t.Fatalf("limit %d chunks %v tail %d: got %+v, want %+v", lim, chunks, tail%8, got, want)
			}
		}
	})
}

// In file mode the child writes straight into the log file: both streams
// in the order written, and OnLine sees the lines read back from the file,
// with Stream set to Combined.
func TestFileModeLogAndLines(t *testing.T) { testFileModeLogAndLines(t, false) }

func testFileModeLogAndLines(t *testing.T, noMap bool) {
	needSh(t)
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "log.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var c collector
	res := Run(context.Background(), Spec{
		Argv:   []string{"/bin/sh", "-c", `echo out1; echo err1 >&2; printf 'a\r\nb\rc'; sleep 0.05; echo ' late'; printf 'no newline'`},
		Log:    f,
		OnLine: c.on,
		noMap:  noMap,
	}, testLogger(t))
	assertGroupGone(t, res.PID)
	if res.ExitCode != 0 || res.LogErr != nil {
		t.Fatalf("exit %d, log err %v", res.ExitCode, res.LogErr)
	}
	raw, _ := os.ReadFile(f.Name())
	if want := "out1\nerr1\na\r\nb\rc late\nno newline"; string(raw) != want {
		t.Errorf("log.txt = %q, want %q", raw, want)
	}
	if got, want := strings.Join(c.texts(Combined), "|"), "out1|err1|a|b|c late|no newline"; got != want {
		t.Errorf("lines %q, want %q", got, want)
	}
	if res.Lines != 6 {
		t.Errorf("Lines = %d, want 6", res.Lines)
	}
}

// Under Select, a file-mode run delivers the marker lines as they come and
// the end of the output after the child exits, and counts every line.
func TestFileModeSelectAndTail(t *testing.T) { testFileModeSelectAndTail(t, false) }

func testFileModeSelectAndTail(t *testing.T, noMap bool) {
	needSh(t)
	f, err := os.Create(filepath.Join(t.TempDir(), "log.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var c collector
	script := `i=0; while [ $i -lt 3000 ]; do echo "step $i took 90 ms"; i=$((i+1)); done
echo 'torch.OutOfMemoryError: CUDA out of memory'; echo 'after 1'; echo 'after 2'; exit 1`
	res := Run(context.Background(), Spec{
		Argv: []string{"/bin/sh", "-c", script}, Log: f, OnLine: c.on,
		Select: []string{"OutOfMemoryError"}, Tail: 2, noMap: noMap,
	}, testLogger(t))
	if res.ExitCode != 1 || res.Lines != 3003 {
		t.Fatalf("exit %d lines %d, want 1 and 3003", res.ExitCode, res.Lines)
	}
	want := []string{"3001 torch.OutOfMemoryError: CUDA out of memory", "3002 after 1", "3003 after 2"}
	var got []string
	for _, l := range c.lines {
		got = append(got, fmt.Sprint(l.No, " ", l.Text))
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("OnLine got %q, want %q", got, want)
	}
}

// A file opened for appending (or written before) is followed from its end:
// earlier content is not the child's output.
func TestFileModeAppendStartsAtEnd(t *testing.T) {
	needSh(t)
	path := filepath.Join(t.TempDir(), "log.txt")
	if err := os.WriteFile(path, []byte("old run\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var c collector
	res := Run(context.Background(), Spec{Argv: []string{"/bin/sh", "-c", "echo new run"}, Log: f, OnLine: c.on}, testLogger(t))
	if got := strings.Join(c.texts(Combined), "|"); got != "new run" || res.Lines != 1 {
		t.Errorf("lines %q (%d), want only the new run's", got, res.Lines)
	}
	if raw, _ := os.ReadFile(path); string(raw) != "old run\nnew run\n" {
		t.Errorf("log = %q", raw)
	}
}

// A process that leaves the group and keeps writing cannot hold Run up:
// the follower stops at the size the file had when the group was gone.
func TestFileModeEscapedWriterDoesNotHoldRun(t *testing.T) {
	needSh(t)
	if _, err := os.Stat("/usr/bin/setsid"); err != nil {
		t.Skip("no setsid")
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "log.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pidFile := filepath.Join(t.TempDir(), "pid")
	script := `setsid /bin/sh -c 'echo $$ > ` + pidFile + `; while :; do echo escaped; sleep 0.01; done' & sleep 0.2; echo main done`
	done := make(chan Result, 1)
	go func() {
		done <- Run(context.Background(), Spec{Argv: []string{"/bin/sh", "-c", script}, Log: f, OnLine: func(Line) {}}, testLogger(t))
	}()
	select {
	case res := <-done:
		if res.ExitCode != 0 {
			t.Errorf("exit %d", res.ExitCode)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return while an escaped process kept writing to the log")
	}
	if b, err := os.ReadFile(pidFile); err == nil {
		var pid int
		fmt.Sscan(string(bytes.TrimSpace(b)), &pid)
		if pid > 0 {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}

func TestFullFileSystem(t *testing.T) {
	cases := []struct {
		st   unix.Statfs_t
		root bool
		want bool
	}{
		{unix.Statfs_t{Blocks: 100, Bfree: 5, Bavail: 0}, false, true},
		{unix.Statfs_t{Blocks: 100, Bfree: 5, Bavail: 0}, true, false}, // root still has the reserve
		{unix.Statfs_t{Blocks: 100, Bfree: 0, Bavail: 0}, true, true},
		{unix.Statfs_t{Blocks: 100, Bfree: 50, Bavail: 40}, false, false},
		{unix.Statfs_t{}, false, false}, // proc-like file systems
	}
	for _, tc := range cases {
		if got := full(tc.st, tc.root); got != tc.want {
			t.Errorf("full(%+v, root=%v) = %v, want %v", tc.st, tc.root, got, tc.want)
		}
	}
}

// The follower's read path (file systems that cannot map) gives the same
// lines as the mapped one.
func TestFileModeWithoutMapping(t *testing.T) {
	t.Parallel()
	testFileModeLogAndLines(t, true)
	testFileModeSelectAndTail(t, true)
}

// A log truncated under the follower while it scans a mapped window is an
// error on the run, never a crash of the runner (SIGBUS on the vanished
// pages is recovered).
func TestTruncatedLogIsAnErrorNotACrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.txt")
	content := bytes.Repeat([]byte("[INFO] step 1/50 took 90.00 ms\n"), 200000) // ~6 MB, several pages
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	lines := 0
	o := newLines(Spec{OnLine: func(Line) {
		lines++
		if lines == 1 {
			if err := os.Truncate(path, 0); err != nil {
				t.Error(err)
			}
		}
	}})
	o.combined = &stream{o: o, name: Combined, limit: MaxLine}
	var buf []byte
	err = o.window(r, 0, followWindow, &buf)
	if err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("window over a truncated log: err = %v (after %d lines), want a truncation error", err, lines)
	}
}

// The follower's thread runs under SCHED_IDLE while the child runs and goes
// back to the default policy for the catch-up.
func TestFollowerThreadPolicy(t *testing.T) {
	got := make(chan [2]uint32, 1)
	go func() {
		if !yieldToChild() {
			got <- [2]uint32{99, 99}
			return
		}
		a, _ := unix.SchedGetAttr(0, 0)
		normalPriority()
		b, _ := unix.SchedGetAttr(0, 0)
		got <- [2]uint32{a.Policy, b.Policy}
	}()
	p := <-got
	if p[0] == 99 {
		t.Skip("sched_setattr refused here (seccomp?); the follower then runs at normal priority")
	}
	if p != [2]uint32{unix.SCHED_IDLE, unix.SCHED_NORMAL} {
		t.Errorf("policies %v, want SCHED_IDLE then SCHED_NORMAL", p)
	}
}

// A log that shrinks under the follower (truncated by someone else) ends
// the reading with an error in Result.LogErr, not a hang or a crash.
func TestFollowerShrunkLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.txt")
	if err := os.WriteFile(path, []byte("one\ntwo\nthree\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan struct{})
	var once sync.Once
	o := newFollower(Spec{OnLine: func(Line) { once.Do(func() { close(first) }) }}, r, 0, testLogger(t))
	<-first
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	o.finish()
	// Two outcomes are right, depending on where the follower was: the next poll sees the
	// file shrink, or the rest of the window it is scanning faults.
	if err := o.logErr(); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("logErr = %v, want the log-shrank or the truncated-pages error", err)
	}
}

// A line a quiet program printed reaches OnLine while the program still
// runs (a server's readiness line), although it sits in the page the
// follower otherwise leaves alone while the file grows.
func TestFileModeDeliversQuietLineWhileRunning(t *testing.T) {
	needSh(t)
	f, err := os.Create(filepath.Join(t.TempDir(), "log.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ready := make(chan struct{})
	var once sync.Once
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan Result, 1)
	go func() {
		done <- Run(ctx, Spec{
			Argv: []string{"/bin/sh", "-c", "echo loading; echo 'Application startup complete.'; sleep 30"},
			Log:  f,
			OnLine: func(l Line) {
				if strings.Contains(l.Text, "startup complete") {
					once.Do(func() { close(ready) })
				}
			},
			InterruptGrace: 100 * time.Millisecond,
		}, testLogger(t))
	}()
	select {
	case <-ready:
	case <-time.After(5 * time.Second):
		t.Error("the readiness line did not reach OnLine within 5 s while the program ran")
	}
	cancel()
	if res := <-done; !res.Interrupted {
		t.Errorf("Run did not report the interrupt: %+v", res)
	}
}
