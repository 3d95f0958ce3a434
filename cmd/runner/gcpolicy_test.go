package main

import (
	"math"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// TestGCPolicyQuietStart: triage starts with the collector off under a memory limit of
// triageQuietHeap, and the first collection puts GOGC 35 and the real limit in place; a
// GOGC or GOMEMLIMIT of the user's is left alone.
func TestGCPolicyQuietStart(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	gcPercent := func() int { p := debug.SetGCPercent(-1); debug.SetGCPercent(p); return p }
	limit := func() int64 { return debug.SetMemoryLimit(-1) }

	done := make(chan struct{})
	gcPolicy(false, false, func() { close(done) })
	if p, l := gcPercent(), limit(); p != -1 || l != triageQuietHeap {
		t.Fatalf("at start: GOGC %d, limit %d; want off and %d", p, l, triageQuietHeap)
	}
	runtime.GC()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the first collection did not end the quiet start")
	}
	if p, l := gcPercent(), limit(); p != triageGCPercent || l != triageMemoryLimit {
		t.Errorf("after the first collection: GOGC %d, limit %d; want %d and %d", p, l, triageGCPercent, triageMemoryLimit)
	}

	debug.SetGCPercent(100)
	debug.SetMemoryLimit(math.MaxInt64)
	gcPolicy(true, true, nil)
	if p, l := gcPercent(), limit(); p != 100 || l != math.MaxInt64 {
		t.Errorf("with the user's GOGC and GOMEMLIMIT: GOGC %d, limit %d; want both left alone", p, l)
	}
	gcPolicy(true, false, nil)
	if p, l := gcPercent(), limit(); p != triageGCPercent || l != math.MaxInt64 {
		t.Errorf("with the user's GOMEMLIMIT: GOGC %d, limit %d; want %d and the user's", p, l, triageGCPercent)
	}
}
