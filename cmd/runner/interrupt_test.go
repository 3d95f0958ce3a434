package main

import (
	"context"
	"errors"
	"flag"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

// TestInterruptibleReturnsAtCancel: an action stuck in work that never looks at the context
// (a read from a FIFO, a long loop) still ends when Ctrl-C cancels it, with the context's
// error (exit 130), and an action that finishes returns its own result.
func TestInterruptibleReturnsAtCancel(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	ctx, cancel := context.WithCancel(context.Background())
	c := cli.NewContext(cli.NewApp(), flag.NewFlagSet("x", flag.ContinueOnError), nil)
	c.Context = ctx
	done := make(chan error, 1)
	go func() {
		done <- interruptible(func(*cli.Context) error { <-block; return nil })(c)
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
	c.Context = context.Background()
	if err := interruptible(func(*cli.Context) error { return want })(c); err != want {
		t.Errorf("err = %v, want the action's own", err)
	}
}

type discard struct{}

func (*discard) Write(p []byte) (int, error) { return len(p), nil }
