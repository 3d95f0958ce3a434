package rundir

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/plans/infile"
)

// Redact rewrites a file's encoded JSON before it is written. The runner passes its secrets
// catalogue (runner/secrets.Redactor.JSON) for the files that record commands and
// environments; nil writes the encoding as it is. It is a function rather than an import so
// that this package stays a leaf and its callers say, at each write, whether they redact.
type Redact func([]byte) []byte

// WriteFileAtomic writes data to path through a temporary file in the same directory and a
// rename, so a reader (or a resumed run) never sees a half-written file. It is the one writer
// of the run directory's files.
func WriteFileAtomic(path string, data []byte) error {
	// 0600: the run directory's records hold commands and environments.
	return WriteFileAtomicPerm(path, data, 0o600)
}

// WriteFileAtomicPerm is WriteFileAtomic for a file of mode perm (less the umask): a report
// meant to be read by others. The rename replaces whatever the name is, a symlink included
// (the link, never the file it points at); check the path first (CheckReplaceable,
// CheckOutput).
func WriteFileAtomicPerm(path string, data []byte, perm os.FileMode) error {
	f, err := createTemp(path, perm)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// WriteFileNew writes data to a new file at path and never replaces an existing one: when path
// exists it returns an error that matches fs.ErrExist, so the caller can pick another name
// (the Slurm executor's numbered batch scripts: a resubmission must not overwrite the script an
// earlier array may still be running from). A write that fails removes the file again; a crash
// in the middle of it can leave it short, which is why callers use the file only after this
// returns.
func WriteFileNew(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, werr := f.Write(data)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(path)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// createTemp creates a new temporary file beside path (".NAME.tmp-N", so a listing shows what
// it is for) with perm less the umask, as os.OpenFile applies it; os.CreateTemp would always
// give 0600.
func createTemp(path string, perm os.FileMode) (*os.File, error) {
	prefix := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	for range 100 {
		f, err := os.OpenFile(prefix+strconv.FormatUint(rand.Uint64()%1e10, 10), os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
	return nil, fmt.Errorf("no unused temporary name beside %s", path)
}

// OutputError is an output path refused before anything was written (a device, a FIFO, a
// directory or a symlink; an existing file without --force; a missing parent directory): the
// user chooses another path, so callers report it as a usage error.
type OutputError struct{ Err error }

func (e *OutputError) Error() string { return e.Err.Error() }
func (e *OutputError) Unwrap() error { return e.Err }

// CheckOutput is the one check of a file the user names as a command's output (trace fix and
// slim's OUT, bundle -o). The file is written beside it and renamed over it, and a rename
// replaces whatever the name points at: as root, a device such as /dev/null would become a
// regular file, and a symlink would be replaced instead of followed. So an existing path that
// is not a regular file is refused even with force, an existing regular file needs force, and
// a missing parent directory is an error that names it rather than being created.
func CheckOutput(path string, force bool) error {
	refuse := func(format string, a ...any) error { return &OutputError{fmt.Errorf(format, a...)} }
	st, err := os.Lstat(path)
	switch {
	case err == nil && !st.Mode().IsRegular():
		return refuse("%s exists and is not a regular file (%s); choose another path", path, st.Mode().Type())
	case err == nil && !force:
		return refuse("%s exists; pass --force to replace it or choose another path", path)
	}
	dir := filepath.Dir(path)
	dst, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return refuse("the directory %s does not exist; create it or choose another path for %s", dir, filepath.Base(path))
	case err != nil:
		return refuse("%s: %v; choose another path", dir, err)
	case !dst.IsDir():
		return refuse("%s is not a directory; choose another path for %s", dir, filepath.Base(path))
	}
	return nil
}

// CheckReplaceable is the check of a file the runner owns and rewrites on every call, such as
// runner report's report.md and report.html in the run directory: a regular file there is
// replaced, and so is a symlink (the link, not the file it points at, which may belong to
// anyone); anything else (a FIFO, a device, a directory, a socket) is not the runner's file
// and is refused.
func CheckReplaceable(path string) error {
	st, err := os.Lstat(path)
	if err != nil || st.Mode().IsRegular() || st.Mode()&fs.ModeSymlink != 0 {
		return nil
	}
	return &OutputError{fmt.Errorf("%s exists and is %s, not a file the runner wrote; remove it or move it away", path, infile.Describe(st.Mode()))}
}

// Output is a file written as a stream (a rewritten trace, a bundle): a temporary file beside
// its path, renamed over the path by Commit only when everything was written, so a failure or
// an interruption leaves no empty or half-written file and an existing one untouched. Its mode
// is os.Create's: 0666 less the umask.
type Output struct {
	*os.File
	path string
}

// CreateOutput starts the output file path. Check the path with CheckOutput first.
func CreateOutput(path string) (*Output, error) {
	f, err := createTemp(path, 0o666)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	return &Output{File: f, path: path}, nil
}

// Commit closes the temporary file and renames it over the output path; on failure the
// temporary file is removed.
func (o *Output) Commit() error {
	err := o.File.Close()
	if err == nil {
		err = os.Rename(o.File.Name(), o.path)
	}
	if err != nil {
		os.Remove(o.File.Name())
		return fmt.Errorf("write %s: %w", o.path, err)
	}
	return nil
}

// Abort closes and removes the temporary file; the output path is untouched.
func (o *Output) Abort() {
	o.File.Close()
	os.Remove(o.File.Name())
}

// WriteJSON encodes v as the run directory's JSON files are encoded, passes it through redact
// when not nil, and writes it atomically.
func WriteJSON(path string, v any, redact Redact) error {
	b, err := encodeJSON(path, v)
	if err != nil {
		return err
	}
	if redact != nil {
		b = redact(b)
	}
	return WriteFileAtomic(path, b)
}

// encodeJSON is how the run directory's JSON files are encoded: indented, and without HTML
// escaping (these files are read by people and shell tools, and "<redacted>" should read as
// such).
func encodeJSON(path string, v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode %s: %w", path, err)
	}
	return b.Bytes(), nil
}

// ErrNotRegular is wrapped by the error of a reader given a path that is not a regular file
// (it is plans/infile's, so errors.Is holds for both).
var ErrNotRegular = infile.ErrNotRegular

// MaxRecordBytes bounds a JSON record of the run directory read whole (summary.json,
// cells.json, result.json, ...): the runner writes them at a few KiB a cell, so a larger one
// is not the runner's and is refused rather than read into memory.
const MaxRecordBytes = 256 << 20

// ReadFile reads a file of the run directory through plans/infile, the one reader of the
// files the runner is given: a path that is not a regular file (a FIFO, a device, a socket, a
// directory; a symlink is followed) is refused with an error that names it and wraps
// ErrNotRegular, without being read (a FIFO planted in a run directory would otherwise block
// the reader forever, past Ctrl-C), and a file over MaxRecordBytes with one that wraps
// infile.ErrTooLarge. A missing file is returned as os.Open's error (errors.Is fs.ErrNotExist
// holds).
func ReadFile(path string) ([]byte, error) {
	return infile.ReadFile(path, MaxRecordBytes)
}

// OpenFile opens a file to be read as a stream (a dataset, a file to hash) through the one
// reader (plans/infile): a path that is not a regular file is refused, wrapping ErrNotRegular.
// The caller closes the file.
func OpenFile(path string) (*os.File, error) {
	return infile.Open(path)
}

// ReadJSON decodes the JSON file path into v through ReadFile (a path that is not a regular
// file is refused). A missing file is returned as os.Open's error (errors.Is fs.ErrNotExist
// holds); invalid JSON names the file.
func ReadJSON(path string, v any) error {
	data, err := ReadFile(path)
	if err != nil {
		return err
	}
	return DecodeJSON(path, data, v)
}

// ReadPlan reads and parses dir/plan.toml, the plan a run was made from, through plans/infile
// (at most plans.MaxPlanBytes).
// raw is the file's bytes, returned also when they do not parse (err is then the plan's
// *plans.Error) so that a bundle can still carry them; raw is nil when the file could not be
// read. plan.toml is the plan as written, and its relative paths start at the directory of the
// file it was copied from, not at dir: its dataset is the file cells.json recorded when the
// run started (Cells.Dataset), so every reader of the run (exec-cell on a Slurm node, --resume,
// a bundle) reads the file the run read. A run directory without that record (written before
// it existed, or a plan without a dataset file) resolves relative paths at dir.
func ReadPlan(dir string) (p *plans.Plan, raw []byte, err error) {
	path := filepath.Join(dir, PlanFile)
	raw, err = infile.ReadFile(path, plans.MaxPlanBytes)
	if err != nil {
		return nil, nil, fmt.Errorf("read plan: %w", err)
	}
	var opts plans.ParseOptions
	if c, err := ReadCells(dir); err == nil && c.Dataset != nil {
		opts.DatasetPath = c.Dataset.Path
	}
	if p, err = plans.ParseWith(path, raw, opts); err != nil {
		return nil, raw, err
	}
	p.Path = path
	return p, raw, nil
}

// Fingerprint reads the file at path (through OpenFile) and returns its absolute path, size
// and SHA-256: what a run records of an input file it reads (cells.json "dataset"), so that a
// later reader can tell whether the file changed. ctx ends the read early.
func Fingerprint(ctx context.Context, path string) (*InputFile, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	f, err := OpenFile(abs)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, ctxReader{ctx, f})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", abs, err)
	}
	return &InputFile{Path: abs, Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// Changed says how the file at f.Path now differs from what f recorded ("" when it is the
// same file content: same size and SHA-256), or why it cannot be read.
func (f *InputFile) Changed(ctx context.Context) string {
	now, err := Fingerprint(ctx, f.Path)
	switch {
	case err != nil:
		return err.Error()
	case now.Bytes != f.Bytes:
		return fmt.Sprintf("%s is %d bytes, it was %d when the run started", f.Path, now.Bytes, f.Bytes)
	case f.SHA256 != "" && now.SHA256 != f.SHA256:
		return fmt.Sprintf("%s has other content (sha256 %.12s, it was %.12s when the run started)", f.Path, now.SHA256, f.SHA256)
	}
	return ""
}

// ContextReader returns r, ending a read loop once ctx is done: Ctrl-C ends the reading of a
// big file (hashing it, bundling it) within one read instead of after it.
func ContextReader(ctx context.Context, r io.Reader) io.Reader { return ctxReader{ctx, r} }

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// DecodeJSON decodes data, the content of the file name (a path or a bundle entry), into v.
func DecodeJSON(name string, data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s is not valid JSON: %w", name, err)
	}
	return nil
}

// readInto reads path into a new T.
func readInto[T any](path string) (*T, error) {
	var v T
	if err := ReadJSON(path, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// ReadResult reads cellDir/result.json.
func ReadResult(cellDir string) (*CellResult, error) {
	return readInto[CellResult](filepath.Join(cellDir, ResultFile))
}

// ReadCommand reads dir/command.json (a cell's or a server's).
func ReadCommand(dir string) (*Launch, error) {
	return readInto[Launch](filepath.Join(dir, CommandFile))
}

// ReadCells reads dir/cells.json.
func ReadCells(dir string) (*Cells, error) {
	return readInto[Cells](filepath.Join(dir, CellsFile))
}

// ReadManifest reads dir/manifest.json.
func ReadManifest(dir string) (*Manifest, error) {
	return readInto[Manifest](filepath.Join(dir, ManifestFile))
}

// ReadSummary reads dir/summary.json.
func ReadSummary(dir string) (*Summary, error) {
	return readInto[Summary](filepath.Join(dir, SummaryJSON))
}

// ReadServer reads a serve-mode server directory's server.json.
func ReadServer(serverDir string) (*ServerRecord, error) {
	return readInto[ServerRecord](filepath.Join(serverDir, ServerFile))
}
