package runner

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestLLMLauncherAsksTheInstalledSglang: an older `sglang serve` whose help names no
// --model-type gets its LLM servers started with the Python beside it and
// `-m sglang.launch_server`; the help is asked once per command and the choice is logged.
func TestLLMLauncherAsksTheInstalledSglang(t *testing.T) {
	dir := t.TempDir()
	count := filepath.Join(dir, "asked")
	script := "#!/bin/sh\necho x >> " + count + "\necho 'Usage: sglang serve --model-path <model-name-or-path> [additional-arguments]'\n"
	for name, body := range map[string]string{"sglang": script, "python": "#!/bin/sh\nexit 0\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var logBuf bytes.Buffer
	opts := &Options{Env: []string{"PATH=" + dir + ":/usr/bin:/bin"}, ProbeTimeout: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(&logBuf, nil))}
	ss := &serveSession{opts: opts}
	for range 2 {
		argv := ss.llmLauncher(context.Background(), []string{"sglang"})
		if !slices.Equal(argv, []string{filepath.Join(dir, "python"), "-m", "sglang.launch_server"}) {
			t.Fatalf("launcher %v; log: %s", argv, logBuf.String())
		}
	}
	if b, _ := os.ReadFile(count); strings.Count(string(b), "x") != 1 {
		t.Errorf("sglang serve --help asked %d times, want once", strings.Count(string(b), "x"))
	}
	if !strings.Contains(logBuf.String(), "does not mention --model-type") {
		t.Errorf("choice not logged: %s", logBuf.String())
	}
}
