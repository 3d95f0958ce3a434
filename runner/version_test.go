package runner

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionFromBuildInfo(t *testing.T) {
	const rev = "4040857abcde0123456789abcdef0123456789ab"
	bi := func(version string, modified string) *debug.BuildInfo {
		b := &debug.BuildInfo{Main: debug.Module{Path: "github.com/sglprof/runner", Version: version}}
		b.Settings = []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}}
		if modified != "" {
			b.Settings = append(b.Settings, debug.BuildSetting{Key: "vcs.modified", Value: modified})
		}
		return b
	}
	cases := []struct {
		name string
		in   *debug.BuildInfo
		want string
	}{
		// Go 1.24+ stamps a pseudo-version holding the revision: it is printed as is.
		{"clean checkout", bi("v0.0.0-20261124221000-4040857abcde", "false"), "v0.0.0-20261124221000-4040857abcde"},
		{"dirty checkout", bi("v0.0.0-20261124221000-4040857abcde+dirty", "true"), "v0.0.0-20261124221000-4040857abcde+dirty"},
		// Without a module version (go build -buildvcs, older Go) the revision is added once.
		{"devel clean", bi("(devel)", "false"), "(devel)+4040857abcde"},
		{"devel dirty", bi("(devel)", "true"), "(devel)+4040857abcde.dirty"},
		{"tagged", bi("v1.2.3", "false"), "v1.2.3+4040857abcde"},
		{"no vcs", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "(devel)"},
		{"empty", &debug.BuildInfo{}, "(devel)"},
	}
	for _, c := range cases {
		got := versionFromBuildInfo(c.in)
		if got != c.want {
			t.Errorf("%s: versionFromBuildInfo = %q, want %q", c.name, got, c.want)
		}
		if n := strings.Count(got, "4040857abcde"); n > 1 {
			t.Errorf("%s: %q repeats the hash %d times", c.name, got, n)
		}
	}
}
