package triage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/sglprof/runner/reports/trace"
)

// Options configure Analyze.
type Options struct {
	// Open reads one trace file into the model. The CLI passes the Kineto reader for
	// FormatKineto inputs and the nsys reader for FormatNsys ones; triage imports neither.
	// The returned trace must be linked (GPUOp.Launch/CPUOp, CPUOp.Frame, Frame.Parent).
	Open func(ctx context.Context, path string) (*trace.Trace, error)
	// OpenMapping, when set, reads the mapping traces instead of Open. A mapping trace only
	// gives Python locations, so a reader may skip what only times need (flow events).
	OpenMapping func(ctx context.Context, path string) (*trace.Trace, error)
	// Mapping, when set, selects mapping-formal mode: these graph-off traces give the Python
	// locations, the analysed inputs (graph-on, "formal") give times. Attribution conflicts
	// between the two are reported as warnings, never merged silently (W9).
	Mapping *Inputs
	// Device chooses the analysed GPU; nil picks the device with the largest kernel time.
	Device *int
	// Cutoff drops rows whose share is below this percentage from the report itself
	// (0 keeps every row; Render applies its own cutoff on top). The CLI passes DefaultCutoff
	// to Render and leaves this 0 so that JSON consumers can choose.
	Cutoff float64
	// Stage, when set, keeps only the stages with this label (extend, decode, DenoisingStage,
	// ...; with several ranks every rank's section of that stage). No match is an error that
	// lists the stages present.
	Stage string
	// Model and TPSize override what server_args.json said (fusion gates).
	Model  string
	TPSize int
	// Catalog and Classifier default to the embedded data files.
	Catalog    *Catalog
	Classifier *Classifier
	// Logger receives progress at debug level; nil discards.
	Logger *slog.Logger
	// Scopes, when set, labels the GPU ops of t that have no Python site (an nsys trace has
	// no Python frames): it returns, per GPU op of t (same index), a name in t.Names (0, the
	// empty name, for none), and the kernel table shows that name in the location column instead of
	// "unresolved". The nsys path passes the op's NVTX scope; torch traces leave it nil.
	Scopes func(t *trace.Trace) []trace.NameID
	// Stages, when set and returning non-nil for t, gives each GPU op of t (same index) its
	// stage label instead of the stages found from annotations (a stage named by the file
	// still wins); "" puts an op in StageUnannotated. `runner triage --nvtx-stage` uses it.
	Stages func(t *trace.Trace) []string
	// LaunchStarts, when set and returning non-nil for t, gives each GPU op of t (same index)
	// the start of its own launch call (trace.NoID for none), for a trace whose Launches no
	// longer carry the calls' times (trace.Trace.LaunchTimesDropped): the idle breakdown and
	// launch delays need them. The nsys path keeps them so before it merges the launches.
	LaunchStarts func(t *trace.Trace) []int64
	// OpenStream, when set, is tried before Open for the analysed inputs (not mapping traces):
	// a non-nil OpStream is analysed as its ops go by, in memory that does not grow with
	// their number. It returns nil, or an error wrapping ErrNotStreamable, for an input it
	// cannot stream (Open then reads it); any other error fails the triage.
	OpenStream func(ctx context.Context, path string) (*OpStream, error)
}

// Analyze reads every input and builds the per-stage kernel, overlap and fusion tables.
// Inputs are read one at a time and released before the next, so memory is bounded by the
// largest single trace.
func Analyze(ctx context.Context, in Inputs, opts Options) (*Report, error) {
	if opts.Open == nil {
		return nil, errors.New("triage: Options.Open is nil; pass a trace reader (the Kineto or nsys reader)")
	}
	if len(in.Files) == 0 {
		return nil, errors.New("triage: no input traces; run Discover on a trace file or directory first")
	}
	a := &analyzer{opts: opts, cls: opts.Classifier, cat: opts.Catalog, log: opts.Logger}
	if a.cls == nil || a.cat == nil {
		// The embedded classifier and catalog (about 5 ms to parse, more in a fresh process)
		// are built on the other core while the first trace is opened, which needs neither:
		// for an nsys export that open is the schema, memory-op and NVTX reads before the
		// pass, on one goroutine. classifier and catalog wait for them where they are used.
		go func() {
			a.classifier()
			a.catalog()
		}()
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	rep, err := a.newReport(ctx, in)
	if err != nil {
		return nil, err
	}
	stats, err := a.analyzeFiles(ctx, in.Files, rep)
	if err != nil {
		return nil, err
	}
	other, err := a.otherRanks(ctx, in.OtherRanks)
	if err != nil {
		return nil, err
	}
	all := append(stats, other...)
	rep.Ranks = buildRanks(all)
	applySkew(rep, all)
	if opts.Stage != "" {
		if err := selectStage(rep, opts.Stage); err != nil {
			return nil, err
		}
	}
	if opts.Cutoff > 0 {
		for i := range rep.Stages {
			applyCutoff(&rep.Stages[i], opts.Cutoff)
		}
	}
	return rep, nil
}

// newReport starts the report: mode, model, TP size and warnings from in and the options, and
// in two-trace mode the mapping trace read (which the formal trace's stages then use).
func (a *analyzer) newReport(ctx context.Context, in Inputs) (*Report, error) {
	opts := a.opts
	rep := &Report{Mode: ModeSingle, Model: in.Model, TPSize: in.TPSize, Warnings: append([]string{}, in.Warnings...)}
	if opts.Model != "" {
		rep.Model = opts.Model
	}
	if opts.TPSize > 0 {
		rep.TPSize = opts.TPSize
	}
	if opts.Mapping != nil {
		rep.Mode = ModeMappingFormal
		if rep.Model == "" {
			rep.Model = opts.Mapping.Model
		}
		if rep.TPSize == 0 {
			rep.TPSize = opts.Mapping.TPSize
		}
		rep.Warnings = append(rep.Warnings, prefixAll("mapping: ", opts.Mapping.Warnings)...)
		if err := a.readMapping(ctx, rep, opts.Mapping.Files); err != nil {
			return nil, err
		}
	}
	a.model, a.tp = rep.Model, rep.TPSize
	return rep, nil
}

// analyzeFiles analyses each input trace into rep's inputs, stages (labelled with the rank
// when there are several, and the file when a label repeats) and warnings, and returns the
// per-rank stage statistics.
func (a *analyzer) analyzeFiles(ctx context.Context, files []Input, rep *Report) ([]rankStat, error) {
	multiRank := false
	for _, f := range files[1:] {
		if f.Rank != files[0].Rank {
			multiRank = true
		}
	}
	seen := map[string]int{}
	var stats []rankStat
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		info, res, held, err := a.oneHeld(ctx, f)
		if err != nil {
			return nil, err
		}
		rep.Inputs = append(rep.Inputs, info)
		rank := f.Rank
		if held != nil {
			rank = deviceRank(info.Device)
			more, err := a.mergedRanks(ctx, f, held, int32(info.Device))
			if err != nil {
				return nil, err
			}
			stats = append(stats, more...)
		}
		base := len(rep.Stages)
		for i, sr := range res {
			rs := newRankStat(rank, i, sr)
			rs.repIdx = base + i // the stage's place in rep.Stages, filled just below
			stats = append(stats, rs)
		}
		for _, sr := range res {
			label := sr.stage.Stage
			if multiRank && f.Rank.String() != "" {
				label += " " + f.Rank.String()
			}
			if seen[label] > 0 {
				label += " (" + filepath.Base(f.Path) + ")"
			}
			seen[label]++
			sr.stage.Stage = label
			rep.Stages = append(rep.Stages, sr.stage)
		}
		rep.Warnings = append(rep.Warnings, a.warn...)
		a.warn = nil
	}
	return stats, nil
}

// selectStage keeps only rep's stages named stage (or stage followed by a rank or file
// suffix); none is an error that lists the stages present.
func selectStage(rep *Report, stage string) error {
	var keep []Stage
	var have []string
	for _, s := range rep.Stages {
		have = append(have, s.Stage)
		if s.Stage == stage || strings.HasPrefix(s.Stage, stage+" ") {
			keep = append(keep, s)
		}
	}
	if len(keep) == 0 {
		return fmt.Errorf("--stage %s: no such stage; stages present: %s", stage, strings.Join(have, ", "))
	}
	rep.Stages = keep
	return nil
}

func prefixAll(p string, ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = p + s
	}
	return out
}

type analyzer struct {
	opts    Options
	cls     *Classifier // nil: the embedded one (classifier)
	cat     *Catalog    // nil: the embedded one (catalog)
	log     *slog.Logger
	model   string
	tp      int
	warn    []string
	mapping map[string]map[string]map[siteKeyS]int64 // stage -> canonical (and base) name -> site -> ns
	// mappingRoof is the mapping traces' roofline sums under the same keys as mapping.
	mappingRoof map[string]map[string]*mapRoof

	unmatchedN     int
	unmatchedNS    int64
	unmatchedFirst string
}

// classifier is Options.Classifier, or the embedded one (DefaultClassifier, which waits for
// Analyze's build of it to finish).
func (a *analyzer) classifier() *Classifier {
	if a.cls != nil {
		return a.cls
	}
	return DefaultClassifier()
}

// catalog is Options.Catalog, or the embedded one (DefaultCatalog).
func (a *analyzer) catalog() *Catalog {
	if a.cat != nil {
		return a.cat
	}
	return DefaultCatalog()
}

// siteKeyS is a resolved (location, CPU op) pair.
type siteKeyS struct{ loc, cpu string }

// site kinds of an op's attribution
const (
	kindFrame uint8 = iota
	kindGraph
	kindUnresolved
	kindScope // no Python site, but an Options.Scopes label (an NVTX range)
)

type siteKey struct {
	loc  trace.NameID // frame name (kindFrame) or launch frame name (kindGraph)
	cpu  trace.NameID // CPU op or launch name
	kind uint8
}

type kagg struct {
	name     string
	lower    string // name lower-cased
	base     string
	cat      string
	total    int64
	hidden   int64
	count    int
	rep      int32 // index into the stage op list of the longest op
	repDur   int64
	repStr   int32 // the stream of the longest op
	sites    map[siteKey]int64
	cur      siteKey // the last op's site, whose time since the site changed is curNS
	curNS    int64   // -1 before the first op and after closeAggs
	resolved int64   // time attributed to a real (non-graph, non-unresolved) site
	rsites   map[siteKeyS]int64
	row      int // index of the kernel row (after sorting)
	roof     roofAgg
	// copyFactor and copyLink are copyTraffic of name, worked out once per aggregate rather
	// than per op (an nsys export can hold hundreds of thousands of copies).
	copyFactor float64
	copyLink   bool
}

// add counts one op of duration d at site k; true when it is the aggregate's longest op so
// far (the first of equal ones), which the caller records as the representative. Consecutive
// ops of a name mostly share a site, so their time is summed in cur and goes into the sites
// map when the site changes (and in closeAggs): a map update per op was a third of a
// streamed analysis's time.
func (g *kagg) add(d int64, k siteKey) bool {
	g.total += d
	g.count++
	if g.curNS < 0 || k != g.cur {
		if g.curNS >= 0 {
			g.sites[g.cur] += g.curNS
		}
		g.curNS = 0
	}
	g.cur = k
	g.curNS += d
	if k.kind == kindFrame {
		g.resolved += d
	}
	if d > g.repDur {
		g.repDur = d
		return true
	}
	return false
}

// newAgg is the empty aggregate of canonical name cid.
func (c *traceCtx) newAgg(cid int32) *kagg {
	g := &kagg{name: c.names[cid], lower: c.lowers[cid], cat: c.cats[cid], sites: map[siteKey]int64{}, repDur: -1, curNS: -1}
	g.base = baseName(g.name)
	g.copyFactor, g.copyLink = copyTraffic(g.name)
	return g
}

// closeAggs ends a stage's aggregation (the pending site times go into the sites maps) and
// orders the aggregates as the kernel table: by total time, then name.
func closeAggs(aggs []*kagg) {
	for _, g := range aggs {
		if g.curNS >= 0 {
			g.sites[g.cur] += g.curNS
			g.curNS = -1
		}
	}
	sort.Slice(aggs, func(i, j int) bool {
		if aggs[i].total != aggs[j].total {
			return aggs[i].total > aggs[j].total
		}
		return aggs[i].name < aggs[j].name
	})
}

// adjacency counts, per pair of kernel rows, the ops of one that ran within AdjacencyWindow
// positions of the other on one stream, walking the sweep's per-stream order once
// (O(n·window)). aggOf(i) is op i's aggregate. A run of the same pair is summed before the
// map is touched.
func adjacency(sw *Sweep, iv *spans, aggOf func(i int32) *kagg) map[uint64]int64 {
	adj := map[uint64]int64{}
	var last uint64 = 1<<64 - 1
	var run int64
	for p, i := range sw.Order {
		a := aggOf(i).row
		si := iv.at(i).Stream
		for q := p + 1; q < len(sw.Order) && q <= p+AdjacencyWindow; q++ {
			j := sw.Order[q]
			if iv.at(j).Stream != si {
				break
			}
			b := aggOf(j).row
			if a == b {
				continue
			}
			k := adjKey(a, b)
			if k != last {
				if run > 0 {
					adj[last] += run
				}
				last, run = k, 0
			}
			run++
		}
	}
	if run > 0 {
		adj[last] += run
	}
	return adj
}

type stageResult struct {
	stage Stage
	aggs  []*kagg
	// main is the stage's main compute stream, the stream with the most kernel time (the
	// lowest id of equal ones); an op on another stream already runs on a side stream.
	main int32
	// comms are the stage's collective instances, for the skew across ranks (applySkew).
	comms []commInst
}

// streamTotals sums kernel time per stream in O(1) per op (consecutive ops mostly share a
// stream, and a map finds the others), for the stage's main stream.
type streamTotals struct {
	idx        map[int32]int
	ids        []int32
	ns         []int64
	last       int
	lastStream int32
}

func (s *streamTotals) add(stream int32, d int64) {
	if s.idx == nil {
		s.idx, s.last = map[int32]int{}, -1
	}
	if s.last < 0 || stream != s.lastStream {
		j, ok := s.idx[stream]
		if !ok {
			j = len(s.ids)
			s.idx[stream] = j
			s.ids, s.ns = append(s.ids, stream), append(s.ns, 0)
		}
		s.last, s.lastStream = j, stream
	}
	s.ns[s.last] += d
}

// main is the stream with the most time, the lowest id of equal ones.
func (s *streamTotals) main() int32 {
	var best int32
	var bestNS int64 = -1
	for j, id := range s.ids {
		if s.ns[j] > bestNS || s.ns[j] == bestNS && id < best {
			best, bestNS = id, s.ns[j]
		}
	}
	return best
}

// one reads and analyses one trace; formal is false for mapping traces (no tables needed).
func (a *analyzer) one(ctx context.Context, f Input, formal bool) (InputInfo, []stageResult, error) {
	if formal && a.opts.OpenStream != nil {
		info, res, ok, err := a.streamOne(ctx, f)
		if err != nil || ok {
			return info, res, err
		}
	}
	info := InputInfo{Path: f.Path, Stage: f.Stage, Rank: f.Rank.Primary(), Device: -1}
	open := a.opts.Open
	if !formal && a.opts.OpenMapping != nil {
		open = a.opts.OpenMapping
	}
	t, err := open(ctx, f.Path)
	if err != nil {
		return info, nil, fmt.Errorf("read %s: %w", f.Path, err)
	}
	if t == nil {
		return info, nil, fmt.Errorf("read %s: reader returned no trace", f.Path)
	}
	for _, w := range t.Warnings {
		a.warn = append(a.warn, filepath.Base(f.Path)+": "+w)
	}
	dev, ok := a.pickDevice(t, f.Path)
	if !ok {
		a.warn = append(a.warn, fmt.Sprintf("%s: no GPU operations; nothing to triage", f.Path))
		if info.Stage == "" {
			info.Stage = StageAll
		}
		return info, nil, nil
	}
	info.Device = int(dev)
	ops := make([]int32, 0, len(t.GPUOps))
	for i := range t.GPUOps {
		if o := &t.GPUOps[i]; o.Device == dev && o.End >= o.Start {
			ops = append(ops, int32(i))
		}
	}
	// Stage of every op: the file name wins, then annotations, else "all".
	groups := map[string][]int32{}
	var order []string
	if f.Stage != "" {
		groups[f.Stage] = ops
		order = []string{f.Stage}
	} else if st := a.opStages(t, ops, dev); st != nil {
		// Consecutive ops mostly share a stage: the map is asked only when it changes.
		var lists [][]int32
		pos := map[string]int{}
		last := -1
		for i, oi := range ops {
			if last < 0 || st[i] != order[last] {
				k, ok := pos[st[i]]
				if !ok {
					k = len(order)
					pos[st[i]] = k
					order = append(order, st[i])
					lists = append(lists, nil)
				}
				last = k
			}
			lists[last] = append(lists[last], oi)
		}
		for k, name := range order {
			groups[name] = lists[k]
		}
		sortStagesByStart(t, order, groups)
		info.Stage = strings.Join(order, ",")
	} else {
		groups[StageAll] = ops
		order = []string{StageAll}
	}
	if info.Stage == "" {
		info.Stage = strings.Join(order, ",")
	}
	c := newTraceCtx(t, a.classifier())
	if a.opts.Scopes != nil {
		c.scopes = a.opts.Scopes(t)
	}
	c.roof = newRoofCtx(t)
	info.GPU, c.peak = devicePeak(t, dev)
	info.Peak = c.peak
	if a.opts.LaunchStarts != nil {
		c.launchStarts = a.opts.LaunchStarts(t)
	}
	var res []stageResult
	for _, st := range order {
		if err := ctx.Err(); err != nil {
			return info, nil, err
		}
		res = append(res, a.stage(c, st, groups[st], formal))
	}
	return info, res, nil
}

func (a *analyzer) pickDevice(t *trace.Trace, path string) (int32, bool) {
	per := map[int32]int64{}
	// Consecutive ops mostly share a device: sum a run of them before the map is asked.
	var dev int32
	var sum int64
	for i := range t.GPUOps {
		if op := &t.GPUOps[i]; i == 0 || op.Device == dev {
			dev, sum = op.Device, sum+op.Dur()
		} else {
			per[dev] += sum
			dev, sum = op.Device, op.Dur()
		}
	}
	if len(t.GPUOps) > 0 {
		per[dev] += sum
	}
	return a.pickFrom(per, path)
}

// pickFrom is pickDevice given each device's summed op durations.
func (a *analyzer) pickFrom(per map[int32]int64, path string) (int32, bool) {
	if len(per) == 0 {
		return 0, false
	}
	devs := make([]int32, 0, len(per))
	for d := range per {
		devs = append(devs, d)
	}
	sort.Slice(devs, func(i, j int) bool {
		if per[devs[i]] != per[devs[j]] {
			return per[devs[i]] > per[devs[j]]
		}
		return devs[i] < devs[j]
	})
	if a.opts.Device != nil {
		want := int32(*a.opts.Device)
		if _, ok := per[want]; ok {
			return want, true
		}
		a.warn = append(a.warn, fmt.Sprintf("%s: device %d has no GPU operations; analysing device %d (devices present: %v)", path, want, devs[0], devs))
		return devs[0], true
	}
	if len(devs) > 1 {
		a.warn = append(a.warn, fmt.Sprintf("%s: GPU ops on devices %v; analysing device %d (largest kernel time); choose another with --device", path, devs, devs[0]))
	}
	return devs[0], true
}

// traceCtx caches per-name and per-frame work for one trace.
type traceCtx struct {
	t      *trace.Trace
	cls    *Classifier
	canon  []int32 // NameID -> index into names; -1 unknown
	names  []string
	byName map[string]int32
	cats   []string
	lowers []string // lower-cased canonical names, shared by the classifier and the fusion catalog
	sites  *siteFinder
	scopes []trace.NameID // per GPU op: Options.Scopes label, or nil
	comms  []int32        // GPU op index -> Trace.Comms index (commIndex)
	roof   *roofCtx       // nil when the trace recorded no shapes
	peak   *Peak          // the analysed device's peaks, nil when unknown
	// launchStarts is per GPU op its launch call's start (Options.LaunchStarts), or nil
	launchStarts []int64
	// streamLaunch is the launch call start of the op a stream is delivering now (OpStream.Each
	// hands it over with the op; trace.NoID when unknown), read by launchOf when streamStarts.
	streamLaunch int64
	streamStarts bool
	// streamScope is the Options.Scopes-like label of the op a stream is delivering now
	// (OpStream.EachScoped; 0 for none), read by scoped for an op not in the trace.
	streamScope trace.NameID
}

func newTraceCtx(t *trace.Trace, cls *Classifier) *traceCtx {
	c := &traceCtx{t: t, cls: cls, canon: make([]int32, t.Names.Len()), byName: map[string]int32{}, sites: newSiteFinder(t)}
	for i := range c.canon {
		c.canon[i] = -1
	}
	return c
}

func (c *traceCtx) canonID(id trace.NameID) int32 {
	if int(id) >= len(c.canon) {
		grown := make([]int32, c.t.Names.Len())
		copy(grown, c.canon)
		for i := len(c.canon); i < len(grown); i++ {
			grown[i] = -1
		}
		c.canon = grown
		if int(id) >= len(c.canon) {
			return -1
		}
	}
	if v := c.canon[id]; v >= 0 {
		return v
	}
	n := Canonical(c.t.Name(id))
	// distinct raw names can share a canonical name (addresses, whitespace, parameter lists)
	if i, ok := c.byName[n]; ok {
		c.canon[id] = i
		return i
	}
	c.byName[n] = int32(len(c.names))
	c.names = append(c.names, n)
	low := strings.ToLower(n)
	c.lowers = append(c.lowers, low)
	c.cats = append(c.cats, c.cls.classifyLower(low))
	c.canon[id] = int32(len(c.names) - 1)
	return c.canon[id]
}

// oneHeld is one for an analysed input; for a merged multi-rank trace (SGLang's merged-*
// files) it also returns the held trace, whose other devices mergedRanks compares.
func (a *analyzer) oneHeld(ctx context.Context, f Input) (InputInfo, []stageResult, *trace.Trace, error) {
	if !reMerged().MatchString(filepath.Base(f.Path)) {
		info, res, err := a.one(ctx, f, true)
		return info, res, nil, err
	}
	var held *trace.Trace
	open, stream := a.opts.Open, a.opts.OpenStream
	a.opts.Open = func(ctx context.Context, p string) (*trace.Trace, error) {
		t, err := open(ctx, p)
		held = t
		return t, err
	}
	a.opts.OpenStream = nil // the devices are compared from the held trace
	info, res, err := a.one(ctx, f, true)
	a.opts.Open, a.opts.OpenStream = open, stream
	return info, res, held, err
}

// mergedRanks compares the devices of a merged trace other than the tabled one: each is one
// rank's GPU (SGLang's merged traces give every rank its own GPU process).
func (a *analyzer) mergedRanks(ctx context.Context, f Input, t *trace.Trace, tabled int32) ([]rankStat, error) {
	devs := map[int32]bool{}
	for i := range t.GPUOps {
		devs[t.GPUOps[i].Device] = true
	}
	var stats []rankStat
	for d := range devs {
		if d == tabled {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		dev := int(d)
		opts := a.opts
		opts.Device, opts.OpenStream = &dev, nil
		opts.Open = func(context.Context, string) (*trace.Trace, error) { return t, nil }
		b := &analyzer{opts: opts, cls: a.cls, cat: a.cat, log: a.log, model: a.model, tp: a.tp}
		_, res, err := b.one(ctx, f, true)
		if err != nil {
			return nil, fmt.Errorf("device %d of %s: %w", d, f.Path, err)
		}
		for i, sr := range res {
			stats = append(stats, newRankStat(deviceRank(dev), i, sr))
		}
	}
	return stats, nil
}

// deviceRank names a merged trace's device as a rank (its global rank is its device index).
func deviceRank(dev int) RankID { return RankID{TP: -1, DP: -1, PP: -1, EP: -1, Global: dev} }

// readMapping reads the mapping traces of mapping-formal mode: their Python sites per stage and
// kernel go into a.mapping.
func (a *analyzer) readMapping(ctx context.Context, rep *Report, files []Input) error {
	a.mapping = map[string]map[string]map[siteKeyS]int64{}
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		info, res, err := a.one(ctx, f, false)
		if err != nil {
			return fmt.Errorf("mapping trace: %w", err)
		}
		rep.Mapping = append(rep.Mapping, info)
		for _, sr := range res {
			a.addMapping(sr)
		}
	}
	return nil
}

// otherRanks reads the traces of the ranks that have no tables, keeping only their per-stage
// totals for the Ranks section; their warnings (the same device and stage notes as the tabled
// rank's) are dropped. Kineto traces are read two at a time, each by its own analyzer (the
// hooks of an nsys export keep per-session state, so those go one at a time); memory is then
// bounded by two traces.
func (a *analyzer) otherRanks(ctx context.Context, files []Input) ([]rankStat, error) {
	workers := min(OtherRankWorkers, runtime.GOMAXPROCS(0), len(files))
	for _, f := range files {
		if f.Format != FormatKineto {
			workers = 1
		}
	}
	type result struct {
		stats []rankStat
		err   error
	}
	results := make([]result, len(files))
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := &analyzer{opts: a.opts, cls: a.cls, cat: a.cat, log: a.log, model: a.model, tp: a.tp}
			for i := range next {
				f := files[i]
				_, res, err := b.one(ctx, f, true)
				if err != nil {
					results[i].err = fmt.Errorf("rank %s: %w", rankLabel(f.Rank), err)
					continue
				}
				for k, sr := range res {
					results[i].stats = append(results[i].stats, newRankStat(f.Rank, k, sr))
				}
				b.warn = nil
			}
		}()
	}
	for i := range files {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var stats []rankStat
	for _, r := range results {
		if r.err != nil {
			return nil, r.err
		}
		stats = append(stats, r.stats...)
	}
	return stats, nil
}

// OtherRankWorkers is how many untabled ranks' traces Analyze reads at once (the goal:
// 8 ranks of 100 MB in 4 s on two cores).
const OtherRankWorkers = 2

// sortStagesByStart puts stages in pipeline order: by their first op's start (the
// diffusion stages came out alphabetically, decoding before denoising before text encoding).
// SGLang's LLM stages keep their fixed order; ops outside every annotation and the "all" stage go
// last.
func sortStagesByStart(t *trace.Trace, order []string, groups map[string][]int32) {
	first := make(map[string]int64, len(order))
	for _, st := range order {
		f := int64(math.MaxInt64)
		for _, oi := range groups[st] {
			f = min(f, t.GPUOps[oi].Start)
		}
		first[st] = f
	}
	sortStages(order, first)
}

// sortStages orders stage labels by SGLang's fixed order, then by first (each stage's first
// op's start), then by name.
func sortStages(order []string, first map[string]int64) {
	sort.SliceStable(order, func(i, j int) bool {
		// SGLang's own stage names keep their fixed order (extend, mixed, decode, then the rest).
		if oi, oj := stageOrder(order[i]), stageOrder(order[j]); oi != oj {
			return oi < oj
		}
		if first[order[i]] != first[order[j]] {
			return first[order[i]] < first[order[j]]
		}
		return order[i] < order[j]
	})
}

// opSite attributes one GPU op to a Python site.
func (c *traceCtx) opSite(oi int32) siteKey { return c.siteOf(&c.t.GPUOps[oi], oi) }

// siteOf is opSite for an op that need not be in the trace (a streamed one: oi is then NoID,
// and the op has no Options.Scopes label).
func (c *traceCtx) siteOf(op *trace.GPUOp, oi int32) siteKey {
	t := c.t
	if op.Launch >= 0 && int(op.Launch) < len(t.Launches) && t.Launches[op.Launch].Graph {
		l := &t.Launches[op.Launch]
		k := siteKey{cpu: l.Name, kind: kindGraph}
		if b := c.sites.bestFrame(l.Frame); b >= 0 {
			k.loc = t.Frames[b].Name
		}
		return k
	}
	if op.CPUOp >= 0 && int(op.CPUOp) < len(t.CPUOps) {
		co := &t.CPUOps[op.CPUOp]
		if b := c.sites.bestFrame(co.Frame); b >= 0 && c.sites.info(b).score > scoreNoise {
			return siteKey{loc: t.Frames[b].Name, cpu: co.Name, kind: kindFrame}
		}
		return c.scoped(oi, siteKey{cpu: co.Name, kind: kindUnresolved})
	}
	if op.Launch >= 0 && int(op.Launch) < len(t.Launches) {
		// No CPU op (External id missing): the frames around the launch call still say where.
		l := &t.Launches[op.Launch]
		if b := c.sites.bestFrame(l.Frame); b >= 0 && c.sites.info(b).score > scoreNoise {
			return siteKey{loc: t.Frames[b].Name, cpu: l.Name, kind: kindFrame}
		}
		return c.scoped(oi, siteKey{cpu: l.Name, kind: kindUnresolved})
	}
	return c.scoped(oi, siteKey{kind: kindUnresolved})
}

// scoped replaces an unresolved site by the op's Options.Scopes label when there is one.
func (c *traceCtx) scoped(oi int32, k siteKey) siteKey {
	if oi >= 0 && int(oi) < len(c.scopes) && c.scopes[oi] != 0 {
		k.loc, k.kind = c.scopes[oi], kindScope
	} else if oi < 0 && c.streamScope != 0 {
		k.loc, k.kind = c.streamScope, kindScope
	}
	return k
}

// opStages is Options.Stages when it answers for t, else the stages from annotations.
func (a *analyzer) opStages(t *trace.Trace, ops []int32, dev int32) []string {
	if a.opts.Stages != nil {
		if per := a.opts.Stages(t); per != nil {
			out := make([]string, len(ops))
			for i, oi := range ops {
				if int(oi) < len(per) && per[oi] != "" {
					out[i] = per[oi]
				} else {
					out[i] = StageUnannotated
				}
			}
			return out
		}
	}
	return opStages(t, ops, dev)
}

// resolve turns a site key into display strings.
func (c *traceCtx) resolve(k siteKey) siteKeyS {
	t := c.t
	switch k.kind {
	case kindGraph:
		loc := "graph replay (no Python frame)"
		if k.loc != 0 {
			loc = siteName(t.Name(k.loc))
		}
		return siteKeyS{loc: loc, cpu: t.Name(k.cpu) + " replay (graph)"}
	case kindFrame:
		return siteKeyS{loc: siteName(t.Name(k.loc)), cpu: t.Name(k.cpu)}
	case kindScope:
		cpu := t.Name(k.cpu)
		if cpu == "" {
			cpu = "-"
		}
		return siteKeyS{loc: t.Name(k.loc), cpu: cpu}
	}
	cpu := t.Name(k.cpu)
	if cpu == "" {
		cpu = "-"
	}
	return siteKeyS{loc: "unresolved", cpu: cpu}
}

func (a *analyzer) stage(c *traceCtx, label string, ops []int32, formal bool) stageResult {
	t := c.t
	var aggs []*kagg
	byCanon := make([]*kagg, len(c.names), len(c.names)+16) // canonical id -> aggregate
	iv := &spans{ops: t.GPUOps, idx: ops}
	var total int64
	var first, last int64
	var perStream streamTotals
	for i, oi := range ops {
		op := &t.GPUOps[oi]
		d := op.Dur()
		total += d
		perStream.add(op.Stream, d)
		if i == 0 || op.Start < first {
			first = op.Start
		}
		if i == 0 || op.End > last {
			last = op.End
		}
		cid := c.canonID(op.Name)
		for int(cid) >= len(byCanon) {
			byCanon = append(byCanon, nil)
		}
		g := byCanon[cid]
		if g == nil {
			g = c.newAgg(cid)
			byCanon[cid] = g
			aggs = append(aggs, g)
		}
		if g.add(d, c.opSite(oi)) {
			g.rep, g.repStr = int32(i), op.Stream
		}
		if op.Kind != trace.OpKernel || c.roof != nil {
			if oc, ok := c.roof.opCost(op, g); ok {
				g.roof.add(oc, d)
			}
		}
	}
	closeAggs(aggs)
	res := stageResult{aggs: aggs, main: perStream.main(), stage: Stage{Stage: label, KernelCount: len(ops), KernelTimeUS: us(total)}}
	if len(ops) > 0 {
		res.stage.WindowUS = us(last - first)
	}
	if !formal {
		for _, g := range aggs {
			g.rsites = map[siteKeyS]int64{}
			for k, ns := range g.sites {
				if k.kind == kindFrame {
					g.rsites[c.resolve(k)] += ns
				}
			}
		}
		return res
	}
	// An op's aggregate is looked up again by its name rather than kept per op: every name
	// has its canonical id by now.
	aggOf := func(i int32) *kagg { return byCanon[c.canon[t.GPUOps[ops[i]].Name]] }
	// The overlap sweep with the idle figures and the collectives table are the stage's two
	// largest passes over its ops and share nothing they write (the sweep writes the
	// aggregates' hidden time and its own accumulators, reading the site cache; collectives
	// reads the aggregates' names and categories and builds its own rows and the comm index),
	// so the sweep runs on a goroutine of its own: the analysis after a trace's read is
	// otherwise serial, on one core of two.
	var sw Sweep
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		idle := heldIdle(c, iv, &sw, first)
		sw.sweep(iv, func(i int32, ns int64) { aggOf(i).hidden += ns })
		if len(ops) > 0 {
			res.stage.IdleFigures = idle.heldDone(c, iv, &sw, first, last)
		}
	}()
	res.stage.Collectives, res.comms = collectives(c, ops, aggs, byCanon)
	<-swept
	res.stage.BusyUS = us(sw.BusyNS)
	res.stage.Summary = OverlapTotals{MultiStreamNS: sw.MultiNS, PeakStreams: sw.Peak, Streams: sw.Streams}
	return a.tables(c, res, total, func() map[uint64]int64 { return adjacency(&sw, iv, aggOf) },
		func(g *kagg) string { return depRisk(c, ops, iv, &sw, g.rep) })
}

// tables builds a stage's kernel, overlap and fusion tables from its aggregates (sorted, each
// with its hidden time), whether the stage's ops were held (stage) or streamed (streamDev):
// adj gives the pairs of aggregates' row numbers that ran back to back on a stream, called
// once the rows are numbered, and dep the dependency risk of an aggregate's longest op.
func (a *analyzer) tables(c *traceCtx, res stageResult, total int64, adj func() map[uint64]int64, dep func(g *kagg) string) stageResult {
	aggs, label := res.aggs, res.stage.Stage
	rows := make([]KernelRow, 0, len(aggs))
	a.unmatchedN, a.unmatchedNS = 0, 0
	for i, g := range aggs {
		g.row = i
	}
	pairs := adj()
	for _, g := range aggs {
		row := KernelRow{Name: g.name, lower: g.lower, Category: g.cat, TotalUS: us(g.total), Count: g.count, SharePct: pct(g.total, total), totalNS: g.total, adj: pairs}
		row.Locations = a.locations(c, g, label)
		setRoofline(&row, &g.roof, c.peak)
		if g.roof.ns == 0 && g.count > 0 {
			if mr := a.lookupMappingRoof(label, g); mr != nil {
				ra := mr.scaled(g.count, g.total)
				setRoofline(&row, &ra, c.peak)
				row.RooflineFrom = RooflineFromMapping
			}
		}
		row.Demangled = demangled(g.name)
		rows = append(rows, row)
	}
	if a.unmatchedN > 0 {
		a.warn = append(a.warn, fmt.Sprintf("stage %s: %d kernel names (%.1f%% of kernel time) have no match in the mapping trace and keep the formal trace's graph-replay or unresolved site; first: %s",
			label, a.unmatchedN, pct(a.unmatchedNS, total), a.unmatchedFirst))
	}
	res.stage.Kernels = rows
	res.stage.Overlap = a.overlapRows(aggs, total, rows, dep, res.main)
	res.stage.Fusions = a.catalog().Match(rows, total, a.model, a.tp)
	return res
}
