package secrets

import (
	"regexp"
	"testing"
)

// TestCatalogueCompiles compiles every rule's expression, which the
// redactor otherwise compiles only when a keyword of the rule shows up:
// a broken expression must fail here, not panic in a user's run.
func TestCatalogueCompiles(t *testing.T) {
	rules, err := base()
	if err != nil {
		t.Fatal(err)
	}
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
