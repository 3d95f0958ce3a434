package nsysdb

import (
	"strconv"

	"github.com/sglprof/runner/reports/render/table"
)

// none is the Empty text of the nsys tables: an export without NVTX ranges, memory operations
// or API calls still prints the table, so the reader sees it was looked for.
const none = "(none)"

// numeric aligns the first n columns right and the rest left.
func numeric(cols, n int) []table.Align {
	a := make([]table.Align, cols)
	for i := range a {
		if i < n {
			a[i] = table.Right
		}
	}
	return a
}

// fmtDur formats nanoseconds for people: integer ns below 1 µs, else three decimals in µs, ms or
// s. Exact integers stay in the JSON and CSV outputs.
func fmtDur(ns int64) string {
	a := ns
	if a < 0 {
		a = -a
	}
	switch {
	case a < 1_000:
		return strconv.FormatInt(ns, 10) + " ns"
	case a < 1_000_000:
		return strconv.FormatFloat(float64(ns)/1e3, 'f', 3, 64) + " µs"
	case a < 1_000_000_000:
		return strconv.FormatFloat(float64(ns)/1e6, 'f', 3, 64) + " ms"
	}
	return strconv.FormatFloat(float64(ns)/1e9, 'f', 3, 64) + " s"
}

// fmtBytes formats a byte count in binary units.
func fmtBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return strconv.FormatFloat(float64(n)/float64(div), 'f', 1, 64) + " " + string("KMGTP"[exp]) + "iB"
}

func i64(n int64) string { return strconv.FormatInt(n, 10) }

// unitOf chooses one time unit for the nanosecond values of a table's time columns: ms with 3
// decimals from a millisecond up (microsecond resolution, as the per-cell units had), else µs.
func unitOf(ns []int64) table.TimeUnit {
	return table.TimeUnitFor(len(ns), func(i int) float64 { return float64(ns[i]) / 1e3 }).WithPrec(3)
}

// NVTXTable renders the NVTX range summary (`Range | Count | Total | Mean | Min | Max | GPU time
// inside`); the time columns share one unit, named in their headers.
func NVTXTable(rows []NVTXRange) *table.Table {
	var all []int64
	for _, r := range rows {
		all = append(all, r.TotalNS, r.MeanNS, r.MinNS, r.MaxNS, r.GPUTimeNS)
	}
	u := unitOf(all)
	tb := &table.Table{Title: "NVTX ranges", Header: []string{"Range", "Count", u.Header("Total"), u.Header("Mean"), u.Header("Min"), u.Header("Max"), u.Header("GPU time inside")},
		Align: []table.Align{table.Left, table.Right, table.Right, table.Right, table.Right, table.Right, table.Right}, Empty: none}
	for _, r := range rows {
		name := r.Range
		if r.Domain != "" {
			name = r.Domain + ":" + r.Range
		}
		tb.Rows = append(tb.Rows, []string{name, strconv.Itoa(r.Count), us(u, r.TotalNS), us(u, r.MeanNS), us(u, r.MinNS), us(u, r.MaxNS), us(u, r.GPUTimeNS)})
	}
	return tb
}

// us formats nanoseconds in the table's unit.
func us(u table.TimeUnit, ns int64) string { return u.Format(float64(ns) / 1e3) }

// MemoryTable renders the memory-operation summary; its two time columns share one unit.
func MemoryTable(rows []MemoryOp) *table.Table {
	var all []int64
	for _, r := range rows {
		all = append(all, r.TotalNS, r.MeanNS)
	}
	u := unitOf(all)
	tb := &table.Table{Title: "Memory operations", Header: []string{"Operation", "Count", "Bytes", u.Header("Total"), u.Header("Mean"), "GB/s"},
		Align: []table.Align{table.Left, table.Right, table.Right, table.Right, table.Right, table.Right}, Empty: none}
	for _, r := range rows {
		tb.Rows = append(tb.Rows, []string{r.Operation, strconv.Itoa(r.Count), fmtBytes(r.Bytes), us(u, r.TotalNS), us(u, r.MeanNS), strconv.FormatFloat(r.GBps, 'f', 2, 64)})
	}
	return tb
}

// APITable renders the CUDA API summary; its time columns share one unit.
func APITable(rows []APICall) *table.Table {
	var all []int64
	for _, r := range rows {
		all = append(all, r.TotalNS, r.MeanNS, r.MinNS, r.MaxNS)
	}
	u := unitOf(all)
	tb := &table.Table{Title: "CUDA API calls", Header: []string{"API call", "Calls", u.Header("Total"), "%", u.Header("Mean"), u.Header("Min"), u.Header("Max"), "Sync"},
		Align: []table.Align{table.Left, table.Right, table.Right, table.Right, table.Right, table.Right, table.Right, table.Left}, Empty: none}
	for _, r := range rows {
		sync := ""
		if r.Sync {
			if sync = SyncKind(r.Name); sync == "" {
				sync = SyncExplicit
			}
		}
		tb.Rows = append(tb.Rows, []string{r.Name, strconv.Itoa(r.Calls), us(u, r.TotalNS), strconv.FormatFloat(r.Percent, 'f', 1, 64),
			us(u, r.MeanNS), us(u, r.MinNS), us(u, r.MaxNS), sync})
	}
	return tb
}

// Table renders an `nsys stats` report with nsys's headers and number formats (integers for
// ns totals, one decimal for averages and percentages), so its CSV diffs cleanly against
// `nsys stats --format csv --report <id>`.
func (s StatsReport) Table() *table.Table {
	tb := &table.Table{Title: s.Title + " (" + s.Report + ")", Header: s.Headers, Align: numeric(len(s.Headers), 8), Empty: none}
	f1 := func(x float64) string { return strconv.FormatFloat(x, 'f', 1, 64) }
	for _, r := range s.Rows {
		row := []string{f1(r.TimePct), i64(r.TotalNS), i64(r.Instances), f1(r.AvgNS), f1(r.MedNS), i64(r.MinNS), i64(r.MaxNS), f1(r.StdDevNS)}
		if len(s.Headers) == 10 {
			row = append(row, r.Style)
		}
		tb.Rows = append(tb.Rows, append(row, r.Name))
	}
	return tb
}
