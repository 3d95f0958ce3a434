package nsysdb

import (
	"cmp"
	"io"
	"slices"
	"strings"

	"github.com/sglprof/runner/reports/render/table"
	"github.com/sglprof/runner/reports/trace"
)

// NVTXRange is one row of the NVTX range summary: every instance of a range name, its CPU-side
// duration statistics, and the GPU time of the ops launched inside it.
type NVTXRange struct {
	Range   string `json:"range"`
	Domain  string `json:"domain,omitempty"`
	Count   int    `json:"count"`
	TotalNS int64  `json:"total_ns"`
	MeanNS  int64  `json:"mean_ns"`
	MinNS   int64  `json:"min_ns"`
	MaxNS   int64  `json:"max_ns"`
	// GPUTimeNS sums the durations of the GPU ops whose launch call started inside an instance
	// of the range on the same thread (nested instances of the same name count their ops twice).
	GPUTimeNS int64 `json:"gpu_time_inside_ns"`
}

// NVTXSummary summarises the captured NVTX ranges by (domain, text), sorted by total time.
// It works on any Capture; Kineto traces have no Capture, but their user annotations can be
// summarised the same way through a Capture built by hand.
func NVTXSummary(c *Capture) []NVTXRange {
	t := c.Trace
	if c.nvtx != nil {
		return sortNVTX(c.nvtx.summary(t))
	}
	gpu := gpuTimeInside(t)
	type key struct {
		domain string
		name   trace.NameID
	}
	idx := map[key]int{}
	var rows []NVTXRange
	for i := range t.Annotations {
		a := &t.Annotations[i]
		if a.GPU {
			continue
		}
		domain := ""
		if i < len(c.Ranges) {
			domain = c.Ranges[i].Domain
		}
		k := key{domain, a.Name}
		j, ok := idx[k]
		if !ok {
			j = len(rows)
			idx[k] = j
			rows = append(rows, NVTXRange{Range: t.Name(a.Name), Domain: domain, MinNS: a.End - a.Start})
		}
		d := a.End - a.Start
		r := &rows[j]
		r.Count++
		r.TotalNS += d
		r.MinNS = min(r.MinNS, d)
		r.MaxNS = max(r.MaxNS, d)
		r.GPUTimeNS += gpu[i]
	}
	return sortNVTX(rows)
}

// sortNVTX fills in the means and sorts the rows by total time, then domain and name.
func sortNVTX(rows []NVTXRange) []NVTXRange {
	for i := range rows {
		rows[i].MeanNS = rows[i].TotalNS / int64(rows[i].Count)
	}
	slices.SortStableFunc(rows, func(a, b NVTXRange) int {
		if c := cmp.Compare(b.TotalNS, a.TotalNS); c != 0 {
			return c
		}
		return cmp.Compare(a.Domain+":"+a.Range, b.Domain+":"+b.Range)
	})
	return rows
}

// RangeKey is the name and domain ("" for the default one) of NVTX range key k of a streamed
// export, as OpStream.EachScoped hands keys over (k below RangeKeys).
func (c *Capture) RangeKey(k int32) (name trace.NameID, domain string) {
	return c.nvtx.keys[k].name, c.nvtx.domains[k]
}

// RangeKeys is the number of NVTX range keys of a streamed export (see RangeKey); 0 for a
// ReadCapture capture, whose ranges are Trace.Annotations.
func (c *Capture) RangeKeys() int {
	if c.nvtx == nil {
		return 0
	}
	return len(c.nvtx.keys)
}

// gpuTimeInside returns, per annotation, the GPU time of ops launched inside it on its thread:
// per thread, launches sorted by start with prefix sums of their GPU time, then two binary
// searches per range.
func gpuTimeInside(t *trace.Trace) []int64 {
	if len(t.Annotations) == 0 {
		return nil
	}
	perLaunch := make([]int64, len(t.Launches))
	for i := range t.GPUOps {
		if l := t.GPUOps[i].Launch; l != trace.NoID && int(l) < len(perLaunch) {
			perLaunch[l] += t.GPUOps[i].Dur()
		}
	}
	type key struct{ pid, tid int32 }
	type lane struct {
		starts []int64
		prefix []int64 // prefix[i] = GPU time of launches [0, i)
	}
	lanes := map[key]*lane{}
	order := make([]int32, 0, len(t.Launches))
	for i := range t.Launches {
		if perLaunch[i] > 0 {
			order = append(order, int32(i))
		}
	}
	byStart := func(a, b int32) int { return cmp.Compare(t.Launches[a].Start, t.Launches[b].Start) }
	if !slices.IsSortedFunc(order, byStart) { // calls are mostly stored in time order
		slices.SortFunc(order, byStart)
	}
	for _, li := range order {
		l := &t.Launches[li]
		k := key{l.PID, l.TID}
		ln := lanes[k]
		if ln == nil {
			ln = &lane{prefix: []int64{0}}
			lanes[k] = ln
		}
		ln.starts = append(ln.starts, l.Start)
		ln.prefix = append(ln.prefix, ln.prefix[len(ln.prefix)-1]+perLaunch[li])
	}
	out := make([]int64, len(t.Annotations))
	for i := range t.Annotations {
		a := &t.Annotations[i]
		ln := lanes[key{a.PID, a.TID}]
		if ln == nil || a.GPU {
			continue
		}
		lo, _ := slices.BinarySearch(ln.starts, a.Start)
		hi, found := slices.BinarySearch(ln.starts, a.End)
		for found && hi < len(ln.starts) && ln.starts[hi] == a.End {
			hi++ // a launch starting exactly at the range end is still inside it
		}
		out[i] = ln.prefix[hi] - ln.prefix[lo]
	}
	return out
}

// MemoryOp is one row of the memory-operation summary: one kind of copy (or memset) with its
// bytes and achieved bandwidth.
type MemoryOp struct {
	Operation string  `json:"operation"`
	Count     int     `json:"count"`
	Bytes     int64   `json:"bytes"`
	TotalNS   int64   `json:"total_ns"`
	MeanNS    int64   `json:"mean_ns"`
	GBps      float64 `json:"gb_per_s"` // bytes / total time, in 10^9 bytes per second
}

// MemorySummary groups memcpy and memset ops by operation name (nsys names carry the copy kind:
// "[CUDA memcpy Host-to-Device]"), sorted by total time.
func MemorySummary(t *trace.Trace) []MemoryOp {
	idx := map[trace.NameID]int{}
	var rows []MemoryOp
	for i := range t.GPUOps {
		op := &t.GPUOps[i]
		if op.Kind == trace.OpKernel {
			continue
		}
		j, ok := idx[op.Name]
		if !ok {
			j = len(rows)
			idx[op.Name] = j
			rows = append(rows, MemoryOp{Operation: t.Name(op.Name)})
		}
		r := &rows[j]
		r.Count++
		r.Bytes += op.Bytes
		r.TotalNS += op.Dur()
	}
	for i := range rows {
		r := &rows[i]
		r.MeanNS = r.TotalNS / int64(r.Count)
		if r.TotalNS > 0 {
			r.GBps = float64(r.Bytes) / float64(r.TotalNS) // bytes per ns == GB/s
		}
	}
	slices.SortStableFunc(rows, func(a, b MemoryOp) int {
		if c := cmp.Compare(b.TotalNS, a.TotalNS); c != 0 {
			return c
		}
		return strings.Compare(a.Operation, b.Operation)
	})
	return rows
}

// APICall is one row of the CUDA API summary.
type APICall struct {
	Name    string  `json:"name"`
	Calls   int     `json:"calls"`
	TotalNS int64   `json:"total_ns"`
	MeanNS  int64   `json:"mean_ns"`
	MinNS   int64   `json:"min_ns"`
	MaxNS   int64   `json:"max_ns"`
	Percent float64 `json:"percent"` // of the summed time of all API calls
	// Sync marks calls that block, or can block, the host on the GPU: explicit ones
	// (cudaStreamSynchronize, ...) and implicit ones (a synchronous cudaMemcpy or cudaMemset,
	// cudaFree); see SyncKind. Time spent there is the host waiting, not launch overhead.
	Sync bool `json:"sync"`
}

// APISummary returns the top API calls by total time (all of them when top <= 0), runtime and
// driver calls alike, synchronisation included.
func APISummary(t *trace.Trace, top int) []APICall {
	idx := map[trace.NameID]int{}
	var rows []APICall
	var total int64
	for i := range t.Launches {
		l := &t.Launches[i]
		d := l.End - l.Start
		total += d
		j, ok := idx[l.Name]
		if !ok {
			j = len(rows)
			idx[l.Name] = j
			name := t.Name(l.Name)
			rows = append(rows, APICall{Name: name, MinNS: d, Sync: IsSyncAPI(name)})
		}
		r := &rows[j]
		r.Calls++
		r.TotalNS += d
		r.MinNS = min(r.MinNS, d)
		r.MaxNS = max(r.MaxNS, d)
	}
	return finishAPI(rows, total, top)
}

// apiFromStats is APISummary over the per-name aggregates of a SummariseAPI read.
func apiFromStats(c *Capture, top int) []APICall {
	rows := make([]APICall, 0, len(c.APIStats))
	var total int64
	for _, st := range c.APIStats {
		if st.Calls == 0 {
			continue
		}
		name := c.Trace.Name(st.Name)
		rows = append(rows, APICall{Name: name, Calls: st.Calls, TotalNS: st.TotalNS, MinNS: st.MinNS, MaxNS: st.MaxNS, Sync: IsSyncAPI(name)})
		total += st.TotalNS
	}
	return finishAPI(rows, total, top)
}

// finishAPI fills means and shares, sorts by total time and keeps the top rows.
func finishAPI(rows []APICall, total int64, top int) []APICall {
	for i := range rows {
		r := &rows[i]
		r.MeanNS = r.TotalNS / int64(r.Calls)
		if total > 0 {
			r.Percent = 100 * float64(r.TotalNS) / float64(total)
		}
	}
	slices.SortStableFunc(rows, func(a, b APICall) int {
		if c := cmp.Compare(b.TotalNS, a.TotalNS); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	if top > 0 && len(rows) > top {
		rows = rows[:top]
	}
	return rows
}

// Tables are the nsys-only tables of a triage, under the JSON keys the triage output uses.
type Tables struct {
	NVTX      []NVTXRange `json:"nvtx"`
	MemoryOps []MemoryOp  `json:"memory_ops"`
	API       []APICall   `json:"api"`
}

// Summaries computes the three nsys-only tables; apiTop limits the API table (0 keeps all).
// The API table comes from Capture.APIStats after a SummariseAPI read, else from every launch.
func Summaries(c *Capture, apiTop int) Tables {
	var api []APICall
	if c.apiSummarised {
		api = apiFromStats(c, apiTop)
	} else {
		api = APISummary(c.Trace, apiTop)
	}
	return Tables{NVTX: NVTXSummary(c), MemoryOps: MemorySummary(c.Trace), API: api}
}

// Render writes the three tables in one format, separated by blank lines.
func (t Tables) Render(w io.Writer, f table.Format) error {
	for i, tb := range []*table.Table{NVTXTable(t.NVTX), MemoryTable(t.MemoryOps), APITable(t.API)} {
		if i > 0 {
			if _, err := io.WriteString(w, "\n"); err != nil {
				return err
			}
		}
		if err := table.Write(w, f, tb); err != nil {
			return err
		}
	}
	return nil
}
