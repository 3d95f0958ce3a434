// Package secrets finds and replaces credentials in text: the literal values of secret-named
// variables, a catalogue of credential formats (gitleaks' rule set, embedded as data), the
// name-based rules of this project (NAME=value, --api-key X, "password": "…") and a plan's own
// [bundle] redact patterns. Bundles, issue bodies and the run directory's JSON files all go
// through one Redactor, so what one place hides no other place shows.
//
// It imports nothing of this module, so the runner (which writes the run directory) and the
// bundle (which packs it) can both use it.
package secrets

import (
	_ "embed"
	"fmt"
	"regexp"
	"strings"

	"github.com/BurntSushi/toml"
)

// Redacted is what every secret is replaced with.
const Redacted = "<redacted>"

// secretMarkers mark variable names whose values must never be written down.
var secretMarkers = []string{"TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL"}

// IsSecretName reports whether an environment variable name looks like it holds a secret.
func IsSecretName(name string) bool {
	u := strings.ToUpper(name)
	for _, m := range secretMarkers {
		if strings.Contains(u, m) {
			return true
		}
	}
	return false
}

// gitleaksTOML is gitleaks' default configuration (MIT, see NOTICE.gitleaks): the catalogue
// of credential formats, kept as upstream ships it so that refreshing it is a copy.
//
//go:embed gitleaks.toml
var gitleaksTOML []byte

// skipped are catalogue rules left out, with why:
//   - generic-api-key matches any long value after "key", "auth", "access" or "api" and
//     relies on gitleaks' stopword and allowlist machinery to stay quiet; the name-based
//     rules of this package cover the same ground with the shapes this project's files use.
var skipped = map[string]bool{"generic-api-key": true}

// glRule is one [[rules]] entry of gitleaks.toml, the fields redaction uses.
type glRule struct {
	ID          string   `toml:"id"`
	Regex       string   `toml:"regex"`
	SecretGroup int      `toml:"secretGroup"`
	Entropy     float64  `toml:"entropy"`
	Keywords    []string `toml:"keywords"`
	Path        string   `toml:"path"`
}

// catalogueRules parses the embedded gitleaks rules. Rules bound to a file path (a .php or
// .tf file) or without a regular expression are left out: a bundle's files are logs, JSON
// and TOML, and the path tells nothing about them.
func catalogueRules() ([]rule, error) {
	var cfg struct {
		Rules []glRule `toml:"rules"`
	}
	if err := toml.Unmarshal(gitleaksTOML, &cfg); err != nil {
		return nil, fmt.Errorf("embedded gitleaks.toml: %w", err)
	}
	var out []rule
	for _, g := range cfg.Rules {
		if g.Regex == "" || g.Path != "" || skipped[g.ID] {
			continue
		}
		re, err := regexp.Compile(g.Regex)
		if err != nil {
			return nil, fmt.Errorf("embedded gitleaks.toml: rule %s: %w", g.ID, err)
		}
		kw := make([]string, len(g.Keywords))
		for i, k := range g.Keywords {
			kw[i] = strings.ToLower(k)
		}
		out = append(out, rule{
			kind: g.ID, re: re, group: g.SecretGroup, firstGroup: g.SecretGroup == 0,
			entropy: g.Entropy, keywords: kw,
			// A rule that can cross lines ([\s\S] in the private-key rule) runs on the whole
			// text, not line by line.
			block: strings.Contains(g.Regex, `[\s\S`),
		})
	}
	return out, nil
}
