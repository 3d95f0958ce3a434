package bundle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/plans/infile"
	"github.com/sglprof/runner/reports/compare"
	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/envfacts"
	"github.com/sglprof/runner/runner/exitcode"
	"github.com/sglprof/runner/runner/exposure"
	"github.com/sglprof/runner/runner/secrets"
)

// OpenOptions configure OpenReplay.
type OpenOptions struct {
	// Output is the new directory the bundle is extracted to (Output/bundle) and run in
	// (Output/runs); it must not exist or be empty. "" means replay-<bundle name>.
	Output string
	// Cells restricts the replay to these bundled cells.
	Cells []string
	// Extract bounds the extraction.
	Extract ExtractOptions
	// Out receives what the replay says about the bundle: where it was extracted, which
	// dataset it reads, the secrets and variables it takes, the confirmation list and the
	// per-cell outcome.
	Out io.Writer
}

// MetricDiff is one timing of a cell in the bundle and in the replay.
type MetricDiff struct {
	Name      string  `json:"name"`
	Unit      string  `json:"unit"`
	Bundle    float64 `json:"bundle"`
	Replay    float64 `json:"replay"`
	Tolerance float64 `json:"tolerance"` // relative
	// ToleranceText is the tolerance as runner compare writes it ("15%", "10% or 120ms").
	ToleranceText string `json:"tolerance_text"`
	Within        bool   `json:"within"`
}

// CellOutcome says whether one cell reproduced.
type CellOutcome struct {
	ID                string       `json:"id"`
	BundleVerdict     string       `json:"bundle_verdict"`
	ReplayVerdict     string       `json:"replay_verdict"`
	BundleReasons     []string     `json:"bundle_reasons,omitempty"`
	ReplayReasons     []string     `json:"replay_reasons,omitempty"`
	VerdictReproduced bool         `json:"verdict_reproduced"`
	Metrics           []MetricDiff `json:"metrics,omitempty"`
	MetricsReproduced bool         `json:"metrics_reproduced"`
	ArgvDiff          []string     `json:"argv_diff,omitempty"`
}

// ReplayResult is what a replay did (the runner's Replay, through Outcome).
type ReplayResult struct {
	Dir    string        `json:"dir"`     // the replay directory
	RunDir string        `json:"run_dir"` // the new run directory
	Cells  []CellOutcome `json:"cells"`   // in run order
	// ExitCode is the replay's exit status: exitcode.OK when every cell reproduced,
	// exitcode.CellsFailed when a verdict did not, exitcode.Regression when the verdicts did
	// but a metric moved beyond its tolerance, exitcode.Interrupted when the run was stopped.
	ExitCode int `json:"exit_code"`
}

// OpenReplay extracts a bundle into a new replay directory (OpenOptions.Output, else
// replay-<bundle name>, then -2, -3, ...) and reads what a replay needs from it: bundle.json,
// the cells to replay, the dataset, the plan (its run directory moved under the replay
// directory) and the bundled run's manifest. Everything in the bundle is untrusted; what its
// plan runs is for the caller to list and confirm (Confirm) before it runs anything. On an
// error it removes what it created; after it, Discard does.
func OpenReplay(ctx context.Context, bundlePath string, opts OpenOptions) (st *Replay, err error) {
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	dir, err := replayDir(bundlePath, opts.Output)
	if err != nil {
		return nil, err
	}
	f, err := infile.Open(bundlePath)
	if err != nil {
		return nil, &exitcode.UsageError{Err: fmt.Errorf("replay: %w", err)}
	}
	defer f.Close()
	ents, statErr := os.ReadDir(dir)
	if statErr == nil && len(ents) > 0 {
		return nil, &exitcode.UsageError{Err: fmt.Errorf("replay: %s already exists and is not empty; choose a new directory with --output", dir)}
	}
	// A failed replay leaves nothing that would block the next attempt.
	defer func() {
		if err != nil {
			removeReplay(dir, statErr == nil)
		}
	}()
	st, err = openBundle(ctx, f, bundlePath, dir, opts)
	if err != nil {
		return nil, err
	}
	st.existed = statErr == nil
	return st, nil
}

// Discard removes what the replay created, for a replay that failed after OpenReplay: the
// replay directory, or its contents when it existed (empty) before.
func (st *Replay) Discard() { removeReplay(st.dir, st.existed) }

// Plan is the bundled plan the cells run with: its dataset is the bundle's copy (or the file
// the run recorded), its run directory is under the replay directory, and SetUp adjusts it to
// this machine.
func (st *Replay) Plan() *plans.Plan { return st.plan }

// Cells are the IDs of the bundled cells to replay.
func (st *Replay) Cells() []string { return st.cells }

// Manifest is the bundled run's manifest.json (empty when the bundle holds none). Its claim to
// be simulated is the bundle's, untrusted like the rest.
func (st *Replay) Manifest() *rundir.Manifest { return &st.bman }

// SetUp readies the bundled plan for this machine and says what it did. It warns about argv
// that holds a redaction marker. With simulatorsOnly (--simulate) it drops everything of the
// plan that sets, runs or contacts anything (exposure.SimulatorOnly) and the manifest's
// variables. Otherwise it takes the secrets the bundle redacted from env (this machine's
// environment; a missing one is named and dropped from backend.env) and, unless noBundleEnv,
// returns the variables of the bundled manifest that differ here, as KEY=VALUE, for the run
// to set.
func (st *Replay) SetUp(env []string, simulatorsOnly, noBundleEnv bool) (setEnv []string) {
	warnRedactedArgv(st.out, st)
	if simulatorsOnly {
		simulatorOnly(st.out, st)
		return nil
	}
	writeSecrets(st.out, st.plan, &st.bman, st.meta, env)
	if !noBundleEnv {
		setEnv = bundleEnv(st.out, &st.bman, env)
	}
	return setEnv
}

// replayDir is the replay's directory: the given one, else replay-<bundle name>.
func replayDir(bundlePath, output string) (string, error) {
	dir := output
	if dir == "" {
		base := filepath.Base(bundlePath)
		for _, suf := range []string{".tar.gz", ".tgz", ".gz"} {
			base = strings.TrimSuffix(base, suf)
		}
		dir = "replay-" + strings.TrimSuffix(base, ".bundle")
		// The default never meets an earlier replay: replaying the same bundle again (to see
		// whether a failure is flaky) gets replay-<name>-2, -3, ... An --output the user names
		// is taken as given, and refused when it holds something.
		for n, try := 2, dir; ; n++ {
			if ents, err := os.ReadDir(try); err != nil || len(ents) == 0 {
				dir = try
				break
			}
			try = dir + "-" + strconv.Itoa(n)
		}
	}
	return filepath.Abs(dir)
}

// removeReplay removes what a failed replay created in dir: dir itself, or its contents when
// dir existed (empty) before.
func removeReplay(dir string, existed bool) {
	if !existed {
		os.RemoveAll(dir)
		return
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}

// Replay is a bundle extracted for replay (OpenReplay): its cells, the plan that runs them,
// the bundled run's manifest and results. The runner drives a replay through it: SetUp,
// Confirm, then it runs the cells, and Outcome compares them with the bundled ones.
type Replay struct {
	dir, bdir string
	meta      Metadata
	cells     []string
	plan      *plans.Plan
	bman      rundir.Manifest
	out       io.Writer
	existed   bool // dir existed (empty) before the replay: Discard empties it
}

// openBundle extracts the bundle into dir/bundle and reads its metadata, plan and manifest.
func openBundle(ctx context.Context, f io.Reader, bundlePath, dir string, opts OpenOptions) (*Replay, error) {
	st := &Replay{dir: dir, bdir: filepath.Join(dir, "bundle"), out: opts.Out}
	if _, err := Extract(f, st.bdir, opts.Extract); err != nil {
		var ee *ExtractError
		if errors.As(err, &ee) {
			return nil, &exitcode.UsageError{Err: fmt.Errorf("replay %s: %w", bundlePath, err)}
		}
		return nil, err
	}
	fmt.Fprintf(opts.Out, "bundle extracted to %s\n", st.bdir)
	if err := rundir.ReadJSON(filepath.Join(st.bdir, MetadataFile), &st.meta); err != nil {
		return nil, &exitcode.UsageError{Err: fmt.Errorf("replay: %w; is this a bundle written by `runner bundle`?", err)}
	}
	st.cells = st.meta.Cells
	if len(opts.Cells) > 0 {
		for _, id := range opts.Cells {
			if !slices.Contains(st.meta.Cells, id) {
				return nil, &exitcode.UsageError{Err: fmt.Errorf("replay: the bundle has no cell %s; it has: %s", id, strings.Join(st.meta.Cells, ", "))}
			}
		}
		st.cells = opts.Cells
	}
	dataset, err := st.dataset(ctx, opts.Out)
	if err != nil {
		return nil, err
	}
	raw, err := rundir.ReadFile(filepath.Join(st.bdir, rundir.PlanFile))
	if err != nil {
		return nil, &exitcode.UsageError{Err: fmt.Errorf("replay: the bundle has no plan: %w; is this a bundle written by `runner bundle`?", err)}
	}
	p, err := plans.ParseWith(filepath.Join(st.bdir, rundir.PlanFile), raw, plans.ParseOptions{DatasetPath: dataset})
	if err != nil {
		return nil, &exitcode.UsageError{Err: fmt.Errorf("replay: the bundled plan does not load (%w); fix %s (a [bundle] redact pattern may have redacted part of it) and replay the directory's cells with `runner run`", err, filepath.Join(st.bdir, rundir.PlanFile))}
	}
	if m, err := rundir.ReadManifest(st.bdir); err == nil {
		st.bman = *m
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("replay: %w", err)
	}
	// The run directory goes under the replay directory, whatever output_dir the plan had.
	p.OutputDir = filepath.Join(dir, "runs")
	p.Path = filepath.Join(st.bdir, rundir.PlanFile)
	st.plan = p
	return st, nil
}

// dataset is the file the replayed plan reads as its dataset, and says which: the bundle's
// copy, or, when the bundle left it out, the file the run recorded (cells.json "dataset"),
// which is there only on the run's machine or a shared filesystem. "" when the run read no
// dataset file (or the bundle predates the record): the plan's own dataset_path stands.
func (st *Replay) dataset(ctx context.Context, out io.Writer) (string, error) {
	if st.meta.Dataset != "" {
		rel := filepath.FromSlash(st.meta.Dataset)
		if !filepath.IsLocal(rel) {
			return "", &exitcode.UsageError{Err: fmt.Errorf("replay: bundle.json names a dataset outside the bundle (%q); the bundle was edited", st.meta.Dataset)}
		}
		p := filepath.Join(st.bdir, rel)
		if _, err := os.Stat(p); err != nil {
			return "", &exitcode.UsageError{Err: fmt.Errorf("replay: bundle.json names the dataset %s, which the bundle does not hold (%w); the bundle was edited or cut", st.meta.Dataset, err)}
		}
		fmt.Fprintf(out, "dataset: the bundled copy %s\n", p)
		return p, nil
	}
	cells, err := rundir.ReadCells(st.bdir)
	if err != nil || cells.Dataset == nil || cells.Dataset.Path == "" {
		return "", nil
	}
	rec := cells.Dataset
	why := "it is not in the bundle"
	for _, o := range st.meta.Omitted {
		if strings.HasPrefix(o.Path, DatasetDir+"/") {
			why = o.Reason
		}
	}
	if _, err := os.Stat(rec.Path); err != nil {
		return "", &exitcode.UsageError{Err: fmt.Errorf("replay: the bundle left out the dataset (%s), and %s is not here (%w): put a copy of the run's dataset there and replay again", why, rec.Path, err)}
	}
	fmt.Fprintf(out, "dataset: the bundle left it out; reading %s, the file the run recorded\n", rec.Path)
	if change := rec.Changed(ctx); change != "" {
		fmt.Fprintf(out, "warning: the dataset is not the run's: %s\n", change)
	}
	return rec.Path, nil
}

// warnRedactedArgv says which cells run with a redaction marker in their argv.
func warnRedactedArgv(out io.Writer, st *Replay) {
	for _, id := range st.cells {
		if cmd, err := rundir.ReadCommand(filepath.Join(st.bdir, rundir.CellsDir, id)); err == nil {
			for _, a := range cmd.Argv {
				if strings.Contains(a, secrets.Redacted) {
					fmt.Fprintf(out, "warning: %s: its argv holds a redacted value (%q); it runs with the marker in its place\n", id, a)
				}
			}
		}
	}
}

// Confirmation is what running the replay's plan does on this machine, as the runner works it
// out, for Confirm to list, and how to ask.
type Confirmation struct {
	// Probes are the environment probes' commands (the runner's ProbeCommands).
	Probes [][]string
	// Commands are the plan's cells' commands (the runner's Describe); those of cells not
	// replayed are skipped.
	Commands []CellCommand
	// Exposure is what the plan sets, runs and contacts beyond the commands (exposure.Of).
	Exposure exposure.Exposure
	// SetEnv are the manifest's variables the replay sets, KEY=VALUE (SetUp).
	SetEnv []string
	// Yes runs what is listed without asking.
	Yes bool
	// Ask asks whether to run what was just listed; nil (no terminal) refuses unless Yes.
	Ask func(prompt string) (bool, error)
	// TrustPlan runs plan.toml's commands even when they differ from the argv the bundle
	// recorded in command.json.
	TrustPlan bool
}

// CellCommand is the process a cell of the replay's plan starts.
type CellCommand struct {
	Cell string
	Argv []string
	// Dir is the cell's directory, which argv may name; it is compared with the bundle's
	// record as a placeholder.
	Dir string
	// Attached is a cell of an attached server (backend.url): no process is started for it.
	Attached bool
}

// Confirm shows everything a replay of the bundle's plan runs, sets and contacts on this
// machine (c), refuses commands that differ from the argv the bundle recorded (a tampered
// plan.toml) unless c.TrustPlan, and asks. Without c.Yes and without a terminal (c.Ask nil) it
// refuses: nothing from a bundle runs unasked.
func (st *Replay) Confirm(c Confirmation) error {
	out := st.out
	if st.bman.Simulated {
		fmt.Fprintln(out, "the bundled run was simulated (its manifest says so), but nothing in a bundle is trusted, that claim included: its plan sets, runs or contacts what follows on this machine (--simulate drops all of it and runs the built-in simulators only)")
	}
	var differ []string
	fmt.Fprintln(out, "replay runs the bundled plan's backend; first the environment probes, once each (and the GPU guard's nvidia-smi queries):")
	for _, argv := range c.Probes {
		fmt.Fprintf(out, "  %s\n", shellArgv(argv))
	}
	fmt.Fprintln(out, "then these commands:")
	for _, l := range c.Commands {
		if !slices.Contains(st.cells, l.Cell) {
			continue
		}
		fmt.Fprintf(out, "  %s: %s\n", l.Cell, shellArgv(l.Argv))
		if l.Attached {
			continue // an attached server: no process to compare, its URL is listed below
		}
		rec, err := rundir.ReadCommand(filepath.Join(st.bdir, rundir.CellsDir, l.Cell))
		if err != nil {
			differ = append(differ, l.Cell+": the bundle records no command")
			continue
		}
		if !slices.Equal(normArgv(rec), normArgv(&rundir.Launch{Argv: l.Argv, Dir: l.Dir})) {
			differ = append(differ, fmt.Sprintf("%s: the bundle recorded %s", l.Cell, strings.Join(rec.Argv, " ")))
		}
	}
	writeExposure(out, st.bdir, c.Exposure, c.SetEnv)
	if len(differ) > 0 && !c.TrustPlan {
		return &exitcode.UsageError{Err: fmt.Errorf("replay: plan.toml's commands differ from the argv the bundle recorded (%s); the bundle may have been edited: check plan.toml and pass --trust-plan to run its commands anyway", strings.Join(differ, "; "))}
	}
	if c.Yes {
		return nil
	}
	if c.Ask == nil {
		return &exitcode.UsageError{Err: errors.New("replay: nothing was run: the bundle's plan runs, sets or contacts what is listed above on this machine; read the list, then pass --yes to run it without asking, or run replay in a terminal to be asked (--simulate replays with the built-in simulators only, without any of it)")}
	}
	ok, err := c.Ask("Run all of the above? [y/N] ")
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	if !ok {
		return &exitcode.UsageError{Err: errors.New("replay: not confirmed; nothing was run")}
	}
	return nil
}

// maxListedFiles bounds the bundle files the confirmation names one by one: a hostile bundle
// may hold a hundred thousand.
const maxListedFiles = 20

// writeExposure lists, after the commands, what else the plan sets, runs and contacts, and
// the bundle's files that can be run or loaded.
func writeExposure(out io.Writer, bdir string, exp exposure.Exposure, setEnv []string) {
	list := func(title string, lines []string) {
		if len(lines) == 0 {
			return
		}
		fmt.Fprintln(out, title)
		for _, l := range lines {
			fmt.Fprintf(out, "  %s\n", l)
		}
	}
	var env, menv []string
	for _, e := range exp.Env {
		env = append(env, e.String())
	}
	for _, kv := range setEnv {
		k, v, _ := strings.Cut(kv, "=")
		menv = append(menv, exposure.NewEnvSetting(k, v).String())
	}
	list("with these variables from the bundle's plan ([backend.env]) in every process the cells start:", env)
	list("and these from the bundle's manifest (--no-bundle-env keeps this machine's):", menv)
	list("on Slurm: sbatch, with these options from the bundle's plan ([executor.slurm]):", exp.Slurm)
	list("and these setup lines, which a shell runs on the node before each cell:", exp.Setup)
	list("contacting:", exp.Network)
	list("reading or running these paths the plan names:", exp.Files)
	files, more := bundleCode(bdir, append(exp.Values, setEnvValues(setEnv)...))
	if more > 0 {
		files = append(files, fmt.Sprintf("... and %d more", more))
	}
	list("files from the bundle that are programs or libraries, or that the plan names (anything that points at them runs or loads them):", files)
}

func setEnvValues(setEnv []string) []string {
	out := make([]string, len(setEnv))
	for i, kv := range setEnv {
		_, out[i], _ = strings.Cut(kv, "=")
	}
	return out
}

// codeSuffixes are the names of files that a loader or an interpreter runs.
var codeSuffixes = []string{".so", ".dylib", ".py", ".pyc", ".pth", ".sh", ".bash", ".pl", ".rb", ".js"}

// bundleCode lists the files of the extracted bundle (as paths under it) that can be run or
// loaded, and why: programs and libraries (ELF, "#!", a library or script name) and any file
// one of values names. A bundle that runner bundle wrote holds none of either. It lists at
// most maxListedFiles and counts the rest.
func bundleCode(bdir string, values []string) (files []string, more int) {
	_ = filepath.WalkDir(bdir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(bdir, path)
		var why []string
		if kind := codeKind(path, d.Name()); kind != "" {
			why = append(why, kind)
		}
		for _, v := range values {
			if strings.Contains(v, rel) || strings.Contains(v, path) {
				why = append(why, fmt.Sprintf("named by the plan (%q)", v))
				break
			}
		}
		if len(why) == 0 {
			return nil
		}
		if len(files) == maxListedFiles {
			more++
			return nil
		}
		files = append(files, path+": "+strings.Join(why, ", "))
		return nil
	})
	return files, more
}

// codeKind says what kind of program or library the file is ("" when it is neither), by its
// first bytes, then by its name.
func codeKind(path, name string) string {
	if f, err := infile.Open(path); err == nil {
		var head [4]byte
		n, _ := io.ReadFull(f, head[:])
		f.Close()
		switch {
		case n == 4 && string(head[:]) == "\x7fELF":
			return "an ELF program or shared library"
		case n >= 2 && string(head[:2]) == "#!":
			return "a script (#!)"
		}
	}
	for _, suf := range codeSuffixes {
		if strings.HasSuffix(name, suf) || strings.Contains(name, suf+".") {
			return "a library or script by its name"
		}
	}
	return ""
}

// simulatorOnly makes the replay run the built-in simulators only (--simulate): everything
// the bundle's plan would set, run or contact is dropped, and so are the variables of its
// manifest, and it says what went.
func simulatorOnly(out io.Writer, st *Replay) {
	dropped := exposure.SimulatorOnly(st.plan)
	if len(st.bman.Env) > 0 {
		dropped = append(dropped, fmt.Sprintf("the %d variable(s) the bundle's manifest recorded (as with --no-bundle-env)", len(st.bman.Env)))
	}
	fmt.Fprintln(out, "simulated replay (--simulate): only the runner's built-in simulators run; nothing from the bundle's plan is run, set in the environment or contacted")
	for _, d := range dropped {
		fmt.Fprintf(out, "  dropped: %s\n", d)
	}
	if !st.bman.Simulated {
		fmt.Fprintln(out, "warning: the bundled run was real and this replay is simulated; the timings cannot reproduce")
	}
}

// bundleEnv returns the variables the bundle's manifest recorded (CUDA_*, SGLANG_*, ...) that
// differ here, as KEY=VALUE, for the replay to set. A variable a run never records (LD_PRELOAD
// in an edited manifest) is ignored, with a warning, and so is a redacted one.
func bundleEnv(out io.Writer, bman *rundir.Manifest, env []string) []string {
	var set, ignored []string
	for _, k := range sortedKeys(bman.Env) {
		v := bman.Env[k]
		if !envfacts.CapturedEnvName(k) {
			ignored = append(ignored, k)
			continue
		}
		if v == secrets.Redacted || strings.Contains(v, secrets.Redacted) {
			continue
		}
		if cur, ok := lookupEnv(env, k); !ok || cur != v {
			set = append(set, k+"="+v)
		}
	}
	if len(ignored) > 0 {
		fmt.Fprintf(out, "warning: the bundle's manifest lists %s, which no run records (the bundle was edited); not set\n", strings.Join(ignored, ", "))
	}
	return set
}

// Outcome compares the replayed cells (the run sum) with the bundle's, prints the outcome and
// writes it to replay.json in the replay directory. simulate says whether the replay ran the
// simulators: timings are compared only when the bundled run was the same kind, through
// compareRuns, which compares the bundle's run directory (base) with the replay's (new) as
// `runner compare` does (the runner's one baseline resolution; this package cannot import it).
func (st *Replay) Outcome(sum *rundir.Summary, simulate bool, compareRuns func(baseDir, newDir string) (*compare.Result, error)) (*ReplayResult, error) {
	out := st.out
	res := &ReplayResult{Dir: st.dir, RunDir: sum.RunDir}
	fmt.Fprintf(out, "\nreplay of %d cell(s) against the bundle (run directory %s):\n", len(st.cells), sum.RunDir)
	co := compare.FromPlan(st.plan.Compare)
	sameMode := st.bman.Simulated == simulate
	for _, id := range st.cells {
		o := compareCell(filepath.Join(st.bdir, rundir.CellsDir, id), filepath.Join(sum.RunDir, rundir.CellsDir, id), &co, sameMode)
		o.ID = id
		res.Cells = append(res.Cells, o)
		writeOutcome(out, o)
	}
	res.ExitCode = exitcode.OK
	for _, o := range res.Cells {
		switch {
		case !o.VerdictReproduced:
			res.ExitCode = exitcode.CellsFailed
		case !o.MetricsReproduced && res.ExitCode == exitcode.OK:
			res.ExitCode = exitcode.Regression
		}
	}
	if sameMode {
		if cmp := runCompare(out, st.bdir, sum.RunDir, compareRuns); cmp != nil && cmp.Regressed() && res.ExitCode == exitcode.OK {
			res.ExitCode = exitcode.Regression
		}
	}
	if sum.Interrupted {
		res.ExitCode = sum.ExitCode // 130, or 143 when SIGTERM stopped the replay
	}
	if err := res.writeFile(filepath.Join(st.dir, ReplayFile)); err != nil {
		return res, err
	}
	fmt.Fprintf(out, "\nreplay outcome: %s\n", filepath.Join(st.dir, ReplayFile))
	return res, nil
}

func lookupEnv(env []string, key string) (string, bool) {
	v, ok := "", false
	for _, kv := range env {
		if k, val, found := strings.Cut(kv, "="); found && k == key {
			v, ok = val, true
		}
	}
	return v, ok
}

// writeSecrets finds the variables whose values the bundle redacted, takes them from this
// environment when set (the plan's backend.env gets the real value back), and says which are
// missing; a missing one is dropped from backend.env rather than passed as "<redacted>".
func writeSecrets(out io.Writer, p *plans.Plan, bman *rundir.Manifest, meta Metadata, env []string) {
	names := map[string]bool{}
	for k, v := range p.Backend.Env {
		if strings.Contains(v, secrets.Redacted) {
			names[k] = true
		}
	}
	for k, v := range bman.Env {
		if v == secrets.Redacted {
			names[k] = true
		}
	}
	for _, n := range secretNames(meta.Redactions) {
		names[n] = true
	}
	if len(names) == 0 {
		return
	}
	var missing, supplied []string
	for _, k := range sortedKeys(names) {
		v, ok := lookupEnv(env, k)
		if ok && v != "" {
			supplied = append(supplied, k)
			if _, inPlan := p.Backend.Env[k]; inPlan {
				p.Backend.Env[k] = v
			}
			continue
		}
		missing = append(missing, k)
		delete(p.Backend.Env, k)
	}
	if len(supplied) > 0 {
		fmt.Fprintf(out, "secrets: %s redacted in the bundle, taken from this environment\n", strings.Join(supplied, ", "))
	}
	if len(missing) > 0 {
		fmt.Fprintf(out, "secrets: %s redacted in the bundle and not set in this environment; the cells run without them (export them and replay again if the cells need them)\n", strings.Join(missing, ", "))
	}
}

// compareCell compares a bundled cell's result with the replayed one.
func compareCell(bundleCell, replayCell string, co *compare.Options, sameMode bool) CellOutcome {
	var o CellOutcome
	br, bErr := rundir.ReadResult(bundleCell)
	rr, rErr := rundir.ReadResult(replayCell)
	o.BundleVerdict, o.ReplayVerdict = rundir.VerdictNotRun, rundir.VerdictNotRun
	if bErr == nil {
		o.BundleVerdict, o.BundleReasons = br.Verdict, reasonCodes(br.Reasons)
	}
	if rErr == nil {
		o.ReplayVerdict, o.ReplayReasons = rr.Verdict, reasonCodes(rr.Reasons)
	}
	o.VerdictReproduced = bErr == nil && rErr == nil && o.BundleVerdict == o.ReplayVerdict && slices.Equal(o.BundleReasons, o.ReplayReasons)
	o.MetricsReproduced = true
	if bErr != nil || rErr != nil {
		o.MetricsReproduced = false
		return o
	}
	// Values in the metric's own unit (ns or MB), shown in ms; the tolerance is runner
	// compare's for the metric (the plan's [compare] tolerances, else SGLang's nightly ones).
	add := func(name, metric string, b, r float64) {
		if b == 0 && r == 0 {
			return
		}
		tol := co.ToleranceFor(metric)
		unit, scale := "ms", 1e6
		if perf.Unit(metric) == perf.UnitMB {
			unit, scale = "MB", 1
		}
		m := MetricDiff{Name: name, Unit: unit, Bundle: b / scale, Replay: r / scale, Tolerance: tol.Rel, ToleranceText: tol.Text}
		m.Within = b != 0 && r != 0 && math.Abs(r-b) <= tol.Limit(b)
		if !m.Within {
			o.MetricsReproduced = false
		}
		o.Metrics = append(o.Metrics, m)
	}
	if sameMode {
		add("e2e", perf.MetricE2E, float64(br.Timings.E2ENS), float64(rr.Timings.E2ENS))
		add("mean denoise step", perf.MetricDenoiseMean, float64(br.Timings.MeanDenoiseStepNS), float64(rr.Timings.MeanDenoiseStepNS))
		add("peak memory", perf.MetricPeakMemory, br.Timings.PeakMemoryMB, rr.Timings.PeakMemoryMB)
	} else {
		// A simulated run against a real one: timings are not comparable, only verdicts.
		o.MetricsReproduced = true
	}
	o.ArgvDiff = argvDiff(bundleCell, replayCell)
	return o
}

// reasonCodes are the sorted codes of a cell's reasons: the part of a verdict that must
// reproduce (messages carry paths and times that differ by design).
func reasonCodes(rs []rundir.Reason) []string {
	var out []string
	for _, r := range rs {
		if !slices.Contains(out, r.Code) {
			out = append(out, r.Code)
		}
	}
	sort.Strings(out)
	return out
}

// argvDiff compares the argv of the bundled and the replayed command.json, with each side's
// cell directory and runner binary (simulators) replaced by placeholders; it returns the
// differing arguments, or nil when the commands are the same.
func argvDiff(bundleCell, replayCell string) []string {
	bl, err1 := rundir.ReadCommand(bundleCell)
	rl, err2 := rundir.ReadCommand(replayCell)
	if err1 != nil || err2 != nil {
		return nil
	}
	b, r := normArgv(bl), normArgv(rl)
	if slices.Equal(b, r) {
		return nil
	}
	var out []string
	for i := 0; i < max(len(b), len(r)); i++ {
		var x, y string
		if i < len(b) {
			x = b[i]
		}
		if i < len(r) {
			y = r[i]
		}
		if x != y {
			out = append(out, fmt.Sprintf("argument %d: bundle %q, replay %q", i, x, y))
		}
	}
	return out
}

func normArgv(l *rundir.Launch) []string {
	out := make([]string, len(l.Argv))
	exe := ""
	if len(l.Argv) > 2 && l.Argv[1] == "sim" {
		exe = l.Argv[0]
	}
	for i, a := range l.Argv {
		if exe != "" && a == exe {
			a = "<runner>"
		}
		if l.Dir != "" {
			a = strings.ReplaceAll(a, l.Dir, "<cell>")
		}
		out[i] = a
	}
	return out
}

func verdictText(v string, codes []string) string {
	if len(codes) == 0 {
		return v
	}
	return v + " (" + strings.Join(codes, ", ") + ")"
}

// writeOutcome prints one cell's outcome: "ID: reproduced: invalid (diffusers-fallback)".
func writeOutcome(w io.Writer, o CellOutcome) {
	switch {
	case o.VerdictReproduced && o.MetricsReproduced:
		fmt.Fprintf(w, "%s: reproduced: %s\n", o.ID, verdictText(o.ReplayVerdict, o.ReplayReasons))
	case o.VerdictReproduced:
		fmt.Fprintf(w, "%s: verdict reproduced (%s), timings did not\n", o.ID, verdictText(o.ReplayVerdict, o.ReplayReasons))
	default:
		fmt.Fprintf(w, "%s: not reproduced: bundle %s, replay %s\n", o.ID, verdictText(o.BundleVerdict, o.BundleReasons), verdictText(o.ReplayVerdict, o.ReplayReasons))
	}
	for _, m := range o.Metrics {
		mark := "within"
		if !m.Within {
			mark = "beyond"
		}
		change := "n/a"
		if m.Bundle != 0 {
			change = fmt.Sprintf("%+.1f%%", (m.Replay-m.Bundle)/m.Bundle*100)
		}
		fmt.Fprintf(w, "    %-18s %10.1f %s -> %10.1f %s  %s (%s %s)\n", m.Name, m.Bundle, m.Unit, m.Replay, m.Unit, change, mark, m.ToleranceText)
	}
	for _, d := range o.ArgvDiff {
		fmt.Fprintf(w, "    argv differs: %s\n", d)
	}
}

// ReplayFile is the replay directory's machine-readable outcome, for scripts and CI.
const ReplayFile = "replay.json"

// writeFile writes the outcome as JSON.
func (r *ReplayResult) writeFile(path string) error {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return err
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	return nil
}

// runCompare compares the bundled cells (base) with the replayed ones (new) exactly as
// `runner compare BUNDLE REPLAY` would: the same cell selection (only the unprofiled cells by
// default; pooling torch and nsys cells mixed profiler overhead into the samples) and the same
// baseline resolution and rules (compareRuns, which the runner gives: its CompareBaseline with
// the plan's [compare] table). A failure to compare is printed, not returned: the per-cell verdicts above
// already stand.
func runCompare(out io.Writer, bundleDir, runDir string, compareRuns func(baseDir, newDir string) (*compare.Result, error)) *compare.Result {
	res, err := compareRuns(bundleDir, runDir)
	if err == nil {
		if len(res.Rows) == 0 {
			fmt.Fprintln(out, "\nrunner compare: no ok cell on both sides, nothing to compare statistically")
			return res
		}
		fmt.Fprintln(out, "\nrunner compare, bundle (base) vs replay (new):")
		if err = compare.WriteText(out, res); err == nil {
			return res
		}
	}
	fmt.Fprintf(out, "\nrunner compare: %v\n", err)
	return nil
}
