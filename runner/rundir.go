package runner

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// Names of the files of a run directory (DESIGN.md §4).
const (
	PlanFile     = "plan.toml"
	CellsFile    = "cells.json"
	ManifestFile = "manifest.json"
	SummaryMD    = "summary.md"
	SummaryJSON  = "summary.json"
	CellsDir     = "cells"
	ResultFile   = "result.json"
	CommandFile  = "command.json"
	LogFile      = "log.txt"
	PerfFile     = "perf.json"
	TriageMD     = "triage.md"
	TriageJSON   = "triage.json"
)

// newRunDir creates <output>/<plan>/<UTC time>-<short id>/ and never reuses an existing one:
// os.Mkdir fails on an existing directory, and the random id makes a collision a retry.
func newRunDir(output, planName string, now time.Time) (string, error) {
	parent := filepath.Join(output, planName)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("cannot create the output directory %s: %w; choose a writable output_dir in the plan or pass --output", parent, err)
	}
	for range 8 {
		var b [3]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", fmt.Errorf("run id: %w", err)
		}
		dir := filepath.Join(parent, now.UTC().Format("20060102T150405Z")+"-"+hex.EncodeToString(b[:]))
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			if err := os.Mkdir(filepath.Join(dir, CellsDir), 0o755); err != nil {
				return "", fmt.Errorf("cannot create %s: %w", filepath.Join(dir, CellsDir), err)
			}
			return dir, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("cannot create the run directory %s: %w; choose a writable output_dir in the plan or pass --output", dir, err)
		}
	}
	return "", fmt.Errorf("could not find an unused run directory name under %s", parent)
}

// writeFileAtomic writes data to path through a temporary file in the same directory and a
// rename, so a reader (or a resumed run) never sees a half-written result.json.
func writeFileAtomic(path string, data []byte) error {
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

// writeJSONAtomic marshals v with indentation and writes it atomically.
func writeJSONAtomic(path string, v any) error {
	b, err := encodeJSON(path, v)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, b)
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

// readJSON decodes a JSON file into v.
func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s is not valid JSON: %w", path, err)
	}
	return nil
}
