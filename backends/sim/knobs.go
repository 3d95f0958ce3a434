package sim

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"

	"github.com/sglprof/runner/plans/infile"
)

// EnvKnobsFile names a file of simulator knobs read at start: one RUNNER_SIM_NAME=VALUE a line
// (the names and syntax of the environment knobs), blank lines and # comments allowed. It lets
// a file in a repository change what the simulator measures from one commit to the next, which
// is how `runner bisect` is tested without a GPU: the plan points it at the step's worktree.
const EnvKnobsFile = "RUNNER_SIM_KNOBS_FILE"

// maxKnobsFile bounds the knobs file: a handful of lines, never a large file read whole.
const maxKnobsFile = 64 << 10

// applyKnobsFile adds the knobs of env's RUNNER_SIM_KNOBS_FILE to env. A knob also set in the
// environment keeps the environment's value: the file is a default, and the runner's own
// per-repeat settings (the jitter seed) stay its own. A line that is not RUNNER_SIM_NAME=VALUE,
// or names RUNNER_SIM_KNOBS_FILE itself, is an error naming the file and line.
func applyKnobsFile(env map[string]string) error {
	path := env[EnvKnobsFile]
	if path == "" {
		return nil
	}
	data, err := infile.ReadFile(path, maxKnobsFile)
	if err != nil {
		return fmt.Errorf("%s: %w", EnvKnobsFile, err)
	}
	knobs, err := parseKnobs(data)
	if err != nil {
		return fmt.Errorf("%s %s: %w", EnvKnobsFile, path, err)
	}
	for k, v := range knobs {
		if _, set := env[k]; !set {
			env[k] = v
		}
	}
	return nil
}

// parseKnobs reads the lines of a knobs file.
func parseKnobs(data []byte) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || !strings.HasPrefix(k, "RUNNER_SIM_") || len(k) == len("RUNNER_SIM_") || strings.ContainsAny(k, " \t") {
			return nil, fmt.Errorf("line %d: want RUNNER_SIM_NAME=VALUE, got %q", n, line)
		}
		if k == EnvKnobsFile {
			return nil, fmt.Errorf("line %d: a knobs file cannot name another knobs file", n)
		}
		out[k] = strings.TrimSpace(v)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("a line longer than %d bytes: %w", bufio.MaxScanTokenSize, err)
	}
	return out, nil
}
