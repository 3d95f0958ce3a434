package bundle

import (
	"fmt"
	"io"

	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/envfacts"
	"github.com/sglprof/runner/runner/secrets"
)

// Diff is one difference between the bundle's environment and this machine's.
type Diff struct {
	Name         string
	Bundle, Here string
}

// DiffManifests compares the environment facts and the variables that matter (the manifests'
// env) of the bundle and of this machine, through the one env diff of two runs
// (envfacts.DiffEnv). The bundle's manifest is redacted, so this machine's secret-named
// variables are too before comparing: a redacted value only differs when it is missing.
func DiffManifests(bundle, here *rundir.Manifest) []Diff {
	h := *here
	h.Env = make(map[string]string, len(here.Env))
	for k, v := range here.Env {
		if secrets.IsSecretName(k) {
			v = secrets.Redacted
		}
		h.Env[k] = v
	}
	var out []Diff
	for _, c := range envfacts.DiffEnv(bundle, &h) {
		out = append(out, Diff{Name: c.Name, Bundle: c.Base, Here: c.New})
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
