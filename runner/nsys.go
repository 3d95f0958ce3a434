package runner

import (
	"context"
	"fmt"

	"github.com/sglprof/runner/nsys"
	"github.com/sglprof/runner/runner/proc"
)

// checkNsys makes sure nsys answers `--version` before the first cell starts, so a sweep does
// not discover a missing nsys halfway through. The PATH searched is the cells' one.
func checkNsys(ctx context.Context, cmd []string, env []string) (string, error) {
	if _, err := proc.LookPath(cmd[0], env); err != nil {
		return "", fmt.Errorf("nsys not found on PATH (%v); install Nsight Systems or drop \"nsys\" from profile.profilers", err)
	}
	return nsys.Check(ctx, proc.Command, cmd)
}
