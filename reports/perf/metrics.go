package perf

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sglprof/runner/plans/infile"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/reports/stats"
)

// Metric names. A stage metric is StagePrefix + the stage's class name
// ("stage/DenoisingStage"). Every metric of a configuration is a list of samples: one per
// cell for e2e, stages, the mean denoise step and peak memory; one per denoising step of every
// cell for denoise_step; one per request for request_latency. Config.Runs holds one value per
// cell (run) of every metric: the median of that cell's samples.
const (
	MetricE2E            = "e2e"
	MetricDenoiseStep    = "denoise_step"
	MetricDenoiseMean    = "denoise_mean"
	MetricPeakMemory     = "peak_memory"
	MetricRequestLatency = "request_latency"
	StagePrefix          = "stage/"

	// LLM serve cells (runner/load, bench_serving's definitions): one sample per request
	// for ttft and tpot, one per generated token after the first for itl, one per cell for the
	// output token throughput and the goodput.
	MetricTTFT             = "ttft"
	MetricTPOT             = "tpot"
	MetricITL              = "itl"
	MetricOutputThroughput = "output_throughput"
	MetricGoodput          = "goodput"
)

// Units of metric samples: times are nanoseconds (as float64, because the statistics work on
// float64), memory is MB as sglang reports it.
const (
	UnitNS       = "ns"
	UnitMB       = "MB"
	UnitTokensPS = "tok/s"
	UnitReqPS    = "req/s"
)

// Unit returns the unit of a metric's samples.
func Unit(metric string) string {
	switch metric {
	case MetricPeakMemory:
		return UnitMB
	case MetricOutputThroughput:
		return UnitTokensPS
	case MetricGoodput:
		return UnitReqPS
	}
	return UnitNS
}

// HigherIsBetter reports whether a rise of the metric is an improvement (throughput, goodput)
// rather than a regression (every time and memory).
func HigherIsBetter(metric string) bool {
	return metric == MetricOutputThroughput || metric == MetricGoodput
}

// Class maps a metric to its tolerance class, the metric names of the plan's
// [compare.tolerances] (plans.CompareMetrics): e2e, denoise_stage, non_denoise_stage,
// denoise_step, denoise_mean (SGLang's "denoise_agg"), peak_memory (SGLang's
// "runtime_peak_vram") and request_latency for serve cells.
func Class(metric string) string {
	switch {
	case metric == MetricE2E:
		return "e2e"
	case metric == MetricDenoiseStep:
		return "denoise_step"
	case metric == MetricDenoiseMean:
		return "denoise_mean"
	case metric == MetricPeakMemory:
		return "peak_memory"
	case metric == MetricRequestLatency:
		return "request_latency"
	case metric == MetricTTFT, metric == MetricTPOT, metric == MetricITL, metric == MetricGoodput:
		return metric
	case metric == MetricOutputThroughput:
		return "throughput"
	case strings.HasPrefix(metric, StagePrefix) && strings.Contains(strings.ToLower(metric), "denois"):
		return "denoise_stage"
	case strings.HasPrefix(metric, StagePrefix):
		return "non_denoise_stage"
	}
	return metric
}

// DefaultProfilers are the profilers whose cells enter a comparison by default: only the
// unprofiled timing pass, because the torch profiler and nsys lengthen every stage by an
// amount that depends on what they record.
var DefaultProfilers = []string{"none"}

// Config is one configuration (cell key) of one side of a comparison, with the samples of
// every repeat of that configuration pooled.
type Config struct {
	Key string `json:"key"`
	// Cells are the IDs of the cells whose samples are pooled here.
	Cells []string `json:"cells"`
	// Metrics maps a metric name to its samples (see Unit), every repeat's pooled.
	Metrics map[string][]float64 `json:"metrics"`
	// Runs maps a metric name to one value per cell (repeat) that measured it: the median of
	// that cell's samples (the sample itself for e2e, stages, denoise_mean, peak memory). The
	// denoising steps or requests of one run share that run's machine state, so they are not
	// independent samples of what another run would measure; the runs are, and comparisons test
	// these.
	Runs map[string][]float64 `json:"runs,omitempty"`
	// Steps holds the denoising-step samples by step index, for the per-step chart.
	Steps [][]float64 `json:"steps,omitempty"`
	// Notes say what this configuration lacks (an old perf dump without denoise_steps_ms).
	Notes []string `json:"notes,omitempty"`
	// TopKernels are the kernel shares from the triage of the configuration's first triaged
	// cell (profiled cells only; they are kept even though their timings are not pooled).
	TopKernels []KernelShare `json:"top_kernels,omitempty"`

	stageSeq []string // stage metrics in first-seen (pipeline) order
}

// KernelShare is what a comparison shows of one of a cell's top kernels: rundir.KernelShare
// (result.json's top_kernels) without the total time, which does not pool across cells.
type KernelShare struct {
	Name     string  `json:"name"`
	Category string  `json:"category"`
	SharePct float64 `json:"share_pct"`
	// Roof is the kernel's roofline figures (result.json's), nil without recorded shapes.
	Roof *rundir.Roof `json:"roofline,omitempty"`
}

// kernelShares keeps of result.json's top kernels what a comparison shows.
func kernelShares(ks []rundir.KernelShare) []KernelShare {
	if ks == nil {
		return nil
	}
	out := make([]KernelShare, len(ks))
	for i, k := range ks {
		out[i] = KernelShare{Name: k.Name, Category: k.Category, SharePct: k.SharePct, Roof: k.Roof}
	}
	return out
}

// MetricNames returns the metric names of c in report order: e2e, stages in first-seen order
// of the pipeline, the denoise metrics, peak memory, request latency. Each name's sort key is
// computed once (a dump can hold 100k stages; searching the stage list inside the comparison
// made this quadratic).
func (c *Config) MetricNames() []string {
	order := make(map[string]int, len(c.stageSeq))
	for i, n := range c.stageSeq {
		if _, dup := order[n]; !dup {
			order[n] = i
		}
	}
	type named struct {
		name        string
		rank, stage int
	}
	ms := make([]named, 0, len(c.Metrics))
	for m := range c.Metrics {
		e := named{name: m, rank: metricRank(m)}
		if e.rank == 1 {
			e.stage = len(c.stageSeq)
			if i, ok := order[m]; ok {
				e.stage = i
			}
		}
		ms = append(ms, e)
	}
	sort.Slice(ms, func(i, j int) bool {
		a, b := ms[i], ms[j]
		if a.rank != b.rank {
			return a.rank < b.rank
		}
		if a.stage != b.stage {
			return a.stage < b.stage
		}
		return a.name < b.name
	})
	out := make([]string, len(ms))
	for i, e := range ms {
		out[i] = e.name
	}
	return out
}

// metricRank is a metric's group in report order.
func metricRank(m string) int {
	switch {
	case m == MetricE2E:
		return 0
	case strings.HasPrefix(m, StagePrefix):
		return 1
	case m == MetricDenoiseMean:
		return 2
	case m == MetricDenoiseStep:
		return 3
	case m == MetricPeakMemory:
		return 4
	}
	return 5
}

// Skip is a cell left out of the comparison and why.
type Skip struct {
	Cell   string `json:"cell"`
	Key    string `json:"key,omitempty"` // the configuration, when result.json names it
	Reason string `json:"reason"`
}

// Set is one side of a comparison: the configurations of a run directory, a cell directory or
// a perf dump, with where they came from.
type Set struct {
	Source  string             `json:"source"`
	Kind    string             `json:"kind"` // run, cell, perf-dump
	RunID   string             `json:"run_id,omitempty"`
	Plan    string             `json:"plan,omitempty"`
	Start   time.Time          `json:"start,omitzero"`
	GPU     string             `json:"gpu,omitempty"`
	Driver  string             `json:"driver,omitempty"`
	Commit  string             `json:"commit,omitempty"`
	Configs map[string]*Config `json:"configs"`
	Skipped []Skip             `json:"skipped,omitempty"`

	kernels map[string][]KernelShare // top kernels of profiled cells, by key, until finish
}

// Keys returns the configuration keys in sorted order.
func (s *Set) Keys() []string {
	keys := make([]string, 0, len(s.Configs))
	for k := range s.Configs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// LoadOptions choose which cells enter a Set.
type LoadOptions struct {
	// Profilers whose cells are pooled; nil means DefaultProfilers. "all" admits every
	// profiler.
	Profilers []string
}

func (o LoadOptions) admits(profiler string) bool {
	ps := o.Profilers
	if len(ps) == 0 {
		ps = DefaultProfilers
	}
	for _, p := range ps {
		if p == "all" || p == profiler {
			return true
		}
	}
	return false
}

// ErrInProgress is returned (wrapped) for a run directory whose run has not finished.
var ErrInProgress = errors.New("run still in progress")

// Load reads one side of a comparison: a run directory (with summary.json), a cell directory
// (with result.json), a result.json or a perf-dump JSON file.
func Load(path string, opts LoadOptions) (*Set, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w; expected a run directory, a cell directory or a perf-dump JSON file", err)
	}
	if !st.IsDir() {
		if filepath.Base(path) == rundir.ResultFile {
			return loadCellDir(filepath.Dir(path), opts)
		}
		d, err := ReadDumpFile(path)
		if err != nil {
			return nil, err
		}
		s := &Set{Source: path, Kind: "perf-dump", Commit: commitOf(d), Configs: map[string]*Config{}}
		key := d.Model
		if key == "" {
			key = "perf-dump"
		}
		c := newConfig(key)
		run := c.beginRun()
		c.addDump(d)
		c.endRun(run)
		c.Cells = []string{filepath.Base(path)}
		s.Configs[key] = c
		return s, nil
	}
	if exists(filepath.Join(path, rundir.CellsFile)) || exists(filepath.Join(path, rundir.SummaryJSON)) {
		return loadRunDir(path, opts)
	}
	if exists(filepath.Join(path, rundir.ResultFile)) {
		return loadCellDir(path, opts)
	}
	if exists(filepath.Join(path, rundir.PerfFile)) {
		return Load(filepath.Join(path, rundir.PerfFile), opts)
	}
	return nil, fmt.Errorf("%s has no summary.json, cells.json, result.json or perf.json; expected a run directory, a cell directory or a perf-dump JSON file", path)
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func loadRunDir(dir string, opts LoadOptions) (*Set, error) {
	if !exists(filepath.Join(dir, rundir.SummaryJSON)) {
		return nil, fmt.Errorf("%s: %w: it has no summary.json yet; wait for `runner run` to finish, or finish it with `runner run --resume %s`", dir, ErrInProgress, dir)
	}
	s := &Set{Source: dir, Kind: "run", RunID: filepath.Base(filepath.Clean(dir)), Configs: map[string]*Config{}}
	if man, err := rundir.ReadManifest(dir); err == nil {
		s.Plan, s.Start = man.Plan, man.Start
		if len(man.GPUs) > 0 {
			s.GPU, s.Driver = man.GPUs[0].Name, man.GPUs[0].Driver
		} else if man.Simulated {
			s.GPU = "simulated"
		}
	}
	var cells []string
	if cf, err := rundir.ReadCells(dir); err == nil {
		for _, c := range cf.Cells {
			cells = append(cells, filepath.Join(dir, c.Dir))
		}
	} else {
		ents, err := os.ReadDir(filepath.Join(dir, rundir.CellsDir))
		if err != nil {
			return nil, fmt.Errorf("%s: %w; is this a run directory?", dir, err)
		}
		for _, e := range ents {
			if e.IsDir() {
				cells = append(cells, rundir.CellDir(dir, e.Name()))
			}
		}
	}
	for _, cd := range cells {
		if err := s.addCell(cd, opts); err != nil {
			return nil, err
		}
	}
	s.finish()
	return s, nil
}

func loadCellDir(dir string, opts LoadOptions) (*Set, error) {
	s := &Set{Source: dir, Kind: "cell", Configs: map[string]*Config{}}
	// A cell directory named on the command line is compared whatever its profiler: the user
	// chose it explicitly.
	if err := s.addCell(dir, LoadOptions{Profilers: []string{"all"}}); err != nil {
		return nil, err
	}
	if len(s.Configs) == 0 {
		if len(s.Skipped) > 0 {
			return nil, fmt.Errorf("%s cannot be compared: %s", dir, s.Skipped[0].Reason)
		}
	}
	s.finish()
	return s, nil
}

// addCell pools one cell directory's samples into s, or records why it is skipped.
func (s *Set) addCell(cd string, opts LoadOptions) error {
	id := filepath.Base(cd)
	r, err := rundir.ReadResult(cd)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			s.Skipped = append(s.Skipped, Skip{Cell: id, Reason: "no result.json (the cell has not run; the run was interrupted or is still in progress)"})
			return nil
		}
		return fmt.Errorf("cell %s: %w", id, err)
	}
	if r.ID != "" {
		id = r.ID
	}
	switch {
	case r.Verdict != "ok":
		s.Skipped = append(s.Skipped, Skip{Cell: id, Key: r.Key, Reason: fmt.Sprintf("verdict %q: only ok cells are compared", r.Verdict)})
		return nil
	case !opts.admits(r.Profiler):
		if c := s.Configs[r.Key]; c != nil && len(c.TopKernels) == 0 {
			c.TopKernels = kernelShares(r.TopKernels)
		} else if c == nil && len(r.TopKernels) > 0 {
			s.pendingKernels(r.Key, kernelShares(r.TopKernels))
		}
		s.Skipped = append(s.Skipped, Skip{Cell: id, Key: r.Key, Reason: fmt.Sprintf("profiler %q distorts timings; only %s cells are compared (--profilers all admits them)", r.Profiler, strings.Join(profilersOf(opts), ","))})
		return nil
	case r.Timings.E2ENS == 0 && len(r.Timings.Stages) == 0 && !exists(filepath.Join(cd, rundir.RequestsFile)):
		s.Skipped = append(s.Skipped, Skip{Cell: id, Key: r.Key, Reason: "no timings in result.json (sglang wrote no perf dump)"})
		return nil
	}
	key := r.Key
	if key == "" {
		key = id
	}
	c := s.Configs[key]
	if c == nil {
		c = newConfig(key)
		s.Configs[key] = c
	}
	c.Cells = append(c.Cells, id)
	if len(c.TopKernels) == 0 {
		c.TopKernels = kernelShares(r.TopKernels)
	}
	run := c.beginRun()
	defer c.endRun(run)
	t := r.Timings
	if t.E2ENS > 0 {
		c.add(MetricE2E, float64(t.E2ENS))
	}
	for _, st := range t.Stages {
		c.add(StagePrefix+st.Name, float64(st.NS))
	}
	if len(t.DenoiseStepsNS) > 0 {
		steps := make([]time.Duration, len(t.DenoiseStepsNS))
		for i, v := range t.DenoiseStepsNS {
			steps[i] = time.Duration(v)
		}
		c.addSteps(steps)
	} else if t.PerfDumpSchema != "" {
		// Serve cells have no perf dump at all (their timings are the requests'); only a dump
		// that lacks the steps is worth a note.
		c.note(fmt.Sprintf("%s: the perf dump has no per-step times (schema %q: an sglang build older than PR #15397 wrote no denoise_steps_ms); denoise_step and denoise_mean are missing", key, t.PerfDumpSchema))
	}
	if t.PeakMemoryMB > 0 {
		c.add(MetricPeakMemory, t.PeakMemoryMB)
	}
	if lat, err := readRequests(filepath.Join(cd, rundir.RequestsFile)); err != nil {
		return fmt.Errorf("cell %s: %w", id, err)
	} else {
		for _, v := range lat {
			c.add(MetricRequestLatency, v)
		}
	}
	if err := c.addLLM(cd, r); err != nil {
		return fmt.Errorf("cell %s: %w", id, err)
	}
	if s.Commit == "" {
		if d, err := ReadDumpFile(filepath.Join(cd, rundir.PerfFile)); err == nil {
			s.Commit = commitOf(d)
		}
	}
	return nil
}

func profilersOf(o LoadOptions) []string {
	if len(o.Profilers) == 0 {
		return DefaultProfilers
	}
	return o.Profilers
}

// pending top kernels of profiled cells whose configuration has no timing cell yet.
func (s *Set) pendingKernels(key string, k []KernelShare) {
	if s.kernels == nil {
		s.kernels = map[string][]KernelShare{}
	}
	if _, ok := s.kernels[key]; !ok {
		s.kernels[key] = k
	}
}

func (s *Set) finish() {
	for key, k := range s.kernels {
		if c := s.Configs[key]; c != nil && len(c.TopKernels) == 0 {
			c.TopKernels = k
		}
	}
	s.kernels = nil
	for _, c := range s.Configs {
		sort.Strings(c.Cells)
	}
}

func commitOf(d *Dump) string {
	if d.CommitHash == "" || d.CommitHash == "N/A" {
		return ""
	}
	return d.CommitHash
}

func newConfig(key string) *Config {
	return &Config{Key: key, Metrics: map[string][]float64{}}
}

func (c *Config) add(metric string, v float64) {
	if strings.HasPrefix(metric, StagePrefix) {
		if _, ok := c.Metrics[metric]; !ok {
			c.stageSeq = append(c.stageSeq, metric)
		}
	}
	c.Metrics[metric] = append(c.Metrics[metric], v)
}

// RunValues returns the per-run values of metric (Runs), falling back to its samples for a
// Config built without runs (a test's, or a dump read by an older runner).
func (c *Config) RunValues(metric string) []float64 {
	if v, ok := c.Runs[metric]; ok {
		return v
	}
	return c.Metrics[metric]
}

// beginRun notes how many samples each metric has before one cell's samples are added.
func (c *Config) beginRun() map[string]int {
	n := make(map[string]int, len(c.Metrics))
	for m, v := range c.Metrics {
		n[m] = len(v)
	}
	return n
}

// endRun adds one run value to Runs for every metric the cell added samples to since
// beginRun: the median of those samples.
func (c *Config) endRun(before map[string]int) {
	for m, v := range c.Metrics {
		added := v[before[m]:]
		if len(added) == 0 {
			continue
		}
		if c.Runs == nil {
			c.Runs = map[string][]float64{}
		}
		c.Runs[m] = append(c.Runs[m], stats.Median(stats.Sorted(added)))
	}
}

func (c *Config) note(n string) {
	for _, x := range c.Notes {
		if x == n {
			return
		}
	}
	c.Notes = append(c.Notes, n)
}

func (c *Config) addSteps(steps []time.Duration) {
	var sum time.Duration
	for i, d := range steps {
		c.add(MetricDenoiseStep, float64(d))
		for len(c.Steps) <= i {
			c.Steps = append(c.Steps, nil)
		}
		c.Steps[i] = append(c.Steps[i], float64(d))
		sum += d
	}
	c.add(MetricDenoiseMean, float64(sum/time.Duration(len(steps))))
}

// addDump pools one perf dump.
func (c *Config) addDump(d *Dump) {
	c.add(MetricE2E, float64(d.Total))
	for _, st := range d.Stages {
		c.add(StagePrefix+st.Name, float64(st.Dur))
	}
	if len(d.DenoiseSteps) > 0 {
		c.addSteps(d.DenoiseSteps)
	} else {
		c.note(fmt.Sprintf("the perf dump has no per-step times (schema %q: an sglang build older than PR #15397 wrote no denoise_steps_ms); denoise_step and denoise_mean are missing", d.Schema))
	}
	if m := d.PeakMemoryMB(); m > 0 {
		c.add(MetricPeakMemory, m)
	}
}

// readRequests reads the request latencies of a serve cell from requests.jsonl, one JSON object
// per request (runner/load's Record). The latency is taken from latency_ns, latency_ms or
// e2e_latency_ms (the first present); warmup requests, requests with a non-empty "error", a
// status outside 2xx or "ok": false are left out. A missing file is no requests, not an error.
func readRequests(path string) ([]float64, error) {
	f, err := infile.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	defer f.Close()
	var out []float64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		b := strings.TrimSpace(sc.Text())
		if b == "" {
			continue
		}
		var rec map[string]json.RawMessage
		if err := json.Unmarshal([]byte(b), &rec); err != nil {
			return nil, fmt.Errorf("%s:%d: not a JSON object: %w", path, line, err)
		}
		if e, ok := rec["error"]; ok && string(e) != "null" && string(e) != `""` {
			continue
		}
		if ok, has := rec["ok"]; has && string(ok) == "false" {
			continue
		}
		if w, has := rec["warmup"]; has && string(w) == "true" {
			continue // warmup requests are discarded, as the load generator's summary does
		}
		if st, has := rec["status"]; has {
			if code, err := strconv.Atoi(strings.TrimSpace(string(st))); err != nil || code < 200 || code > 299 {
				continue // no HTTP response, or an error status
			}
		}
		v, found, err := latencyOf(rec)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		if found {
			out = append(out, v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

func latencyOf(rec map[string]json.RawMessage) (float64, bool, error) {
	if raw, ok := rec["latency_ns"]; ok {
		n, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		if err != nil || n < 0 {
			return 0, false, fmt.Errorf("latency_ns = %s; expected a non-negative integer", raw)
		}
		return float64(n), true, nil
	}
	for _, k := range []string{"latency_ms", "e2e_latency_ms"} {
		if raw, ok := rec[k]; ok {
			d, err := parseMS(strings.TrimSpace(string(raw)))
			if err != nil {
				return 0, false, fmt.Errorf("%s: %w", k, err)
			}
			return float64(d), true, nil
		}
	}
	return 0, false, nil
}

// addLLM adds an LLM serve cell's streaming metrics: per-request TTFT and TPOT and every ITL from
// its llm_requests.jsonl (completed requests only), and the cell's output throughput and goodput
// (with an SLO) from result.json.
func (c *Config) addLLM(cellDir string, r *rundir.CellResult) error {
	if r.Serve == nil || r.Serve.LLM == nil {
		return nil
	}
	l := r.Serve.LLM
	if l.OutputThroughput > 0 {
		c.add(MetricOutputThroughput, l.OutputThroughput)
	}
	if l.SLO != nil {
		c.add(MetricGoodput, l.Goodput)
	}
	path := filepath.Join(cellDir, rundir.LLMRecordsFile)
	f, err := infile.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 64<<20)
	for line := 1; sc.Scan(); line++ {
		// runner/load's Record; run directories written before it had the request's
		// end-to-end latency as e2e_ns.
		var rec struct {
			TTFT    int64   `json:"ttft_ns"`
			Latency *int64  `json:"latency_ns"`
			E2E     int64   `json:"e2e_ns"`
			ITL     []int64 `json:"itl_ns"`
			Output  int     `json:"output_tokens"`
			Error   string  `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return fmt.Errorf("%s:%d: not a request record: %w", path, line, err)
		}
		if rec.Error != "" {
			continue
		}
		if rec.Latency != nil {
			rec.E2E = *rec.Latency
		}
		c.add(MetricTTFT, float64(rec.TTFT))
		if rec.Output > 1 {
			c.add(MetricTPOT, float64(rec.E2E-rec.TTFT)/float64(rec.Output-1))
		}
		for _, v := range rec.ITL {
			c.add(MetricITL, float64(v))
		}
	}
	return sc.Err()
}
