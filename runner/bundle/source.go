// Package bundle turns a run directory into one redacted .tar.gz a maintainer on another
// machine can read and replay (`runner bundle`, `runner bundle --issue`), and holds the
// bundle's side of a replay (`runner replay`, which the runner's Replay drives): safe
// extraction, the bundled plan readied for this machine, the list to confirm before anything
// runs, an environment diff, and a per-cell verdict of whether the result reproduced. It runs
// nothing itself, so it never imports the orchestrator.
//
// Secrets never reach the archive: every text file goes through a Redactor before it is
// written, and binary files that contain a secret are left out.
package bundle

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/exposure"
	"github.com/sglprof/runner/runner/secrets"
)

// source is a run directory read for bundling.
type source struct {
	dir      string // the run directory
	planRaw  []byte
	plan     *plans.Plan // nil when plan.toml no longer decodes
	planErr  error
	cells    []rundir.CellRecord
	dataset  *rundir.InputFile // the run's dataset file (cells.json "dataset"), nil when none
	manifest rundir.Manifest
	selected []rundir.CellRecord // the cells going into the bundle, in run order
}

// resolve finds the run directory of path (a run directory or one of its cell directories)
// and the cells to bundle: the named ones, the one cell of a cell directory, or all.
func resolve(path string, only []string) (*source, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("bundle: %w; give a run directory (runs/<plan>/<time>-<id>) or one of its cells/<id> directories", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("bundle: %s is not a directory; give a run directory or one of its cells/<id> directories", path)
	}
	dir := abs
	if _, err := os.Stat(filepath.Join(abs, rundir.CellsFile)); err != nil {
		parent := filepath.Dir(abs)
		if filepath.Base(parent) == rundir.CellsDir {
			if _, err := os.Stat(filepath.Join(filepath.Dir(parent), rundir.CellsFile)); err == nil {
				dir = filepath.Dir(parent)
				if len(only) == 0 {
					only = []string{filepath.Base(abs)}
				}
			}
		}
		if dir == abs {
			return nil, fmt.Errorf("bundle: %s has no %s; give a run directory (runs/<plan>/<time>-<id>) or one of its cells/<id> directories", path, rundir.CellsFile)
		}
	}
	s := &source{dir: dir}
	s.plan, s.planRaw, s.planErr = rundir.ReadPlan(dir)
	if s.planRaw == nil {
		if errors.Is(s.planErr, fs.ErrNotExist) {
			return nil, fmt.Errorf("bundle: %w; the run directory is incomplete", s.planErr)
		}
		return nil, fmt.Errorf("bundle: %w", s.planErr)
	}
	cj, err := rundir.ReadCells(dir)
	if err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	s.cells, s.dataset = cj.Cells, cj.Dataset
	if m, err := rundir.ReadManifest(dir); err == nil {
		s.manifest = *m
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	if len(only) == 0 {
		s.selected = s.cells
		return s, nil
	}
	var missing []string
	for _, c := range s.cells {
		if slices.Contains(only, c.Cell.ID) {
			s.selected = append(s.selected, c)
		}
	}
	for _, id := range only {
		if !slices.ContainsFunc(s.cells, func(c rundir.CellRecord) bool { return c.Cell.ID == id }) {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		ids := make([]string, len(s.cells))
		for i, c := range s.cells {
			ids[i] = c.Cell.ID
		}
		return nil, fmt.Errorf("bundle: the run has no cell %s; its cells are: %s", strings.Join(missing, ", "), strings.Join(ids, ", "))
	}
	return s, nil
}

// cellDir is the absolute directory of a cell of the run.
func (s *source) cellDir(c rundir.CellRecord) string {
	if c.Dir != "" && filepath.IsLocal(c.Dir) {
		return filepath.Join(s.dir, c.Dir)
	}
	return filepath.Join(s.dir, rundir.CellsDir, c.Cell.ID)
}

// redactor is the run's redactor (exposure.Redactor, the one the runner wrote the run
// directory with) given the bundling process's environment, normally the one the run had: the
// plan's backend.env (plan.toml keeps them as written) and env are searched for literally, and
// so are the secrets of the plan's command lines.
func (s *source) redactor(env []string) (*secrets.Redactor, error) {
	return exposure.Redactor(s.plan, env)
}
