package runner

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/nsys"
	"github.com/sglprof/runner/reports/kineto"
	"github.com/sglprof/runner/reports/trace"
	"github.com/sglprof/runner/reports/triage"
)

// OpenTrace reads one trace file into the linked trace model: an nsys SQLite export through
// the nsys reader, anything else through the Kineto reader (which detects gzip by its magic
// bytes). It is the Open function every triage in the runner uses.
func OpenTrace(ctx context.Context, path string) (*trace.Trace, error) {
	if isSQLite(path) {
		return nsys.Read(ctx, path, nsys.ReadOptions{})
	}
	t, err := kineto.ReadFile(ctx, path, kineto.Options{})
	if err != nil {
		return nil, err
	}
	trace.Link(t)
	return t, nil
}

// isSQLite sniffs the SQLite file header rather than trusting the suffix.
func isSQLite(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var hdr [16]byte
	n, _ := f.Read(hdr[:])
	return n == 16 && string(hdr[:]) == "SQLite format 3\x00"
}

// topKernelCount is how many kernels of a cell go into summary.md.
const topKernelCount = 3

// triageCell writes triage.md and triage.json for a cell with a torch trace or an nsys export,
// and keeps the top kernels for the summary. A triage problem is a warning: the measurement
// itself is still valid.
func triageCell(ctx context.Context, rec cellRecord, res *CellResult, opts *Options) {
	var root string
	switch {
	case rec.NSys != nil:
		root = filepath.Join(rec.abs, rec.NSys.Report+".sqlite")
		if _, err := os.Stat(root); err != nil {
			return
		}
	case len(res.Found.Traces) > 0:
		root = filepath.Join(rec.abs, "traces")
	default:
		return
	}
	rep, err := TriagePath(ctx, root, triage.DiscoverOptions{}, triage.Options{Logger: opts.Logger})
	if err != nil {
		res.Warnings = append(res.Warnings, backends.Reason{Code: "triage", Message: fmt.Sprintf("triage of %s failed: %v", root, err)})
		return
	}
	for _, f := range []struct{ name, format string }{{TriageMD, "md"}, {TriageJSON, "json"}} {
		var b bytes.Buffer
		if err := triage.Render(&b, rep, f.format, triage.DefaultCutoff); err != nil {
			res.Warnings = append(res.Warnings, backends.Reason{Code: "triage", Message: err.Error()})
			return
		}
		if err := writeFileAtomic(filepath.Join(rec.abs, f.name), b.Bytes()); err != nil {
			res.Warnings = append(res.Warnings, backends.Reason{Code: "triage", Message: err.Error()})
			return
		}
	}
	res.TopKernels = topKernels(rep, topKernelCount)
	for _, w := range rep.Warnings {
		if strings.Contains(w, "window") || strings.Contains(w, "no kernel") {
			res.Warnings = append(res.Warnings, backends.Reason{Code: "triage", Message: w})
		}
	}
}

// TriagePath discovers the traces under root (a file or directory) and triages them with the
// runner's readers.
func TriagePath(ctx context.Context, root string, dopts triage.DiscoverOptions, topts triage.Options) (*triage.Report, error) {
	in, err := triage.Discover(root, dopts)
	if err != nil {
		return nil, err
	}
	if topts.Open == nil {
		topts.Open = OpenTrace
	}
	return triage.Analyze(ctx, in, topts)
}

// topKernels takes the first n kernel rows of the stage with the most kernel time, which for a
// diffusion cell is the denoising loop.
func topKernels(rep *triage.Report, n int) []KernelShare {
	best := -1
	for i, st := range rep.Stages {
		if best < 0 || st.KernelTimeUS > rep.Stages[best].KernelTimeUS {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	var out []KernelShare
	for _, k := range rep.Stages[best].Kernels {
		if len(out) == n {
			break
		}
		out = append(out, KernelShare{Name: k.Name, Category: k.Category, TotalUS: k.TotalUS, SharePct: k.SharePct})
	}
	return out
}

// ResolveCell handles `runner triage CELL_DIR`: when path is a run cell (or a file or folder
// inside one), it returns the cell's result and the trace to triage in it. It returns a nil
// result for a path that is not part of a cell.
func ResolveCell(path string) (cellDir string, res *CellResult, root string, err error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", nil, "", err
	}
	for d, i := abs, 0; i < 3; d, i = filepath.Dir(d), i+1 {
		var r CellResult
		if rerr := readJSON(filepath.Join(d, ResultFile), &r); rerr == nil {
			cellDir, res = d, &r
			break
		}
	}
	if res == nil {
		return "", nil, path, nil
	}
	root = path
	if abs == cellDir {
		root = filepath.Join(cellDir, "traces")
		if m, _ := filepath.Glob(filepath.Join(root, "*")); len(m) == 0 {
			root = filepath.Join(cellDir, "nsys", "report.sqlite")
		}
	}
	return cellDir, res, root, nil
}

// GateError is returned when a triage is asked of a cell whose verdict says its traces do not
// show what they claim (a diffusers fallback); --force overrides it.
type GateError struct {
	Cell   string
	Result *CellResult
}

func (e *GateError) Error() string {
	var why []string
	for _, r := range e.Result.Reasons {
		why = append(why, reasonLine(r))
	}
	return fmt.Sprintf("cell %s is marked %s: %s; its traces do not measure what the cell claims (pass --force to triage them anyway)", e.Cell, e.Result.Verdict, strings.Join(why, "; "))
}
