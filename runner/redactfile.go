package runner

import (
	"fmt"

	"github.com/sglprof/runner/runner/rundir"
	"github.com/sglprof/runner/runner/secrets"
)

// writeRedactedJSON is rundir.WriteJSON for the files of a run directory that record commands
// and environments (cells.json, command.json, manifest.json): after the name-based redaction
// of the values themselves, the encoded file goes through the secrets catalogue, so a token
// passed as a plain argument or under an innocent variable name is not written down either.
func writeRedactedJSON(path string, v any) error {
	red, err := secrets.Default()
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return rundir.WriteJSON(path, v, red.JSON)
}
