package runner

import (
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/exitcode"
	"github.com/sglprof/runner/runner/exposure"
	"github.com/sglprof/runner/runner/secrets"
)

// prepareRedactor builds the run's redactor once (exposure.Redactor), before any file of the run
// directory is written.
func (o *Options) prepareRedactor(p *plans.Plan) error {
	red, err := exposure.Redactor(p, o.Env)
	if err != nil {
		return &exitcode.UsageError{Err: err}
	}
	o.red = red
	return nil
}

// writeRedactedJSON is rundir.WriteJSON for the files of a run directory that record commands
// and environments (cells.json, command.json, manifest.json): after the name-based redaction
// of the values themselves, the encoded file goes through the run's redactor, so a token
// passed as a plain argument, under an innocent variable name, matching a plan pattern or
// printed by a probe in free text is not written down either. Cells may write concurrently
// (GPU slots): each write gets its own clone of the redactor.
func (o *Options) writeRedactedJSON(path string, v any) error {
	red := o.red
	if red == nil {
		// Only code that drives a cell without a run (a test) gets here.
		red = secrets.Default()
	} else {
		red = red.Clone()
	}
	return rundir.WriteJSON(path, v, red.JSON)
}
