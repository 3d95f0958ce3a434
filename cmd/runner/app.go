package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/urfave/cli/v3"
	"golang.org/x/term"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/plans/infile"
	"github.com/sglprof/runner/runner"
	"github.com/sglprof/runner/runner/exitcode"
	"github.com/sglprof/runner/runner/proc"
)

// stdio is the process's standard streams, injected so commands can be tested in-process.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

// exitError carries an exit code from a command to run.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }

// usageErr marks a command-line mistake (exit 2).
func usageErr(format string, a ...any) error {
	return &exitError{code: exitcode.Usage, err: fmt.Errorf(format, a...)}
}

// run is the whole program: it builds the CLI, runs it and maps the outcome to an exit code.
func run(args []string, io stdio) int {
	ctx := context.Background()
	// The simulators handle signals themselves, as the programs they imitate do; everything
	// else turns SIGINT/SIGTERM into a cancelled context so cells are stopped and recorded.
	if len(args) < 2 || args[1] != "sim" {
		var stop context.CancelFunc
		ctx, stop = stopOnSignals(ctx)
		defer stop()
	}
	app := newApp(io)
	if err := unknownCommand(app, args); err != nil {
		return exitCode(err, io.err)
	}
	quietUsage(app.Commands)
	err := app.Run(ctx, permuteArgs(app, args))
	return exitStatus(ctx, err, io.err)
}

// exitStatus is exitCode, except that a command stopped by a signal exits with that signal's
// status whatever path its stop took (a cancelled read, a run's summary): 130 for Ctrl-C, 143
// for SIGTERM (runner.InterruptedExit of ctx, the context stopOnSignals cancelled).
func exitStatus(ctx context.Context, err error, stderr io.Writer) int {
	code := exitCode(err, stderr)
	if code == exitcode.Interrupted {
		code = runner.InterruptedExit(ctx)
	}
	return code
}

// stopSignals are the signals that stop the runner, each with the exit status it calls for.
// SIGTERM is Ctrl-C in every respect (the context is cancelled, cells are stopped through the
// stop ladder and recorded as interrupted, a second signal kills what is still stopping)
// except the exit status, 128+15, so whoever sent it sees its own signal.
var stopSignals = map[os.Signal]*runner.Stopped{
	syscall.SIGINT:  {Signal: "SIGINT", ExitCode: exitcode.Interrupted},
	syscall.SIGTERM: {Signal: "SIGTERM", ExitCode: exitcode.Terminated},
}

// stopOnSignals cancels ctx on the first SIGINT/SIGTERM, with the signal's runner.Stopped as
// the cause, and, on the second, tells the processes being stopped to skip the rest of their
// grace and die now (proc.WithKill).
func stopOnSignals(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, kill := proc.WithKill(ctx)
	ctx, cancel := context.WithCancelCause(ctx)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		for n := 0; ; n++ {
			var sig os.Signal
			select {
			case sig = <-sigs:
			case <-done:
				return
			}
			if n == 0 {
				cancel(stopSignals[sig])
			} else {
				kill()
			}
		}
	}()
	return ctx, func() { signal.Stop(sigs); close(done); cancel(nil) }
}

func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintf(stderr, "runner: %v\n", ee.err)
		}
		return ee.code
	}
	var pe *plans.Error
	var ue *exitcode.UsageError
	// A file that is not a regular file, or too large to be what it should be (plans/infile,
	// the one reader), is unusable input, as regularInput's refusals are.
	if errors.As(err, &pe) || errors.As(err, &ue) || errors.Is(err, infile.ErrNotRegular) || errors.Is(err, infile.ErrTooLarge) {
		fmt.Fprintf(stderr, "runner: %v\n", err)
		return exitcode.Usage
	}
	if errors.Is(err, context.Canceled) {
		fmt.Fprintln(stderr, "runner: interrupted")
		return exitcode.Interrupted
	}
	msg := err.Error()
	// urfave/cli reports flag-parsing problems as plain errors; they are usage errors.
	if strings.HasPrefix(msg, "flag provided but not defined") || strings.HasPrefix(msg, "invalid value") ||
		strings.Contains(msg, "flag needs an argument") || strings.HasPrefix(msg, "No help topic") {
		fmt.Fprintf(stderr, "runner: %v\n", err)
		return exitcode.Usage
	}
	fmt.Fprintf(stderr, "runner: %v\n", err)
	return exitcode.Error
}

func newApp(io stdio) *cli.Command {
	return &cli.Command{
		Name:      "runner",
		Usage:     "reproducible sglang benchmark-and-profile runs, and triage of what the profilers wrote",
		Version:   runner.RunnerVersion(),
		Reader:    io.in,
		Writer:    io.out,
		ErrWriter: io.err,
		// urfave/cli would call os.Exit itself; exit codes are mapped in run instead.
		ExitErrHandler:  func(context.Context, *cli.Command, error) {},
		HideHelpCommand: true,
		Suggest:         true,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "log-format", Value: "text", Usage: "diagnostics format on stderr: text or json"},
			&cli.StringFlag{Name: "log-level", Value: "warn", Usage: "diagnostics level: debug, info, warn or error"},
		},
		Commands: []*cli.Command{
			runCommand(io),
			planCommand(io),
			triageCommand(io),
			traceCommand(io),
			versionCommand(io),
			bundleCommand(io),
			replayCommand(io),
			simCommand(io),
			loadClientCommand(),
			execCellCommand(io),
			compareCommand(io),
			historyCommand(io),
			reportCommand(io),
			exportCommand(io),
			bisectCommand(io),
			completionCommand(io),
		},
		OnUsageError: func(_ context.Context, _ *cli.Command, err error, _ bool) error {
			return &exitError{code: exitcode.Usage, err: err}
		},
		// The global flags are checked once for every command, also those that log nothing.
		Before: func(ctx context.Context, c *cli.Command) (context.Context, error) {
			_, err := logger(c, io.err)
			return ctx, err
		},
	}
}

// logger builds the diagnostics logger from the global flags.
func logger(c *cli.Command, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return nil, usageErr("--log-level: %v", err)
	}
	ho := &slog.HandlerOptions{Level: level}
	switch c.String("log-format") {
	case "text":
		return slog.New(slog.NewTextHandler(w, ho)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, ho)), nil
	default:
		return nil, usageErr("--log-format must be text or json, not %q", c.String("log-format"))
	}
}

// positional returns the command's positional arguments, checking their count. Flags written
// after them were already moved in front by permuteArgs; what still starts with a dash here
// came after a `--` and is taken as a name.
func positional(c *cli.Command, min, max int, what string) ([]string, error) {
	args := c.Args().Slice()
	if len(args) < min || (max >= 0 && len(args) > max) {
		return nil, usageErr("usage: runner %s [flags] %s", c.Name, what)
	}
	return args, nil
}

// isTerminal reports whether w is a terminal (for the progress bar).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// loadPlan reads a plan; every failure to read it is the user's to fix (exit 2).
func loadPlan(path string) (*plans.Plan, error) {
	if err := regularInput(path, "pass a plan file"); err != nil {
		return nil, err
	}
	p, err := plans.Load(path)
	if err != nil {
		var pe *plans.Error
		if errors.As(err, &pe) {
			return nil, err
		}
		return nil, &exitError{code: exitcode.Usage, err: err}
	}
	return p, nil
}

// regularInput refuses, with exit 2, an input path that exists and is neither a regular file
// nor a directory (a FIFO, a device, a socket): reading it could block forever, past Ctrl-C,
// and a plan, trace, perf dump or bundle is a file. hint says what to pass instead. A path
// that does not exist is left to the reader, whose error names it.
func regularInput(path, hint string) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return nil
	}
	if err := infile.Check(path); errors.Is(err, infile.ErrNotRegular) {
		return usageErr("%v; %s", err, hint)
	}
	return nil
}

// interruptible returns an action that ends at Ctrl-C even while its work is inside a loop or
// a read that does not watch the context (a plan being judged, a trace being parsed): the work
// runs in a goroutine and the action returns the context's error, exit 130, as soon as it is
// done. Only for commands that write nothing but their standard output, which may be cut.
func interruptible(action cli.ActionFunc) cli.ActionFunc {
	return func(ctx context.Context, c *cli.Command) error {
		_, err := interruptibly(ctx, func() (struct{}, error) { return struct{}{}, action(ctx, c) })
		return err
	}
}

// interruptibly runs a read-only phase of a command (interruptible's rule) and returns its
// result, or the context's error as soon as the context is done: a command that writes files
// afterwards (runner report) reads under it and writes only once it returned.
func interruptibly[T any](ctx context.Context, work func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := work()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}
