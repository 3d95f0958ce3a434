package runner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/runner/exitcode"
)

// checkTraceSpace refuses a run whose torch cells, under [profile] max_trace_mb, may write
// more traces than the output directory's file system has free: each cell's profiled steps
// (already capped by the budget) at plans.TraceMBPerStep each. Without a budget nothing is
// estimated, so nothing is refused: the estimate is a stated figure, not a measurement, and a
// plan that set no budget asked for none.
func checkTraceSpace(cells []plans.Cell, output string, opts *Options) error {
	var needMB int64
	var n int
	budget := 0
	for i := range cells {
		c := cells[i]
		if c.Profile.MaxTraceMB <= 0 {
			continue
		}
		budget = c.Profile.MaxTraceMB
		if steps, _ := plans.TraceSteps(&c); steps > 0 {
			needMB += int64(steps) * plans.TraceMBPerStep
			n++
		}
	}
	if needMB == 0 {
		return nil
	}
	free := opts.freeSpace
	if free == nil {
		free = statFree
	}
	dir := existingAncestor(output)
	avail, err := free(dir)
	if err != nil {
		opts.Logger.Warn("free space of the output directory unknown; the trace estimate is not checked", "dir", dir, "err", err)
		return nil
	}
	if uint64(needMB)<<20 > avail {
		return &exitcode.UsageError{Err: fmt.Errorf(
			"the %d torch cells may write up to %d MB of traces (their profiled steps at an estimated %d MB each, within [profile] max_trace_mb = %d), but %s has %d MB free; nothing was run: free space, point output_dir (or --output) elsewhere, lower max_trace_mb, or profile fewer cells",
			n, needMB, plans.TraceMBPerStep, budget, dir, avail>>20)}
	}
	return nil
}

// statFree is the space an unprivileged writer may use on the file system holding dir.
func statFree(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// existingAncestor is dir, or its nearest ancestor that exists (a first run's output
// directory does not exist yet; its file system is its parent's).
func existingAncestor(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return dir
	}
	for {
		if _, err := os.Stat(abs); !errors.Is(err, fs.ErrNotExist) {
			return abs
		}
		parent := filepath.Dir(abs)
		if parent == abs {
			return abs
		}
		abs = parent
	}
}
