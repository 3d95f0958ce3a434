package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/kineto"
	"github.com/sglprof/runner/reports/trace"
)

func TestTracegenWritesReadableGzip(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "t.json.gz")
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"-flavor", "llm", "-steps", "2", "-comm", "-graph", "-stack", "-o", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	raw, err := os.ReadFile(out)
	if err != nil || len(raw) < 2 || raw[0] != 0x1f || raw[1] != 0x8b {
		t.Fatalf("output is not gzip (%v)", err)
	}
	tr, err := kineto.ReadFile(context.Background(), out, kineto.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := tr.KernelTime(trace.NoID); n == 0 || len(tr.Frames) == 0 || len(tr.Warnings) != 0 {
		t.Errorf("kernels %d frames %d warnings %v", n, len(tr.Frames), tr.Warnings)
	}
	if !strings.Contains(stderr.String(), "kernels") {
		t.Errorf("no summary line: %q", stderr.String())
	}
}

func TestTracegenUsageErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"-size", "lots", "-o", "x.json"}, {"-o", "x.json", "extra"}, {"-nope"}} {
		var so, se bytes.Buffer
		if code := run(context.Background(), args, &so, &se); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

func TestTracegenReadMode(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "t.json")
	var so, se bytes.Buffer
	if code := run(context.Background(), []string{"-steps", "1", "-o", out}, &so, &se); code != 0 {
		t.Fatalf("generate: %s", se.String())
	}
	info, _ := os.Stat(out)
	for _, mode := range []string{"full", "lean"} {
		so.Reset()
		if code := run(context.Background(), []string{"-read", out, "-read-mode", mode}, &so, &se); code != 0 {
			t.Fatalf("%s: exit %d: %s", mode, code, se.String())
		}
		if !strings.Contains(so.String(), "bytes="+strconv.FormatInt(info.Size(), 10)+" ") || strings.Contains(so.String(), "kernels=0 ") {
			t.Errorf("%s: %q", mode, so.String())
		}
	}
	if code := run(context.Background(), []string{"-read", out, "-read-mode", "bogus"}, &so, &se); code != 2 {
		t.Errorf("bogus mode: exit %d", code)
	}
}

// TestTracegenWorldSize: -world gives every rank the same world_size (triage refuses a
// directory whose ranks disagree); without it a rank past the default raises its own.
func TestTracegenWorldSize(t *testing.T) {
	dir := t.TempDir()
	world := func(args ...string) string {
		out := filepath.Join(dir, "t.json")
		var so, se bytes.Buffer
		if code := run(context.Background(), append([]string{"-steps", "1", "-comm", "-o", out}, args...), &so, &se); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, se.String())
		}
		tr, err := kineto.ReadFile(context.Background(), out, kineto.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Meta["distributedInfo.world_size"]
	}
	if a, b := world("-rank", "0", "-world", "8"), world("-rank", "7", "-world", "8"); a != "8" || b != "8" {
		t.Errorf("-world 8: ranks 0 and 7 wrote world_size %q and %q, want 8", a, b)
	}
	if a, b := world("-rank", "0"), world("-rank", "3"); a != "2" || b != "4" {
		t.Errorf("without -world: ranks 0 and 3 wrote world_size %q and %q, want 2 and 4", a, b)
	}
}
