package runner

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sglprof/runner/nsys"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/proc"
)

// checkNsys makes sure nsys answers `--version` before the first cell starts, so a sweep does
// not discover a missing nsys halfway through. The PATH searched is the cells' one. It returns
// the answer as the manifest's probe record, so the manifest need not ask nsys again.
func checkNsys(ctx context.Context, cmd []string, env []string) (rundir.Probe, error) {
	pr := rundir.Probe{Command: append(append([]string(nil), cmd...), "--version")}
	if _, err := proc.LookPath(cmd[0], env); err != nil {
		return pr, fmt.Errorf("nsys not found on PATH (%v); install Nsight Systems or drop \"nsys\" from profile.profilers", err)
	}
	start := time.Now()
	run := func(ctx context.Context, argv, env []string) (string, error) {
		out, err := proc.Command(ctx, argv, env)
		pr.WallNS = time.Since(start).Nanoseconds()
		pr.Output = strings.TrimSpace(out)
		if len(pr.Output) > probeOutputCap {
			pr.Output = pr.Output[:probeOutputCap] + "…"
		}
		return out, err
	}
	_, err := nsys.Check(ctx, run, cmd)
	pr.Available = err == nil
	return pr, err
}
