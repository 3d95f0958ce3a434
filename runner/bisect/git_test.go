package bisect

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sglprof/runner/runner/proc"
)

// makeRepo writes a repository of n commits ("commit 1" … "commit n") with git fast-import, in
// one git process: commit k's knobs file holds a slowdown from commit stepAt on. The checkout
// is on branch main with an uncommitted file, and a post-checkout hook that would leave a
// marker if any hook ran.
func makeRepo(t *testing.T, n, stepAt int) string {
	t.Helper()
	if _, err := proc.LookPath("git", os.Environ()); err != nil {
		t.Skip("git not on PATH")
	}
	dir := t.TempDir()
	var s strings.Builder
	for k := 1; k <= n; k++ {
		knobs := "# simulator knobs\n"
		if k >= stepAt {
			knobs += "RUNNER_SIM_SLOWDOWN=DenoisingStage=1.10\n"
		}
		fmt.Fprintf(&s, "commit refs/heads/main\nmark :%d\ncommitter T <t@example.com> %d +0000\ndata %d\ncommit %d\n", k, 1700000000+k*60, len(fmt.Sprint("commit ", k)), k)
		if k > 1 {
			fmt.Fprintf(&s, "from :%d\n", k-1)
		}
		fmt.Fprintf(&s, "M 644 inline knobs\ndata %d\n%s\n", len(knobs), knobs)
	}
	stream := filepath.Join(t.TempDir(), "stream")
	if err := os.WriteFile(stream, []byte(s.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `set -e; cd "$1"; git init -q -b main .; git fast-import --quiet < "$2"; git checkout -q main
mkdir -p .git/hooks; printf '#!/bin/sh\ntouch "$0.ran"\n' > .git/hooks/post-checkout; chmod +x .git/hooks/post-checkout
echo draft > uncommitted.txt`
	if out, err := proc.Command(t.Context(), []string{"sh", "-c", script, "sh", dir, stream}, nil); err != nil {
		t.Fatalf("make the repository: %v\n%s", err, out)
	}
	return dir
}

func TestRangeCheckoutAndRemoveLeaveTheUsersCheckoutAlone(t *testing.T) {
	dir := makeRepo(t, 6, 4)
	r := Repo{Dir: dir, Env: os.Environ()}
	ctx := t.Context()
	before, err := r.git(ctx, "rev-parse", "HEAD", "--symbolic-full-name", "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	commits, err := r.Range(ctx, "main~5", "main")
	if err != nil {
		t.Fatal(err)
	}
	if len(commits) != 6 || commits[0].Subject != "commit 1" || commits[5].Subject != "commit 6" || len(commits[3].Hash) != 40 {
		t.Fatalf("range = %+v, want commits 1..6 with full hashes", commits)
	}
	if commits[0].Date.IsZero() {
		t.Error("no author date")
	}
	w, err := r.Checkout(ctx, filepath.Join(t.TempDir(), "wt"), commits[3].Hash)
	if err != nil {
		t.Fatal(err)
	}
	knobs, err := os.ReadFile(filepath.Join(w.Dir, "knobs"))
	if err != nil || !strings.Contains(string(knobs), "DenoisingStage=1.10") {
		t.Fatalf("worktree knobs = %q, %v; want commit 4's slowdown", knobs, err)
	}
	if err := w.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(w.Dir); !os.IsNotExist(err) {
		t.Errorf("worktree %s still there: %v", w.Dir, err)
	}
	after, _ := r.git(ctx, "rev-parse", "HEAD", "--symbolic-full-name", "HEAD")
	if after != before {
		t.Errorf("HEAD moved: %q, was %q", after, before)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "uncommitted.txt")); err != nil || string(b) != "draft\n" {
		t.Errorf("uncommitted file = %q, %v", b, err)
	}
	if list, _ := r.git(ctx, "worktree", "list", "--porcelain"); strings.Count(list, "worktree ") != 1 {
		t.Errorf("git still lists other worktrees:\n%s", list)
	}
	if _, err := os.Stat(filepath.Join(dir, ".git/hooks/post-checkout.ran")); err == nil {
		t.Error("the repository's post-checkout hook ran")
	}
	if _, err := r.Range(ctx, "main", "main~2"); err == nil || !strings.Contains(err.Error(), "not an ancestor") {
		t.Errorf("reversed range: err = %v", err)
	}
	if _, err := r.Range(ctx, "--output=/tmp/x", "main"); err == nil || !strings.Contains(err.Error(), "starts with '-'") {
		t.Errorf("option as revision: err = %v", err)
	}
}

func TestInstallStoppedByCancelLeavesNothingRunning(t *testing.T) {
	dir := makeRepo(t, 2, 9)
	r := Repo{Dir: dir, Env: os.Environ()}
	w, err := r.Checkout(t.Context(), filepath.Join(t.TempDir(), "wt"), "main")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	marker := filepath.Join(t.TempDir(), "started")
	go func() {
		for range 500 {
			if _, err := os.Stat(marker); err == nil {
				cancel()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	logPath := filepath.Join(t.TempDir(), "install.log")
	_, err = Install(ctx, w, "touch "+marker+"; exec sleep 60", logPath, nil, time.Minute, nil)
	if err == nil {
		t.Fatal("an interrupted install returned no error")
	}
	if err := w.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(w.Dir); !os.IsNotExist(err) {
		t.Errorf("worktree still there after the interrupted install: %v", err)
	}
	res, err := Install(t.Context(), &Worktree{Dir: dir}, "echo broken >&2; exit 3", logPath, nil, time.Minute, nil)
	if err != nil || !strings.Contains(res.Failed, "exit status 3") {
		t.Errorf("failed install: %+v, %v", res, err)
	}
	if b, _ := os.ReadFile(logPath); !strings.Contains(string(b), "broken") {
		t.Errorf("install log = %q, want the command's output", b)
	}
}
