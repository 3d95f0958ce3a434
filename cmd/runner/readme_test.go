package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sglprof/runner/plans"
)

// TestREADME keeps the README true: it stays under 15 KB; every section is in its
// contents list; every repository path it names exists; every link into docs/ lands on a
// heading that exists; it links to nothing outside the repository but web pages; every fenced
// TOML block is a valid plan; and a block marked `<!-- file: PATH -->` is that file verbatim.
func TestREADME(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	if len(data) >= 15*1024 {
		t.Errorf("README.md is %d bytes; keep it under 15 KB and move detail to docs/", len(data))
	}
	prose := fences.ReplaceAllString(readme, "")

	// Every section is reachable from the contents list.
	contents := section(readme, "Contents")
	for _, m := range regexp.MustCompile(`(?m)^#{2,3} (.+)$`).FindAllStringSubmatch(prose, -1) {
		if m[1] == "Contents" {
			continue
		}
		if !strings.Contains(contents, "(#"+anchor(m[1])+")") {
			t.Errorf("section %q is not in the contents list", m[1])
		}
	}
	// Links: in-page anchors exist; repository paths exist (with their anchors); nothing
	// points outside the repository.
	for _, m := range regexp.MustCompile(`\]\(([^)\s]+)\)`).FindAllStringSubmatch(prose, -1) {
		target := m[1]
		switch {
		case strings.HasPrefix(target, "https://"):
			continue
		case strings.HasPrefix(target, "#"):
			if !hasHeading(prose, target[1:]) {
				t.Errorf("link %s: no such section", target)
			}
			continue
		case strings.HasPrefix(target, "..") || strings.HasPrefix(target, "/") || strings.Contains(target, "://"):
			t.Errorf("link %s points outside the repository", target)
			continue
		}
		path, frag, _ := strings.Cut(target, "#")
		b, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Errorf("link %s: %v", target, err)
			continue
		}
		if frag != "" && !hasHeading(fences.ReplaceAllString(string(b), ""), frag) {
			t.Errorf("link %s: %s has no heading #%s", target, path, frag)
		}
	}
	// Paths named in code spans and code blocks.
	named := regexp.MustCompile(`(?:^|[\s\x60(\[])((?:\.ci|backends|cmd|docs|nsys|plans|reports|runner|scripts)/[A-Za-z0-9_./-]*[A-Za-z0-9_])`)
	for _, m := range named.FindAllStringSubmatch(readme, -1) {
		if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
			t.Errorf("README names %s, which does not exist", m[1])
		}
	}
	if regexp.MustCompile(`ref-[a-z-]+\.md|DESIGN\.md|shared/docs`).MatchString(readme) {
		t.Errorf("README refers to design documents outside the repository")
	}
	// Fenced plans are valid, and a marked one is the shipped file.
	n := 0
	for _, m := range regexp.MustCompile("(?s)(<!-- file: (\\S+) -->\\n)?```toml\\n(.*?)```").FindAllStringSubmatch(readme, -1) {
		n++
		if _, err := plans.Parse("README.md plan", []byte(m[3])); err != nil {
			t.Errorf("a plan in the README is not valid: %v", err)
		}
		if m[2] != "" {
			want, err := os.ReadFile(filepath.Join(root, m[2]))
			if err != nil {
				t.Errorf("%v", err)
			} else if string(want) != m[3] {
				t.Errorf("the plan quoted as %s differs from the file", m[2])
			}
		}
	}
	if n == 0 {
		t.Errorf("no fenced plan found in the README")
	}
}

var fences = regexp.MustCompile("(?s)```.*?```")

// section returns the text of the `## name` section.
func section(md, name string) string {
	_, rest, ok := strings.Cut(md, "\n## "+name+"\n")
	if !ok {
		return ""
	}
	body, _, _ := strings.Cut(rest, "\n## ")
	return body
}

// anchor is GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes.
func anchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

func hasHeading(md, frag string) bool {
	for _, m := range regexp.MustCompile(`(?m)^#{1,6} (.+)$`).FindAllStringSubmatch(md, -1) {
		if anchor(m[1]) == frag {
			return true
		}
	}
	return false
}
