package bundle

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
)

type tarEntry struct {
	hdr  tar.Header
	body []byte
}

func makeTarGz(t testing.TB, entries []tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := e.hdr
		if h.Typeflag == tar.TypeReg && h.Size == 0 {
			h.Size = int64(len(e.body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if len(e.body) > 0 {
			if _, err := tw.Write(e.body); err != nil {
				t.Fatal(err)
			}
		}
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

func reg(name, body string) tarEntry {
	return tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name}, body: []byte(body)}
}

func TestExtractRefusesHostileArchives(t *testing.T) {
	ok := reg("README.md", "fine")
	for _, tc := range []struct {
		name    string
		entries []tarEntry
		opts    ExtractOptions
		want    string
	}{
		{"absolute path", []tarEntry{ok, reg("/tmp/evil-abs", "x")}, ExtractOptions{}, "is an absolute path"},
		{"dot-dot", []tarEntry{ok, reg("../evil-dotdot", "x")}, ExtractOptions{}, `has a ".." component`},
		{"dot-dot inside", []tarEntry{ok, reg("cells/../../evil-inner", "x")}, ExtractOptions{}, `has a ".." component`},
		{"symlink", []tarEntry{ok, {hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "cells/link", Linkname: "/etc/passwd"}}, reg("cells/link", "x")}, ExtractOptions{}, "is a link"},
		{"hardlink", []tarEntry{ok, {hdr: tar.Header{Typeflag: tar.TypeLink, Name: "hard", Linkname: "../../etc/passwd"}}}, ExtractOptions{}, "is a link"},
		{"char device", []tarEntry{ok, {hdr: tar.Header{Typeflag: tar.TypeChar, Name: "null", Devmajor: 1, Devminor: 3}}}, ExtractOptions{}, "is a device or FIFO"},
		{"block device", []tarEntry{ok, {hdr: tar.Header{Typeflag: tar.TypeBlock, Name: "sda", Devmajor: 8}}}, ExtractOptions{}, "is a device or FIFO"},
		{"fifo", []tarEntry{ok, {hdr: tar.Header{Typeflag: tar.TypeFifo, Name: "pipe"}}}, ExtractOptions{}, "is a device or FIFO"},
		{"one big entry", []tarEntry{ok, reg("big.log", strings.Repeat("a", 4096))}, ExtractOptions{MaxBytes: 1024}, "would expand the bundle beyond 1.0 KiB"},
		{"many entries add up", []tarEntry{reg("a", strings.Repeat("a", 600)), reg("b", strings.Repeat("b", 600))}, ExtractOptions{MaxBytes: 1000}, "would expand the bundle beyond"},
		{"too many entries", []tarEntry{reg("a", "1"), reg("b", "2"), reg("c", "3")}, ExtractOptions{MaxEntries: 2}, "has more than 2 entries"},
		{"duplicate", []tarEntry{ok, reg("README.md", "again")}, ExtractOptions{}, "appears twice"},
		{"backslash", []tarEntry{reg(`..\evil`, "x")}, ExtractOptions{}, "backslash"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			dest := filepath.Join(parent, "target")
			_, err := Extract(bytes.NewReader(makeTarGz(t, tc.entries)), dest, tc.opts)
			var ee *ExtractError
			if !errors.As(err, &ee) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want an *ExtractError containing %q", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "refusing the bundle") {
				t.Errorf("message %q does not say the bundle is refused", err)
			}
			// Nothing is left: not the target, not anything beside it.
			if ents, _ := os.ReadDir(parent); len(ents) != 0 {
				t.Errorf("left behind in %s: %v", parent, ents)
			}
			if _, err := os.Lstat("/tmp/evil-abs"); err == nil {
				t.Error("/tmp/evil-abs was written")
			}
		})
	}
}

func TestExtractNotGzip(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "t")
	_, err := Extract(strings.NewReader("PK\x03\x04 a zip file"), dest, ExtractOptions{})
	if err == nil || !strings.Contains(err.Error(), "is not a gzip-compressed tar archive") {
		t.Fatalf("err = %v", err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte(strings.Repeat("not a tar header ", 64)))
	zw.Close()
	_, err = Extract(&buf, dest, ExtractOptions{})
	if err == nil || !strings.Contains(err.Error(), "not a readable tar archive") {
		t.Fatalf("err = %v", err)
	}
}

func TestExtractGood(t *testing.T) {
	parent := t.TempDir()
	dest := filepath.Join(parent, "t")
	data := makeTarGz(t, []tarEntry{
		{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "cells/", Mode: 0o755}},
		reg("README.md", "hello"),
		reg("./cells/000/log.txt", "line\n"),
	})
	files, err := Extract(bytes.NewReader(data), dest, ExtractOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(files, ",") != "README.md,cells/000/log.txt" {
		t.Errorf("files = %v", files)
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "cells", "000", "log.txt")); string(b) != "line\n" {
		t.Errorf("log.txt = %q", b)
	}
	// A second extraction into the same, now non-empty, directory is refused and keeps it.
	if _, err := Extract(bytes.NewReader(data), dest, ExtractOptions{}); err == nil || !strings.Contains(err.Error(), "is not empty") {
		t.Errorf("err = %v", err)
	}
	if _, err := os.Stat(filepath.Join(dest, "README.md")); err != nil {
		t.Error("a refused extraction removed an existing directory")
	}
}

// FuzzExtract feeds arbitrary archives: Extract must never write outside its target, and must
// leave nothing behind when it fails.
func FuzzExtract(f *testing.F) {
	f.Add(makeTarGz(f, []tarEntry{reg("README.md", "x"), reg("cells/a/log.txt", "y")}))
	f.Add(makeTarGz(f, []tarEntry{reg("../x", "x")}))
	f.Add(makeTarGz(f, []tarEntry{{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "/"}}, reg("l/x", "x")}))
	f.Add([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff})
	f.Add([]byte("plain text"))
	f.Fuzz(func(t *testing.T, data []byte) {
		parent := t.TempDir()
		dest := filepath.Join(parent, "t")
		files, err := Extract(bytes.NewReader(data), dest, ExtractOptions{MaxBytes: 1 << 20, MaxEntries: 100})
		ents, _ := os.ReadDir(parent)
		if err != nil {
			if len(ents) != 0 {
				t.Fatalf("failed extraction left %v", ents)
			}
			return
		}
		if len(ents) != 1 || ents[0].Name() != "t" {
			t.Fatalf("extraction wrote beside its target: %v", ents)
		}
		for _, f := range walkFiles(t, dest) {
			st, err := os.Lstat(f)
			if err != nil || !st.Mode().IsRegular() {
				t.Fatalf("%s is not a regular file", f)
			}
		}
		_ = files
	})
}

// walkFiles lists the regular files under dir.
func walkFiles(t *testing.T, dir string) []string {
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}
