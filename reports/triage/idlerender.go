package triage

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sglprof/runner/reports/render/table"
)

// The idle section's words, in the legend with the rest (kept here beside their section).
func init() {
	legendText["host wait"] = "host wait: GPU idle because the kernel that ended the gap had not been launched yet (its launch call started after every stream went idle); the CPU was late"
	legendText["kernel wait"] = fmt.Sprintf("kernel wait: a gap under %s between kernels the CPU had already launched (the GPU's own scheduling bubbles)", threshLabel())
	legendText["other idle"] = fmt.Sprintf("other idle: gaps of %s or more with the next kernel already launched (waits on events, other streams or devices), gaps ended by ops without a known launch, and the tail after the last busy time", threshLabel())
	legendText["launch delay"] = "launch delay: launch call start to kernel start, over the kernels launched one by one (graph replays excluded); queue length: the stream's ops launched before the kernel and not yet finished when its launch call started"
	legendText["host-bound"] = fmt.Sprintf("host-bound: idle time is at least %.0f%% of the window and more than %.0f%% of it is host wait; the sites named launched the kernels that ended the longest host waits, so the CPU time before them is where to look", HostBoundIdleShare, HostBoundHostShare)
}

func threshLabel() string {
	return strconv.FormatFloat(float64(KernelWaitThresholdNS)/1e3, 'f', -1, 64) + " µs"
}

// idleSection writes the "GPU Idle Time" section: per stage, the idle breakdown, launch
// delays, queue lengths and the host-bound verdict. Nothing when no stage has idle figures.
func (d *doc) idleSection(r *Report) error {
	any := false
	for i := range r.Stages {
		any = any || r.Stages[i].Idle != nil
	}
	if !any {
		return nil
	}
	d.heading("GPU Idle Time")
	d.leg.use("host wait", "kernel wait", "other idle", "launch delay", "host-bound")
	for i := range r.Stages {
		s := &r.Stages[i]
		if s.Idle == nil {
			continue
		}
		d.stage(s)
		id := s.Idle
		idle := id.HostWaitUS + id.KernelWaitUS + id.OtherUS
		lu := lineUnit(id.WindowUS, idle)
		fmt.Fprintf(&d.b, "Idle %s of the %s window (%s); kernel wait threshold %s.\n",
			lu(idle), lu(id.WindowUS), pc(pctF(idle, id.WindowUS)), threshLabel())
		u := unitFor(3, func(i int) float64 { return []float64{id.HostWaitUS, id.KernelWaitUS, id.OtherUS}[i] })
		t := &table.Table{
			Header: []string{"Idle part", "Time (" + u.Label + ")", "Share of idle", "Share of window"},
			Align:  []table.Align{table.Left, table.Right, table.Right, table.Right},
		}
		for _, p := range []struct {
			name string
			v    float64
		}{{"host wait", id.HostWaitUS}, {"kernel wait", id.KernelWaitUS}, {"other", id.OtherUS}} {
			t.Rows = append(t.Rows, []string{p.name, u.Format(p.v), pc(pctF(p.v, idle)), pc(pctF(p.v, id.WindowUS))})
		}
		if err := d.flush(t); err != nil {
			return err
		}
		if q := s.LaunchDelayUS; q != nil {
			l := lineUnit(q.Max)
			fmt.Fprintf(&d.b, "Launch delay p50 %s, p90 %s, p99 %s, max %s", l(q.P50), l(q.P90), l(q.P99), l(q.Max))
			if ql := s.QueueLength; ql != nil {
				fmt.Fprintf(&d.b, "; queue length at launch p50 %s, p90 %s, p99 %s, max %s", qlen(ql.P50), qlen(ql.P90), qlen(ql.P99), qlen(ql.Max))
			}
			d.b.WriteString(".\n")
		} else {
			d.b.WriteString("No op launched one by one has a known launch time: no launch delays.\n")
		}
		hb := s.HostBound
		if hb == nil {
			d.b.WriteString("\n")
			continue
		}
		if !hb.LaunchTimes {
			d.b.WriteString("Host-bound: unknown. No op's launch time is known (no launch calls, or an nsys export streamed with one call per API name), so no gap can be told to be host wait.\n\n")
			continue
		}
		if hb.HostBound {
			fmt.Fprintf(&d.b, "Host-bound: host wait is %s of the idle time, idle %s of the window.", pc(hb.HostWaitPct), pc(hb.IdlePct))
		} else {
			fmt.Fprintf(&d.b, "Not host-bound: host wait is %s of the idle time, idle %s of the window.", pc(hb.HostWaitPct), pc(hb.IdlePct))
		}
		if len(hb.Longest) == 0 {
			d.b.WriteString("\n\n")
			continue
		}
		d.b.WriteString(" Longest host waits, with the site that launched the kernel ending each:\n")
		vals := make([]float64, len(hb.Longest))
		for i, w := range hb.Longest {
			vals[i] = w.GapUS
		}
		gu := unitFor(len(vals), func(i int) float64 { return vals[i] })
		t = &table.Table{
			Header: []string{"Gap (" + gu.Label + ")", "Python location / NVTX range", "CPU op"},
			Align:  []table.Align{table.Right, table.Left, table.Left},
		}
		for _, w := range hb.Longest {
			t.Rows = append(t.Rows, []string{gu.Format(w.GapUS), shortName(w.Location), shortName(w.CPUOp)})
		}
		if err := d.flush(t); err != nil {
			return err
		}
	}
	return nil
}

// qlen formats a queue length (whole ops below 128, the histogram's bucket middle above).
func qlen(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }

func pctF(part, whole float64) float64 {
	if whole <= 0 {
		return 0
	}
	return part * 100 / whole
}

// idleCSVRows are the idle section's rows of the long-form CSV (table "idle"): one per idle
// part, with its share of the idle time and, on the host-wait row, the verdict "host-bound"
// and the longest host waits' sites; then a "launch delay" row whose rationale column holds the
// percentiles. n is the CSV's column count.
func idleCSVRows(r *Report, n int) [][]string {
	var rows [][]string
	row := func(cells ...string) []string {
		out := make([]string, n)
		copy(out, cells)
		return out
	}
	for _, s := range r.Stages {
		id := s.Idle
		if id == nil {
			continue
		}
		idle := id.HostWaitUS + id.KernelWaitUS + id.OtherUS
		verdict, sites := "", ""
		if hb := s.HostBound; hb != nil {
			if hb.HostBound {
				verdict = "host-bound"
			}
			var ls []string
			for _, w := range hb.Longest {
				ls = append(ls, fmt.Sprintf("%s (%s µs)", w.Location, f64(w.GapUS)))
			}
			sites = strings.Join(ls, "; ")
		}
		rows = append(rows,
			row("idle", s.Stage, "host wait", "", f64(id.HostWaitUS), "", f64(pctF(id.HostWaitUS, idle)), sites, "", "", verdict),
			row("idle", s.Stage, "kernel wait", "", f64(id.KernelWaitUS), "", f64(pctF(id.KernelWaitUS, idle))),
			row("idle", s.Stage, "other", "", f64(id.OtherUS), "", f64(pctF(id.OtherUS, idle))))
		if q := s.LaunchDelayUS; q != nil {
			why := fmt.Sprintf("launch_delay_us p50=%s p90=%s p99=%s max=%s", f64(q.P50), f64(q.P90), f64(q.P99), f64(q.Max))
			if ql := s.QueueLength; ql != nil {
				why += fmt.Sprintf(" queue_length p50=%s p90=%s p99=%s max=%s", f64(ql.P50), f64(ql.P90), f64(ql.P99), f64(ql.Max))
			}
			r := row("idle", s.Stage, "launch delay")
			r[n-1] = why
			rows = append(rows, r)
		}
	}
	return rows
}
