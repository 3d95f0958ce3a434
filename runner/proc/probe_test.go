package proc

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A probe's two streams come back apart, whole, each line ending in '\n'.
func TestProbeStreams(t *testing.T) {
	out, res := Probe(context.Background(), Spec{
		Argv: []string{"/bin/sh", "-c", `printf 'a, b\r\nc\n'; echo oops >&2; printf 'last'`},
	}, 0, nil)
	if res.StartErr != nil || res.ExitCode != 0 || out.Cut {
		t.Fatalf("res = %+v, cut %v", res, out.Cut)
	}
	if got := string(out.Stdout); got != "a, b\nc\nlast\n" {
		t.Errorf("stdout = %q", got)
	}
	if got := string(out.Stderr); got != "oops\n" {
		t.Errorf("stderr = %q", got)
	}
}

// A line longer than MaxLine reaches Probe in pieces that overlap; it comes back as printed.
func TestProbeLongLine(t *testing.T) {
	n := 3*MaxLine + 12345
	out, res := Probe(context.Background(), Spec{
		Argv: []string{"/bin/sh", "-c", `head -c ` + itoa(n) + ` /dev/zero | tr '\0' x; echo; echo end`},
	}, 16<<20, nil)
	if res.ExitCode != 0 || out.Cut {
		t.Fatalf("res = %+v, cut %v", res, out.Cut)
	}
	want := strings.Repeat("x", n) + "\nend\n"
	if string(out.Stdout) != want {
		t.Errorf("stdout: %d bytes, want %d (%q…)", len(out.Stdout), len(want), out.Stdout[:min(40, len(out.Stdout))])
	}
}

// A probe that prints without end is stopped once it passed the limit; what is kept stays
// within the limit, and nothing of it is left running.
func TestProbeCut(t *testing.T) {
	const limit = 1 << 20
	out, res := Probe(context.Background(), Spec{
		Argv:           []string{"/bin/sh", "-c", `exec yes '0, GPU-aaaa, 0 %, 1 MiB'`},
		InterruptGrace: 200 * time.Millisecond, TerminateGrace: 200 * time.Millisecond,
	}, limit, nil)
	if !out.Cut {
		t.Fatalf("not cut; res = %+v, %d bytes", res, len(out.Stdout))
	}
	if n := len(out.Stdout) + len(out.Stderr); n > limit || n < limit/2 {
		t.Errorf("kept %d bytes, want at most the limit %d (and most of it)", n, limit)
	}
	if !bytes.HasPrefix(out.Stdout, []byte("0, GPU-aaaa, 0 %, 1 MiB\n")) {
		t.Errorf("stdout starts %q", out.Stdout[:min(40, len(out.Stdout))])
	}
	if res.StoppedWith == "" || res.Interrupted {
		t.Errorf("res = %+v: want the ladder run for the cut, not an interruption", res)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
