package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestNightlyWorkflow keeps docs/github-actions-nightly.yml true: it is YAML-shaped
// (the top-level keys a workflow needs, no tabs), the plan and package it names exist, and every
// runner command it runs exists with the flags it passes, so a renamed command or flag breaks
// this test instead of someone's nightly job.
func TestNightlyWorkflow(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "docs", "github-actions-nightly.yml"))
	if err != nil {
		t.Fatal(err)
	}
	wf := string(data)
	if strings.Contains(wf, "\t") {
		t.Error("a tab in the workflow: YAML indents with spaces")
	}
	for _, key := range []string{"name", "on", "jobs"} {
		if !regexp.MustCompile(`(?m)^` + key + `:`).MatchString(wf) {
			t.Errorf("no top-level %q key", key)
		}
	}
	for _, path := range []string{"plans/nightly.toml", "cmd/runner"} {
		if !strings.Contains(wf, path) {
			t.Errorf("the workflow no longer names %s", path)
		}
		if _, err := os.Stat(filepath.Join(root, path)); err != nil {
			t.Errorf("the workflow names %s: %v", path, err)
		}
	}

	app := newApp(stdio{in: strings.NewReader(""), out: io.Discard, err: io.Discard})
	// Shell continuation lines are one command; a call starts a line of a run block or a
	// one-line run (not `go build -o "$RUNNER_TEMP/runner"`).
	joined := strings.ReplaceAll(wf, "\\\n", " ")
	calls := regexp.MustCompile(`(?m)(?:^ *|run: ')"\$RUNNER_TEMP/runner"((?: +[^ \n|&;]+)+)`).FindAllStringSubmatch(joined, -1)
	seen := map[string]bool{}
	for _, m := range calls {
		words := strings.Fields(m[1])
		cmd := findCommand(app.Commands, words[0])
		if cmd == nil {
			t.Errorf("the workflow runs `runner %s`: no such command", words[0])
			continue
		}
		seen[cmd.Name] = true
		for _, w := range words[1:] {
			if isFlag(w) && !defines(cmd.Flags, w) && !defines(app.Flags, w) {
				t.Errorf("the workflow runs `runner %s %s`: no such flag", cmd.Name, w)
			}
		}
	}
	for _, want := range []string{"run", "report", "bundle"} {
		if !seen[want] {
			t.Errorf("the workflow no longer runs `runner %s` (the test's pattern may be stale): found %v", want, seen)
		}
	}
}
