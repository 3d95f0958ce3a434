package proc

import (
	"os"
	"path/filepath"
	"testing"
)

// LookPath searches the PATH of the environment it is given (the last PATH= wins, as in
// exec), not the runner's, and says in words what it did not find.
func TestLookPathUsesTheGivenPATH(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	prog := filepath.Join(b, "prog")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := LookPath("prog", []string{"PATH=" + a, "PATH=" + b}); err != nil || got != prog {
		t.Errorf("LookPath(prog) = %q, %v; want %s", got, err, prog)
	}
	if _, err := LookPath("prog", []string{"PATH=" + b, "PATH=" + a}); err == nil || err.Error() != "prog not found on PATH" {
		t.Errorf("LookPath(prog) with the other PATH last: %v, want prog not found on PATH", err)
	}
	if _, err := LookPath(filepath.Join(a, "prog"), nil); err == nil || err.Error() != filepath.Join(a, "prog")+" is not an executable file" {
		t.Errorf("LookPath(missing path): %v", err)
	}
	if got, err := LookPath(prog, nil); err != nil || got != prog {
		t.Errorf("LookPath(%s) = %q, %v", prog, got, err)
	}
}
