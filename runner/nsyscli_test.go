package runner

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	nsyscmd "github.com/sglprof/runner/nsys"
	"github.com/sglprof/runner/runner/proc"
)

// fakeNsys writes a shell script named nsys into a fresh directory and returns its absolute
// path. The script records its arguments (one per line) in args.txt beside itself, then runs
// body.
func fakeNsys(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "nsys")
	// ${0%/*} instead of dirname: some tests run the script with a PATH that has only nsys.
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"${0%/*}/args.txt\"\n" + body + "\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func recordedArgs(t *testing.T, nsys string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(filepath.Dir(nsys), "args.txt"))
	if err != nil {
		t.Fatalf("fake nsys was not run: %v", err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// exportBody behaves like `nsys export`: it writes the -o file.
const exportBody = `prev=""
for a in "$@"; do
  if [ "$prev" = "-o" ]; then out="$a"; fi
  prev="$a"
done
echo "Processing events..."
echo "SQLite" > "$out"`

func TestNsysCheck(t *testing.T) {
	tests := []struct{ out, want string }{
		{"NVIDIA Nsight Systems version 2024.5.1.113-245134619542v0", "2024.5.1.113-245134619542v0"},
		{"\n  NVIDIA Nsight Systems version 2022.2.1.31-5fe97ab\nextra", "2022.2.1.31-5fe97ab"},
		{"2026.4.1", "2026.4.1"},
		{"WARNING: CPU IP/backtrace sampling not supported\nNVIDIA Nsight Systems version 2023.4.4.54-234433681190v0", "2023.4.4.54-234433681190v0"},
	}
	for _, tt := range tests {
		nsys := fakeNsys(t, "printf '%s\\n' '"+tt.out+"'")
		got, err := nsyscmd.Check(context.Background(), proc.Command, []string{nsys})
		if err != nil {
			t.Fatal(err)
		}
		if got != tt.want {
			t.Errorf("Check with output %q = %q, want %q", tt.out, got, tt.want)
		}
		if diff := cmp.Diff([]string{"--version"}, recordedArgs(t, nsys)); diff != "" {
			t.Error(diff)
		}
	}
}

func TestNsysCheckCommandPrefix(t *testing.T) {
	// A multi-element command (e.g. a wrapper script plus its argument) is kept in front.
	nsys := fakeNsys(t, "echo NVIDIA Nsight Systems version 1.2.3")
	if _, err := nsyscmd.Check(context.Background(), proc.Command, []string{nsys, "--wrapper-arg"}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"--wrapper-arg", "--version"}, recordedArgs(t, nsys)); diff != "" {
		t.Error(diff)
	}
}

func TestNsysCheckNotOnPath(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // a PATH without nsys
	_, err := nsyscmd.Check(context.Background(), proc.Command, []string{"nsys"})
	if err == nil {
		t.Fatal("Check succeeded without nsys")
	}
	const want = `nsys not found on PATH; install Nsight Systems or drop "nsys" from profile.profilers`
	if !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q does not start with %q", err, want)
	}
	if !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("error %v does not wrap exec.ErrNotFound", err)
	}
}

func TestNsysCheckOnTempPath(t *testing.T) {
	nsys := fakeNsys(t, "echo NVIDIA Nsight Systems version 2025.1.1")
	t.Setenv("PATH", filepath.Dir(nsys))
	v, err := nsyscmd.Check(context.Background(), proc.Command, []string{"nsys"})
	if err != nil || v != "2025.1.1" {
		t.Fatalf("Check via PATH = %q, %v", v, err)
	}
}

func TestNsysCheckFailures(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nsys")
	notExec := filepath.Join(t.TempDir(), "nsys")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cmd  []string
		want string
	}{
		{"absolute path missing", []string{missing}, "nsys not found at " + missing + `; install Nsight Systems or drop "nsys" from profile.profilers`},
		{"not executable", []string{notExec}, "is not executable"},
		{"empty command", nil, "empty nsys command"},
		{"exit status", []string{fakeNsys(t, "echo 'libcupti.so: cannot open shared object file' >&2; exit 3")}, "libcupti.so: cannot open shared object file"},
		{"no output", []string{fakeNsys(t, "true")}, "printed nothing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := nsyscmd.Check(context.Background(), proc.Command, tt.cmd)
			if err == nil {
				t.Fatalf("Check = %q, want an error", v)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q lacks %q", err, tt.want)
			}
		})
	}
}

func TestNsysCheckTimeoutKillsHungNsys(t *testing.T) {
	// The fake starts a grandchild that would outlive a plain kill of the script; the process
	// group kill must take both down, and Check must return promptly.
	pidFile := filepath.Join(t.TempDir(), "pid")
	nsys := fakeNsys(t, "sleep 30 & echo $! > "+pidFile+"; wait")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := nsyscmd.Check(ctx, proc.Command, []string{nsys})
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want a deadline error", err)
	}
	if time.Since(start) > 4*time.Second {
		t.Errorf("Check took %v after its deadline (WaitDelay not needed when the group is killed)", time.Since(start))
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(string(b))
	deadline := time.Now().Add(5 * time.Second)
	for {
		// /proc/<pid> disappears once the killed grandchild is reaped by init.
		st, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil || strings.Contains(string(st), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("grandchild %s still running after the timeout", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// An nsys that leaves a process behind (`sleep 300 &`) and exits: Check still reads its
// version, and nothing of it is left once Check returned (it runs under runner/proc's
// supervisor, which sweeps what the probe left).
func TestNsysCheckLeavesNoProcess(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	nsys := fakeNsys(t, "sleep 300 & echo $! > "+pidFile+"; echo NVIDIA Nsight Systems version 2025.1.1")
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				syscall.Kill(pid, syscall.SIGKILL) // only when the test failed
			}
		}
	})
	v, err := nsyscmd.Check(context.Background(), proc.Command, []string{nsys})
	if err != nil || v != "2025.1.1" {
		t.Fatalf("Check = %q, %v", v, err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("pid %d, started by the stand-in nsys, outlived Check (kill 0: %v)", pid, err)
	}
}

func TestNsysExport(t *testing.T) {
	nsys := fakeNsys(t, exportBody)
	cell := t.TempDir()
	base, err := nsyscmd.PrepareReportDir(cell)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(base+".nsys-rep", []byte("report"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{base, base + ".nsys-rep"} {
		got, err := nsyscmd.Export(context.Background(), proc.Command, []string{nsys}, arg)
		if err != nil {
			t.Fatal(err)
		}
		if got != base+".sqlite" {
			t.Errorf("Export(%q) = %q", arg, got)
		}
		want := []string{"export", "--type", "sqlite", "--force-overwrite=true", "-o", base + ".sqlite", base + ".nsys-rep"}
		if diff := cmp.Diff(want, recordedArgs(t, nsys)); diff != "" {
			t.Errorf("argv mismatch (-want +got):\n%s", diff)
		}
		if b, err := os.ReadFile(got); err != nil || string(b) != "SQLite\n" {
			t.Errorf("export file %q: %v", b, err)
		}
	}
}

func TestNsysExportFailures(t *testing.T) {
	newReport := func(t *testing.T, content string) string {
		base := filepath.Join(t.TempDir(), "report")
		if content != "-" {
			if err := os.WriteFile(base+".nsys-rep", []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return base
	}
	tests := []struct {
		name, report, body string
		want               []string
		ran                bool
	}{
		{"no report", "-", exportBody, []string{"report.nsys-rep not found", "nsys wrote no report"}, false},
		{"empty report", "", exportBody, []string{"is empty", "delay"}, false},
		{"nsys fails", "r", "echo 'Processing events...'; echo 'ERROR: Importer error status: Wrong event order' >&2; exit 1",
			[]string{"nsys export failed", "exit status 1", "Wrong event order"}, true},
		{"nothing written", "r", "echo done", []string{"exited 0 but wrote no", "report.sqlite", "done"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nsys := fakeNsys(t, tt.body)
			base := newReport(t, tt.report)
			got, err := nsyscmd.Export(context.Background(), proc.Command, []string{nsys}, base)
			if err == nil {
				t.Fatalf("Export = %q, want an error", got)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			_, statErr := os.Stat(filepath.Join(filepath.Dir(nsys), "args.txt"))
			if ran := statErr == nil; ran != tt.ran {
				t.Errorf("nsys ran = %v, want %v", ran, tt.ran)
			}
		})
	}
}

func TestNsysExportTimeout(t *testing.T) {
	nsys := fakeNsys(t, "exec sleep 30")
	base := filepath.Join(t.TempDir(), "report")
	if err := os.WriteFile(base+".nsys-rep", []byte("r"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := nsyscmd.Export(ctx, proc.Command, []string{nsys}, base)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "nsys export") {
		t.Fatalf("error %v, want a deadline error naming the export", err)
	}
}

func TestNsysExportMissingBinary(t *testing.T) {
	base := filepath.Join(t.TempDir(), "report")
	if err := os.WriteFile(base+".nsys-rep", []byte("r"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", t.TempDir())
	_, err := nsyscmd.Export(context.Background(), proc.Command, []string{"nsys"}, base)
	if err == nil || !strings.HasPrefix(err.Error(), "nsys not found on PATH") {
		t.Fatalf("error %v", err)
	}
}
