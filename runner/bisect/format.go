package bisect

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/sglprof/runner/reports/compare"
	"github.com/sglprof/runner/reports/render/table"
)

// Report is what `runner bisect` prints: the result of Run, the configuration bisected and the
// comparison of the last good commit with the first bad one (with its kernel diff).
type Report struct {
	Result *Result
	// Config is the configuration key whose cells every step ran.
	Config string
	// Compare is the first bad commit against the good endpoint (the comparison that called
	// it bad), with the kernel diff of the last good and the first bad commit's profiled cells
	// attached; nil when no single commit was named.
	Compare *compare.Result
	// StepsDir is where the steps' run directories and install logs are.
	StepsDir string
}

// JSON is the --format json document.
type JSON struct {
	Good            Commit          `json:"good"`
	Bad             Commit          `json:"bad"`
	Config          string          `json:"config"`
	EndpointsDiffer bool            `json:"endpoints_differ"`
	FirstBad        *Commit         `json:"first_bad"`
	LastGood        *Commit         `json:"last_good,omitempty"`
	Candidates      []string        `json:"candidates,omitempty"`
	Change          *compare.Row    `json:"change,omitempty"`
	Steps           []JSONStep      `json:"steps"`
	Skipped         []string        `json:"skipped"`
	MeasuredSteps   int             `json:"measured_steps"`
	Endpoints       *compare.Result `json:"endpoints,omitempty"`
	Comparison      *compare.Result `json:"comparison,omitempty"`
	StepsDir        string          `json:"steps_dir,omitempty"`
}

// JSONStep is one step of JSON.
type JSONStep struct {
	Commit  string `json:"commit"`
	Subject string `json:"subject"`
	Step
}

// Doc is the JSON document of r.
func (r *Report) Doc() JSON {
	res := r.Result
	d := JSON{Good: res.Good, Bad: res.Bad, Config: r.Config, EndpointsDiffer: res.Differ, FirstBad: res.FirstBad,
		LastGood: res.LastGood, Change: res.Change, Steps: []JSONStep{}, Skipped: []string{}, MeasuredSteps: res.Measured,
		Endpoints: res.Endpoints, Comparison: r.Compare, StepsDir: r.StepsDir}
	for _, c := range res.Candidates {
		d.Candidates = append(d.Candidates, c.Hash)
	}
	for _, s := range res.Steps {
		d.Steps = append(d.Steps, JSONStep{Commit: s.Commit.Hash, Subject: s.Commit.Subject, Step: s})
	}
	for _, c := range res.Skipped {
		d.Skipped = append(d.Skipped, c.Hash)
	}
	return d
}

// WriteJSON writes the JSON document of r.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r.Doc())
}

// WriteText writes the verdict, the change, the steps and the kernel diff.
func (r *Report) WriteText(w io.Writer) error {
	res := r.Result
	fmt.Fprintf(w, "bisect %s..%s (%s), configuration %s\n", res.Good.Short(), res.Bad.Short(), plural(countRange(res), "commit"), r.Config)
	switch {
	case !res.Differ:
		fmt.Fprintf(w, "the endpoints do not differ: no metric of %s is a regression against %s; no commit is named\n", res.Bad.Short(), res.Good.Short())
		if res.Endpoints != nil {
			for _, row := range res.Endpoints.Rows {
				fmt.Fprintf(w, "  %s: %s %s, smallest detectable change %s, tolerance %s\n", row.Metric, deltaText(row), compare.FormatP(row), compare.FormatMDC(row), row.Tolerance)
			}
			for _, row := range res.Endpoints.Rows {
				if !row.Significant && (row.MDCPct < 0 || row.MDCPct > TolerancePct(row)) {
					fmt.Fprintf(w, "note: %s could not have shown a change of its tolerance at these repeats (smallest detectable change %s, tolerance %s): raise --max-repeats to be sure\n", row.Metric, compare.FormatMDC(row), row.Tolerance)
				}
			}
		}
	case res.FirstBad != nil:
		fb := res.FirstBad
		fmt.Fprintf(w, "first bad commit: %s %s\n", fb.Hash, fb.Subject)
		if !fb.Date.IsZero() {
			fmt.Fprintf(w, "author date: %s\n", fb.Date.Format("2006-01-02 15:04:05 -0700"))
		}
		if row := res.Change; row != nil {
			fmt.Fprintf(w, "change against %s: %s %s %s, smallest detectable change %s, tolerance %s\n", res.Good.Short(), row.Metric, deltaText(*row), compare.FormatP(*row), compare.FormatMDC(*row), row.Tolerance)
		}
	default:
		var hs []string
		for _, c := range res.Candidates {
			hs = append(hs, c.Short())
		}
		fmt.Fprintf(w, "no single first bad commit: skipped commits leave %d candidates: %s\n", len(res.Candidates), strings.Join(hs, " "))
	}
	for _, s := range res.Steps {
		if s.Verdict == Skip || s.Verdict == Undecided {
			fmt.Fprintf(w, "skipped: %s %s: %s\n", s.Commit.Hash, s.Commit.Subject, s.Reason)
		}
	}
	cached := 0
	for _, s := range res.Steps {
		if s.Cached {
			cached++
		}
	}
	fmt.Fprintf(w, "steps: %d measured now, %d from the cache\n\n", res.Measured, cached)
	t := &table.Table{Header: []string{"#", "COMMIT", "VERDICT", "REPEATS", "CHANGE", "P", "SOURCE", "SUBJECT"}, NoRule: true}
	for i, s := range res.Steps {
		change, p := "", ""
		if s.Row != nil {
			change, p = deltaText(*s.Row), compare.FormatP(*s.Row)
		}
		src := "measured"
		switch {
		case s.Cached:
			src = "cache"
		case s.Verdict == Skip:
			src = "tried"
		}
		t.Rows = append(t.Rows, []string{strconv.Itoa(i + 1), s.Commit.Short(), s.Verdict, strconv.Itoa(s.Repeats), change, p, src, s.Commit.Subject})
	}
	if err := table.WriteText(w, t); err != nil {
		return err
	}
	if r.Compare != nil {
		fmt.Fprintf(w, "\nfirst bad %s against the good endpoint %s (kernel diff: last good %s against first bad %s):\n",
			res.FirstBad.Short(), res.Good.Short(), res.LastGood.Short(), res.FirstBad.Short())
		if err := compare.WriteText(w, r.Compare); err != nil {
			return err
		}
	}
	if r.StepsDir != "" {
		fmt.Fprintf(w, "steps kept in %s\n", r.StepsDir)
	}
	return nil
}

// deltaText is a row's change in percent, measured whether or not it is significant.
func deltaText(r compare.Row) string {
	return fmt.Sprintf("%+.2f%%", r.DeltaPct)
}

func countRange(res *Result) int {
	n := 0
	for _, s := range res.Steps {
		n = max(n, s.Index+1)
	}
	return n
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
