package runner

import (
	"context"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
)

// datasetRecord is what cells.json records of the plan's dataset file (a sharegpt, multiturn or
// mooncake plan's
// load.dataset_path, absolute since plans resolved it from the plan file's directory): the
// run directory's plan.toml keeps the path as written, relative to a directory the run
// directory is not in, so exec-cell, --resume and bundles read this record instead
// (rundir.ReadPlan). nil when the plan reads no dataset file.
func datasetRecord(ctx context.Context, p *plans.Plan, opts *Options) *rundir.InputFile {
	if p.Backend.ModelType != plans.ModelTypeLLM || p.Load.DatasetPath == "" {
		return nil
	}
	rec, err := rundir.Fingerprint(ctx, p.Load.DatasetPath)
	if err != nil {
		// The plan check read it a moment ago; the cells will say what is wrong with it.
		opts.Logger.Warn("the dataset could not be read to record its size and sha256", "path", p.Load.DatasetPath, "err", err)
		return &rundir.InputFile{Path: p.Load.DatasetPath}
	}
	return rec
}

// warnDatasetChanged says when the dataset a run recorded at its start is no longer the same
// file content: the cells run now (--resume, exec-cell) draw their prompts from other data
// than the finished ones, so their results do not compare.
func warnDatasetChanged(ctx context.Context, rec *rundir.InputFile, opts *Options) {
	if rec == nil {
		return
	}
	if why := rec.Changed(ctx); why != "" {
		opts.Logger.Warn("the dataset changed since the run started; the cells run now draw their prompts from other data than the finished ones (start a new run to compare like with like)", "dataset", rec.Path, "change", why)
	}
}
