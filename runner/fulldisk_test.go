package runner

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/runner/exitcode"
)

// fillOnStart fills the file system of path when the first cell starts.
type fillOnStart struct {
	nopProgress
	t    *testing.T
	path string
}

func (f fillOnStart) CellStart(n, _ int, _ plans.Cell) {
	if n != 0 {
		return
	}
	fh, err := os.Create(f.path)
	if err != nil {
		f.t.Errorf("filler: %v", err)
		return
	}
	defer fh.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := fh.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				f.t.Errorf("filler: %v", err)
			}
			return
		}
	}
}

// A real full disk (a small tmpfs, so root only; skipped otherwise): every cell fails with its
// reasons, the summary is printed, the error names --resume, and once space is freed --resume
// measures the cells (the run ended with only "write manifest.json: no space left").
func TestFullDiskTmpfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"); err != nil {
		t.Skip("cannot mount a tmpfs:", err)
	}
	defer func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) }()

	p := testPlan(t, twoCells)
	opts := simOptions(t)
	opts.OutputDir = dir
	filler := filepath.Join(dir, "filler")
	opts.Progress = fillOnStart{t: t, path: filler}
	var out bytes.Buffer
	opts.Out = &out
	sum, err := Run(context.Background(), p, opts)
	if err == nil || !strings.Contains(err.Error(), "no space left") || !strings.Contains(err.Error(), "--resume") {
		t.Fatalf("err = %v, want no space left and a --resume hint", err)
	}
	t.Log(err)
	if sum == nil {
		t.Fatal("no summary")
	}
	for _, row := range sum.Cells {
		if row.Verdict != plans.VerdictFailed {
			t.Errorf("cell %s: verdict %q, want failed", row.ID, row.Verdict)
		}
		if !strings.Contains(out.String(), row.ID) {
			t.Errorf("summary table lacks %s:\n%s", row.ID, out.String())
		}
	}
	if sum.ExitCode != exitcode.CellsFailed {
		t.Errorf("exit code %d, want %d", sum.ExitCode, exitcode.CellsFailed)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	opts.Progress = nil
	sum2, err := Resume(context.Background(), sum.RunDir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if sum2.Counts[plans.VerdictOK] != 2 {
		t.Fatalf("after freeing space, resume: %v %+v", sum2.Counts, sum2.Cells)
	}
}
