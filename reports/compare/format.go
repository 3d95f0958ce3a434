package compare

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/sglprof/runner/reports/perf"
	"github.com/sglprof/runner/reports/render/table"
)

// Formats accepted by Write.
var Formats = []string{"text", "md", "json", "csv", "benchstat"}

// Write renders res in one of Formats. The benchstat format needs the samples, so it takes
// the two sets; the other formats only read res.
func Write(w io.Writer, format string, res *Result, base, cur *perf.Set) error {
	switch format {
	case "text", "":
		return WriteText(w, res)
	case "md":
		return WriteMarkdown(w, res)
	case "json":
		return WriteJSON(w, res)
	case "csv":
		return WriteCSV(w, res)
	case "benchstat":
		if base == nil || cur == nil {
			return fmt.Errorf("--format benchstat needs two sample sets; a history baseline has no samples to export")
		}
		return WriteBenchstat(w, res, base, cur)
	}
	return fmt.Errorf("unknown format %q; use one of %s", format, strings.Join(Formats, ", "))
}

// FormatValue renders a sample value in the metric's display unit (ms for times).
func FormatValue(v float64, unit string) string {
	switch unit {
	case perf.UnitMB:
		return strconv.FormatFloat(v, 'f', 1, 64) + "MB"
	case perf.UnitTokensPS, perf.UnitReqPS:
		return strconv.FormatFloat(v, 'f', 1, 64) + unit
	}
	ms := v / 1e6
	switch {
	case ms >= 100:
		return strconv.FormatFloat(ms, 'f', 1, 64) + "ms"
	case ms >= 1:
		return strconv.FormatFloat(ms, 'f', 2, 64) + "ms"
	}
	return strconv.FormatFloat(ms, 'f', 3, 64) + "ms"
}

// FormatStat renders "median ±CI%" (benchstat style), or "median (n=3)" when the sample is too
// small for an order-statistic interval of the median (fewer than 6 values); the t-test and
// its MDC do not need one.
func FormatStat(s Stat, unit string) string {
	if s.N == 0 {
		return "-"
	}
	v := FormatValue(s.Median, unit)
	if !s.CI {
		return fmt.Sprintf("%s (n=%d)", v, s.N)
	}
	if s.Median == 0 {
		return v + " ±0%"
	}
	pct := math.Max(s.Hi/s.Median-1, 1-s.Lo/s.Median) * 100
	return fmt.Sprintf("%s ±%.0f%%", v, pct)
}

// FormatBase renders a row's base side: FormatStat for samples, "median (N runs)" for a
// history baseline, which is a median of per-run medians and has no interval.
func FormatBase(r Row) string {
	if r.History() {
		if r.Base.N == 0 {
			return "-"
		}
		return fmt.Sprintf("%s (%d runs)", FormatValue(r.Base.Median, r.Unit), r.Base.N)
	}
	return FormatStat(r.Base, r.Unit)
}

// FormatP renders the comparison like benchstat: "(p=0.002 n=6)", n counting runs;
// "(p=0.000 n=50 in 1 run)" for a test inside one run a side; "(no test n=1)" where nothing
// could be tested (never a p-value that reads as "identical"); history rows have no test.
func FormatP(r Row) string {
	n := fmt.Sprintf("n=%d", r.New.N)
	if r.Base.N != r.New.N {
		n = fmt.Sprintf("n=%d+%d", r.Base.N, r.New.N)
	}
	switch r.Test {
	case TestHistory:
		return fmt.Sprintf("(history n=%d)", r.Base.N)
	case TestNone:
		return "(no test " + n + ")"
	case TestWithinRun:
		return fmt.Sprintf("(p=%.3f %s in 1 run)", r.P, n)
	}
	return fmt.Sprintf("(p=%.3f %s)", r.P, n)
}

// FormatMDC renders the minimum detectable change: "6.3%", or "-" when it cannot be stated.
func FormatMDC(r Row) string {
	if r.MDCPct < 0 {
		return "-"
	}
	if r.MDCPct > 1000 {
		return ">1000%" // an absolute floor far above a tiny value (120 ms on a 0.08 ms stage)
	}
	if r.MDCPct < 10 {
		return fmt.Sprintf("%.1f%%", r.MDCPct)
	}
	return fmt.Sprintf("%.0f%%", r.MDCPct)
}

// statusMark is the verdict column: the status with a marker that stands out in a long table.
func statusMark(r Row) string {
	switch r.Status {
	case StatusRegression:
		return "REGRESSION"
	case StatusImprovement:
		return "improved"
	case StatusInsufficient:
		return "n too small"
	case StatusWarning:
		return fmt.Sprintf("warning (%d in a row)", r.Violations)
	}
	return r.Status
}

// Headline is the one-line verdict printed under every format but JSON and CSV.
func Headline(res *Result) string {
	switch {
	case res.Regressions > 0:
		return fmt.Sprintf("%d regression(s): %s", res.Regressions, strings.Join(res.RegressedMetrics(), ", "))
	case res.Warnings > 0:
		return fmt.Sprintf("no regression; %d warning(s) (a first violation; a regression needs consecutive violations)", res.Warnings)
	case countStatus(res, StatusEnvDiffers) > 0:
		return heldHeadline(res)
	}
	return "no regression"
}

// WriteText renders an aligned table in the style of benchstat.
func WriteText(w io.Writer, res *Result) error {
	fmt.Fprintf(w, "base: %s\nnew:  %s\n", res.Base, res.New)
	fmt.Fprintln(w, MethodLine(res))
	t := &table.Table{Header: []string{"CONFIG", "METRIC", "BASE", "NEW", "DELTA", "", "MDC", "TOLERANCE", "VERDICT"}, NoRule: true}
	last := ""
	for _, r := range res.Rows {
		cfg := r.Config
		if cfg == last {
			cfg = ""
		}
		last = r.Config
		t.Rows = append(t.Rows, []string{cfg, r.Metric, FormatBase(r), FormatStat(r.New, r.Unit), r.Delta, FormatP(r), FormatMDC(r), r.Tolerance, statusMark(r)})
	}
	if err := table.WriteText(w, t); err != nil {
		return err
	}
	writeFootnotes(w, res, "")
	if err := writeKernelDiffs(w, res, false); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, Headline(res))
	return err
}

// MethodLine says in one line how the rows were judged and what the MDC column means.
func MethodLine(res *Result) string {
	power := res.Power
	if power == 0 {
		power = DefaultPower
	}
	if res.Mode == "history" {
		return fmt.Sprintf("baseline: rolling median of the history; a run violates beyond the tolerance (calibrated to each configuration's run-to-run noise unless the plan fixes it) and consecutive violations make a regression; MDC: the smallest sustained change flagged with %.0f%% probability", power*100)
	}
	return fmt.Sprintf("alpha %.2g; Welch's t-test on the logs of per-run values (runs, not steps, are the samples); a delta is shown only when p < alpha, otherwise ~; MDC: the smallest change this test finds with %.0f%% probability, so a smaller one can hide behind ~", res.Alpha, power*100)
}

func writeFootnotes(w io.Writer, res *Result, bullet string) {
	withinRun := 0
	for _, r := range res.Rows {
		switch {
		case r.Test == TestWithinRun:
			withinRun++
		case r.Note != "" && r.Status != StatusInsufficient:
			fmt.Fprintf(w, "%snote: %s %s: %s\n", bullet, r.Config, r.Metric, r.Note)
		}
		if r.Change != nil && (r.Status == StatusRegression || r.Status == StatusWarning) {
			fmt.Fprintf(w, "%schange: %s %s: a step change of %+.1f%% began at run %s (%s; p=%.3g): start a bisection there\n",
				bullet, r.Config, r.Metric, r.Change.ShiftPct, r.Change.RunID, runsAgo(r.Change.RunsAgo), r.Change.P)
		}
	}
	if withinRun > 0 {
		fmt.Fprintf(w, "%snote: %d row(s) \"in 1 run\": one run a side, so the test used the steps or requests inside each run; it says these two runs differ, not that a rerun would (repeats = 3 or more a side test run-to-run)\n", bullet, withinRun)
	}
	if n := countStatus(res, StatusInsufficient); n > 0 {
		fmt.Fprintf(w, "%snote: %d row(s) marked \"n too small\": one run a side with one value each, so there is no spread to test against and no claim; raise repeats in the plan (3 a side let the t-test decide)\n", bullet, n)
	}
	for _, n := range res.Notes {
		fmt.Fprintf(w, "%snote: %s\n", bullet, n)
	}
	writeEnvDiff(w, res, bullet)
	if len(res.OnlyBase) > 0 {
		fmt.Fprintf(w, "%sonly in base (not compared): %s\n", bullet, strings.Join(res.OnlyBase, ", "))
	}
	if len(res.OnlyNew) > 0 {
		fmt.Fprintf(w, "%sonly in new (not compared): %s\n", bullet, strings.Join(res.OnlyNew, ", "))
	}
	if k := len(res.SkippedBase) + len(res.SkippedNew); k > 0 {
		fmt.Fprintf(w, "%sskipped cells: %d (invalid, failed, not run or profiled; see --format json)\n", bullet, k)
	}
}

// runsAgo says where a change point lies relative to the judged run.
func runsAgo(n int) string {
	switch n {
	case 0:
		return "this run"
	case 1:
		return "1 run ago"
	}
	return fmt.Sprintf("%d runs ago", n)
}

func countStatus(res *Result, status string) int {
	n := 0
	for _, r := range res.Rows {
		if r.Status == status {
			n++
		}
	}
	return n
}

// WriteMarkdown renders a GitHub-flavoured table that fits a job summary.
func WriteMarkdown(w io.Writer, res *Result) error {
	fmt.Fprintf(w, "**%s**\n\n", table.EscapeMarkdown(Headline(res)))
	fmt.Fprintf(w, "base %s → new %s\n\n", table.CodeSpan(res.Base), table.CodeSpan(res.New))
	fmt.Fprintf(w, "%s\n\n", table.EscapeMarkdown(MethodLine(res)))
	t := &table.Table{Header: []string{"Config", "Metric", "Base", "New", "Delta", "", "MDC", "Tolerance", "Verdict"},
		Align: []table.Align{table.Left, table.Left, table.Right, table.Right, table.Right, table.Left, table.Right, table.Right, table.Left},
		Code:  []bool{true}} // the config column: the writer owns its backticks
	for _, r := range res.Rows {
		v := statusMark(r)
		if r.Status == StatusRegression {
			v = "**" + v + "**"
		}
		t.Rows = append(t.Rows, []string{r.Config, r.Metric, FormatBase(r), FormatStat(r.New, r.Unit), r.Delta, FormatP(r), FormatMDC(r), r.Tolerance, v})
	}
	if err := table.WriteMarkdown(w, t); err != nil {
		return err
	}
	fmt.Fprintln(w)
	writeFootnotes(w, res, "- ")
	return writeKernelDiffs(w, res, true)
}

// WriteJSON writes res as one indented JSON object (the shape of Result).
func WriteJSON(w io.Writer, res *Result) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}

// CSVHeader is the header row of WriteCSV.
var CSVHeader = []string{"config", "metric", "class", "unit", "base_n", "base_median", "base_lo", "base_hi", "new_n", "new_median", "new_lo", "new_hi", "delta_pct", "p", "significant", "tolerance", "limit", "status", "violations", "test", "mdc_pct"}

// WriteCSV writes one line per row; values are in the metric's unit (ns or MB).
func WriteCSV(w io.Writer, res *Result) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	for _, r := range res.Rows {
		rec := []string{r.Config, r.Metric, r.Class, r.Unit,
			strconv.Itoa(r.Base.N), f(r.Base.Median), f(r.Base.Lo), f(r.Base.Hi),
			strconv.Itoa(r.New.N), f(r.New.Median), f(r.New.Lo), f(r.New.Hi),
			strconv.FormatFloat(r.DeltaPct, 'f', 4, 64), strconv.FormatFloat(r.P, 'f', 6, 64), strconv.FormatBool(r.Significant),
			r.Tolerance, f(r.Limit), r.Status, strconv.Itoa(r.Violations), r.Test, strconv.FormatFloat(r.MDCPct, 'f', 4, 64)}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

var benchNameRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[^A-Za-z0-9_./=-]+`) })

// WriteBenchstat writes every sample of the compared configurations in the Go benchmark
// format, the base's after a "side: base" configuration line and the new run's after
// "side: new", so that `benchstat -col side FILE` puts them side by side. Benchmark names are
// Benchmark<config>/metric=<metric>; times are ns/op, memory MB.
func WriteBenchstat(w io.Writer, res *Result, base, cur *perf.Set) error {
	keys := map[string]bool{}
	var order []string
	for _, r := range res.Rows {
		if !keys[r.Config] {
			keys[r.Config] = true
			order = append(order, r.Config)
		}
	}
	for _, side := range []struct {
		name string
		set  *perf.Set
	}{{"base", base}, {"new", cur}} {
		// Only the side is a configuration key: any other key that differs between the two
		// halves (the source path) would make benchstat split them into separate tables.
		if _, err := fmt.Fprintf(w, "side: %s\n", side.name); err != nil {
			return err
		}
		for _, key := range order {
			c := side.set.Configs[key]
			if c == nil {
				continue
			}
			name := "Benchmark" + benchNameRe().ReplaceAllString(key, "_")
			for _, m := range c.MetricNames() {
				unit := "ns/op"
				if perf.Unit(m) == perf.UnitMB {
					unit = "MB"
				}
				for _, v := range c.Metrics[m] {
					if _, err := fmt.Fprintf(w, "%s/metric=%s 1 %s %s\n", name, benchNameRe().ReplaceAllString(strings.ReplaceAll(m, "/", "."), "_"), strconv.FormatFloat(v, 'f', -1, 64), unit); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}
