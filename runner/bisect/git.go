package bisect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sglprof/runner/runner/proc"
)

// gitTimeout bounds one git command: a rev-list of a long history or the checkout of a large
// tree takes seconds; anything beyond a few minutes is a stuck filesystem or lock.
const gitTimeout = 5 * time.Minute

// Repo is a git repository the bisection reads and checks commits of out. The repository is
// the user's and is treated as untrusted: git runs with hooks and the file-system monitor off
// (a repository's config can name programs for both), and nothing touches the user's checkout,
// HEAD, index or uncommitted files: each commit is checked out detached in a worktree of its
// own, in a directory the runner creates and removes.
type Repo struct {
	// Dir is the repository (any directory inside its work tree).
	Dir string
	// Env is the environment git runs with (KEY=VALUE), the run's own (its PATH finds git);
	// this package reads no environment itself.
	Env    []string
	Logger *slog.Logger
}

// gitArgs are the options every git command gets before its own: no hooks run (a post-checkout
// hook would run at every worktree add), no fsmonitor program, no pager.
var gitArgs = []string{"git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "--no-pager"}

// git runs one git command in the repository and returns its standard output.
func (r Repo) git(ctx context.Context, args ...string) (string, error) {
	argv := append(append(append([]string(nil), gitArgs...), "-C", r.Dir), args...)
	// No prompt for credentials; no optional locks on the user's index (git status would
	// otherwise refresh it).
	env := append(append([]string(nil), r.Env...), "GIT_TERMINAL_PROMPT=0", "GIT_OPTIONAL_LOCKS=0")
	log := r.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	out, res := proc.Probe(ctx, proc.Spec{Argv: argv, Env: env, Timeout: gitTimeout}, 0, log)
	cmd := "git " + strings.Join(args, " ")
	switch {
	case res.Interrupted:
		return "", ctx.Err()
	case res.StartErr != nil:
		return "", fmt.Errorf("%s: %w; install git or put it on PATH", cmd, res.StartErr)
	case res.TimedOut:
		return "", fmt.Errorf("%s: no answer within %s", cmd, gitTimeout)
	case out.Cut:
		return "", fmt.Errorf("%s: more output than the runner reads (%d bytes)", cmd, proc.ProbeLimit)
	case res.ExitCode != 0:
		msg := strings.TrimSpace(string(out.Stderr))
		if msg == "" {
			msg = fmt.Sprintf("exit status %d", res.ExitCode)
		}
		return "", fmt.Errorf("%s: %s", cmd, msg)
	}
	return string(out.Stdout), nil
}

// Resolve returns the full hash of the commit rev names.
func (r Repo) Resolve(ctx context.Context, rev string) (string, error) {
	if strings.HasPrefix(rev, "-") {
		return "", fmt.Errorf("revision %q starts with '-'; name a commit, branch or tag", rev)
	}
	out, err := r.git(ctx, "rev-parse", "--verify", "--quiet", "--end-of-options", rev+"^{commit}")
	if err != nil {
		return "", fmt.Errorf("%s is not a commit of %s (%v); name a commit, branch or tag of the repository", rev, r.Dir, err)
	}
	return strings.TrimSpace(out), nil
}

// Range lists the commits from good to bad along bad's first-parent chain, good first: the
// commits a bisection chooses among. good must be an ancestor of bad. A merge counts as one
// commit (the first-parent chain is what the branch saw land), unlike git bisect, which also
// walks the merged branch.
func (r Repo) Range(ctx context.Context, good, bad string) ([]Commit, error) {
	g, err := r.Resolve(ctx, good)
	if err != nil {
		return nil, err
	}
	b, err := r.Resolve(ctx, bad)
	if err != nil {
		return nil, err
	}
	if g == b {
		return nil, fmt.Errorf("--good and --bad name the same commit %.12s", g)
	}
	if _, err := r.git(ctx, "merge-base", "--is-ancestor", g, b); err != nil {
		return nil, fmt.Errorf("the good commit %.12s is not an ancestor of the bad commit %.12s; pass an older --good", g, b)
	}
	const format = "--format=%H%x00%aI%x00%s"
	first, err := r.git(ctx, "log", "-1", format, g)
	if err != nil {
		return nil, err
	}
	rest, err := r.git(ctx, "log", "--first-parent", "--reverse", format, g+".."+b)
	if err != nil {
		return nil, err
	}
	out := parseLog(first + rest)
	if len(out) < 2 || out[0].Hash != g || out[len(out)-1].Hash != b {
		return nil, fmt.Errorf("could not list the commits from %.12s to %.12s along the first-parent chain", g, b)
	}
	return out, nil
}

// parseLog reads git log lines of the form hash NUL author-date NUL subject; a line of another
// form is left out (a subject cannot hold a newline, so lines are commits).
func parseLog(text string) []Commit {
	var out []Commit
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		parts := strings.SplitN(line, "\x00", 3)
		if len(parts) != 3 || parts[0] == "" {
			continue
		}
		c := Commit{Hash: parts[0], Subject: parts[2]}
		c.Date, _ = time.Parse(time.RFC3339, parts[1])
		out = append(out, c)
	}
	return out
}

// Worktree is one commit checked out for a step.
type Worktree struct {
	Dir  string
	repo Repo
}

// Checkout checks commit out, detached, in a new directory under parent. Remove it on every
// path out (Ctrl-C included).
func (r Repo) Checkout(ctx context.Context, parent, commit string) (*Worktree, error) {
	// Absolute: the path reaches the step's cells ({worktree}), which run in other directories.
	parent, err := filepath.Abs(parent)
	if err != nil {
		return nil, fmt.Errorf("worktree directory: %w", err)
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("worktree directory: %w", err)
	}
	dir, err := os.MkdirTemp(parent, "worktree-"+commit[:min(12, len(commit))]+"-")
	if err != nil {
		return nil, fmt.Errorf("worktree directory: %w", err)
	}
	// git worktree add wants a directory that does not exist or is empty: MkdirTemp gives a
	// name nobody else holds.
	if _, err := r.git(ctx, "worktree", "add", "--detach", "--quiet", dir, commit); err != nil {
		w := &Worktree{Dir: dir, repo: r}
		return nil, errors.Join(fmt.Errorf("check out %.12s: %w", commit, err), w.Remove())
	}
	return &Worktree{Dir: dir, repo: r}, nil
}

// Remove deletes the worktree and git's record of it. It runs on a context of its own (the
// bisection's may be cancelled already: removing is what Ctrl-C asks for).
func (w *Worktree) Remove() error {
	ctx, cancel := context.WithTimeout(context.Background(), gitTimeout)
	defer cancel()
	_, err := w.repo.git(ctx, "worktree", "remove", "--force", "--force", w.Dir)
	if _, serr := os.Stat(w.Dir); err != nil || serr == nil {
		// The checkout failed half-way, or git refused: remove the directory ourselves and let
		// git forget the worktree it no longer finds.
		rerr := os.RemoveAll(w.Dir)
		_, perr := w.repo.git(ctx, "worktree", "prune")
		if rerr != nil || perr != nil {
			return fmt.Errorf("remove worktree %s: %w", w.Dir, errors.Join(err, rerr, perr))
		}
	}
	return nil
}

// InstallResult says how the install command of a step ended.
type InstallResult struct {
	// Failed says why the commit could not be installed ("" on success).
	Failed string
}

// Install runs the user's install command in the worktree with sh -c, its output in logPath,
// stopped after timeout. A failure is not an error: the commit is skipped; an error is
// returned only for ctx's end and a log that cannot be created.
func Install(ctx context.Context, w *Worktree, command, logPath string, env []string, timeout time.Duration, log *slog.Logger) (InstallResult, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return InstallResult{}, fmt.Errorf("install log: %w", err)
	}
	f, err := os.Create(logPath)
	if err != nil {
		return InstallResult{}, fmt.Errorf("install log: %w", err)
	}
	defer f.Close()
	res := proc.Run(ctx, proc.Spec{Argv: []string{"sh", "-c", command}, Env: env, Dir: w.Dir, Log: f, Timeout: timeout}, log)
	switch {
	case res.Interrupted:
		return InstallResult{}, ctx.Err()
	case res.StartErr != nil:
		return InstallResult{Failed: fmt.Sprintf("install command did not start: %v (log %s)", res.StartErr, logPath)}, nil
	case res.TimedOut:
		return InstallResult{Failed: fmt.Sprintf("install command timed out after %s (log %s)", timeout, logPath)}, nil
	case res.Signal != "":
		return InstallResult{Failed: fmt.Sprintf("install command killed by %s (log %s)", res.Signal, logPath)}, nil
	case res.ExitCode != 0:
		return InstallResult{Failed: fmt.Sprintf("install command failed with exit status %d (log %s)", res.ExitCode, logPath)}, nil
	}
	return InstallResult{}, nil
}
