package runner

import (
	"fmt"
	"slices"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/exitcode"
	"github.com/sglprof/runner/runner/secrets"
)

// prepareRedactor builds the run's redactor once (PlanRedactor), before any file of the run
// directory is written.
func (o *Options) prepareRedactor(p *plans.Plan) error {
	red, err := PlanRedactor(p, o.Env)
	if err != nil {
		return &exitcode.UsageError{Err: err}
	}
	o.red = red
	return nil
}

// PlanRedactor is the redactor of the files of a run of p (secrets.ForRun), the one the
// runner writes the run directory with and a bundle of the run packs it with: it knows the
// values of p's [backend.env] and of env's secret-named variables, p's [bundle] redact
// patterns, and the secrets the rules find in p's command lines (planCommands). p may be nil
// (a run directory whose plan does not load): then only env and the rules.
func PlanRedactor(p *plans.Plan, env []string) (*secrets.Redactor, error) {
	if p == nil {
		return secrets.ForRun(nil, env, nil)
	}
	return secrets.ForRun(p.Backend.Env, env, p.Bundle.Redact, planCommands(p)...)
}

// planCommands are the command lines of p, each an argv: backend.command and extra_args as one,
// each Slurm setup line and sbatch directive, the attached server's URL, and each
// [backend.env] entry as NAME=value (a value may itself be a command line).
func planCommands(p *plans.Plan) [][]string {
	out := [][]string{append(slices.Clone(p.Backend.Command), p.Backend.ExtraArgs...)}
	for _, l := range p.Executor.Slurm.Setup {
		out = append(out, []string{l})
	}
	for _, l := range p.Executor.Slurm.ExtraSbatch {
		out = append(out, []string{l})
	}
	if p.Backend.URL != "" {
		out = append(out, []string{p.Backend.URL})
	}
	for k, v := range p.Backend.Env {
		out = append(out, []string{k + "=" + v})
	}
	return out
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
		var err error
		if red, err = secrets.Default(); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	} else {
		red = red.Clone()
	}
	return rundir.WriteJSON(path, v, red.JSON)
}
