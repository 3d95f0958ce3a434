package proc

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"
)

// commandTail is how much of a short command's output Command keeps: the end is where a tool
// explains a failure, and what is kept stays bounded whatever the tool prints.
const commandTail = 16 << 10

// Command runs a short command line (nsys --version, nsys export, an nsys session command) to
// its end like every child of the runner: under the supervisor, in a process group of its own,
// so that ctx's end (a timeout, Ctrl-C) stops it and everything it started, and nothing it
// leaves behind outlives the call. It returns the tail of the combined output (commandTail),
// and an error saying how the command ended when it failed: its start error, ctx's error when
// ctx cut it, "killed by SIG" or "exit status N".
func Command(ctx context.Context, argv []string, env []string) (string, error) {
	var buf tailBuffer
	res := Run(ctx, Spec{
		Argv: argv, Env: env, Log: &buf, // Env nil: the runner's own environment
		// Nothing of a version query, an export or a session command is worth waiting for
		// once it is cut.
		InterruptGrace: 200 * time.Millisecond, TerminateGrace: time.Second,
		LeftoverGrace: 500 * time.Millisecond,
	}, nil)
	switch {
	case res.StartErr != nil && !res.Interrupted:
		return buf.String(), res.StartErr
	case res.Interrupted:
		return buf.String(), ctx.Err()
	case res.Signal != "":
		return buf.String(), fmt.Errorf("killed by %s", res.Signal)
	case res.ExitCode != 0:
		return buf.String(), fmt.Errorf("exit status %d", res.ExitCode)
	}
	return buf.String(), nil
}

// tailBuffer keeps the last commandTail bytes written to it. It is shared by stdout and
// stderr, which os/exec copies from separate goroutines when they are not *os.File.
type tailBuffer struct {
	mu      sync.Mutex
	b       []byte
	dropped bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > commandTail {
		t.b = append(t.b[:0], t.b[len(t.b)-commandTail:]...)
		t.dropped = true
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := string(bytes.ToValidUTF8(t.b, []byte("\uFFFD")))
	if t.dropped {
		s = "…" + s
	}
	return s
}
