package rundir

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
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

// ReadJSON decodes the JSON file path into v. A missing file is returned as os.ReadFile's
// error (errors.Is fs.ErrNotExist holds); invalid JSON names the file.
func ReadJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return DecodeJSON(path, data, v)
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
