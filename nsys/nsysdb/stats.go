package nsysdb

import (
	"cmp"
	"math"
	"slices"
	"strings"

	"github.com/sglprof/runner/reports/stats"
	"github.com/sglprof/runner/reports/trace"
)

// StatsRow is one row of an `nsys stats`-style summary. Float columns are rounded to one
// decimal, as nsys's report SQL does (round(x, 1)).
type StatsRow struct {
	TimePct   float64 `json:"time_pct"`
	TotalNS   int64   `json:"total_ns"`
	Instances int64   `json:"instances"`
	AvgNS     float64 `json:"avg_ns"`
	MedNS     float64 `json:"med_ns"`
	MinNS     int64   `json:"min_ns"`
	MaxNS     int64   `json:"max_ns"`
	StdDevNS  float64 `json:"stddev_ns"`
	Style     string  `json:"style,omitempty"` // nvtx_sum only: PushPop or StartEnd
	Name      string  `json:"name"`
}

// StatsReport is one `nsys stats` report computed from the trace: its report id
// (cuda_gpu_kern_sum, cuda_api_sum, nvtx_sum), nsys's CSV headers, and the rows.
type StatsReport struct {
	Report  string     `json:"report"`
	Title   string     `json:"title"`
	Headers []string   `json:"headers"`
	Rows    []StatsRow `json:"rows"`
}

// The CSV headers `nsys stats --format csv` prints in default (ns) units.
var (
	KernSumHeaders = []string{"Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)", "Name"}
	APISumHeaders  = []string{"Time (%)", "Total Time (ns)", "Num Calls", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)", "Name"}
	NVTXSumHeaders = []string{"Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)", "Style", "Range"}
)

// group collects durations per name key.
type group struct {
	name, style string
	durs        []int64
}

func summarise(groups []*group) []StatsRow {
	var all int64
	rows := make([]StatsRow, 0, len(groups))
	for _, g := range groups {
		slices.Sort(g.durs)
		var sum int64
		for _, d := range g.durs {
			sum += d
		}
		all += sum
		n := len(g.durs)
		mean := float64(sum) / float64(n)
		med := stats.Median(g.durs)
		var sd float64
		if n > 1 {
			sd = stats.StdDev(g.durs, 1) // sample standard deviation, like nsys's stdev()
		}
		rows = append(rows, StatsRow{
			TotalNS: sum, Instances: int64(n), AvgNS: round1(mean), MedNS: round1(med),
			MinNS: g.durs[0], MaxNS: g.durs[n-1], StdDevNS: round1(sd), Style: g.style, Name: g.name,
		})
	}
	for i := range rows {
		if all > 0 {
			rows[i].TimePct = round1(float64(rows[i].TotalNS) * 100 / float64(all))
		}
	}
	// nsys orders by total time only; ties fall back to the name so output is stable.
	slices.SortStableFunc(rows, func(a, b StatsRow) int {
		if c := cmp.Compare(b.TotalNS, a.TotalNS); c != 0 {
			return c
		}
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.Style, b.Style)
	})
	return rows
}

func round1(x float64) float64 { return math.Round(x*10) / 10 }

// KernSum is cuda_gpu_kern_sum: kernel durations grouped by kernel name (the trace's kernel
// name style, demangled by default as in nsys).
func KernSum(t *trace.Trace) StatsReport {
	idx := map[trace.NameID]*group{}
	var groups []*group
	for i := range t.GPUOps {
		op := &t.GPUOps[i]
		if op.Kind != trace.OpKernel {
			continue
		}
		g := idx[op.Name]
		if g == nil {
			g = &group{name: t.Name(op.Name)}
			idx[op.Name] = g
			groups = append(groups, g)
		}
		g.durs = append(g.durs, op.Dur())
	}
	return StatsReport{Report: "cuda_gpu_kern_sum", Title: "CUDA GPU Kernel Summary", Headers: KernSumHeaders, Rows: summarise(groups)}
}

// APISum is cuda_api_sum: runtime and driver calls grouped by name, with nsys's rule for
// names (a trailing four-digit "_vNNNN" is dropped, a five-digit one is kept).
func APISum(c *Capture) StatsReport {
	t := c.Trace
	idx := map[trace.NameID]*group{}
	var groups []*group
	for i := range t.Launches {
		l := &t.Launches[i]
		g := idx[l.Name]
		if g == nil {
			raw, ok := c.APIRaw[l.Name]
			if !ok {
				raw = t.Name(l.Name)
			}
			g = &group{name: statsAPIName(raw)}
			idx[l.Name] = g
			groups = append(groups, g)
		}
		g.durs = append(g.durs, l.End-l.Start)
	}
	return StatsReport{Report: "cuda_api_sum", Title: "CUDA API Summary", Headers: APISumHeaders, Rows: summarise(groups)}
}

// NVTXSum is nvtx_sum: NVTX ranges grouped by (domain:text, style). Ranges still open at the
// end of the capture are not in the trace and so not counted (nsys extends them to the last
// timestamp).
func NVTXSum(c *Capture) StatsReport {
	t := c.Trace
	type key struct {
		label, style string
	}
	idx := map[key]*group{}
	var groups []*group
	for i := range t.Annotations {
		a := &t.Annotations[i]
		if a.GPU {
			continue
		}
		var ri RangeInfo
		if i < len(c.Ranges) {
			ri = c.Ranges[i]
		}
		if ri.Style == "" {
			ri.Style = "PushPop"
		}
		k := key{RangeLabel(ri.Domain, t.Name(a.Name)), ri.Style}
		g := idx[k]
		if g == nil {
			g = &group{name: k.label, style: k.style}
			idx[k] = g
			groups = append(groups, g)
		}
		g.durs = append(g.durs, a.End-a.Start)
	}
	return StatsReport{Report: "nvtx_sum", Title: "NVTX Range Summary", Headers: NVTXSumHeaders, Rows: summarise(groups)}
}

// Stats returns the three `nsys stats` summaries that `--stats` prints, in nsys's order.
func Stats(c *Capture) []StatsReport {
	return []StatsReport{NVTXSum(c), APISum(c), KernSum(c.Trace)}
}
