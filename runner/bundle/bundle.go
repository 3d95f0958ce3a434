package bundle

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/klauspost/compress/gzip"

	"github.com/sglprof/runner/nsys"
	"github.com/sglprof/runner/nsys/nsysdb"
	"github.com/sglprof/runner/plans/infile"
	"github.com/sglprof/runner/reports/kineto"
	"github.com/sglprof/runner/reports/render/table"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/exitcode"
	"github.com/sglprof/runner/runner/secrets"
)

// DefaultMaxSize is the default --max-size: small enough to attach to an issue or a chat.
const DefaultMaxSize = 50 << 20

// DefaultTraceSteps is how many steps a slimmed trace keeps.
const DefaultTraceSteps = 2

// DefaultMaxDataset is the default --max-dataset-size: a sampled or hand-made ShareGPT file
// fits, a whole public dataset (hundreds of MB, downloadable by its name) does not.
const DefaultMaxDataset = 16 << 20

// DatasetDir is the bundle's directory of the run's dataset file.
const DatasetDir = "dataset"

// Names of the files a bundle adds to the run directory's own.
const (
	ReadmeFile   = "README.md"
	MetadataFile = "bundle.json"
)

// Options configure Create.
type Options struct {
	// Output is the archive to write; "" means <plan>-<run id>.bundle.tar.gz in the current
	// directory (as the caller resolves relative paths).
	Output string
	// Cells restricts the bundle to these cell IDs (a cell directory given as the source
	// selects its own cell).
	Cells []string
	// Force replaces an existing regular file at Output; without it an existing file is an
	// error. A device, directory or symlink at Output, or an Output inside the bundled run,
	// is refused either way.
	Force bool
	// WithTraces includes the full traces (and nsys reports) instead of slimmed traces.
	WithTraces bool
	// TraceSteps is the number of steps a slimmed trace keeps; 0 means DefaultTraceSteps.
	TraceSteps int
	// MaxSize bounds the archive in bytes; 0 means DefaultMaxSize.
	MaxSize int64
	// MaxDataset bounds the run's dataset file (a sharegpt plan's load.dataset_path) in
	// bytes: a bigger one is left out, and the bundle says so; 0 means DefaultMaxDataset.
	MaxDataset int64
	// Env is the environment of the bundling process (KEY=VALUE): values of secret-named
	// variables in it are searched for literally in every file.
	Env []string
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// RunnerVersion is the version of the runner making the bundle, which bundle.json and the
	// README record (cmd/runner passes the runner's own; the run's version is in its manifest).
	RunnerVersion string
}

func (o *Options) defaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxSize <= 0 {
		o.MaxSize = DefaultMaxSize
	}
	if o.TraceSteps <= 0 {
		o.TraceSteps = DefaultTraceSteps
	}
	if o.MaxDataset <= 0 {
		o.MaxDataset = DefaultMaxDataset
	}
}

// Omission is a file the bundle left out or shortened, and why.
type Omission struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// FileInfo is one file of the bundle as bundle.json lists it.
type FileInfo struct {
	Path  string `json:"path"`
	Bytes int64  `json:"bytes"`
	Note  string `json:"note,omitempty"` // "slimmed to the first 2 steps", "truncated to head and tail"
}

// Metadata is bundle.json: what the bundle holds and how it was made, read back by replay.
type Metadata struct {
	Format        int                 `json:"format"`
	RunnerVersion string              `json:"runner_version"`
	Created       time.Time           `json:"created"`
	Plan          string              `json:"plan"`
	Run           string              `json:"run"` // the run directory's name (<time>-<id>)
	Simulated     bool                `json:"simulated"`
	Cells         []string            `json:"cells"`
	Traces        string              `json:"traces"` // "slim", "full" or "none"
	Redactions    []secrets.Redaction `json:"redactions"`
	Omitted       []Omission          `json:"omitted,omitempty"`
	// Dataset is the bundle's copy of the run's dataset file (dataset/<name>), which a replay
	// reads instead of the plan's dataset_path; "" when the run read none or the bundle left
	// it out (Omitted says why).
	Dataset string     `json:"dataset,omitempty"`
	Files   []FileInfo `json:"files"`
	// Warnings are problems that weakened the bundle without stopping it.
	Warnings []string `json:"warnings,omitempty"`
}

// Result says what Create wrote.
type Result struct {
	Path     string
	Bytes    int64
	Metadata Metadata
}

// entry is one file of the archive: text already redacted in data, or a staged file on disk.
type entry struct {
	name  string // archive path
	data  []byte
	file  string // staged file (when data is nil)
	size  int64
	kind  string // "trace", "log", "text", "dataset", "binary"
	note  string
	cell  string
	trunc bool // a log truncated to head and tail
}

// Create writes the bundle of the run directory (or cell directory) src. Every text file is
// redacted before it is written; the archive stays under opts.MaxSize by dropping traces
// first and then truncating logs to their head and tail, and says what it left out.
func Create(ctx context.Context, src string, opts Options) (*Result, error) {
	opts.defaults()
	s, err := resolve(src, opts.Cells)
	if err != nil {
		return nil, err
	}
	red, err := s.redactor(opts.Env)
	if err != nil {
		return nil, err
	}
	stage, err := os.MkdirTemp("", "runner-bundle-*")
	if err != nil {
		return nil, fmt.Errorf("bundle: staging directory: %w", err)
	}
	defer os.RemoveAll(stage)

	out := opts.Output
	if out == "" {
		out = defaultName(s)
	}
	if abs, err := filepath.Abs(out); err == nil {
		out = abs
	}
	if err := checkOutput(out, s.dir, opts.Force); err != nil {
		return nil, err
	}
	b := &builder{ctx: ctx, s: s, red: red, opts: &opts, stage: stage}
	if err := b.collect(ctx); err != nil {
		return nil, err
	}
	var tried []string
	b.file = filepath.Base(out)
	for level := 0; level < len(levels); level++ {
		entries, omitted := b.degrade(level)
		meta := b.metadata(entries, omitted)
		f, size, err := writeArchive(ctx, out, b.finish(entries, meta))
		if err != nil {
			return nil, err
		}
		if size <= opts.MaxSize {
			// Only a bundle that fits replaces the file at -o (with --force).
			if err := f.Commit(); err != nil {
				return nil, fmt.Errorf("bundle: %w", err)
			}
			return &Result{Path: out, Bytes: size, Metadata: meta}, nil
		}
		f.Abort()
		tried = append(tried, fmt.Sprintf("%s: %s", levels[level], humanize.IBytes(uint64(size))))
	}
	return nil, fmt.Errorf("bundle: the bundle stays over --max-size %s (%s); select fewer cells with --cells or raise --max-size",
		humanize.IBytes(uint64(opts.MaxSize)), strings.Join(tried, "; "))
}

// checkOutput refuses an archive path the final rename would wrongly replace: what
// rundir.CheckOutput refuses (anything but a regular file, an existing file unless force, a
// missing directory), and a path inside the run being bundled (its plan.toml, a log). The
// errors are usage errors: the user chooses another -o.
func checkOutput(out, src string, force bool) error {
	if err := rundir.CheckOutput(out, force); err != nil {
		return &exitcode.UsageError{Err: fmt.Errorf("bundle: -o %w", err)}
	}
	if within(out, src) {
		return &exitcode.UsageError{Err: fmt.Errorf("bundle: -o %s is inside the run directory being bundled (%s); write the bundle elsewhere", out, src)}
	}
	return nil
}

// within reports whether path lies under dir, after resolving symlinks of both (path's
// existing parent directories).
func within(path, dir string) bool {
	real := func(p string) string {
		abs, err := filepath.Abs(p)
		if err != nil {
			return p
		}
		// Resolve the deepest existing ancestor, keep the rest as written.
		rest := ""
		for cur := abs; ; cur = filepath.Dir(cur) {
			if r, err := filepath.EvalSymlinks(cur); err == nil {
				return filepath.Join(r, rest)
			}
			if filepath.Dir(cur) == cur {
				return abs
			}
			rest = filepath.Join(filepath.Base(cur), rest)
		}
	}
	rel, err := filepath.Rel(real(dir), real(path))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// levels are the successive ways to make a bundle fit --max-size.
var levels = []string{
	"everything",
	"without traces",
	"without traces, logs cut to 256 KiB head and tail",
	"without traces, logs cut to 16 KiB head and tail",
	"without traces or the dataset, logs cut to 16 KiB head and tail",
}

func defaultName(s *source) string {
	name := s.manifest.Plan
	if name == "" && s.plan != nil {
		name = s.plan.Name
	}
	if name == "" {
		name = "run"
	}
	return name + "-" + filepath.Base(s.dir) + ".bundle.tar.gz"
}

type builder struct {
	ctx     context.Context // Ctrl-C: checked between the chunks of every file read
	s       *source
	red     *secrets.Redactor
	opts    *Options
	stage   string
	entries []entry
	omitted []Omission // files left out whatever the size
	// warnings are problems found while collecting, for bundle.json's Warnings.
	warnings []string
	traces   string
	file     string // the archive's name, for the README's replay command
}

// text adds a text file, redacted.
func (b *builder) text(name string, data []byte, kind, cell string) {
	red := b.red.Bytes(data)
	b.entries = append(b.entries, entry{name: name, data: red, size: int64(len(red)), kind: kind, cell: cell})
}

// textFile adds a text file of the run directory when it exists; big files are redacted as a
// stream into the staging directory.
func (b *builder) textFile(name, path, kind, cell string) error {
	// Lstat: a link in a run directory could point at any file of the machine.
	st, err := os.Lstat(path)
	if err != nil || !st.Mode().IsRegular() {
		return nil
	}
	if st.Size() <= 8<<20 {
		// Through the one reader: the name may have become a FIFO since the Lstat. A file
		// that grew past 8 MiB meanwhile is streamed like any big one.
		data, err := infile.ReadFile(path, 8<<20)
		if err == nil {
			b.text(name, data, kind, cell)
			return nil
		}
		if !errors.Is(err, infile.ErrTooLarge) {
			return fmt.Errorf("bundle: %w", err)
		}
	}
	staged, n, err := b.stageStream(path, false, false)
	if err != nil {
		return err
	}
	b.entries = append(b.entries, entry{name: name, file: staged, size: n, kind: kind, cell: cell})
	return nil
}

// stageStream redacts a file into the staging directory, gunzipping it first and gzipping the
// result when asked.
func (b *builder) stageStream(path string, gunzip, gz bool) (string, int64, error) {
	in, err := infile.Open(path)
	if err != nil {
		return "", 0, fmt.Errorf("bundle: %w", err)
	}
	defer in.Close()
	return b.stageReader(in, path, gunzip, gz)
}

// stageReader is stageStream of an open file (path names it in errors).
func (b *builder) stageReader(in io.Reader, path string, gunzip, gz bool) (string, int64, error) {
	var r io.Reader = rundir.ContextReader(b.ctx, in)
	if gunzip {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return "", 0, fmt.Errorf("bundle: %s: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	f, err := os.CreateTemp(b.stage, "f-*")
	if err != nil {
		return "", 0, fmt.Errorf("bundle: %w", err)
	}
	defer f.Close()
	var w io.Writer = f
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(f)
		w = zw
	}
	if err := b.red.Stream(w, r); err != nil {
		return "", 0, fmt.Errorf("bundle: redact %s: %w", path, err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return "", 0, fmt.Errorf("bundle: %w", err)
		}
	}
	st, err := f.Stat()
	if err != nil {
		return "", 0, err
	}
	return f.Name(), st.Size(), nil
}

// collect gathers every file of the bundle, redacted, before anything is written.
func (b *builder) collect(ctx context.Context) error {
	s := b.s
	b.text(rundir.PlanFile, s.planRaw, "text", "")
	for _, f := range []string{rundir.CellsFile, rundir.ManifestFile, rundir.SummaryMD, rundir.SummaryJSON} {
		if err := b.textFile(f, filepath.Join(s.dir, f), "text", ""); err != nil {
			return err
		}
	}
	// The batch scripts of a Slurm run's job arrays, as the manifest lists them: what each node
	// was asked to run (setup lines, sbatch options) is part of reproducing it.
	for _, j := range s.manifest.Slurm {
		if rel := filepath.Clean(filepath.FromSlash(j.Script)); j.Script != "" && filepath.IsLocal(rel) {
			if err := b.textFile(filepath.ToSlash(rel), filepath.Join(s.dir, rel), "text", ""); err != nil {
				return err
			}
		}
	}
	// A comparison written into the run directory by runner compare or run --baseline.
	if m, _ := filepath.Glob(filepath.Join(s.dir, "compare*")); len(m) > 0 {
		sort.Strings(m)
		for _, p := range m {
			if ext := filepath.Ext(p); ext == ".json" || ext == ".md" || ext == ".txt" || ext == ".csv" {
				if err := b.textFile(filepath.Base(p), p, "text", ""); err != nil {
					return err
				}
			}
		}
	}
	b.traces = "slim"
	if b.opts.WithTraces {
		b.traces = "full"
	}
	for _, c := range s.selected {
		if err := ctx.Err(); err != nil {
			return err
		}
		dir := s.cellDir(c)
		rel := path.Join(rundir.CellsDir, c.Cell.ID)
		// load.json and requests.jsonl are a serve cell's client side.
		for _, f := range []string{rundir.CommandFile, rundir.ResultFile, rundir.PerfFile, rundir.TriageMD, rundir.TriageJSON, "triage.csv", rundir.LoadFile, rundir.RequestsFile} {
			if err := b.textFile(path.Join(rel, f), filepath.Join(dir, f), "text", c.Cell.ID); err != nil {
				return err
			}
		}
		if err := b.textFile(path.Join(rel, rundir.LogFile), filepath.Join(dir, rundir.LogFile), "log", c.Cell.ID); err != nil {
			return err
		}
		if err := b.nsysSummaries(ctx, c, dir, rel); err != nil {
			return err
		}
		if err := b.cellTraces(ctx, c, dir, rel); err != nil {
			return err
		}
	}
	if err := b.dataset(); err != nil {
		return err
	}
	return b.servers()
}

// dataset adds the run's dataset file (the one cells.json recorded: plan.toml's dataset_path
// is relative to a directory the bundle does not have), redacted like every text file, as
// dataset/<name>; replay points the plan at it. A file over MaxDataset, or one that cannot be
// read, is left out, and the bundle says so and where the run read it.
func (b *builder) dataset() error {
	rec := b.s.dataset
	if rec == nil || rec.Path == "" {
		return nil
	}
	base := filepath.Base(rec.Path)
	if base == "." || base == ".." || base == string(filepath.Separator) {
		base = "dataset.json"
	}
	name := path.Join(DatasetDir, base)
	where := b.red.String(rec.Path)
	leaveOut := func(why string) {
		b.omitted = append(b.omitted, Omission{Path: name, Reason: why + "; the run read it from " + where + ", where a replay without it looks"})
	}
	f, err := rundir.OpenFile(rec.Path)
	if err != nil {
		leaveOut("the run's dataset cannot be read (" + b.red.String(err.Error()) + ")")
		return nil
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	if st.Size() > b.opts.MaxDataset {
		leaveOut(fmt.Sprintf("%s, over --max-dataset-size %s", humanize.IBytes(uint64(st.Size())), humanize.IBytes(uint64(b.opts.MaxDataset))))
		return nil
	}
	// The redacted copy is staged while the original is hashed, to tell whether it is still
	// the file the run read.
	h := sha256.New()
	before := b.red.Count()
	staged, n, err := b.stageReader(io.TeeReader(f, h), rec.Path, false, false)
	if err != nil {
		return err
	}
	note := "the run's dataset (load.dataset_path), redacted; replay reads it"
	if k := b.red.Count() - before; k > 0 {
		note = fmt.Sprintf("the run's dataset (load.dataset_path) with %d secrets redacted, so a replay's prompts differ from the run's there; replay reads it", k)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); rec.SHA256 != "" && sum != rec.SHA256 {
		b.warnings = append(b.warnings, fmt.Sprintf("the dataset %s changed since the run started (sha256 %.12s, it was %.12s); the bundle holds the file as it is now", where, sum, rec.SHA256))
	}
	b.entries = append(b.entries, entry{name: name, file: staged, size: n, kind: "dataset", note: note})
	return nil
}

// servers adds the server directories (servers/<n>/: command.json, server.json, log.txt) that
// the selected serve cells ran against: in serve mode the sglang log is the server's.
func (b *builder) servers() error {
	want := map[string]bool{}
	for _, c := range b.s.selected {
		if r, err := rundir.ReadResult(b.s.cellDir(c)); err == nil && r.Serve != nil && r.Serve.Server != "" && filepath.IsLocal(r.Serve.Server) {
			want[filepath.ToSlash(filepath.Clean(r.Serve.Server))] = true
		}
	}
	for _, srv := range sortedKeys(want) {
		dir := filepath.Join(b.s.dir, filepath.FromSlash(srv))
		for _, f := range []string{rundir.CommandFile, rundir.ServerFile} {
			if err := b.textFile(path.Join(srv, f), filepath.Join(dir, f), "text", ""); err != nil {
				return err
			}
		}
		if err := b.textFile(path.Join(srv, rundir.LogFile), filepath.Join(dir, rundir.LogFile), "log", ""); err != nil {
			return err
		}
	}
	return nil
}

// nsysSummaries adds the `nsys stats`-style CSV summaries of a cell's SQLite export (kernels,
// CUDA API, NVTX ranges) instead of the export itself, which can be gigabytes.
func (b *builder) nsysSummaries(ctx context.Context, c rundir.CellRecord, dir, rel string) error {
	exports, _ := filepath.Glob(filepath.Join(dir, "nsys", "*"+nsys.SQLiteExt))
	for _, exp := range exports {
		if !isRegular(exp) {
			continue
		}
		base := strings.TrimSuffix(filepath.Base(exp), nsys.SQLiteExt)
		capt, err := nsysdb.ReadCapture(ctx, exp, nsysdb.ReadOptions{})
		if err != nil {
			b.omitted = append(b.omitted, Omission{Path: path.Join(rel, "nsys", filepath.Base(exp)), Reason: "the nsys export could not be summarised: " + b.red.String(err.Error())})
			continue
		}
		for _, rep := range nsysdb.Stats(capt) {
			var buf bytes.Buffer
			if err := table.WriteCSV(&buf, rep.Table()); err != nil {
				return fmt.Errorf("bundle: %s: %w", exp, err)
			}
			b.text(path.Join(rel, "nsys", base+"_"+rep.Report+".csv"), buf.Bytes(), "text", c.Cell.ID)
		}
		b.omitted = append(b.omitted, Omission{Path: path.Join(rel, "nsys", filepath.Base(exp)), Reason: "the SQLite export is summarised as nsys/*_cuda_gpu_kern_sum.csv, *_cuda_api_sum.csv and *_nvtx_sum.csv"})
	}
	return nil
}

// cellTraces adds a cell's torch traces, slimmed to a few steps unless --with-traces, and with
// --with-traces its nsys reports (binary, so they are only included when no secret is found in
// them).
func (b *builder) cellTraces(ctx context.Context, c rundir.CellRecord, dir, rel string) error {
	traces, _ := filepath.Glob(filepath.Join(dir, "traces", "*.json*"))
	sort.Strings(traces)
	for _, tp := range traces {
		if !isRegular(tp) {
			continue
		}
		name := path.Join(rel, "traces", filepath.Base(tp))
		gz := strings.HasSuffix(tp, ".gz")
		if b.opts.WithTraces {
			staged, n, err := b.stageStream(tp, gz, gz)
			if err != nil {
				b.omitted = append(b.omitted, Omission{Path: name, Reason: err.Error()})
				continue
			}
			b.entries = append(b.entries, entry{name: name, file: staged, size: n, kind: "trace", cell: c.Cell.ID})
			continue
		}
		var buf bytes.Buffer
		st, err := slimFile(ctx, tp, &buf, b.opts.TraceSteps)
		if err != nil {
			b.omitted = append(b.omitted, Omission{Path: name, Reason: "could not be slimmed (" + b.red.String(err.Error()) + "); bundle with --with-traces to include it whole"})
			continue
		}
		red := b.red.Bytes(buf.Bytes())
		var out bytes.Buffer
		if gz {
			zw := gzip.NewWriter(&out)
			zw.Write(red)
			if err := zw.Close(); err != nil {
				return err
			}
		} else {
			out.Write(red)
		}
		b.entries = append(b.entries, entry{name: name, data: out.Bytes(), size: int64(out.Len()), kind: "trace", cell: c.Cell.ID,
			note: fmt.Sprintf("slimmed to the first %d %s steps (%d of %d events); bundle with --with-traces for the whole trace", st.Steps, st.StepFamily, st.Kept, st.Events)})
	}
	reps, _ := filepath.Glob(filepath.Join(dir, "nsys", "*"+nsys.ReportExt))
	for _, rp := range reps {
		if !isRegular(rp) {
			continue
		}
		name := path.Join(rel, "nsys", filepath.Base(rp))
		if !b.opts.WithTraces {
			b.omitted = append(b.omitted, Omission{Path: name, Reason: "the nsys report is a full trace; bundle with --with-traces to include it"})
			continue
		}
		hits, err := b.red.Scan(rp)
		switch {
		case err != nil:
			b.omitted = append(b.omitted, Omission{Path: name, Reason: err.Error()})
		case hits > 0:
			b.omitted = append(b.omitted, Omission{Path: name, Reason: fmt.Sprintf("left out: this binary report contains %d secret-looking strings (nsys records the profiled process's command line and environment) and cannot be redacted", hits)})
		default:
			st, err := os.Stat(rp)
			if err != nil {
				return err
			}
			b.entries = append(b.entries, entry{name: name, file: rp, size: st.Size(), kind: "trace", cell: c.Cell.ID, note: "binary; scanned for secrets, none found"})
		}
	}
	return nil
}

func slimFile(ctx context.Context, p string, w io.Writer, steps int) (kineto.SlimStats, error) {
	f, err := infile.Open(p)
	if err != nil {
		return kineto.SlimStats{}, err
	}
	defer f.Close()
	return kineto.Slim(ctx, f, w, kineto.SlimOptions{Steps: steps})
}

// logKeep is how much of a log's head and tail each size level keeps (0 = whole).
var logKeep = []int64{0, 0, 256 << 10, 16 << 10, 16 << 10}

// degrade returns the entries of a size level and what that level leaves out.
func (b *builder) degrade(level int) ([]entry, []Omission) {
	omitted := append([]Omission(nil), b.omitted...)
	var out []entry
	for _, e := range b.entries {
		// The dataset goes last: without it a replay elsewhere cannot run at all.
		if level >= 1 && e.kind == "trace" || level >= 4 && e.kind == "dataset" {
			omitted = append(omitted, Omission{Path: e.name, Reason: fmt.Sprintf("dropped to stay under --max-size %s", humanize.IBytes(uint64(b.opts.MaxSize)))})
			continue
		}
		if keep := logKeep[level]; keep > 0 && e.kind == "log" && e.size > 2*keep {
			data, err := headTail(e, keep)
			if err == nil {
				omitted = append(omitted, Omission{Path: e.name, Reason: fmt.Sprintf("cut to its first and last %s to stay under --max-size %s (%s left out)", humanize.IBytes(uint64(keep)), humanize.IBytes(uint64(b.opts.MaxSize)), humanize.IBytes(uint64(e.size-int64(len(data)))))})
				e = entry{name: e.name, data: data, size: int64(len(data)), kind: e.kind, cell: e.cell, trunc: true,
					note: "truncated to head and tail"}
			}
		}
		out = append(out, e)
	}
	return out, omitted
}

// headTail keeps the first and last keep bytes of an entry, cut at line ends, with a marker
// line between them.
func headTail(e entry, keep int64) ([]byte, error) {
	var head, tail []byte
	if e.data != nil {
		head, tail = e.data[:keep], e.data[int64(len(e.data))-keep:]
	} else {
		f, err := infile.Open(e.file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		head, tail = make([]byte, keep), make([]byte, keep)
		if _, err := f.ReadAt(head, 0); err != nil {
			return nil, err
		}
		if _, err := f.ReadAt(tail, e.size-keep); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
	}
	if i := bytes.LastIndexByte(head, '\n'); i >= 0 {
		head = head[:i+1]
	}
	if i := bytes.IndexByte(tail, '\n'); i >= 0 {
		tail = tail[i+1:]
	}
	var out bytes.Buffer
	out.Write(head)
	fmt.Fprintf(&out, "\n[... runner bundle: %d bytes of this log left out to stay under --max-size; the head and tail are kept ...]\n\n", e.size-int64(len(head))-int64(len(tail)))
	out.Write(tail)
	return out.Bytes(), nil
}

// metadata builds bundle.json for a set of entries.
func (b *builder) metadata(entries []entry, omitted []Omission) Metadata {
	m := Metadata{
		Format:        1,
		RunnerVersion: b.opts.RunnerVersion,
		Created:       b.opts.Now().UTC().Truncate(time.Second),
		Plan:          b.s.manifest.Plan,
		Run:           filepath.Base(b.s.dir),
		Simulated:     b.s.manifest.Simulated,
		Traces:        b.traces,
		Omitted:       omitted,
		Redactions:    b.red.Report(),
	}
	if m.Plan == "" && b.s.plan != nil {
		m.Plan = b.s.plan.Name
	}
	m.Warnings = append(m.Warnings, b.warnings...)
	if b.s.planErr != nil {
		m.Warnings = append(m.Warnings, "plan.toml does not load with this runner ("+b.red.Clone().String(b.s.planErr.Error())+"), so its [bundle] redact patterns were not applied and its backend.env values were not searched for literally; only the built-in secret patterns were. Check the bundle before sharing it.")
	}
	hasTrace := false
	for _, e := range entries {
		m.Files = append(m.Files, FileInfo{Path: e.name, Bytes: e.size, Note: e.note})
		hasTrace = hasTrace || e.kind == "trace"
		if e.kind == "dataset" {
			m.Dataset = e.name
		}
	}
	if !hasTrace {
		m.Traces = "none"
	}
	for _, c := range b.s.selected {
		m.Cells = append(m.Cells, c.Cell.ID)
	}
	return m
}

// finish adds README.md and bundle.json in front of the entries. Both are redacted too (with
// a copy of the redactor, so the counts they list are those of the run's files).
func (b *builder) finish(entries []entry, meta Metadata) []entry {
	shadow := b.red.Clone()
	readme := shadow.Bytes([]byte(renderReadme(b.s, meta, entries, b.file)))
	var mj bytes.Buffer
	enc := json.NewEncoder(&mj)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	_ = enc.Encode(meta)
	front := []entry{
		{name: ReadmeFile, data: readme, size: int64(len(readme)), kind: "text"},
		{name: MetadataFile, data: shadow.Bytes(mj.Bytes()), kind: "text"},
	}
	front[1].size = int64(len(front[1].data))
	return append(front, entries...)
}

// writeArchive writes the entries as a .tar.gz into a temporary file beside out and returns it
// with its size, for the caller to commit (rename over out) or abort.
func writeArchive(ctx context.Context, out string, entries []entry) (*rundir.Output, int64, error) {
	f, err := rundir.CreateOutput(out)
	if err != nil {
		return nil, 0, fmt.Errorf("bundle: %w; choose a writable -o", err)
	}
	fail := func(err error) (*rundir.Output, int64, error) {
		f.Abort()
		return nil, 0, fmt.Errorf("bundle: write %s: %w", out, err)
	}
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	mtime := time.Now().UTC().Truncate(time.Second)
	dirs := map[string]bool{}
	for _, e := range entries {
		// Directory entries first, so tools that extract strictly in order are happy.
		for d := path.Dir(e.name); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	dl := make([]string, 0, len(dirs))
	for d := range dirs {
		dl = append(dl, d)
	}
	sort.Strings(dl)
	for _, d := range dl {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return fail(err)
		}
	}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: e.name, Mode: 0o644, Size: e.size, ModTime: mtime, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return fail(err)
		}
		if e.data != nil || e.file == "" {
			if _, err := tw.Write(e.data); err != nil {
				return fail(err)
			}
			continue
		}
		src, err := infile.Open(e.file)
		if err != nil {
			return fail(err)
		}
		_, err = io.CopyN(tw, rundir.ContextReader(ctx, src), e.size)
		src.Close()
		if err != nil {
			return fail(err)
		}
	}
	if err := errors.Join(tw.Close(), zw.Close()); err != nil {
		return fail(err)
	}
	st, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	return f, st.Size(), nil
}

// isRegular says whether p is a regular file itself, not a link to one.
func isRegular(p string) bool {
	st, err := os.Lstat(p)
	return err == nil && st.Mode().IsRegular()
}
