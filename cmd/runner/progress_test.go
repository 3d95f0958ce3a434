package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/runner"
)

// Both progress displays can show the serve session's status lines (the flush wait).
func TestProgressShowsStatus(t *testing.T) {
	var b bytes.Buffer
	var p runner.Progress = newLineProgress(&b)
	sr, ok := p.(runner.StatusReporter)
	if !ok {
		t.Fatal("line progress does not implement StatusReporter")
	}
	c := plans.Cell{ID: "000-x"}
	sr.Status(c, "waiting for the profiler flush")
	if !strings.Contains(b.String(), "000-x: waiting for the profiler flush") {
		t.Errorf("status line missing: %q", b.String())
	}
	if _, ok := newBarProgress(&b).(runner.StatusReporter); !ok {
		t.Error("bar progress does not implement StatusReporter")
	}
}
