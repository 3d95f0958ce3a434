package nsys

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"time"
)

// CheckTimeout bounds `nsys --version`. nsys answers it in well under a second; a hang means
// a broken installation, and a sweep must not wait on it.
const CheckTimeout = 30 * time.Second

// notFoundHint is appended to every "nsys is missing" error: the runner calls Check before
// the first cell, so the user can still choose between installing nsys and dropping it.
const notFoundHint = `install Nsight Systems or drop "nsys" from profile.profilers`

// Check runs `<nsysCmd> --version` (bounded by CheckTimeout and ctx) and returns the version
// nsys reports, e.g. "2024.5.1.113-245134619542v0" from "NVIDIA Nsight Systems version
// 2024.5.1.113-245134619542v0" (the first line when no line has a "version" word). When nsys
// cannot be found the error says so and what to do; errors.Is(err, exec.ErrNotFound) or
// fs.ErrNotExist holds for it.
func Check(ctx context.Context, run Exec, nsysCmd []string) (string, error) {
	if len(nsysCmd) == 0 || nsysCmd[0] == "" {
		return "", errors.New("nsys: empty nsys command; " + notFoundHint)
	}
	ctx, cancel := context.WithTimeout(ctx, CheckTimeout)
	defer cancel()
	out, err := run(ctx, append(append([]string(nil), nsysCmd...), "--version"), nil)
	if err != nil {
		return "", describe(ctx, nsysCmd, "--version", err, out)
	}
	v := versionFromOutput(out)
	if v == "" {
		return "", fmt.Errorf("nsys: %s --version printed nothing; check the Nsight Systems installation", nsysCmd[0])
	}
	return v, nil
}

// versionFromOutput extracts the version from `nsys --version` output: the word after "version"
// on the first line that has one (stderr warnings may come first), else the first non-empty
// line.
func versionFromOutput(out string) string {
	first := ""
	for line := range strings.SplitSeq(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if first == "" {
			first = line
		}
		fields := strings.Fields(line)
		for i, f := range fields {
			if strings.EqualFold(f, "version") && i+1 < len(fields) {
				return fields[i+1]
			}
		}
	}
	return first
}

// Export converts a report into SQLite with
//
//	<nsysCmd> export --type sqlite --force-overwrite=true -o <base>.sqlite <base>.nsys-rep
//
// and returns the SQLite path. report is the base given to Wrap or the .nsys-rep path. ctx
// bounds the export (large reports take minutes; the caller chooses how long to wait). The
// error carries the end of nsys's output, since that is where nsys explains a failure.
func Export(ctx context.Context, run Exec, nsysCmd []string, report string) (string, error) {
	if len(nsysCmd) == 0 || nsysCmd[0] == "" {
		return "", errors.New("nsys: empty nsys command; " + notFoundHint)
	}
	rep := ReportPath(report)
	out := SQLitePath(report)
	st, err := os.Stat(rep)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("nsys: report %s not found: nsys wrote no report (did the application exit before [nsys] delay elapsed, or was nsys killed before it could write?): %w", rep, err)
	case err != nil:
		return "", fmt.Errorf("nsys: report %s: %w", rep, err)
	case st.Size() == 0:
		return "", fmt.Errorf("nsys: report %s is empty: collection never started (the application probably exited before [nsys] delay elapsed)", rep)
	}
	argv := append(append([]string(nil), nsysCmd...), "export", "--type", "sqlite", "--force-overwrite=true", "-o", out, rep)
	text, err := run(ctx, argv, nil)
	if err != nil {
		return "", describe(ctx, nsysCmd, "export", err, text)
	}
	if _, err := os.Stat(out); err != nil {
		return "", fmt.Errorf("nsys: export of %s exited 0 but wrote no %s; nsys said: %s", rep, out, quoteOutput(text))
	}
	return out, nil
}

// Exec runs one nsys command line to its end and returns the tail of its combined output
// (bounded, whatever nsys prints); a command that ran and failed returns an error that says how
// it ended, and one cut by ctx returns ctx's error. nsys only builds command lines and explains
// their failures: the runner passes proc.Command, which starts the process through its one
// process owner (under the supervisor, in a group of its own, stopped with everything it
// started when ctx ends), since this package sits below the runner and cannot import it.
type Exec func(ctx context.Context, argv, env []string) (string, error)

// describe turns a failed run into an error that says what to do.
func describe(ctx context.Context, nsysCmd []string, what string, err error, out string) error {
	name := nsysCmd[0]
	switch {
	case errors.Is(err, exec.ErrNotFound):
		return fmt.Errorf("nsys not found on PATH; %s (%w)", notFoundHint, err)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("nsys not found at %s; %s (%w)", name, notFoundHint, err)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("nsys at %s is not executable; fix its permissions or %s (%w)", name, notFoundHint, err)
	case ctx.Err() != nil:
		return fmt.Errorf("nsys %s: %w (nsys was killed); nsys said: %s", what, ctx.Err(), quoteOutput(out))
	}
	return fmt.Errorf("nsys %s failed (%w); nsys said: %s", what, err, quoteOutput(out))
}

func quoteOutput(out string) string {
	out = strings.TrimSpace(out)
	if out == "" {
		return "(nothing)"
	}
	return out
}
