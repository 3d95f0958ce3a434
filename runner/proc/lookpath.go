package proc

import (
	"fmt"
	"strings"

	"github.com/sglprof/runner/runner/proc/internal/supervisor"
)

// LookPath finds name on env's PATH (not the runner's own), so the program a cell, a probe or
// an export would run is the one checked beforehand. A name with a slash is taken as a path.
// The rules are the supervisor's (supervisor.LookPath: exec.LookPath's, on a PATH of our
// choosing), so the program checked here is the one the supervisor then starts; the process
// owner decides which program a command line names.
func LookPath(name string, env []string) (string, error) {
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v // the last one wins, as in exec
		}
	}
	p, err := supervisor.LookPath(name, path)
	switch {
	case err == nil:
		return p, nil
	case strings.Contains(name, "/"):
		return "", fmt.Errorf("%s is not an executable file", name)
	default:
		return "", fmt.Errorf("%s not found on PATH", name)
	}
}
