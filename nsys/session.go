package nsys

import (
	"context"
	"fmt"
	"strings"

	"github.com/sglprof/runner/plans"
)

// Interactive nsys sessions (Nsight Systems User Guide, "CLI Launch/Start/Stop/Shutdown
// Command Switch Options"): `nsys launch --session-new=NAME` starts an application with
// collection off; `nsys start --session=NAME` and `nsys stop --session=NAME` open and close a
// collection, and nsys writes the report at stop while the application keeps running;
// `nsys shutdown --session=NAME` ends the session. A server whose program has no
// cudaProfilerStart path of its own (sglang's diffusion server) is captured this way: the
// runner opens the collection right before the cell's measured requests and closes it right
// after them, so neither model loading nor warmup is in the report.

// Launch returns the argv that starts argv in the new nsys session named session, with
// collection off until SessionStart. The trace options are Wrap's: they belong to the launch.
func Launch(nsysCmd []string, opts plans.NSys, session string, argv []string) []string {
	graph := opts.CudaGraphTrace
	if graph == "" {
		graph = DefaultCudaGraphTrace
	}
	trace := opts.Trace
	if len(trace) == 0 {
		trace = DefaultTrace
	}
	out := append([]string(nil), nsysCmd...)
	out = append(out,
		"launch",
		"--session-new="+session,
		"--trace-fork-before-exec=true",
		"--cuda-graph-trace="+graph,
		"--trace="+strings.Join(trace, ","),
	)
	return append(out, argv...)
}

// SessionStartArgv is `nsys start` of session writing report (the base given to Export).
func SessionStartArgv(nsysCmd []string, session, report string) []string {
	return append(append([]string(nil), nsysCmd...), "start", "--session="+session, "--force-overwrite=true", "--output="+ReportPath(report))
}

// SessionStopArgv is `nsys stop` of session: the collection ends and the report is written.
func SessionStopArgv(nsysCmd []string, session string) []string {
	return append(append([]string(nil), nsysCmd...), "stop", "--session="+session)
}

// SessionShutdownArgv is `nsys shutdown` of session (its application is sent SIGTERM, nsys's
// default --kill for shutdown).
func SessionShutdownArgv(nsysCmd []string, session string) []string {
	return append(append([]string(nil), nsysCmd...), "shutdown", "--session="+session)
}

// Session runs one session command (SessionStartArgv, SessionStopArgv, SessionShutdownArgv)
// with env, which must be the environment the session's `nsys launch` ran with (nsys finds a
// session through it: its temporary directory, its user), and returns its error with the end
// of nsys's output, since that is where nsys explains it.
func Session(ctx context.Context, run Exec, argv []string, env []string) error {
	if len(argv) < 2 || argv[0] == "" {
		return fmt.Errorf("nsys: empty nsys command; %s", notFoundHint)
	}
	text, err := run(ctx, argv, env)
	if err != nil {
		verb := "session command"
		for _, a := range argv {
			if a == "start" || a == "stop" || a == "shutdown" {
				verb = a
			}
		}
		return describe(ctx, argv[:1], verb, err, text)
	}
	return nil
}
