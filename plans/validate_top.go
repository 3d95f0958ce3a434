package plans

import (
	"fmt"
	"strings"
)

// validateTop checks the top-level keys name and output_dir.
func (d *decoder) validateTop(p *Plan) {
	if d.check("name") {
		if !d.md.IsDefined("name") {
			d.missing([]string{"name"}, `required: add name = "my-plan" at the top of the file (run directories go under <output_dir>/<name>/)`)
		} else if msg := dirNameProblem(p.Name); msg != "" {
			d.addKey([]string{"name"}, msg)
		}
	}
	if d.check("output_dir") && d.md.IsDefined("output_dir") {
		if p.OutputDir == "" {
			d.addKey([]string{"output_dir"}, `empty; give a directory such as "runs", or drop the key for the default "runs"`)
		} else if strings.ContainsRune(p.OutputDir, 0) {
			d.addKey([]string{"output_dir"}, "contains a NUL byte, which no path can hold; remove it")
		}
	}
}

// validateBackend checks [backend] keys every mode uses (the serve keys: validate_serve.go).
func (d *decoder) validateBackend(p *Plan) {
	b := p.Backend
	if d.check("backend", "kind") && !oneOf(b.Kind, Kinds) {
		d.addKey(path("backend", "kind"), fmt.Sprintf("unknown backend kind %q; use one of %s", b.Kind, quoteList(Kinds)))
	}
	if d.check("backend", "mode") && !oneOf(b.Mode, Modes) {
		d.addKey(path("backend", "mode"), fmt.Sprintf("unknown mode %q; use one of %s", b.Mode, quoteList(Modes)))
	}
	if d.check("backend", "command") {
		switch {
		case len(b.Command) == 0:
			d.addKey(path("backend", "command"), `empty; give the program to run, e.g. ["sglang"] or ["/path/to/venv/bin/sglang"], or drop the key for the default ["sglang"]`)
		case b.Command[0] == "":
			d.addElem(path("backend", "command"), 0, "", "the program name is empty; give the program to run, e.g. \"sglang\"")
		}
		d.noNUL(path("backend", "command"), b.Command)
	}
	if d.check("backend", "extra_args") {
		d.noNUL(path("backend", "extra_args"), b.ExtraArgs)
	}
	if d.check("backend", "env") {
		for _, k := range sortedKeys(b.Env) {
			kp := path("backend", "env", k)
			if !d.check(kp...) {
				continue
			}
			switch {
			case k == "":
				d.addKey(kp, "empty environment variable name; give a name such as HF_HUB_OFFLINE")
			case strings.ContainsAny(k, "=\x00"):
				d.addKey(kp, fmt.Sprintf("environment variable name %q contains '=' or a NUL byte; names cannot", k))
			}
			if strings.ContainsRune(b.Env[k], 0) {
				d.addKey(kp, "value contains a NUL byte, which an environment variable cannot hold; remove it")
			}
		}
	}
	d.positiveDuration(path("backend", "timeout"), b.Timeout, `"20m"`)
	d.positiveDuration(path("backend", "grace"), b.Grace, `"10s"`)
}

// dirNameProblem says why name cannot be a directory name, or "".
func dirNameProblem(name string) string {
	const hint = `; use letters, digits, '.', '_', '-' or '+', starting with a letter or digit (e.g. "qwen-image")`
	switch {
	case name == "":
		return "empty" + hint
	case len(name) > 128:
		return fmt.Sprintf("%d bytes long; keep it to 128", len(name))
	}
	for i, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if !ok && (i == 0 || !strings.ContainsRune("._-+", r)) {
			return fmt.Sprintf("%q cannot be used as a directory name", name) + hint
		}
	}
	return ""
}
