package rundir

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/runner/infile"
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
// (it is runner/infile's, so errors.Is holds for both).
var ErrNotRegular = infile.ErrNotRegular

// MaxRecordBytes bounds a JSON record of the run directory read whole (summary.json,
// cells.json, result.json, ...): the runner writes them at a few KiB a cell, so a larger one
// is not the runner's and is refused rather than read into memory.
const MaxRecordBytes = 256 << 20

// ReadFile reads a file of the run directory through runner/infile, the one reader of the
// files the runner is given: a path that is not a regular file (a FIFO, a device, a socket, a
// directory; a symlink is followed) is refused with an error that names it and wraps
// ErrNotRegular, without being read (a FIFO planted in a run directory would otherwise block
// the reader forever, past Ctrl-C), and a file over MaxRecordBytes with one that wraps
// infile.ErrTooLarge. A missing file is returned as os.Open's error (errors.Is fs.ErrNotExist
// holds).
func ReadFile(path string) ([]byte, error) {
	return infile.ReadFile(path, MaxRecordBytes)
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

// ReadPlan reads and parses dir/plan.toml, the plan a run was made from, through runner/infile
// (at most plans.MaxPlanBytes).
// raw is the file's bytes, returned also when they do not parse (err is then the plan's
// *plans.Error) so that a bundle can still carry them; raw is nil when the file could not be
// read.
func ReadPlan(dir string) (p *plans.Plan, raw []byte, err error) {
	path := filepath.Join(dir, PlanFile)
	raw, err = infile.ReadFile(path, plans.MaxPlanBytes)
	if err != nil {
		return nil, nil, fmt.Errorf("read plan: %w", err)
	}
	if p, err = plans.Parse(path, raw); err != nil {
		return nil, raw, err
	}
	p.Path = path
	return p, raw, nil
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
