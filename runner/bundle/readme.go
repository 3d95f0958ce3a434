package bundle

import (
	"bytes"
	"fmt"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"

	"github.com/sglprof/runner/plans/infile"
	"github.com/sglprof/runner/reports/compare"
	"github.com/sglprof/runner/reports/render/table"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/envfacts"
	"github.com/sglprof/runner/runner/secrets"
)

// view is what the README and the issue body are made of, read back from the redacted
// entries (never from the run directory), so a secret cannot reach them by another path.
type view struct {
	plan     string
	planRaw  string
	manifest rundir.Manifest
	cells    []cellView
	compare  string // a comparison's Markdown, when the run directory has one
	worst    []compare.Row
	servers  []serverView
}

type serverView struct {
	dir     string
	command *rundir.Launch
}

type cellView struct {
	id       string
	result   *rundir.CellResult
	command  *rundir.Launch
	triageMD string
}

func entryBytes(e entry) []byte {
	if e.data != nil || e.file == "" {
		return e.data
	}
	// A text entry over 8 MiB was staged (redacted into a file of the bundle's own); it is
	// read back through the one reader, bounded like any record.
	b, _ := infile.ReadFile(e.file, rundir.MaxRecordBytes)
	return b
}

func buildView(s *source, entries []entry) view {
	byName := map[string]entry{}
	for _, e := range entries {
		byName[e.name] = e
	}
	v := view{plan: s.manifest.Plan}
	if v.plan == "" && s.plan != nil {
		v.plan = s.plan.Name
	}
	if e, ok := byName[rundir.PlanFile]; ok {
		v.planRaw = string(entryBytes(e))
	}
	if e, ok := byName[rundir.ManifestFile]; ok {
		_ = rundir.DecodeJSON(e.name, entryBytes(e), &v.manifest)
	}
	for _, name := range []string{rundir.CompareMD, "compare.txt"} {
		if e, ok := byName[name]; ok {
			v.compare = string(entryBytes(e))
			break
		}
	}
	if e, ok := byName[rundir.CompareFile]; ok {
		var res compare.Result
		if rundir.DecodeJSON(e.name, entryBytes(e), &res) == nil {
			v.worst = worstRegressions(res.Rows, 5)
		}
	}
	for _, e := range entries {
		if strings.HasPrefix(e.name, "servers/") && path.Base(e.name) == rundir.CommandFile {
			var l rundir.Launch
			if rundir.DecodeJSON(e.name, entryBytes(e), &l) == nil {
				v.servers = append(v.servers, serverView{dir: path.Dir(e.name), command: &l})
			}
		}
	}
	for _, c := range s.selected {
		cv := cellView{id: c.Cell.ID}
		rel := path.Join(rundir.CellsDir, c.Cell.ID)
		if e, ok := byName[path.Join(rel, rundir.ResultFile)]; ok {
			var r rundir.CellResult
			if rundir.DecodeJSON(e.name, entryBytes(e), &r) == nil {
				cv.result = &r
			}
		}
		if e, ok := byName[path.Join(rel, rundir.CommandFile)]; ok {
			var l rundir.Launch
			if rundir.DecodeJSON(e.name, entryBytes(e), &l) == nil {
				cv.command = &l
			}
		}
		if e, ok := byName[path.Join(rel, rundir.TriageMD)]; ok {
			cv.triageMD = string(entryBytes(e))
		}
		v.cells = append(v.cells, cv)
	}
	return v
}

// renderReadme writes the bundle's README.md.
func renderReadme(s *source, meta Metadata, entries []entry, file string) string {
	v := buildView(s, entries)
	var b strings.Builder
	fmt.Fprintf(&b, "# Bug report bundle: %s\n\n", orDash(v.plan))
	fmt.Fprintf(&b, "Made by `runner bundle` (runner %s) on %s from the run directory %s: %d cell(s). Secrets were redacted before anything was written (see [Redacted](#redacted)).\n\n",
		meta.RunnerVersion, meta.Created.Format("2006-01-02 15:04 UTC"), table.CodeSpan(meta.Run), len(meta.Cells))
	for _, w := range meta.Warnings {
		fmt.Fprintf(&b, "**Warning:** %s\n\n", w)
	}
	if v.manifest.Simulated {
		b.WriteString("**This run was simulated** (`runner run --simulate`): sglang and nsys were the runner's built-in simulators and every timing is invented.\n\n")
	}
	b.WriteString("## Symptom\n\n")
	writeSymptom(&b, v)
	writeComparison(&b, v, "###")
	b.WriteString("\n## Environment\n\n")
	writeEnvTable(&b, &v.manifest)
	b.WriteString("\n## Commands\n\n")
	b.WriteString("Each cell ran exactly this (working directory, environment added to the inherited one, argv):\n\n")
	for _, c := range v.cells {
		if c.command == nil {
			continue
		}
		fmt.Fprintf(&b, "%s:\n\n```sh\n%s\n```\n\n", table.CodeSpan(c.id), shellCommand(c.command))
	}
	for _, srv := range v.servers {
		fmt.Fprintf(&b, "Server %s (serve mode; its cells sent requests to it, see each cell's load.json):\n\n```sh\n%s\n```\n\n", table.CodeSpan(srv.dir), shellCommand(srv.command))
	}
	writeTimings(&b, v)
	writeTopKernels(&b, v, 5)
	b.WriteString("\n## Reproduce\n\n")
	if v.manifest.Simulated {
		fmt.Fprintf(&b, "```sh\nrunner replay --simulate %s   # the run was simulated\n", shellQuote(file))
	} else {
		fmt.Fprintf(&b, "```sh\nrunner replay %s\n", shellQuote(file))
	}
	b.WriteString("```\n\n")
	b.WriteString("`runner replay` extracts the bundle into a new directory, prints how this machine's environment differs from the bundle's, runs the same cells with the same argv and environment, and says per cell whether the verdict and the timings reproduced. ")
	if names := secretNames(meta.Redactions); len(names) > 0 {
		fmt.Fprintf(&b, "Redacted variables must be set again in the environment first: %s.\n", strings.Join(names, ", "))
	} else {
		b.WriteString("\n")
	}
	b.WriteString("\n## Contents\n\n")
	contents := &table.Table{Header: []string{"file", "bytes", "note"}, Align: []table.Align{table.Left, table.Right}, Code: []bool{true}}
	for _, f := range meta.Files {
		contents.Rows = append(contents.Rows, []string{f.Path, strconv.FormatInt(f.Bytes, 10), f.Note})
	}
	contents.Rows = append(contents.Rows,
		[]string{ReadmeFile, "", "this file"},
		[]string{MetadataFile, "", "what the bundle holds, machine-readable"})
	writeTable(&b, contents)
	if len(meta.Omitted) > 0 {
		b.WriteString("\n### Left out\n\n")
		for _, o := range meta.Omitted {
			fmt.Fprintf(&b, "- %s: %s\n", table.CodeSpan(o.Path), o.Reason)
		}
	}
	b.WriteString("\n## Redacted\n\n")
	if len(meta.Redactions) == 0 {
		b.WriteString("Nothing secret-looking was found.\n")
	} else {
		b.WriteString("Each secret was replaced by `" + secrets.Redacted + "`. Names and kinds only, never values:\n\n")
		red := &table.Table{Header: []string{"kind", "name", "count"}, Align: []table.Align{table.Left, table.Left, table.Right}}
		for _, r := range meta.Redactions {
			red.Rows = append(red.Rows, []string{r.Kind, r.Name, strconv.Itoa(r.Count)})
		}
		writeTable(&b, red)
	}
	return b.String()
}

// secretNames are the variables whose values were redacted, which a replay needs again.
func secretNames(rs []secrets.Redaction) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range rs {
		if r.Kind == secrets.KindEnv && !seen[r.Name] {
			seen[r.Name] = true
			out = append(out, r.Name)
		}
	}
	sort.Strings(out)
	return out
}

func writeSymptom(b *strings.Builder, v view) {
	counts := map[string]int{}
	for _, c := range v.cells {
		if c.result == nil {
			counts[rundir.VerdictNotRun]++
			continue
		}
		counts[c.result.Verdict]++
	}
	var parts []string
	for _, k := range sortedKeys(counts) {
		parts = append(parts, fmt.Sprintf("%d %s", counts[k], k))
	}
	fmt.Fprintf(b, "%d cell(s): %s.\n\n", len(v.cells), strings.Join(parts, ", "))
	for _, c := range v.cells {
		if c.result == nil {
			fmt.Fprintf(b, "- %s: not run (no result.json)\n", table.CodeSpan(c.id))
			continue
		}
		r := c.result
		fmt.Fprintf(b, "- %s: **%s**", table.CodeSpan(c.id), r.Verdict)
		if r.Exit.Code != 0 || r.Exit.Signal != "" {
			fmt.Fprintf(b, " (exit status %d%s)", r.Exit.Code, map[bool]string{true: ", signal " + r.Exit.Signal, false: ""}[r.Exit.Signal != ""])
		}
		b.WriteString("\n")
		for _, rs := range r.Reasons {
			writeReason(b, rs, "reason")
		}
		for _, rs := range r.Warnings {
			writeReason(b, rs, "warning")
		}
	}
}

func writeReason(b *strings.Builder, r rundir.Reason, what string) {
	fmt.Fprintf(b, "  - %s %s: %s\n", what, table.CodeSpan(r.Code), oneLine(r.Message))
	for _, l := range r.Lines {
		fmt.Fprintf(b, "    > log.txt line %d: %s\n", l.Line, table.CodeSpan(oneLine(stripANSI(l.Text))))
	}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// stripANSI drops terminal colour sequences that sglang puts into its log lines.
func stripANSI(s string) string {
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '[' {
			j := i + 2
			for j < len(s) && (s[j] < 0x40 || s[j] > 0x7e) {
				j++
			}
			i = j
			continue
		}
		out.WriteByte(s[i])
	}
	return out.String()
}

func writeEnvTable(b *strings.Builder, m *rundir.Manifest) {
	facts := &table.Table{Header: []string{"", ""}}
	for _, f := range envfacts.EnvFacts(m) {
		facts.Rows = append(facts.Rows, []string{f.Name, f.Value})
	}
	writeTable(b, facts)
	if len(m.Env) > 0 {
		b.WriteString("\nVariables that matter (CUDA_, SGLANG_, NCCL_, HF_, TORCH_, PYTORCH_, VLLM_, NVIDIA_), as the run saw them:\n\n```sh\n")
		for _, k := range sortedKeys(m.Env) {
			fmt.Fprintf(b, "%s=%s\n", k, shellQuote(m.Env[k]))
		}
		b.WriteString("```\n")
	}
}

func writeTimings(b *strings.Builder, v view) {
	b.WriteString("## Timings\n\n")
	t := &table.Table{
		Header: []string{"cell", "verdict", "e2e ms", "mean denoise step ms", "peak memory"},
		Align:  []table.Align{table.Left, table.Left, table.Right, table.Right, table.Right},
		Code:   []bool{true},
	}
	defer writeTable(b, t)
	for _, c := range v.cells {
		if c.result == nil {
			continue
		}
		tm := c.result.Timings
		mem := "-"
		if tm.PeakMemoryMB > 0 {
			mem = fmt.Sprintf("%.0f MB", tm.PeakMemoryMB)
		}
		t.Rows = append(t.Rows, []string{c.id, string(c.result.Verdict), ms(tm.E2ENS), ms(tm.MeanDenoiseStepNS), mem})
	}
}

func ms(ns int64) string {
	if ns == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(ns)/1e6)
}

func writeTopKernels(b *strings.Builder, v view, n int) {
	t := &table.Table{
		Header: []string{"cell", "kernel", "category", "total µs", "share"},
		Align:  []table.Align{table.Left, table.Left, table.Left, table.Right, table.Right},
		Code:   []bool{true, true},
	}
	for _, c := range v.cells {
		if c.result == nil || len(c.result.TopKernels) == 0 {
			continue
		}
		for i, k := range c.result.TopKernels {
			if i == n {
				break
			}
			t.Rows = append(t.Rows, []string{c.id, truncName(k.Name, 90), k.Category, fmt.Sprintf("%.1f", k.TotalUS), fmt.Sprintf("%.1f%%", k.SharePct)})
		}
	}
	if len(t.Rows) > 0 {
		b.WriteString("\n## Top kernels (from triage)\n\n")
		writeTable(b, t)
	}
}

// writeTable renders one of the README's tables with the runner's one Markdown table writer
// (which escapes every cell).
func writeTable(b *strings.Builder, t *table.Table) {
	_ = table.WriteMarkdown(b, t) // a strings.Builder does not fail
}

// truncName cuts a kernel name to n runes (not bytes, so a multi-byte character is never split).
// The table writer escapes it after the cut, so an escape is never cut in half.
func truncName(s string, n int) string {
	if r := []rune(s); len(r) > n {
		s = string(r[:n]) + "…"
	}
	return s
}

// excerpt keeps the first n lines of s.
func excerpt(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append(lines[:n], fmt.Sprintf("… (%d more lines in the bundle)", len(lines)-n))
	}
	return strings.Join(lines, "\n") + "\n"
}

// shellCommand renders a launch as a copy-pasteable shell command.
func shellCommand(l *rundir.Launch) string {
	var b strings.Builder
	if l.Dir != "" {
		fmt.Fprintf(&b, "cd %s && \\\n", shellQuote(l.Dir))
	}
	for _, k := range sortedKeys(l.Env) {
		fmt.Fprintf(&b, "%s=%s \\\n", k, shellQuote(l.Env[k]))
	}
	for i, a := range l.Argv {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(shellQuote(a))
	}
	return b.String()
}

// shellArgv is argv as a shell would need it typed, so what replay shows is exactly what runs
// (a multi-line -c script, a prompt with spaces).
func shellArgv(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// IssueOptions configure Issue.
type IssueOptions struct {
	// Cells restricts the issue to these cells.
	Cells []string
	// Env is the environment whose secret-named values are redacted (see Options.Env).
	Env []string
	// PlanLines bounds the plan excerpt; 0 means 60.
	PlanLines int
}

// Issue renders a Markdown issue body for a run or cell directory: symptom, reproduction
// (plan excerpt and commands), environment table, top kernels and the comparison when the run
// has one. It is redacted like a bundle and writes nothing to disk.
func Issue(src string, opts IssueOptions) (string, error) {
	s, err := resolve(src, opts.Cells)
	if err != nil {
		return "", err
	}
	red, err := s.redactor(opts.Env)
	if err != nil {
		return "", err
	}
	b := &builder{s: s, red: red, opts: &Options{}}
	b.opts.defaults()
	b.text(rundir.PlanFile, s.planRaw, "text", "")
	if err := b.textFile(rundir.ManifestFile, filepath.Join(s.dir, rundir.ManifestFile), "text", ""); err != nil {
		return "", err
	}
	for _, f := range []string{rundir.CompareMD, rundir.CompareFile, "compare.txt"} {
		if err := b.textFile(f, filepath.Join(s.dir, f), "text", ""); err != nil {
			return "", err
		}
	}
	for _, c := range s.selected {
		rel := path.Join(rundir.CellsDir, c.Cell.ID)
		for _, f := range []string{rundir.CommandFile, rundir.ResultFile} {
			if err := b.textFile(path.Join(rel, f), filepath.Join(s.cellDir(c), f), "text", c.Cell.ID); err != nil {
				return "", err
			}
		}
	}
	v := buildView(s, b.entries)
	n := opts.PlanLines
	if n <= 0 {
		n = 60
	}
	var w strings.Builder
	if v.manifest.Simulated {
		// First, before any number: a reader must not take invented timings for a GPU's.
		w.WriteString("> **Simulated run** (`runner run --simulate`): sglang and nsys were the runner's built-in simulators; every timing below is invented.\n\n")
	}
	w.WriteString("### Describe the bug\n\n")
	writeSymptom(&w, v)
	w.WriteString("\n### Reproduction\n\n")
	fmt.Fprintf(&w, "Plan (%s, run %s):\n\n```toml\n%s```\n\n", table.CodeSpan(orDash(v.plan)), table.CodeSpan(filepath.Base(s.dir)), excerpt(v.planRaw, n))
	for _, c := range v.cells {
		if c.command != nil {
			fmt.Fprintf(&w, "%s:\n\n```sh\n%s\n```\n\n", table.CodeSpan(c.id), shellCommand(c.command))
		}
	}
	w.WriteString("The logs, results and a slimmed trace are in a bundle: `runner bundle " + shellQuote(src) + "`, replayed with `runner replay <file>`.\n")
	w.WriteString("\n### Environment\n\n")
	writeEnvTable(&w, &v.manifest)
	var tk strings.Builder
	writeTopKernels(&tk, v, 5)
	if tk.Len() > 0 {
		w.WriteString(strings.Replace(tk.String(), "## Top kernels", "### Top kernels", 1))
	}
	writeComparison(&w, v, "###")
	out := red.Clone().Bytes([]byte(w.String()))
	if rs := red.Report(); len(rs) > 0 {
		var names []string
		for _, r := range rs {
			names = append(names, fmt.Sprintf("%s (%s) ×%d", r.Name, r.Kind, r.Count))
		}
		out = append(out, []byte("\n<sub>Redacted by runner: "+strings.Join(names, ", ")+".</sub>\n")...)
	}
	return string(bytes.TrimLeft(out, "\n")), nil
}

// humanBytes is humanize.IBytes for an int64.
func humanBytes(n int64) string { return humanize.IBytes(uint64(max(n, 0))) }

// worstRegressions are the rows of a comparison that regressed, the largest change first.
func worstRegressions(rows []compare.Row, n int) []compare.Row {
	var out []compare.Row
	for _, r := range rows {
		if r.Status == compare.StatusRegression {
			out = append(out, r)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].DeltaPct > out[j].DeltaPct })
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// writeComparison writes the worst regressions of the run's comparison (compare.json) and the
// head of its Markdown, when the run directory has them.
func writeComparison(b *strings.Builder, v view, h string) {
	if len(v.worst) == 0 && v.compare == "" {
		return
	}
	fmt.Fprintf(b, "\n%s Comparison with the baseline\n\n", h)
	if len(v.worst) > 0 {
		b.WriteString("Worst regressions:\n\n")
		t := &table.Table{
			Header: []string{"config", "metric", "base", "new", "change", "tolerance"},
			Align:  []table.Align{table.Left, table.Left, table.Right, table.Right, table.Right, table.Left},
			Code:   []bool{true},
		}
		for _, r := range v.worst {
			t.Rows = append(t.Rows, []string{r.Config, r.Metric, compare.FormatStat(r.Base, r.Unit), compare.FormatStat(r.New, r.Unit), fmt.Sprintf("%+.1f%%", r.DeltaPct), r.Tolerance})
		}
		writeTable(b, t)
		b.WriteString("\n")
	} else if v.compare != "" {
		b.WriteString("No metric regressed beyond its tolerance.\n\n")
	}
	if v.compare != "" {
		b.WriteString("<details><summary>compare.md</summary>\n\n")
		b.WriteString(excerpt(v.compare, 40))
		b.WriteString("\n</details>\n")
	}
}
