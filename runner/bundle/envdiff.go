package bundle

import (
	"fmt"
	"io"
	"sort"

	"github.com/sglprof/runner/rundir"
	"github.com/sglprof/runner/runner"
)

// Fact is one row of the environment table (runner.EnvFact, whose owner is the runner's
// manifest).
type Fact = runner.EnvFact

// Facts lists the environment of a manifest in a fixed order (runner.EnvFacts).
func Facts(m *rundir.Manifest) []Fact { return runner.EnvFacts(m) }

// Diff is one difference between the bundle's environment and this machine's.
type Diff struct {
	Name         string
	Bundle, Here string
}

// DiffManifests compares the environment facts and the variables that matter (the manifests'
// env) of the bundle and of this machine. Host names and CPU counts differ between any two
// machines and are reported like the rest; a redacted value only differs when it is missing.
func DiffManifests(bundle, here *rundir.Manifest) []Diff {
	var out []Diff
	bf, hf := Facts(bundle), Facts(here)
	hm := map[string]string{}
	for _, f := range hf {
		hm[f.Name] = f.Value
	}
	for _, f := range bf {
		if h, ok := hm[f.Name]; !ok {
			out = append(out, Diff{Name: f.Name, Bundle: f.Value, Here: "(not probed)"})
		} else if h != f.Value {
			out = append(out, Diff{Name: f.Name, Bundle: f.Value, Here: h})
		}
	}
	names := map[string]bool{}
	for k := range bundle.Env {
		names[k] = true
	}
	for k := range here.Env {
		names[k] = true
	}
	keys := make([]string, 0, len(names))
	for k := range names {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b, inB := bundle.Env[k]
		h, inH := here.Env[k]
		if inH && runner.IsSecretName(k) {
			h = Redacted
		}
		switch {
		case inB && !inH:
			out = append(out, Diff{Name: "$" + k, Bundle: b, Here: "(unset)"})
		case !inB && inH:
			out = append(out, Diff{Name: "$" + k, Bundle: "(unset)", Here: h})
		case b != h:
			out = append(out, Diff{Name: "$" + k, Bundle: b, Here: h})
		}
	}
	return out
}

// WriteDiff prints the differences, or that there are none.
func WriteDiff(w io.Writer, diffs []Diff) error {
	if len(diffs) == 0 {
		_, err := fmt.Fprintln(w, "environment: this machine matches the bundle's (GPU, driver, CUDA, sglang, runner, variables)")
		return err
	}
	if _, err := fmt.Fprintf(w, "environment: %d differences between the bundle and this machine (they may explain a result that does not reproduce):\n", len(diffs)); err != nil {
		return err
	}
	for _, d := range diffs {
		if _, err := fmt.Fprintf(w, "  %-12s bundle: %s\n  %-12s here:   %s\n", d.Name, d.Bundle, "", d.Here); err != nil {
			return err
		}
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
