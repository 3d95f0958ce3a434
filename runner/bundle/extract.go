package bundle

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/gzip"
)

// DefaultMaxExtract bounds what a bundle may expand to: a bundle is at most --max-size
// compressed, and traces compress about 10×, so 4 GiB leaves room and still stops a bomb.
const DefaultMaxExtract = 4 << 30

// DefaultMaxEntries bounds the number of entries of a bundle.
const DefaultMaxEntries = 100000

// ExtractOptions bound an extraction.
type ExtractOptions struct {
	// MaxBytes is the most the archive may expand to; 0 means DefaultMaxExtract.
	MaxBytes int64
	// MaxEntries is the most entries it may have; 0 means DefaultMaxEntries.
	MaxEntries int
}

// ExtractError is a bundle refused by Extract: the entry and why. Nothing outside the target
// directory was written, and the target directory was removed.
type ExtractError struct {
	Entry  string
	Reason string
}

// Error says which entry was refused and why.
func (e *ExtractError) Error() string {
	if e.Entry == "" {
		return "refusing the bundle: " + e.Reason
	}
	return fmt.Sprintf("refusing the bundle: entry %q %s", e.Entry, e.Reason)
}

// Extract unpacks a bundle (.tar.gz) read from r into dest, which must not exist or be
// empty. It refuses absolute paths, paths with "..", links, devices and anything but regular
// files and directories, duplicate entries, and archives that expand beyond the limits; on any
// error it removes dest and returns an *ExtractError (or the I/O error). It returns the
// regular files written, relative to dest, in archive order.
func Extract(r io.Reader, dest string, opts ExtractOptions) (files []string, err error) {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxExtract
	}
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultMaxEntries
	}
	if ents, rerr := os.ReadDir(dest); rerr == nil && len(ents) > 0 {
		return nil, fmt.Errorf("extract: %s is not empty; choose a new directory with --output", dest)
	} else if rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
		return nil, fmt.Errorf("extract: %w", rerr)
	}
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return nil, fmt.Errorf("extract: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dest)
			files = nil
		}
	}()
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, &ExtractError{Reason: fmt.Sprintf("is not a gzip-compressed tar archive (%v); give the .tar.gz that `runner bundle` wrote", err)}
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	var total int64
	seen := map[string]bool{}
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, &ExtractError{Reason: fmt.Sprintf("is not a readable tar archive: %v", err)}
		}
		if n >= opts.MaxEntries {
			return nil, &ExtractError{Reason: fmt.Sprintf("has more than %d entries", opts.MaxEntries)}
		}
		rel, err := safeName(hdr.Name)
		if err != nil {
			return nil, &ExtractError{Entry: hdr.Name, Reason: err.Error()}
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if rel == "." {
				continue
			}
			if err := os.MkdirAll(filepath.Join(dest, rel), 0o755); err != nil {
				return nil, fmt.Errorf("extract: %w", err)
			}
		case tar.TypeReg: // the reader reports the old regular-file flag (TypeRegA) as TypeReg
			if seen[rel] {
				return nil, &ExtractError{Entry: hdr.Name, Reason: "appears twice; a bundle names each file once"}
			}
			seen[rel] = true
			if hdr.Size < 0 || hdr.Size > opts.MaxBytes-total {
				return nil, &ExtractError{Entry: hdr.Name, Reason: fmt.Sprintf("would expand the bundle beyond %s; this is not a runner bundle (or raise the limit)", humanBytes(opts.MaxBytes))}
			}
			total += hdr.Size
			if err := writeEntry(filepath.Join(dest, rel), tr, hdr.Size); err != nil {
				return nil, err
			}
			files = append(files, filepath.ToSlash(rel))
		case tar.TypeSymlink, tar.TypeLink:
			return nil, &ExtractError{Entry: hdr.Name, Reason: fmt.Sprintf("is a link (to %q); a bundle holds only regular files and directories", hdr.Linkname)}
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			return nil, &ExtractError{Entry: hdr.Name, Reason: "is a device or FIFO; a bundle holds only regular files and directories"}
		case tar.TypeXGlobalHeader:
			continue
		default:
			return nil, &ExtractError{Entry: hdr.Name, Reason: fmt.Sprintf("has tar type %q; a bundle holds only regular files and directories", string(hdr.Typeflag))}
		}
	}
	return files, nil
}

// safeName turns an entry name into a path relative to the target, refusing anything that
// could land outside it.
func safeName(name string) (string, error) {
	if name == "" {
		return "", errors.New("has an empty name")
	}
	if strings.ContainsRune(name, 0) || strings.Contains(name, `\`) {
		return "", errors.New("has a NUL or backslash in its name")
	}
	if strings.HasPrefix(name, "/") || filepath.IsAbs(name) {
		return "", errors.New("is an absolute path; a bundle holds only relative paths")
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", errors.New(`has a ".." component, which would write outside the target directory`)
		}
	}
	clean := path.Clean(name)
	if clean == "." {
		return ".", nil
	}
	if !filepath.IsLocal(filepath.FromSlash(clean)) {
		return "", errors.New("does not name a path inside the target directory")
	}
	return filepath.FromSlash(clean), nil
}

// writeEntry writes one regular file; O_EXCL means it never follows or replaces anything.
func writeEntry(p string, r io.Reader, size int64) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("extract: %w", err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("extract: %w", err)
	}
	n, err := io.Copy(f, io.LimitReader(r, size))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return &ExtractError{Entry: filepath.Base(p), Reason: fmt.Sprintf("could not be read: %v", err)}
	}
	if n != size {
		return &ExtractError{Entry: filepath.Base(p), Reason: fmt.Sprintf("is truncated (%d of %d bytes)", n, size)}
	}
	return nil
}
