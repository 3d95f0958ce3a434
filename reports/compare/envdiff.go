package compare

import (
	"fmt"
	"io"
)

// StatusEnvDiffers marks a row that would be a regression but is not called one, because the
// two runs measured under different clock states: a floating clock against a
// locked one moves every timing, so the difference proves nothing about the software.
const StatusEnvDiffers = "env-differs"

// EnvChange is one line of the env diff: an environment fact (driver, torch, clock state,
// a CUDA_ variable, ...) whose value differs between the two runs.
type EnvChange struct {
	Name string `json:"name"`
	Base string `json:"base"`
	New  string `json:"new"`
}

// EnvDiff is the env diff of a comparison: what differs between the environments of the two
// runs, read from their manifests. Checked is false when a side has no manifest (a perf dump,
// a history baseline); then nothing is known and nothing is shown.
type EnvDiff struct {
	Checked bool        `json:"checked"`
	Changes []EnvChange `json:"changes,omitempty"`
	// ClocksDiffer says why regressions were not called (empty when they were).
	ClocksDiffer string `json:"clocks_differ,omitempty"`
}

// HoldRegressions turns every regression row into StatusEnvDiffers with why in its note and
// recounts: the runs' clock states differ, so a slowdown may be the clocks'.
func (r *Result) HoldRegressions(why string) {
	for i := range r.Rows {
		if r.Rows[i].Status == StatusRegression {
			r.Rows[i].Status = StatusEnvDiffers
			if r.Rows[i].Note == "" {
				r.Rows[i].Note = "not called a regression: " + why
			}
		}
	}
	r.count()
}

// writeEnvDiff prints the env diff section under a comparison (text and Markdown; the
// report's Markdown goes through WriteMarkdown, so it gets it too).
func writeEnvDiff(w io.Writer, res *Result, bullet string) {
	d := res.Env
	if d == nil || !d.Checked {
		return
	}
	if d.ClocksDiffer != "" {
		fmt.Fprintf(w, "%snote: %s\n", bullet, d.ClocksDiffer)
	}
	if len(d.Changes) == 0 {
		fmt.Fprintf(w, "%senv diff: none (driver, CUDA, torch, triton, flashinfer, NCCL, sglang, clocks and the CUDA_/NCCL_/SGLANG_ variables match)\n", bullet)
		return
	}
	fmt.Fprintf(w, "%senv diff (%d; a changed driver or library is the first suspect of a regression):\n", bullet, len(d.Changes))
	for _, c := range d.Changes {
		fmt.Fprintf(w, "%s  %s: %s → %s\n", bullet, c.Name, c.Base, c.New)
	}
}

// heldHeadline is the verdict line when regressions were held for differing clock states.
func heldHeadline(res *Result) string {
	return fmt.Sprintf("no regression called: %d row(s) beyond tolerance, but the runs' GPU clock states differ (see the env diff; --ignore-env calls them)", countStatus(res, StatusEnvDiffers))
}
