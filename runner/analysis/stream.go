package analysis

import (
	"context"
	"errors"
	"fmt"

	"github.com/sglprof/runner/nsys/nsysdb"
	"github.com/sglprof/runner/reports/trace"
	"github.com/sglprof/runner/reports/triage"
)

// openStream is the triage.Options.OpenStream hook: an nsys export that nsysdb.OpenStream can
// deliver in time order (one process or several, with NVTX ranges or without) is triaged as
// its kernels go by, so the triage's memory does not grow with their number (the NVTX ranges
// are held in a compact index: each op comes with its scope, and only the ranges that name
// stages are held as annotations, for the stage windows). Everything else, and an export whose order
// breaks during the pass, goes to open (the held trace). The window mapping and --nvtx-stage
// want NVTX ranges and the held capture, so they are not streamed.
func (s *Session) openStream(ctx context.Context, path string) (*triage.OpStream, error) {
	if s.opts.held || !nsysInput(path) || s.opts.Window || s.opts.StageRE != nil || s.opts.AllowNoKernels {
		return nil, nil
	}
	input := path // as Analyze names it, for open to recognise a dropped pass
	if IsNsysReport(path) {
		if s.opts.Env == nil {
			return nil, nil // open's reader says how to export it
		}
		var err error
		if path, err = ExportReport(ctx, path, s.opts.Env, s.log); err != nil {
			return nil, err
		}
	}
	st, err := nsysdb.OpenStream(ctx, path, nsysdb.ReadOptions{Logger: s.log, SummariseAPI: true, SkipKernelInfo: true, OneLaunchPerName: true,
		KeepRange: triage.IsStageAnnotation})
	if err != nil {
		return nil, notStreamable(err)
	}
	c := st.Capture
	// Each NVTX range key's scope label (scopeLabels), interned before the pass.
	var labels []trace.NameID
	if n := c.RangeKeys(); n > 0 {
		label := rangeLabeler(c.Trace)
		labels = make([]trace.NameID, n)
		for k := range labels {
			labels[k] = label(c.RangeKey(int32(k)))
		}
	}
	return &triage.OpStream{
		Trace: c.Trace,
		EachScoped: func(ctx context.Context, fn func(op *trace.GPUOp, seq, launchStart int64, scope trace.NameID)) error {
			err := st.EachScoped(ctx, func(op *trace.GPUOp, seq, launchStart int64, k int32) {
				var scope trace.NameID
				if k >= 0 && int(k) < len(labels) {
					scope = labels[k]
				}
				fn(op, seq, launchStart, scope)
			})
			if err != nil {
				return notStreamable(err)
			}
			// The NVTX, memory and API tables, once the pass has summed the API calls.
			s.inputs++
			s.streamed = input
			if s.inputs == 1 {
				top := s.opts.APITop
				if top == 0 {
					top = DefaultAPITop
				}
				tb := nsysdb.Summaries(c, max(top, 0))
				s.tables = &tb
			}
			return nil
		},
		Close: st.Close,
	}, nil
}

// notStreamable marks the reader's nsysdb.ErrNotStreamable as the triage's, so that Analyze
// reads the export with open instead; other errors pass unchanged.
func notStreamable(err error) error {
	if errors.Is(err, nsysdb.ErrNotStreamable) {
		return fmt.Errorf("%w: %w", triage.ErrNotStreamable, err)
	}
	return err
}
