package runner

import (
	"errors"
	"path/filepath"

	"github.com/sglprof/runner/reports/render"
	"github.com/sglprof/runner/reports/rundir"
)

// writeSummaryFiles writes summary.md and summary.json, each even when the other fails.
func writeSummaryFiles(dir string, s *rundir.Summary) error {
	return errors.Join(rundir.WriteFileAtomic(filepath.Join(dir, rundir.SummaryMD), render.SummaryMarkdown(s)),
		rundir.WriteJSON(filepath.Join(dir, rundir.SummaryJSON), s, nil))
}
