// Package rundir owns the run directory: the layout of its paths, the types of the JSON files
// in it (cells.json, manifest.json, summary.json and, per cell, command.json and result.json;
// serve mode's server.json and load.json), how they are read, and how they are written
// (atomically, optionally through a redaction function). The runner writes a run directory;
// the reports, bundles and the CLI read it, and all of them do so through this package.
//
// It imports nothing of this module but plans, so that any package, whichever side of the
// runner it sits on, can read a run directory without an import cycle. Types recorded in these
// files that other packages produce (a backend's Launch and Reasons, the load phase's summary)
// are declared here and aliased there.
package rundir

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// Names of the files and directories of a run directory:
//
//	<output>/<plan>/<UTC time>-<id>/
//	  plan.toml  cells.json  manifest.json  summary.md  summary.json  [compare.json compare.md]
//	  [parity.json]                                            (a plan with an engine axis)
//	  cells/<id>/  command.json log.txt result.json perf.json triage.md triage.json
//	               traces/ outputs/ nsys/  [requests.jsonl load.json]
//	  servers/<n>/ command.json log.txt server.json traces/      (serve mode)
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

// Files of serve mode.
const (
	ServersDir   = "servers"
	RequestsFile = "requests.jsonl"
	LoadFile     = "load.json"
	ServerFile   = "server.json"
)

// CompareFile and CompareMD are the comparison a run with a baseline leaves in its directory.
const (
	CompareFile = "compare.json"
	CompareMD   = "compare.md"
)

// CellDir is the directory of cell id in the run directory dir.
func CellDir(dir, id string) string { return filepath.Join(dir, CellsDir, id) }

// Create creates <output>/<plan>/<UTC time>-<short id>/ and its cells/ and never reuses an
// existing one: os.Mkdir fails on an existing directory, and the random id makes a collision a
// retry.
func Create(output, planName string, now time.Time) (string, error) {
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
