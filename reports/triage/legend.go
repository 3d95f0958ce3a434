package triage

import (
	"sort"
	"strings"

	"github.com/sglprof/runner/reports/render/table"
)

// legendText explains every word a triage table uses as a verdict, priority, risk, advice,
// status or confidence ("headroom", "formal", "check deps" were never explained).
// The legend lists only the words the output used, each once.
var legendText = map[string]string{
	"P1": "act first: a large exclusive share (at least 1% of the stage and 10 microseconds summed) with a clear action",
	"P2": "worth a look once the dependencies are checked (at least 1% of the stage and 10 microseconds summed)",
	"P3": "exclusive but small or already low-risk: defer",
	"P4": "little to gain, or the signal is unclear",
	"P5": "below the reporting bar (skip)",

	VerdictHeadroom:   "headroom: the kernel runs alone on the GPU most of its time (exclusive), so hiding it behind other work or removing it would shorten the stage",
	VerdictLowROI:     "low-roi-hidden: a light kernel already hidden behind other streams; moving it gains little",
	VerdictOverlapped: "overlapped: communication already hidden behind compute",

	DepHigh:    "dep risk high: a same-stream neighbour within a tight gap shares its Python scope or is its producer/consumer, so it likely depends on it",
	DepUnclear: "dep risk unclear: a neighbour's Python site is unknown (graph replay or no stack)",
	DepLow:     "dep risk low: no tight same-stream neighbour it seems to depend on",

	RecTryOverlap: "try overlap: run the collective on a side stream behind compute",
	RecTryFusion:  "try fusion: fuse the kernel with its neighbours or pick a faster implementation",
	RecCheckDeps:  "check deps: confirm what the kernel waits on before moving or fusing it",
	RecSkip:       "skip: not worth the effort",
	RecDefer:      "defer: real but small; after the P1/P2 rows",
	RecInspect:    "inspect: look at the trace, the signal is ambiguous",
	RecCopyAsync:  "pin + async copy: use pinned host memory and a non-blocking copy on a side stream, or move the copy out of the step loop; copies are never fused",
	RecCopyPinned: "async or hoist copy: the host memory is already pinned; make the copy non-blocking on a side stream, or move it out of the step loop; copies are never fused",
	RecCopyAvoid:  "avoid or hoist copy: write in place or preallocate, or move the copy/memset out of the step loop",
	RecSideStream: "start earlier: the op already runs on its own stream, not the stage's main compute stream (the stream with the most kernel time), yet is exposed: issue it earlier or overlap it with independent compute on the main stream",

	StatusPresent:   "fused path present: the family's fused kernel runs; any split launches that remain are named",
	StatusAvailable: "split kernels, fusion available: the framework has a fused kernel for these launches",
	StatusUpstream:  "split kernels, fusion upstream: a fused kernel exists upstream or in an open PR, not in this framework version",

	"confidence " + ConfHigh:   "confidence high: the kernels' own names match and their share clears the pattern's bar",
	"confidence " + ConfMedium: "confidence medium: names match, share below the pattern's likely level",
	"confidence " + ConfLow:    "confidence low: some parts matched only through Python locations, or never ran back to back",

	"formal":          "formal trace: in two-trace mode, the trace whose times are reported (a mapping trace only supplies Python locations)",
	"straggler":       "straggler: the rank with the most compute time (busy time minus time in collectives) in a stage, by how much it exceeds the median rank; busy time does not show it, since the other ranks wait for it inside their collectives; the kernels listed are those that ran longer on it than their median",
	"collectives":     "collectives: per kind and size (nccl-tests' S: the larger of one rank's in and out message), algo GB/s = size x count / time and bus GB/s = algo x 2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all, 1 for send/recv and broadcast (n = ranks in the group); with several ranks, time is each instance's shortest kernel over the ranks; skew = latest rank's kernel start minus the earliest's for the same instance (the n-th of its kind and size on each rank), valid only when the ranks' clocks agree (one host, or hosts synchronised well below the skew); A2A imbalance = largest split / mean split",
	"collective wait": "collective wait: a rank's time in communication kernels beyond the least any rank spent in them; a collective ends together on every rank, so the excess is waiting for the slowest rank (HTA's approach)",
	// "sync" explains the Sync column of an nsys input's CUDA API table (the nsys package's
	// SyncKind values: "yes" and "implicit").
	"sync":              "Sync (CUDA API calls): yes = the call waits for the GPU (…Synchronize) or polls it (…Query); implicit = a synchronous copy or memset (cudaMemcpy, cudaMemset, not their …Async forms) or cudaFree, which can block the host until earlier GPU work is done (a copy to pageable host memory returns only when complete; cudaFree synchronises the device); blank = does not wait for the GPU",
	"roof":              "roof: the row's achieved share of the roof its arithmetic intensity (FLOP/B) allows: the dense tensor peak of its operand type when compute-bound, the HBM bandwidth when memory-bound; FLOPs and bytes come from the recorded shapes of the CPU op that launched the kernel (a device-to-device copy counts every byte read and written); \"(of N%)\": the figures cover only that share of the row's time, the launches whose op had recorded shapes and a formula",
	"roof above 100":    "above 100% memory: the model counts every operand byte as HBM traffic; part of them came from the L2 cache (a tensor the previous kernel had just written), so the kernel ran faster than HBM alone allows; it is not a measurement error",
	"roof from mapping": "(mapping) after the roof: this trace recorded no shapes for the row's kernels (a CUDA/HIP graph replay records no CPU op at all); their FLOPs and bytes per launch are the mapping trace's for the same kernel name (taken only where every launch of it there had recorded shapes), applied to this trace's launches and time",
	"link copy":         "GB/s without a roof: a copy to or from the host or another GPU moves its bytes over PCIe, NVLink or host memory, whose peaks the table does not hold; compare it with the link's rated bandwidth",
	"busy":              "busy: union of the stage's GPU busy intervals over all streams; share = % of the summed kernel time",
}

// legend collects the words an output used.
type legend struct{ used map[string]bool }

func (l *legend) use(words ...string) {
	if l.used == nil {
		l.used = map[string]bool{}
	}
	for _, w := range words {
		if _, ok := legendText[w]; ok {
			l.used[w] = true
		}
	}
}

func (l *legend) write(b *strings.Builder, md bool) {
	keys := make([]string, 0, len(l.used))
	for k := range l.used {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		text := legendText[k]
		if strings.HasPrefix(k, "P") && len(k) == 2 {
			text = k + ": " + text
		}
		if md {
			b.WriteString("- " + table.EscapeMarkdown(text) + "\n")
		} else {
			b.WriteString("- " + text + "\n")
		}
	}
}

// unit is one table's time unit (table.TimeUnit, shared with the nsys tables).
type unit = table.TimeUnit

func unitFor(n int, usAt func(i int) float64) unit { return table.TimeUnitFor(n, usAt) }

func maxf(a, b float64) float64 {
	if b > a {
		return b
	}
	return a
}

// distinctShort shortens n names to width for one table, widening the names that would
// otherwise print the same (add and threshold_backward both showed as
// vectorized_elementwise_kernel<…>) until they differ; names equal in full stay equal.
func distinctShort(n int, nameAt func(i int) string, width int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = table.Shorten(nameAt(i), width)
	}
	for w := width; ; w = w * 3 / 2 {
		groups := map[string][]int{}
		for i, s := range out {
			groups[s] = append(groups[s], i)
		}
		clash := false
		for _, idx := range groups {
			if len(idx) < 2 || allSame(idx, nameAt) {
				continue
			}
			clash = true
			for _, i := range idx {
				out[i] = table.Shorten(nameAt(i), w*3/2)
			}
		}
		if !clash || w > 1<<16 {
			return out
		}
	}
}

func allSame(idx []int, nameAt func(i int) string) bool {
	for _, i := range idx[1:] {
		if nameAt(i) != nameAt(idx[0]) {
			return false
		}
	}
	return true
}
