package backends

import (
	"slices"
	"testing"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
)

func TestServerArgsKey(t *testing.T) {
	base := plans.Cell{ID: "a", Model: "m", Prompt: "p", Steps: 4}
	base.Backend = plans.Backend{Command: []string{"sglang"}, ExtraArgs: []string{"--x"}, Env: map[string]string{"A": "1", "B": "2"}, Port: 0}
	same := base
	same.ID, same.Prompt, same.Steps = "b", "q", 50 // requests only
	same.Backend.Env = map[string]string{"B": "2", "A": "1"}
	if ServerArgsKey(base, "diffusion") != ServerArgsKey(same, "diffusion") {
		t.Fatal("cells that differ only in their requests get different servers")
	}
	for name, change := range map[string]func(*plans.Cell){
		"command": func(c *plans.Cell) { c.Backend.Command = []string{"/venv/bin/sglang"} },
		"model":   func(c *plans.Cell) { c.Model = "n" },
		"args":    func(c *plans.Cell) { c.Backend.ExtraArgs = []string{"--y"} },
		"env":     func(c *plans.Cell) { c.Backend.Env = map[string]string{"A": "1"} },
		"port":    func(c *plans.Cell) { c.Backend.Port = 30001 },
	} {
		c := base
		change(&c)
		if ServerArgsKey(c, "diffusion") == ServerArgsKey(base, "diffusion") {
			t.Errorf("%s: a different server gets the same key", name)
		}
	}
	if ServerArgsKey(base, "llm") == ServerArgsKey(base, "diffusion") {
		t.Error("the backend's parts are not in the key")
	}
}

func TestShowPort(t *testing.T) {
	var c plans.Cell
	l := rundir.Launch{Argv: []string{"s", "--port", "30000", "--x"}, Env: map[string]string{EnvServerMarker: "m", "A": "1"}}
	got := ShowPort(l, c)
	if !slices.Equal(got.Argv, []string{"s", "--port", PortPlaceholder, "--x"}) || got.Env[EnvServerMarker] != "" || got.Env["A"] != "1" {
		t.Fatalf("%+v", got)
	}
	c.Backend.Port = 30000
	l.Argv[2] = "30000"
	if got := ShowPort(l, c); got.Argv[2] != "30000" {
		t.Fatalf("the plan's own port was hidden: %v", got.Argv)
	}
}

// TestShowPortAttached: `runner plan` shows no command for a server the runner attaches to.
func TestShowPortAttached(t *testing.T) {
	c := plans.Cell{}
	c.Backend.URL = "http://h:1"
	l := ShowPort(rundir.Launch{Argv: []string{"sglang", "serve", "--port", "0"}, Env: map[string]string{"A": "1"}}, c)
	if len(l.Argv) != 2 || l.Argv[0] != AttachedPlaceholder || l.Argv[1] != "http://h:1" || len(l.Env) != 0 {
		t.Fatalf("launch %+v", l)
	}
}
