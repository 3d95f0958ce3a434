package nsys

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sglprof/runner/plans"
)

// Defaults for [nsys] settings a plan leaves empty. node keeps one record per kernel inside
// CUDA graphs (what triage needs, and what SGLang's own docs use); cuda,nvtx,osrt is the set
// SGLang's docs and issue reports recommend for seeing GPU work, markers and OS runtime calls.
const (
	DefaultCudaGraphTrace = "node"
)

// DefaultTrace is the --trace list used when the plan gives none.
var DefaultTrace = []string{"cuda", "nvtx", "osrt"}

// Names inside a cell directory: nsys writes <cell>/nsys/report.nsys-rep and Export writes
// <cell>/nsys/report.sqlite next to it.
const (
	ReportDir     = "nsys"
	ReportName    = "report"
	ReportExt     = ".nsys-rep"
	SQLiteExt     = ".sqlite"
	reportDirMode = 0o755
)

// ReportBase is the -o value for a cell: <cellDir>/nsys/report (nsys appends .nsys-rep).
func ReportBase(cellDir string) string {
	return filepath.Join(cellDir, ReportDir, ReportName)
}

// ReportPath is the report file nsys writes for base (a base that already ends in .nsys-rep
// is returned unchanged).
func ReportPath(base string) string {
	return strings.TrimSuffix(base, ReportExt) + ReportExt
}

// SQLitePath is the export Export writes for base (or for a .nsys-rep path).
func SQLitePath(base string) string {
	return strings.TrimSuffix(base, ReportExt) + SQLiteExt
}

// PrepareReportDir creates <cellDir>/nsys and returns the report base for Wrap. nsys does not
// create missing parent directories of -o, and finding that out after a 20-minute run would
// lose the run.
func PrepareReportDir(cellDir string) (string, error) {
	base := ReportBase(cellDir)
	if err := os.MkdirAll(filepath.Dir(base), reportDirMode); err != nil {
		return "", fmt.Errorf("nsys: create report directory: %w; check that the run directory is writable", err)
	}
	return base, nil
}

// Wrap returns the argv that runs argv under `nsys profile`:
//
//	<nsysCmd> profile --trace-fork-before-exec=true --cuda-graph-trace=<node|graph>
//	  --force-overwrite=true --trace=<list> [--delay <s>] [--duration <s>] -o <report> <argv...>
//
// --trace-fork-before-exec is always on because sglang runs its GPU work in spawned worker
// processes, which nsys otherwise does not trace (the classic "report has no kernels").
// --force-overwrite makes a resumed cell replace a partial report instead of failing. Delay
// and duration are whole seconds for nsys; a fraction is rounded up so that a window is never
// shorter than the plan asked for and a sub-second value does not silently become 0 (unset).
// argv is appended unchanged: no element is quoted or split.
func Wrap(nsysCmd []string, opts plans.NSys, report string, argv []string) []string {
	return wrap(nsysCmd, opts, report, argv, false)
}

// WrapServer is Wrap for a server (serve cells): with a --duration it adds --kill none.
// nsys ends the application it launched when --duration runs out (its default --kill is
// sigterm), and a server killed there fails every later request of the cell with "connection
// refused"; the runner stops the server itself, and nsys writes the report when it does.
func WrapServer(nsysCmd []string, opts plans.NSys, report string, argv []string) []string {
	return wrap(nsysCmd, opts, report, argv, true)
}

func wrap(nsysCmd []string, opts plans.NSys, report string, argv []string, server bool) []string {
	graph := opts.CudaGraphTrace
	if graph == "" {
		graph = DefaultCudaGraphTrace
	}
	trace := opts.Trace
	if len(trace) == 0 {
		trace = DefaultTrace
	}
	out := make([]string, 0, len(nsysCmd)+10+len(argv))
	out = append(out, nsysCmd...)
	out = append(out,
		"profile",
		"--trace-fork-before-exec=true",
		"--cuda-graph-trace="+graph,
		"--force-overwrite=true",
		"--trace="+strings.Join(trace, ","),
	)
	if s := wholeSeconds(opts.Delay.Duration); s > 0 {
		out = append(out, "--delay", strconv.FormatInt(s, 10))
	}
	if s := wholeSeconds(opts.Duration.Duration); s > 0 {
		out = append(out, "--duration", strconv.FormatInt(s, 10))
		if server {
			out = append(out, "--kill", "none")
		}
	}
	if opts.CaptureRange == plans.CaptureRangeCudaAPI {
		// Always with an explicit end: nsys's default, stop-shutdown, would end the server.
		end := opts.CaptureRangeEnd
		if end == "" {
			end = "stop"
		}
		out = append(out, "--capture-range="+plans.CaptureRangeCudaAPI, "--capture-range-end="+end)
	}
	out = append(out, "-o", report)
	return append(out, argv...)
}

// wholeSeconds rounds d up to whole seconds; 0 and negative durations mean "unset".
func wholeSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}
