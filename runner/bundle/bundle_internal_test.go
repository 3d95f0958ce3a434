package bundle

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/secrets"
)

// TestBundleStopsOnCancel: a cancelled context reaches the read loop of a streamed file and
// the archive writer, so Ctrl-C stops bundling a big log at once.
func TestBundleStopsOnCancel(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "log.txt")
	if err := os.WriteFile(big, bytes.Repeat([]byte("a line of log text\n"), 1<<16), 0o644); err != nil {
		t.Fatal(err)
	}
	red, _ := secrets.New(nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b := &builder{ctx: ctx, red: red, stage: dir}
	if _, _, err := b.stageStream(big, false, false); !errors.Is(err, context.Canceled) {
		t.Errorf("stageStream with a cancelled context: err = %v, want context.Canceled", err)
	}
	out := filepath.Join(dir, "b.tar.gz")
	if _, _, err := writeArchive(ctx, out, []entry{{name: "log.txt", file: big, size: 19 << 16}}); !errors.Is(err, context.Canceled) {
		t.Errorf("writeArchive with a cancelled context: err = %v, want context.Canceled", err)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a cancelled bundle left its archive")
	}
}

// TestReadmeCodeCells: the README's cell ids and kernel names are code columns of the table
// model, so a "~" or "<" in a kernel name shows literally inside its code span (before, the
// backticks were the caller's and the writer's "\\~" showed its backslash) and a "|" cannot end
// the cell.
func TestReadmeCodeCells(t *testing.T) {
	v := view{cells: []cellView{{id: "000-c", result: &rundir.CellResult{TopKernels: []rundir.KernelShare{
		{Name: "void k<float>|x ~Foo()", Category: "gemm", TotalUS: 2, SharePct: 50}}}}}}
	var b strings.Builder
	writeTopKernels(&b, v, 3)
	want := "| `000-c` | `void k<float>\\|x ~Foo()` | gemm | 2.0 | 50.0% |\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("top kernels:\n%s\nwant the row:\n%s", b.String(), want)
	}
}
