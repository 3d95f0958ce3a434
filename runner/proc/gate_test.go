package proc

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gateMarkers are sglang's diffusers-fallback markers (backends/sglang's
// watcher), one of them with a colour code inside as sglang's logger prints
// it. The test holds them as literals because runner/proc sits below the
// backends.
var gateMarkers = []string{
	"Falling back to diffusers backend",
	"Using diffusers backend",
	"Loaded diffusers pipeline: \x1b[36mQwenImagePipeline",
}

// gateCut is one place where the output path cuts the byte stream, and
// where the line holding the marker starts (lineAt < 0: a short line just
// before the cut).
type gateCut struct {
	name       string
	lineAt, at int
}

// gateCuts lists the internal boundaries: the MaxLine cuts of one long line
// (the first, and the second, which lies Overlap before twice MaxLine),
// with the line starting at the beginning of the output or off the chunk
// grid; the dispatcher's chunkSize pieces (where take switches between
// consume and bulk) and the follower's mapped windows, inside a long line
// and inside ordinary lines.
func gateCuts() []gateCut {
	var cuts []gateCut
	for _, start := range []int{0, 1000} {
		cuts = append(cuts,
			gateCut{"first MaxLine cut", start, start + MaxLine},
			gateCut{"second MaxLine cut", start, start + 2*MaxLine - Overlap})
	}
	for _, at := range []int{chunkSize, 2 * chunkSize, MaxLine + chunkSize, followWindow, followWindow + chunkSize} {
		cuts = append(cuts, gateCut{"chunk or window in a long line", max(0, at-MaxLine+Overlap), at},
			gateCut{"chunk or window in short lines", -1, at})
	}
	return cuts
}

// gateInput is output in which marker starts at byte at, in a line that
// starts at lineAt (or shortly before at, when lineAt < 0), with ordinary
// log lines before and after it. It is built in b (reset first), which the
// callers reuse: the inputs are megabytes and there are thousands of them.
func gateInput(b *bytes.Buffer, lineAt, at int, marker string) []byte {
	b.Reset()
	line := "[2026-11-24 10:00:00] [INFO] Denoising step 1/50 took 81.2 ms\n"
	if lineAt < 0 {
		lineAt = at - 40
	}
	b.Grow(at + len(marker) + 3001 + 50*len(line))
	for b.Len()+len(line) <= lineAt {
		b.WriteString(line)
	}
	pad(b, '-', lineAt-b.Len()) // ends the lead exactly at lineAt
	if lineAt > 0 {
		b.Bytes()[lineAt-1] = '\n'
	}
	pad(b, 'x', at-b.Len())
	b.WriteString(marker)
	pad(b, 'y', 3000)
	b.WriteString("\n")
	for range 50 { // more output after it, so the marker is not in the tail
		b.WriteString(line)
	}
	return b.Bytes()
}

// pad writes n copies of c to b without building them first.
func pad(b *bytes.Buffer, c byte, n int) {
	var block [4096]byte
	for i := range block {
		block[i] = c
	}
	for n > 0 {
		k := min(n, len(block))
		b.Write(block[:k])
		n -= k
	}
}

// TestGateSeesMarkerAcrossEveryBoundary places each marker at every offset
// around every internal boundary, in pipe mode and file mode, and checks
// that a selective OnLine receives a line holding the whole marker (issue
// 14: a marker straddling the 1 MiB line cut was missed and the cell passed
// the gate).
func TestGateSeesMarkerAcrossEveryBoundary(t *testing.T) {
	// Every offset at the marker's edges (ending just before the cut, cut after its first
	// bytes, cut before its last bytes, starting at or after the cut), every third in between:
	// the output path's overlap treats a cut anywhere inside the marker alike, and each run
	// pushes megabytes through both modes (every offset took a quarter of the package's CPU).
	// One subtest per marker, in parallel: the package's longest test is all CPU, and runs
	// beside tests that mostly wait.
	step := 3
	if testing.Short() {
		step = 5
	}
	for _, marker := range gateMarkers {
		clean := strings.ReplaceAll(marker, "\x1b[36m", "")
		t.Run(clean, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			var buf bytes.Buffer
			for _, c := range gateCuts() {
				for d := -len(marker) - 1; d <= 1; d++ {
					if edge := d <= -len(marker)+2 || d >= -3; !edge && d%step != 0 {
						continue
					}
					in := gateInput(&buf, c.lineAt, c.at+d, marker)
					for _, mode := range []string{"pipe", "file"} {
						if !gateSeen(t, dir, mode, in, marker) {
							t.Errorf("%s mode: marker %q at byte %d (%s at %d%+d) not delivered whole", mode, clean, c.at+d, c.name, c.at, d)
						}
					}
				}
			}
		})
	}
}

// gateSeen runs in through the pipe pipeline (stream.Write, as os/exec's
// copy would) or the file follower (a log file read back), with the markers
// as Spec.Select, and reports whether some delivered line holds marker.
func gateSeen(t *testing.T, dir, mode string, in []byte, marker string) bool {
	seen := false
	s := Spec{
		Select: gateMarkers, Tail: 1, LogStall: DefaultLogStall,
		OnLine: func(l Line) { seen = seen || strings.Contains(l.Text, marker) },
		// The follower's SCHED_IDLE thread protects a running child; here there is none, and
		// on a busy machine (go test runs packages side by side) an idle-priority thread
		// waits for a free core thousands of times over. The cuts are the same either way.
		busyFollower: true,
	}
	switch mode {
	case "pipe":
		o := newOutput(s, slog.New(slog.DiscardHandler))
		o.stdout.Write(in)
		o.finish()
	case "file":
		p := filepath.Join(dir, "log.txt")
		if err := os.WriteFile(p, in, 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		o := newFollower(s, r, 0, slog.New(slog.DiscardHandler))
		o.finish()
	}
	return seen
}
