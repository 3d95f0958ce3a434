package secrets

import (
	"os"
	"regexp"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestCatalogueCompiles compiles every rule's expression, which the
// redactor otherwise compiles only when a keyword of the rule shows up:
// a broken expression must fail here, not panic in a user's run.
func TestCatalogueCompiles(t *testing.T) {
	rules := base()
	if len(rules) < 100 {
		t.Fatalf("only %d rules: the catalogue did not load", len(rules))
	}
	for _, r := range rules {
		for _, l := range []*lazyRE{r.re, r.at} {
			if l == nil {
				continue
			}
			if _, err := regexp.Compile(l.src); err != nil {
				t.Errorf("rule %s: %v", r.kind, err)
			}
		}
	}
}

// TestCatalogueIsGitleaksTOML: the compiled-in table is gitleaks.toml, rule for rule. After
// copying a newer gitleaks.toml over the old one, `go generate ./runner/secrets` rewrites the
// table; without it this fails.
func TestCatalogueIsGitleaksTOML(t *testing.T) {
	src, err := os.ReadFile("gitleaks.toml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Rules []glRule `toml:"rules"`
	}
	if err := toml.Unmarshal(src, &cfg); err != nil {
		t.Fatalf("gitleaks.toml: %v", err)
	}
	if d := cmp.Diff(cfg.Rules, catalogue, cmpopts.EquateEmpty()); d != "" {
		t.Errorf("catalogue_gen.go differs from gitleaks.toml (run go generate ./runner/secrets) (-toml +table):\n%s", d)
	}
	if len(catalogue) < 100 {
		t.Errorf("only %d rules in the table", len(catalogue))
	}
}
