package main

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/sglprof/runner/runner/exitcode"
	"github.com/urfave/cli/v3"
)

// TestInterruptibleReturnsAtCancel: an action stuck in work that never looks at the context
// (a read from a FIFO, a long loop) still ends when Ctrl-C cancels it, with the context's
// error (exit 130), and an action that finishes returns its own result.
func TestInterruptibleReturnsAtCancel(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	ctx, cancel := context.WithCancel(context.Background())
	c := &cli.Command{}
	done := make(chan error, 1)
	go func() {
		done <- interruptible(func(context.Context, *cli.Command) error { <-block; return nil })(ctx, c)
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
		if code := exitCode(err, &discard{}); code != 130 {
			t.Errorf("exit code %d, want 130", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the action did not return after the cancel")
	}
	want := errors.New("own")
	if err := interruptible(func(context.Context, *cli.Command) error { return want })(context.Background(), c); err != want {
		t.Errorf("err = %v, want the action's own", err)
	}
}

type discard struct{}

func (*discard) Write(p []byte) (int, error) { return len(p), nil }

// TestStopSignalsExitStatus: SIGINT and SIGTERM each cancel the command's context, and the
// runner then exits with that signal's status, 130 or 143, whether the command returned the
// context's error (a read under interruptibly) or a run's own exit status (its summary).
func TestStopSignalsExitStatus(t *testing.T) {
	for _, c := range []struct {
		sig  syscall.Signal
		want int
	}{{syscall.SIGINT, 130}, {syscall.SIGTERM, 143}} {
		ctx, stop := stopOnSignals(context.Background())
		// Caught by stopOnSignals' handler, not by the test process's default one.
		if err := syscall.Kill(os.Getpid(), c.sig); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("%v did not cancel the context", c.sig)
		}
		for _, err := range []error{ctx.Err(), &exitError{code: exitcode.Interrupted}} {
			if got := exitStatus(ctx, err, &discard{}); got != c.want {
				t.Errorf("%v, command returned %v: exit status %d, want %d", c.sig, err, got, c.want)
			}
		}
		stop()
	}
	// Without a signal, an exit status of 130 stays what the command said.
	if got := exitStatus(context.Background(), &exitError{code: 130}, &discard{}); got != 130 {
		t.Errorf("no signal: exit status %d, want 130", got)
	}
}
