package sglang

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/reports/rundir"
)

// Reason and warning codes Assess produces. They are stable: result.json, summaries and CI
// scripts key on them.
const (
	CodeFallback         = "diffusers-fallback" // invalid (warning with [gate] diffusers_fallback = "warn")
	CodeOOM              = "cuda-oom"           // failed
	CodeWorkerDead       = "worker-dead"        // failed
	CodeGenerateFailed   = "generate-failed"    // failed
	CodeExitStatus       = "exit-status"        // failed (warning for nsys cells with a duration)
	CodeTraceMissing     = "trace-missing"      // failed
	CodeTraceTruncated   = "trace-truncated"    // failed
	CodeTraceSaveFailed  = "trace-save-failed"  // warning: sglang complained but a complete trace exists
	CodeTraceOutsideCell = "trace-outside-cell" // warning: this sglang build ignored the profiler-dir variables
	CodePerfDumpMissing  = "perf-dump-missing"  // failed (warning for nsys cells with a duration)
)

// tailContext is how many final log lines a reason about a non-zero exit quotes.
const tailContext = 10

// severity orders verdicts: a failed run outranks an invalid one because a crashed run has no
// measurement whose validity could be discussed; both reasons are kept either way.
type severity int

const (
	sevWarn severity = iota
	sevInvalid
	sevFailed
)

type finding struct {
	sev severity
	r   rundir.Reason
}

// Assess implements backends.Backend. See the package documentation of the codes above for
// what each one means; the verdict is the worst severity among the reasons (ok < invalid <
// failed). w should be the watcher from NewWatcher for this run; any other value is treated as
// a watcher that saw no lines.
func (Backend) Assess(c plans.Cell, cellDir string, bw backends.Watcher, exit rundir.Exit) backends.Assessment {
	w, ok := bw.(*Watcher)
	if !ok || w == nil {
		w = NewWatcher()
	}
	dir, err := filepath.Abs(cellDir)
	if err != nil {
		dir = cellDir
	}
	// nsys ends the target process when --duration expires, so a non-zero exit and a missing
	// perf dump are expected there; the nsys report is that cell's success signal and the
	// runner checks it.
	nsysCut := c.Profiler == plans.ProfilerNsys && c.NSys.Duration.Duration > 0
	var found findings
	found.logFindings(c, w, exit, nsysCut)
	crashed := false
	for _, f := range found {
		if f.sev == sevFailed {
			crashed = true
		}
	}
	traces := found.traceFindings(c, dir, w, crashed)
	dump, msg := checkPerfDump(dir, w, crashed)
	if msg != "" {
		sev := sevFailed
		if nsysCut {
			sev = sevWarn
			msg += " Expected when nsys stops the application at the end of [nsys] duration."
		}
		found.add(sev, CodePerfDumpMissing, msg, nil)
	}

	a := found.assessment()
	a.Artifacts = backends.Artifacts{Traces: traces, PerfDump: dump, Outputs: listFiles(filepath.Join(dir, backends.OutputsDir))}
	return a
}

// findings are Assess's reasons in the order found.
type findings []finding

// add appends one finding.
func (found *findings) add(s severity, code, msg string, lines []rundir.Evidence) {
	*found = append(*found, finding{s, rundir.Reason{Code: code, Message: msg, Lines: lines}})
}

// logFindings adds what the log and the exit status say: a diffusers fallback, an OOM, a dead
// worker or failed generation (only without an OOM), a bad exit.
func (found *findings) logFindings(c plans.Cell, w *Watcher, exit rundir.Exit, nsysCut bool) {
	if ev := w.Evidence(FindingFallback); len(ev) > 0 {
		sev := sevInvalid
		if c.Gate.DiffusersFallback == "warn" {
			sev = sevWarn
		}
		found.add(sev, CodeFallback, "sglang fell back to the vanilla diffusers pipeline, so timings and traces do not measure sglang's native engine. "+
			"Add \"--backend\", \"sglang\" to backend.extra_args to force the native engine (it then fails instead of falling back); "+
			"for a local model directory whose name is not a known hub id also add \"--model-id\", \"<name>\" (e.g. Qwen-Image). "+
			"To accept the fallback set [gate] diffusers_fallback = \"warn\".", ev)
	}
	oom := w.Evidence(FindingOOM)
	if len(oom) > 0 {
		found.add(sevFailed, CodeOOM, "CUDA ran out of memory. Try a smaller resolution or fewer steps, or offload components with backend.extra_args such as "+
			"\"--dit-cpu-offload\", \"--text-encoder-cpu-offload\", \"--vae-cpu-offload\"; also check that no other process holds GPU memory.", oom)
	}
	// A dead worker or a failed prompt is usually the OOM already reported; only without an
	// OOM are they the best description of what went wrong.
	if len(oom) == 0 {
		if ev := w.Evidence(FindingWorkerDead); len(ev) > 0 {
			found.add(sevFailed, CodeWorkerDead, "an sglang worker process died; the lines before it in log.txt name the cause.", ev)
		}
		if ev := w.Evidence(FindingGenerateFailed); len(ev) > 0 {
			found.add(sevFailed, CodeGenerateFailed, "sglang reported that generation failed; see the quoted lines and log.txt.", ev)
		}
	}
	if msg, lines := exitProblem(c, w, exit); msg != "" {
		sev := sevFailed
		if nsysCut && exit.StartErr == "" {
			sev = sevWarn
			msg += " This is expected when nsys stops the application at the end of [nsys] duration."
		}
		found.add(sev, CodeExitStatus, msg, lines)
	}
}

// traceFindings adds what the torch traces say (missing, truncated, a save error, written
// outside the cell) and returns the traces found.
func (found *findings) traceFindings(c plans.Cell, dir string, w *Watcher, crashed bool) []string {
	traces, outside := findTraces(dir, w)
	if c.Profiler == plans.ProfilerTorch {
		saveErr := w.Evidence(FindingTraceSave)
		if len(traces) == 0 {
			found.add(sevFailed, CodeTraceMissing, traceMissingMessage(dir, w, saveErr, crashed), saveErr)
		} else {
			for _, t := range traces {
				if err := CheckTrace(t); err != nil {
					found.add(sevFailed, CodeTraceTruncated, fmt.Sprintf("trace %s is unusable: %v. The profiler or the run was stopped while the file was written; rerun the cell.", t, err), saveErr)
				}
			}
			if len(saveErr) > 0 {
				found.add(sevWarn, CodeTraceSaveFailed, "sglang reported a problem saving the profiler trace, but the trace file is a complete gzip stream; check it if triage looks wrong.", saveErr)
			}
		}
	}
	for _, t := range outside {
		found.add(sevWarn, CodeTraceOutsideCell, fmt.Sprintf("trace %s was written outside the cell directory: this sglang build ignores %s/%s. It is listed, but it may be overwritten by the next run.", t, EnvDiffusionProfilerDir, EnvProfilerDir), nil)
	}
	return traces
}

// assessment sorts the findings into warnings and reasons; the verdict is the worst reason's.
func (found findings) assessment() backends.Assessment {
	a := backends.Assessment{Verdict: plans.VerdictOK}
	worst := sevWarn
	for _, f := range found {
		if f.sev == sevWarn {
			a.Warnings = append(a.Warnings, f.r)
			continue
		}
		a.Reasons = append(a.Reasons, f.r)
		worst = max(worst, f.sev)
	}
	switch worst {
	case sevFailed:
		a.Verdict = plans.VerdictFailed
	case sevInvalid:
		a.Verdict = plans.VerdictInvalid
	}
	return a
}

// exitProblem describes a process that did not exit cleanly, quoting the argparse complaint if
// there is one and the last lines of the log.
func exitProblem(c plans.Cell, w *Watcher, exit rundir.Exit) (string, []rundir.Evidence) {
	var msg string
	switch {
	case exit.StartErr != "":
		cmd := "backend.command"
		if len(c.Backend.Command) > 0 {
			cmd = fmt.Sprintf("backend.command (%q)", c.Backend.Command[0])
		}
		return fmt.Sprintf("sglang could not be started: %s; check %s and that sglang is installed in that environment.", exit.StartErr, cmd), nil
	case exit.Signal != "":
		msg = fmt.Sprintf("sglang was killed by signal %q.", exit.Signal)
	case exit.Code != 0:
		msg = fmt.Sprintf("sglang exited with status %d.", exit.Code)
	default:
		return "", nil
	}
	var lines []rundir.Evidence
	if un := w.Evidence(FindingUnrecognized); len(un) > 0 {
		msg += " It rejected a flag (" + strings.TrimSpace(un[0].Text) + "): compare backend.extra_args with `sglang generate --help` of this build."
		lines = append(lines, un...)
	}
	seen := map[int]bool{}
	for _, e := range lines {
		seen[e.Line] = true
	}
	for _, e := range w.Tail(tailContext) {
		if !seen[e.Line] {
			lines = append(lines, e)
		}
	}
	if len(lines) > 0 {
		msg += " The last lines of log.txt are quoted."
	}
	return msg, lines
}

// findTraces returns the torch-profiler traces of a cell: the files sglang named in its log
// that exist, plus any *.trace.json.gz in <cell>/traces and <cell>/logs (the oldest builds
// always write ./logs, relative to the cell directory because the process runs there). outside
// lists the existing ones that are not inside the cell directory.
func findTraces(dir string, w *Watcher) (traces, outside []string) {
	seen := map[string]bool{}
	addTrace := func(p string) {
		if seen[p] {
			return
		}
		seen[p] = true
		traces = append(traces, p)
		if rel, err := filepath.Rel(dir, p); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			outside = append(outside, p)
		}
	}
	for _, p := range w.TracePaths() {
		p = resolve(dir, p)
		if isFile(p) {
			addTrace(p)
		}
	}
	for _, sub := range []string{backends.TracesDir, "logs"} {
		matches, _ := filepath.Glob(filepath.Join(dir, sub, "*.trace.json.gz"))
		sort.Strings(matches)
		for _, p := range matches {
			if isFile(p) {
				addTrace(p)
			}
		}
	}
	return traces, outside
}

// traceMissingMessage says which trace is missing and the most likely reason.
func traceMissingMessage(dir string, w *Watcher, saveErr []rundir.Evidence, crashed bool) string {
	tdir := filepath.Join(dir, backends.TracesDir)
	var b strings.Builder
	fmt.Fprintf(&b, "the torch profiler trace is missing: profiler dir %s has no *.trace.json.gz", tdir)
	switch logged := w.TracePaths(); {
	case len(saveErr) > 0:
		fmt.Fprintf(&b, "; sglang printed '%s'", strings.TrimSpace(saveErr[0].Text))
	case len(logged) > 0:
		fmt.Fprintf(&b, "; sglang printed 'Saved profiler traces to: %s' but that file does not exist (written on another host or deleted?)", logged[0])
	default:
		b.WriteString(" and sglang printed no trace line")
		if crashed {
			b.WriteString(" (the run failed before the profiler stopped; see the other reasons)")
		} else {
			b.WriteString(" (was --profile accepted by this build, and does the run have more denoising steps than num_profiled_timesteps?)")
		}
	}
	b.WriteString(".")
	return b.String()
}

// checkPerfDump finds the perf dump sglang wrote (the path it printed, else <cell>/perf.json)
// and reads it. It returns the path when the file exists, and a message when it is missing
// or unreadable.
func checkPerfDump(dir string, w *Watcher, crashed bool) (string, string) {
	want := filepath.Join(dir, PerfDumpFile)
	printed := w.MetricsPaths()
	candidates := make([]string, 0, len(printed)+1)
	for i := len(printed) - 1; i >= 0; i-- {
		candidates = append(candidates, resolve(dir, printed[i]))
	}
	candidates = append(candidates, want)
	for _, p := range candidates {
		if !isFile(p) {
			continue
		}
		if _, err := perf.ReadDumpFile(p); err != nil {
			return p, fmt.Sprintf("the perf dump is unreadable: %v.", err)
		}
		return p, ""
	}
	msg := fmt.Sprintf("the perf dump %s is missing", want)
	if len(printed) > 0 {
		msg += fmt.Sprintf("; sglang printed 'Metrics dumped to: %s' but that file does not exist", printed[len(printed)-1])
	} else {
		msg += "; sglang printed no 'Metrics dumped to:' line"
		if crashed {
			msg += " (it writes the dump only after a successful generation; see the other reasons)"
		} else {
			msg += " (does this sglang build support --perf-dump-path?)"
		}
	}
	return "", msg + "."
}

// CheckTrace is backends.CheckTrace: whether path is a complete, valid gzip stream.
func CheckTrace(path string) error { return backends.CheckTrace(path) }

// resolve makes a path printed by sglang absolute; relative paths are relative to the cell
// directory because that is the process's working directory.
func resolve(dir, p string) string {
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	return filepath.Clean(p)
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// listFiles returns the regular files under root, sorted; nil when root does not exist.
func listFiles(root string) []string {
	var out []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable parts are skipped: the listing is informational
		}
		if d.Type().IsRegular() {
			out = append(out, p)
		}
		return nil
	})
	sort.Strings(out)
	return out
}
