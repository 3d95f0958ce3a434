package infile

import (
	"bytes"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
}

func TestReadFileRegular(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "plan.toml")
	want := bytes.Repeat([]byte("name = \"x\"\n"), 1000)
	if err := os.WriteFile(p, want, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(p, 0)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("ReadFile = %d bytes, %v; want %d bytes", len(got), err, len(want))
	}
	// A link to a regular file is followed: a dataset linked into place is usual.
	l := filepath.Join(dir, "link.toml")
	if err := os.Symlink(p, l); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadFile(l, int64(len(want))); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("ReadFile(link, exact limit) = %d bytes, %v", len(got), err)
	}
	f, err := Open(l)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rest, err := io.ReadAll(f)
	if err != nil || !bytes.Equal(rest, want) {
		t.Fatalf("Open + ReadAll = %d bytes, %v", len(rest), err)
	}
}

func TestReadFileMissing(t *testing.T) {
	_, err := ReadFile(filepath.Join(t.TempDir(), "nope"), 0)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want fs.ErrNotExist", err)
	}
}

// Each kind of non-regular file is refused with an error that names the path and the kind,
// and a FIFO is refused without being opened: the call returns although nobody writes to it.
func TestRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "perf.json")
	mkfifo(t, fifo)
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, kind string }{
		{fifo, "a FIFO"},
		{link, "a FIFO"},
		{dir, "a directory"},
		{"/dev/null", "a character device"},
	} {
		for name, read := range map[string]func(string) error{
			"ReadFile": func(p string) error { _, err := ReadFile(p, 1<<20); return err },
			"Open": func(p string) error {
				f, err := Open(p)
				if err == nil {
					f.Close()
				}
				return err
			},
			"Check": Check,
		} {
			err := read(c.path)
			if !errors.Is(err, ErrNotRegular) {
				t.Fatalf("%s(%s) = %v, want ErrNotRegular", name, c.path, err)
			}
			if msg := err.Error(); !strings.Contains(msg, c.path) || !strings.Contains(msg, c.kind) {
				t.Errorf("%s(%s): %q does not name the path and %q", name, c.path, msg, c.kind)
			}
		}
	}
}

// A FIFO put in place of a file after it was checked still cannot block the open (O_NONBLOCK)
// and is refused on the open descriptor.
func TestOpenRegularRefusesSwappedFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "summary.json")
	mkfifo(t, fifo)
	f, err := openRegular(fifo)
	if err == nil {
		f.Close()
	}
	if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "a FIFO") {
		t.Fatalf("openRegular(FIFO) = %v, want ErrNotRegular naming a FIFO", err)
	}
}

func TestReadFileTooLarge(t *testing.T) {
	p := filepath.Join(t.TempDir(), "ds.json")
	if err := os.WriteFile(p, make([]byte, 1001), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := ReadFile(p, 1000)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
	if msg := err.Error(); !strings.Contains(msg, p) || !strings.Contains(msg, "1000 bytes") {
		t.Errorf("%q does not name the file and the limit", msg)
	}
	if b, err := ReadFile(p, 1001); err != nil || len(b) != 1001 {
		t.Fatalf("at the limit: %d bytes, %v", len(b), err)
	}
}

// A file whose size stat does not know (here a /proc file, size 0) is still read whole, and
// still bounded.
func TestReadFileUnknownSize(t *testing.T) {
	b, err := ReadFile("/proc/self/status", 0)
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	if !bytes.Contains(b, []byte("Pid:")) {
		t.Fatalf("read %q", b)
	}
	if _, err := ReadFile("/proc/self/status", 10); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("limit 10: err = %v, want ErrTooLarge", err)
	}
}

// readerExceptions are the files that may call os.Open or os.ReadFile themselves, each for a
// reason; every other file of the module reads through this package.
var readerExceptions = map[string]string{
	"runner/proc/ports.go":                      "the kernel's /proc files, not files anyone gives the runner",
	"runner/proc/follow.go":                     "the runner's own log, reopened through /proc/self/fd",
	"runner/proc/record.go":                     "the kernel's /proc files",
	"runner/proc/internal/supervisor/procfs.go": "the kernel's /proc directory",
	"runner/manifest.go":                        "the kernel's /proc/cpuinfo and /proc/meminfo",
	"backends/sim/":                             "the simulators stand for the programs the runner runs, and run as those programs",
	"cmd/tracegen/":                             "a tool that writes synthetic traces for tests",
}

// TestEveryReaderGoesThroughInfile keeps this package the one reader: no other non-test file
// of the module calls os.Open or os.ReadFile, except readerExceptions. A new reader that opens
// a file itself would block on a FIFO again.
func TestEveryReaderGoesThroughInfile(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if name := d.Name(); rel != "." && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") || strings.HasPrefix(rel, "plans/infile/") {
			return nil
		}
		for prefix := range readerExceptions {
			if rel == prefix || strings.HasSuffix(prefix, "/") && strings.HasPrefix(rel, prefix) {
				return nil
			}
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "os" && (sel.Sel.Name == "Open" || sel.Sel.Name == "ReadFile") {
				t.Errorf("%s: os.%s: read files through plans/infile (Open, ReadFile), which refuses FIFOs and devices", fset.Position(call.Pos()), sel.Sel.Name)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
