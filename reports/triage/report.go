// Package triage answers the three questions a performance engineer asks of a GPU trace —
// which kernels dominate, where communication or memory traffic could overlap compute, and
// which known fusion applies — as per-stage kernel, overlap and fusion tables.
//
// It works on the profiler-neutral model of reports/trace, so Kineto (torch profiler) and
// Nsight Systems traces are analysed by the same code; reading a file is injected through
// Options.Open so that this package imports neither reader. Discover finds the traces of a
// run directory (SGLang, SGLang diffusion and vLLM-Omni naming), Analyze builds a Report, and
// Render writes it as text, Markdown, JSON or CSV. The JSON shape is a contract other tools
// read; see Report.
package triage

// Mode values of Report.Mode.
const (
	ModeSingle        = "single"
	ModeMappingFormal = "mapping-formal"
)

// DefaultCutoff is the share (percent of the stage's summed kernel time) below which table rows
// are hidden unless the user asks for a lower cutoff; the anchor used the same 1.0 %.
const DefaultCutoff = 1.0

// Report is the result of one triage. Its JSON encoding is the contract of
// `runner triage --format json`; numbers are unrounded and times are microseconds (float,
// derived from integer nanoseconds only at the output edge).
type Report struct {
	Inputs   []InputInfo `json:"inputs"`
	Mode     string      `json:"mode"`
	Stages   []Stage     `json:"stages"`
	Warnings []string    `json:"warnings"`

	// Optional sections added by the nsys path (another package fills them); absent in
	// torch-profiler reports. Render writes them after the triage tables.
	NVTX      Section `json:"nvtx,omitempty"`
	MemoryOps Section `json:"memory_ops,omitempty"`
	API       Section `json:"api,omitempty"`

	// Ranks compares the ranks of a multi-rank run (absent for one rank).
	Ranks *RankReport `json:"ranks,omitempty"`

	// Diff is the kernel diff against a base triage (`runner triage --diff BASE NEW`: this
	// report is NEW's); absent otherwise. With a diff, Render writes the diff in text, Markdown
	// and CSV, and JSON carries it under "diff" beside this report's own keys.
	Diff *DiffReport `json:"diff,omitempty"`

	// Model and TPSize come from server_args.json; shown in the text/Markdown header only.
	Model  string `json:"-"`
	TPSize int    `json:"-"`
	// Mapping lists the graph-off traces used for Python attribution in mapping-formal mode.
	Mapping []InputInfo `json:"-"`
}

// InputInfo names one analysed trace.
type InputInfo struct {
	Path  string `json:"path"`
	Stage string `json:"stage"`
	// Rank is the TP rank (SGLang) or global rank (diffusion, vLLM-Omni); -1 when unknown.
	Rank int `json:"rank"`
	// Device is the analysed GPU (the one with the largest kernel time unless chosen).
	Device int `json:"device"`
	// GPU is the analysed device's name as the trace gives it; Peak the peak-table entry it
	// matched (absent for a GPU the table does not know: no percentages of peak then).
	GPU  string `json:"gpu,omitempty"`
	Peak *Peak  `json:"peak,omitempty"`
}

// Stage is the triage of one stage (extend, decode, a diffusion pipeline stage, or all).
type Stage struct {
	Stage string `json:"stage"`
	// KernelCount is the number of GPU ops (kernels, memcpys, memsets) in the stage.
	KernelCount int `json:"kernel_count"`
	// KernelTimeUS is the summed duration of those ops: the share denominator of every table
	// (cumulative, so it exceeds BusyUS when streams overlap).
	KernelTimeUS float64 `json:"kernel_time_us"`
	// BusyUS is the union of busy intervals over all streams.
	BusyUS float64 `json:"busy_us"`
	// WindowUS is last end minus first start.
	WindowUS float64      `json:"window_us"`
	Kernels  []KernelRow  `json:"kernels"`
	Overlap  []OverlapRow `json:"overlap"`
	Fusions  []FusionRow  `json:"fusions"`
	// Collectives are the stage's collectives by kind and size (absent without
	// communication kernels; see CollectiveRow).
	Collectives []CollectiveRow `json:"collectives,omitempty"`
	Summary     OverlapTotals   `json:"-"`
	// IdleFigures (idle.go) say where in the window the GPU sat idle and why.
	IdleFigures
}

// OverlapTotals are the stage-wide figures of the stream sweep.
type OverlapTotals struct {
	MultiStreamNS int64 // time during which 2+ streams were busy
	PeakStreams   int   // most streams busy at once
	Streams       int   // distinct streams
}

// KernelRow is one canonical kernel name of a stage.
type KernelRow struct {
	Name      string     `json:"name"`
	Category  string     `json:"category"`
	TotalUS   float64    `json:"total_us"`
	Count     int        `json:"count"`
	SharePct  float64    `json:"share_pct"`
	Locations []Location `json:"locations"`
	// Demangled is Name demangled when Name is a mangled C++ symbol (tables show it); absent
	// otherwise.
	Demangled string `json:"demangled,omitempty"`

	// Roofline figures (roofline.go), over the launches whose CPU op had recorded shapes and
	// a cost formula (RooflineUS of TotalUS), or that carried their own byte counts
	// (memcpy, memset); absent when none did. FLOPs and Bytes are summed over those launches,
	// TFLOPS and GBps are per second of their kernel time, Intensity is FLOPs per byte.
	// PctOfPeak and Bound need the GPU in the peak table: PctOfPeak is the share of the roof
	// the row's intensity allows (the compute peak of its Dtype when compute-bound, the HBM
	// bandwidth when memory-bound).
	FLOPs      float64 `json:"flops,omitempty"`
	Bytes      float64 `json:"bytes,omitempty"`
	RooflineUS float64 `json:"roofline_us,omitempty"`
	TFLOPS     float64 `json:"tflops,omitempty"`
	GBps       float64 `json:"gbps,omitempty"`
	Intensity  float64 `json:"flops_per_byte,omitempty"`
	Dtype      string  `json:"dtype,omitempty"`
	PctOfPeak  float64 `json:"pct_of_peak,omitempty"`
	Bound      string  `json:"bound,omitempty"`
	// RooflineFrom is RooflineFromMapping when the figures are the mapping trace's (two-trace
	// mode: a kernel with no shapes of its own, such as a graph replay, takes the mapping
	// trace's FLOPs and bytes per launch for the same kernel name, over this row's launches and
	// time); absent when they are the row's own.
	RooflineFrom string `json:"roofline_from,omitempty"`

	totalNS int64
	lower   string // Name lower-cased when the analyzer has it (the fusion catalog matches on it)
	// adj counts, per pair of the stage's rows (adjKey), the launches of one that ran directly
	// next to the other on one stream (shared by all rows of the stage); nil when unknown, e.g.
	// for rows built by hand.
	adj map[uint64]int64
}

// AdjacencyWindow is how many following ops on the same stream count as "back to back" for the
// fusion table's split-kernel test (a fusion joins kernels that run next to each other). It is
// 1, the very next launch: with 3, a GELU MLP's activation, its down-projection GEMM and the
// block's gate multiply read as a split SwiGLU.
const AdjacencyWindow = 1

func adjKey(a, b int) uint64 {
	if a > b {
		a, b = b, a
	}
	return uint64(a)<<32 | uint64(uint32(b))
}

// adjacent reports whether rows i and j ran back to back somewhere (true when unknown).
func adjacent(rows []KernelRow, i, j int) bool {
	if i == j || rows[i].adj == nil {
		return true
	}
	return rows[i].adj[adjKey(i, j)] > 0
}

// Location is one Python site of a kernel with the share of the kernel's time spent there.
type Location struct {
	Location string  `json:"location"`
	CPUOp    string  `json:"cpu_op"`
	SharePct float64 `json:"share_pct"`
}

// OverlapRow is one overlap opportunity (or a reason to leave a kernel alone).
type OverlapRow struct {
	Priority       string  `json:"priority"`
	Verdict        string  `json:"verdict"`
	Kernel         string  `json:"kernel"`
	Category       string  `json:"category"`
	TotalUS        float64 `json:"total_us"`
	SharePct       float64 `json:"share_pct"`
	ExclusivePct   float64 `json:"exclusive_pct"`
	HiddenPct      float64 `json:"hidden_pct"`
	DepRisk        string  `json:"dep_risk"`
	Recommendation string  `json:"recommendation"`
	Scope          string  `json:"scope"`
}

// FusionRow is one catalog pattern that matched the stage.
type FusionRow struct {
	Pattern        string   `json:"pattern"`
	Status         string   `json:"status"`
	Confidence     string   `json:"confidence"`
	RelatedUS      float64  `json:"related_us"`
	SharePct       float64  `json:"share_pct"`
	Evidence       []string `json:"evidence"`
	CandidatePaths []string `json:"candidate_paths"`
	Rationale      string   `json:"rationale"`
	// SplitRemaining names the split launches of the family that still run beside its fused
	// kernel ("name ×launches at python/site"); empty unless the status is present.
	SplitRemaining []string `json:"split_remaining,omitempty"`
	// Locations are the Python sites of the evidence kernels (Markdown column only).
	Locations []string `json:"-"`
	// cited are the canonical names of every kernel the row counts (tests check that no kernel
	// is cited by two rows of a stage).
	cited []string
	// citedPct is the share each cited kernel counts for: a split kernel counts only for its
	// launches that ran next to another part of the pattern.
	citedPct []float64
}

func us(ns int64) float64 { return float64(ns) / 1e3 }

func pct(part, whole int64) float64 {
	if whole <= 0 {
		return 0
	}
	return float64(part) * 100 / float64(whole)
}
