package plans

import "testing"

// The shipped nightly plan is a valid plan whose unprofiled cells have enough
// repeats for a confidence interval (what --baseline history compares), and whose name is the
// directory the GitHub Actions example reads the run from (runs/nightly/).
func TestNightlyPlan(t *testing.T) {
	p, err := Load("nightly.toml")
	if err != nil {
		t.Fatalf("plans/nightly.toml: %v", err)
	}
	if p.Name != "nightly" {
		t.Errorf("name = %q; docs/github-actions-nightly.yml reads runs/nightly/", p.Name)
	}
	cells := p.Expand()
	timing := 0
	for _, c := range cells {
		if c.Profiler == ProfilerNone {
			timing++
		}
	}
	if timing < 6 {
		t.Errorf("%d unprofiled cells of %d; the nightly comparison needs at least 6 samples a configuration", timing, len(cells))
	}
}
