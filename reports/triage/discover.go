package triage

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sglprof/runner/plans/infile"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/reports/trace"
)

// Stage labels derived from file names and annotations.
const (
	StageExtend = "extend"
	StageDecode = "decode"
	StageMixed  = "mixed"
	StageAll    = "all"
	// StageUnannotated holds the kernels of an annotated trace that fell outside every stage
	// annotation (warm-up, scheduler work between steps).
	StageUnannotated = "unannotated"
)

// Input formats.
const (
	FormatKineto = "kineto"
	FormatNsys   = "nsys"
)

// RankID is the parallel position a trace file name encodes; -1 marks an absent component.
type RankID struct {
	TP, DP, PP, EP int
	// Global is the global rank of diffusion (global-rank<R>) and vLLM-Omni (trace_rank<r>) names.
	Global int
}

// NoRank is a RankID with every component absent.
var NoRank = RankID{-1, -1, -1, -1, -1}

// Primary is the rank used for selection: the TP rank when present, else the global rank.
func (r RankID) Primary() int {
	if r.TP >= 0 {
		return r.TP
	}
	return r.Global
}

// String renders the tuple as SGLang names it ("TP-0-DP-1"), or "rank3", or "" when unknown.
func (r RankID) String() string {
	if r.TP < 0 {
		if r.Global >= 0 {
			return "rank" + strconv.Itoa(r.Global)
		}
		return ""
	}
	s := "TP-" + strconv.Itoa(r.TP)
	for _, c := range []struct {
		k string
		v int
	}{{"DP", r.DP}, {"PP", r.PP}, {"EP", r.EP}} {
		if c.v >= 0 {
			s += "-" + c.k + "-" + strconv.Itoa(c.v)
		}
	}
	return s
}

func (r RankID) less(o RankID) bool {
	a := [5]int{r.Primary(), r.DP, r.PP, r.EP, r.Global}
	b := [5]int{o.Primary(), o.DP, o.PP, o.EP, o.Global}
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// Input is one trace file chosen by Discover.
type Input struct {
	Path   string
	Format string // FormatKineto or FormatNsys
	// Stage comes from the file name or its directory (extend, decode, mixed); "" means it is
	// derived from annotations when the trace is read, falling back to "all".
	Stage   string
	Rank    RankID
	Merged  bool
	ModTime time.Time
	// RankFromHeader is true when Rank came from the trace's distributedInfo, not its name.
	RankFromHeader bool
}

// Inputs is the result of discovery: the traces to analyse and what server_args.json said.
type Inputs struct {
	Root  string
	Files []Input
	// Model and TPSize come from server_args.json ("model_path" or "model", "tp_size");
	// TPSize is 0 when unknown.
	Model          string
	TPSize         int
	ServerArgsPath string
	Warnings       []string
	// OtherRanks are the traces of the ranks not chosen for the tables: Analyze reads them one
	// at a time for the Ranks section only (per-rank kernel, busy and collective time).
	OtherRanks []Input
}

// regularFile reports whether a directory entry is a regular file, or a symlink to one.
func regularFile(p string, d fs.DirEntry) bool {
	if d.Type()&fs.ModeSymlink != 0 {
		st, err := os.Stat(p)
		return err == nil && st.Mode().IsRegular()
	}
	return d.Type().IsRegular()
}

// DiscoverOptions chooses among the traces of a directory.
type DiscoverOptions struct {
	// Rank selects the TP rank (SGLang) or global rank (diffusion, vLLM-Omni) to analyse;
	// nil means the lowest rank present.
	Rank *int
	// AllRanks keeps every rank (one stage section per rank and stage).
	AllRanks bool
	// Header, when set, reads a torch-profiler trace's distributedInfo (rank and world_size,
	// -1 when absent) from its header only. Discover uses it for the rank of a file whose name
	// carries none (PyTorch's and HTA's names: rank-0.pt.trace.json.gz,
	// host_1234.1700000000.pt.trace.json) and to refuse files of different world sizes. The
	// runner passes the Kineto reader's; triage imports no reader.
	Header func(path string) (rank, worldSize int, err error)
}

var (
	reSGLang = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^(.*?)-TP-(\d+)(?:-DP-(\d+))?(?:-PP-(\d+))?(?:-EP-(\d+))?(?:-([A-Za-z]+))?\.trace\.json(?:\.gz)?$`)
	})
	reMerged    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^merged-.*\.trace\.json(?:\.gz)?$`) })
	reDiffusion = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^(.*?)(?:-(\d+)_steps|-full_stages)?-global-rank(\d+)\.trace\.json(?:\.gz)?$`)
	})
	reOmni    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^trace_rank(\d+)\.json(?:\.gz)?$`) })
	reTPn     = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?i)(?:^|[_-])tp(\d+)(?:[_.-]|$)`) })
	reRankN   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?i)(?:^|[_-])rank(\d+)(?:[_.-]|$)`) })
	reWorkerN = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?i)(?:^|[_-])worker(\d+)(?:[_.-]|$)`) })
)

// notTraces are JSON files that sit next to traces in run directories and are never traces.
var notTraces = map[string]bool{
	"server_args.json": true, "metadata.json": true, "config.json": true, rundir.PerfFile: true,
	rundir.ResultFile: true, rundir.CellsFile: true, rundir.ManifestFile: true, rundir.SummaryJSON: true,
	rundir.TriageJSON: true, rundir.CommandFile: true,
}

func atoiOr(s string, def int) int {
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return def
	}
	return n
}

// nameStage maps an SGLang stage suffix or a directory name to a stage label.
func nameStage(s string) string {
	switch strings.ToLower(s) {
	case "extend", "prefill":
		return StageExtend
	case "decode":
		return StageDecode
	case "mixed":
		return StageMixed
	}
	return ""
}

// classifyName parses one file name. ok is false when the name is not a trace candidate by
// name alone (other *.json files are sniffed by the caller).
func classifyName(base string) (in Input, ok bool) {
	in.Rank = NoRank
	in.Format = FormatKineto
	lower := strings.ToLower(base)
	switch {
	case strings.HasSuffix(lower, ".sqlite") || strings.HasSuffix(lower, ".nsys-rep"):
		in.Format = FormatNsys
		fillLooseRank(&in, base)
		return in, true
	case reMerged().MatchString(base):
		in.Merged = true
		return in, true
	}
	if m := reSGLang().FindStringSubmatch(base); m != nil {
		in.Rank = RankID{TP: atoiOr(m[2], -1), DP: atoiOr(m[3], -1), PP: atoiOr(m[4], -1), EP: atoiOr(m[5], -1), Global: -1}
		in.Stage = nameStage(m[6])
		return in, true
	}
	if m := reDiffusion().FindStringSubmatch(base); m != nil {
		in.Rank.Global = atoiOr(m[3], -1)
		return in, true
	}
	if m := reOmni().FindStringSubmatch(base); m != nil {
		in.Rank.Global = atoiOr(m[1], -1)
		return in, true
	}
	if strings.HasSuffix(lower, ".trace.json") || strings.HasSuffix(lower, ".trace.json.gz") {
		fillLooseRank(&in, base)
		for _, suf := range []string{"-extend", "-prefill", "_extend", "_prefill"} {
			if strings.Contains(lower, suf) {
				in.Stage = StageExtend
			}
		}
		if in.Stage == "" && (strings.Contains(lower, "-decode") || strings.Contains(lower, "_decode")) {
			in.Stage = StageDecode
		}
		return in, true
	}
	return in, false
}

// fillLooseRank applies the anchor's v2 rank patterns to names that follow no known scheme.
func fillLooseRank(in *Input, base string) {
	if m := reTPn().FindStringSubmatch(base); m != nil {
		in.Rank.TP = atoiOr(m[1], -1)
		return
	}
	for _, re := range []*regexp.Regexp{reRankN(), reWorkerN()} {
		if m := re.FindStringSubmatch(base); m != nil {
			in.Rank.Global = atoiOr(m[1], -1)
			return
		}
	}
}

// sniffTrace reports whether an unconventionally named .json/.json.gz file is a Chrome trace,
// reading only its first few KiB (the anchor full-parsed every such file, W1).
func sniffTrace(path string) bool {
	f, err := infile.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var r io.Reader = f
	head := make([]byte, 2)
	if n, _ := io.ReadFull(f, head); n == 2 && head[0] == 0x1f && head[1] == 0x8b {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return false
		}
		gz, err := gzip.NewReader(f)
		if err != nil {
			return false
		}
		r = gz
	} else if _, err := f.Seek(0, io.SeekStart); err != nil {
		return false
	}
	buf := make([]byte, 8192)
	n, _ := io.ReadFull(r, buf)
	buf = bytes.TrimLeft(buf[:n], " \t\r\n\ufeff")
	if bytes.Contains(buf, []byte(`"traceEvents"`)) {
		return true
	}
	return len(buf) > 0 && buf[0] == '[' && bytes.Contains(buf, []byte(`"ph"`))
}

// Discover finds the traces to analyse under root (a trace file or a directory).
//
// Rules, improving on the anchor (§3, W10): SGLang names are parsed for the full
// TP/DP/PP/EP tuple and the stage suffix; merged-* files are used only when nothing else
// exists; diffusion (-global-rank<R>) and vLLM-Omni (trace_rank<r>) names give the global rank;
// .sqlite/.nsys-rep files are nsys inputs (an export wins over its report); other *.json files
// are sniffed, not parsed. A directory whose traces sit in several sub-directories is read as a
// staged layout when the sub-directories carry stages (prefill/…, decode/…), otherwise the
// newest sub-directory wins. A directory whose files are not one job's ranks is refused
// (oneJob); the lowest rank is kept unless opts say otherwise. server_args.json is looked for
// next to the traces, one level up, and one level below the root.
func Discover(root string, opts DiscoverOptions) (Inputs, error) {
	res := Inputs{Root: root}
	st, err := os.Stat(root)
	if err != nil {
		return res, fmt.Errorf("triage input %s: %w (pass a trace file or the directory the profiler wrote)", root, err)
	}
	var cands []Input
	if !st.IsDir() && !st.Mode().IsRegular() {
		// A FIFO or a device would block the read (or never end); triage reads files.
		return res, fmt.Errorf("triage input %s is not a regular file (%s); pass a trace file or the directory the profiler wrote", root, st.Mode().Type())
	}
	if !st.IsDir() {
		in, ok := classifyName(filepath.Base(root))
		if !ok {
			fillLooseRank(&in, filepath.Base(root)) // the rank in a loose name (…-rank0.json.gz)
		}
		in.Path = root
		in.ModTime = st.ModTime()
		in.Merged = false // an explicitly named file is used whatever it is called
		res.Files = []Input{in}
		res.findServerArgs([]string{filepath.Dir(root), filepath.Dir(filepath.Dir(root))})
		return res, nil
	}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root {
				return err
			}
			res.Warnings = append(res.Warnings, fmt.Sprintf("skipped %s: %v", p, err))
			return nil
		}
		if d.IsDir() || !regularFile(p, d) {
			return nil // a FIFO, socket or device: opening it could block
		}
		base := d.Name()
		in, ok := classifyName(base)
		if !ok {
			lower := strings.ToLower(base)
			if notTraces[lower] || !(strings.HasSuffix(lower, ".json") || strings.HasSuffix(lower, ".json.gz")) || !sniffTrace(p) {
				return nil
			}
			fillLooseRank(&in, base)
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		in.Path = p
		in.ModTime = info.ModTime()
		if in.Stage == "" {
			in.Stage = dirStage(root, p)
		}
		cands = append(cands, in)
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("scan %s: %w", root, err)
	}
	if len(cands) == 0 {
		return res, fmt.Errorf("no trace files under %s (looked for *.trace.json[.gz], *-global-rank<R>.trace.json.gz, trace_rank<r>.json[.gz], *.sqlite, *.nsys-rep and other Chrome-trace *.json[.gz]); pass a trace file or the profiler's output directory", root)
	}
	cands = res.pickDirs(root, cands)
	cands = dedupeNsys(cands)
	cands = dropMerged(cands)
	worldErr, err := headerRanks(root, cands, opts.Header)
	if err != nil {
		return res, err
	}
	if err := oneJob(root, cands); err != nil {
		return res, err
	}
	if worldErr != nil {
		return res, worldErr
	}
	cands, err = res.pickRanks(cands, opts)
	if err != nil {
		return res, err
	}
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.Rank != b.Rank {
			return a.Rank.less(b.Rank)
		}
		if sa, sb := stageOrder(a.Stage), stageOrder(b.Stage); sa != sb {
			return sa < sb
		}
		return a.Path < b.Path
	})
	res.Files = cands
	dirs := []string{}
	seen := map[string]bool{}
	for _, c := range cands {
		for _, d := range []string{filepath.Dir(c.Path), filepath.Dir(filepath.Dir(c.Path))} {
			if !seen[d] {
				seen[d] = true
				dirs = append(dirs, d)
			}
		}
	}
	for _, d := range append([]string{root, filepath.Dir(root)}, subdirs(root)...) {
		if !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	res.findServerArgs(dirs)
	return res, nil
}

func subdirs(root string) []string {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, filepath.Join(root, e.Name()))
		}
	}
	return out
}

// dirStage reads a stage from the directories between root and the file (v2's own
// prefill/… and decode/… workload layout).
func dirStage(root, p string) string {
	rel, err := filepath.Rel(root, filepath.Dir(p))
	if err != nil || rel == "." {
		return ""
	}
	for _, seg := range strings.Split(filepath.ToSlash(rel), "/") {
		if s := nameStage(seg); s != "" {
			return s
		}
	}
	return ""
}

func stageOrder(s string) int {
	switch s {
	case StageExtend:
		return 0
	case StageMixed:
		return 1
	case StageDecode:
		return 2
	case StageAll, "":
		return 4
	case StageUnannotated:
		return 5
	}
	return 3
}

func (res *Inputs) pickDirs(root string, cands []Input) []Input {
	byDir := map[string][]Input{}
	for _, c := range cands {
		d := filepath.Dir(c.Path)
		byDir[d] = append(byDir[d], c)
	}
	if direct := byDir[filepath.Clean(root)]; len(direct) > 0 {
		return direct
	}
	if len(byDir) == 1 {
		return cands
	}
	staged := map[string]bool{}
	for _, c := range cands {
		if c.Stage != "" {
			staged[c.Stage] = true
		}
	}
	if len(staged) > 1 {
		return cands
	}
	var best string
	var bestT time.Time
	for d, fs := range byDir {
		for _, f := range fs {
			if f.ModTime.After(bestT) || (f.ModTime.Equal(bestT) && d > best) {
				best, bestT = d, f.ModTime
			}
		}
	}
	res.Warnings = append(res.Warnings, fmt.Sprintf("%d directories under %s hold traces; using the newest, %s (pass that directory or a file to choose another)", len(byDir), root, best))
	return byDir[best]
}

func dedupeNsys(cands []Input) []Input {
	sqlite := map[string]bool{}
	for _, c := range cands {
		if strings.HasSuffix(strings.ToLower(c.Path), ".sqlite") {
			sqlite[strings.TrimSuffix(c.Path, filepath.Ext(c.Path))] = true
		}
	}
	out := cands[:0]
	for _, c := range cands {
		if strings.HasSuffix(strings.ToLower(c.Path), ".nsys-rep") && sqlite[strings.TrimSuffix(c.Path, filepath.Ext(c.Path))] {
			continue
		}
		out = append(out, c)
	}
	return out
}

// MixedInputsError is a directory whose traces are not the ranks of one job: Analyze would
// compare unrelated traces as ranks (an MPI nsys export read as "rank ?" beside
// a DDP trace). The CLI makes it a usage error (exit 2).
type MixedInputsError struct{ Msg string }

func (e *MixedInputsError) Error() string { return e.Msg }

// oneJob refuses a directory that mixes nsys exports and torch traces, in which two files
// claim the same rank and stage (two jobs, or two profiles of one), or in which a file whose
// name carries no rank sits beside other files of its stage or beside ranked files. Files of
// one rank but different stages, an export beside its own report and merged traces beside
// per-rank ones were settled before (dedupeNsys, dropMerged).
func oneJob(root string, cands []Input) error {
	if len(cands) < 2 {
		return nil
	}
	var nsysF, kin, ranked, rankless []string
	type key struct {
		r RankID
		s string
	}
	claims := map[key][]string{}
	var order []key
	for _, c := range cands {
		if c.Format == FormatNsys {
			nsysF = append(nsysF, c.Path)
		} else {
			kin = append(kin, c.Path)
		}
		if c.Rank.Primary() < 0 {
			rankless = append(rankless, c.Path)
		} else {
			ranked = append(ranked, c.Path)
		}
		k := key{c.Rank, c.Stage}
		if claims[k] == nil {
			order = append(order, k)
		}
		claims[k] = append(claims[k], c.Path)
	}
	const fix = "pass one file, or a directory that holds the traces of one job only"
	if len(nsysF) > 0 && len(kin) > 0 {
		return &MixedInputsError{fmt.Sprintf("%s mixes nsys exports (%s) and torch-profiler traces (%s): they are not ranks of one job; %s", root, strings.Join(nsysF, ", "), strings.Join(kin, ", "), fix)}
	}
	if len(rankless) > 0 && len(ranked) > 0 {
		return &MixedInputsError{fmt.Sprintf("%s holds traces whose names carry no rank (%s) beside per-rank traces (%s): which rank they are is unknown; %s", root, strings.Join(rankless, ", "), strings.Join(ranked, ", "), fix)}
	}
	for _, k := range order {
		if ps := claims[k]; len(ps) > 1 {
			what := "rank " + k.r.String()
			if k.r.Primary() < 0 {
				what = "no rank in their names"
			}
			if k.s != "" {
				what += ", stage " + k.s
			}
			return &MixedInputsError{fmt.Sprintf("%s holds %d traces with %s (%s): they are different jobs or profiles, not ranks of one job; %s", root, len(ps), what, strings.Join(ps, ", "), fix)}
		}
	}
	return nil
}

func dropMerged(cands []Input) []Input {
	var rest []Input
	for _, c := range cands {
		if !c.Merged {
			rest = append(rest, c)
		}
	}
	if len(rest) == 0 {
		return cands
	}
	return rest
}

func (res *Inputs) pickRanks(cands []Input, opts DiscoverOptions) ([]Input, error) {
	if opts.AllRanks {
		return cands, nil
	}
	ranks := map[RankID]bool{}
	primaries := map[int]bool{}
	for _, c := range cands {
		if c.Rank.Primary() >= 0 {
			ranks[c.Rank] = true
			primaries[c.Rank.Primary()] = true
		}
	}
	if len(ranks) == 0 {
		if opts.Rank != nil {
			return nil, fmt.Errorf("--rank %d: no trace file name under %s carries a rank; drop --rank", *opts.Rank, res.Root)
		}
		return cands, nil
	}
	list := make([]RankID, 0, len(ranks))
	for r := range ranks {
		list = append(list, r)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].less(list[j]) })
	var want RankID
	if opts.Rank != nil {
		found := false
		for _, r := range list {
			if r.Primary() == *opts.Rank {
				want, found = r, true
				break
			}
		}
		if !found {
			ps := make([]int, 0, len(primaries))
			for p := range primaries {
				ps = append(ps, p)
			}
			sort.Ints(ps)
			return nil, fmt.Errorf("--rank %d: no trace for that rank under %s; ranks present: %v", *opts.Rank, res.Root, ps)
		}
	} else {
		want = list[0]
	}
	var out []Input
	for _, c := range cands {
		if c.Rank == want {
			out = append(out, c)
		} else {
			res.OtherRanks = append(res.OtherRanks, c)
		}
	}
	if len(list) > 1 {
		names := make([]string, len(list))
		for i, r := range list {
			names[i] = r.String()
		}
		res.Warnings = append(res.Warnings, fmt.Sprintf("tables for %s only (the Ranks section compares %s); use --rank N or --all-ranks for another rank's tables", want.String(), strings.Join(names, ", ")))
	}
	return out, nil
}

// serverArgs is the subset of SGLang's server_args.json that triage uses.
type serverArgs struct {
	ModelPath string          `json:"model_path"`
	Model     string          `json:"model"`
	TPSize    json.RawMessage `json:"tp_size"`
}

// maxServerArgs bounds server_args.json, which SGLang writes at a few KiB.
const maxServerArgs = 16 << 20

func (res *Inputs) findServerArgs(dirs []string) {
	for _, d := range dirs {
		p := filepath.Join(d, "server_args.json")
		b, err := infile.ReadFile(p, maxServerArgs)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				res.Warnings = append(res.Warnings, fmt.Sprintf("server_args: %v", err))
			}
			continue
		}
		var sa serverArgs
		if err := json.Unmarshal(b, &sa); err != nil {
			res.Warnings = append(res.Warnings, fmt.Sprintf("server_args %s is not valid JSON (%v); model and TP gates are off", p, err))
			continue
		}
		res.ServerArgsPath = p
		res.Model = sa.ModelPath
		if res.Model == "" {
			res.Model = sa.Model
		}
		if len(sa.TPSize) > 0 {
			res.TPSize = atoiOr(strings.Trim(string(sa.TPSize), `" `), 0)
		}
		return
	}
}

// OpenFunc reads one trace file into the linked model (the type of Options.Open).
type OpenFunc = func(ctx context.Context, path string) (*trace.Trace, error)

// OpenByFormat returns an Options.Open that sends nsys inputs (.sqlite exports; a .nsys-rep
// must be exported first) to nsysOpen and everything else to kinetoOpen, so the CLI can pass
// both readers without triage importing either. A nil reader turns its inputs into an error
// that says what is missing.
func OpenByFormat(kinetoOpen, nsysOpen OpenFunc) OpenFunc {
	return func(ctx context.Context, path string) (*trace.Trace, error) {
		in, _ := classifyName(filepath.Base(path))
		if in.Format == FormatNsys {
			if strings.HasSuffix(strings.ToLower(path), ".nsys-rep") {
				return nil, fmt.Errorf("%s is an Nsight Systems report; export it first (nsys export --type sqlite) and triage the .sqlite", path)
			}
			if nsysOpen == nil {
				return nil, fmt.Errorf("%s is an nsys export but no nsys reader was given", path)
			}
			return nsysOpen(ctx, path)
		}
		if kinetoOpen == nil {
			return nil, fmt.Errorf("%s is a torch-profiler trace but no Kineto reader was given", path)
		}
		return kinetoOpen(ctx, path)
	}
}
