package supervisor

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The record the supervisor writes by hand is the document encoding/json writes and reads:
// byte for byte what json.MarshalIndent gives for the same values, and read back the same,
// tokens with quotes, backslashes and control characters included.
func TestEncodeRecordIsJSON(t *testing.T) {
	type id struct {
		PID   int    `json:"pid"`
		Start uint64 `json:"start"`
	}
	type record struct {
		Supervisor id     `json:"supervisor"`
		Processes  []id   `json:"processes"`
		Token      string `json:"token"`
	}
	cases := []struct {
		sup   Proc
		ps    []Proc
		token string
	}{
		{Proc{12, 34}, nil, "00112233445566778899aabbccddeeff"},
		{Proc{1, 2}, []Proc{{3, 4}}, ""},
		{Proc{1 << 22, 1 << 40}, []Proc{{5, 6}, {7, 8}, {9, 18446744073709551615}}, "a\"b\\c\n\t\x01\x1f\b\f\ré"},
	}
	for _, tc := range cases {
		got := EncodeRecord(tc.sup, tc.ps, tc.token)
		want := record{Supervisor: id(tc.sup), Token: tc.token, Processes: []id{}}
		for _, p := range tc.ps {
			want.Processes = append(want.Processes, id(p))
		}
		wb, err := json.MarshalIndent(want, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		// encoding/json escapes <, > and & too; the tokens here hold none, so the bytes agree.
		if string(got) != string(wb)+"\n" {
			t.Errorf("EncodeRecord:\n%s\nwant (json.MarshalIndent):\n%s", got, wb)
		}
		var back record
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("the record does not parse: %v\n%s", err, got)
		}
		if back.Token != tc.token || back.Supervisor != want.Supervisor || len(back.Processes) != len(tc.ps) {
			t.Errorf("read back %+v, want %+v", back, want)
		}
	}
}

// LookPath answers as exec.LookPath does, with the supervisor's one difference: a relative
// result is used, not refused with exec.ErrDot.
func TestLookPathIsExecLookPath(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("prog", 0o755)
	write("noexec", 0o644)
	if err := os.Mkdir(filepath.Join(dir, "adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	names := []string{"prog", "noexec", "adir", "missing", "", ".", "..", "./prog", "./noexec", "./adir",
		"./missing", filepath.Join(dir, "prog"), filepath.Join(dir, "noexec"), "sh"}
	for _, path := range []string{dir, "", ".", ":" + dir, dir + ":", "/nonexistent:" + dir + "/", os.Getenv("PATH")} {
		t.Setenv("PATH", path)
		for _, name := range names {
			want, werr := exec.LookPath(name)
			if errors.Is(werr, exec.ErrDot) {
				werr = nil
			}
			got, gerr := LookPath(name, path)
			if (gerr == nil) != (werr == nil) {
				t.Errorf("PATH=%q LookPath(%q) = %q, %v; exec.LookPath: %q, %v", path, name, got, gerr, want, werr)
				continue
			}
			if gerr != nil {
				if gerr.Error() != werr.Error() {
					t.Errorf("PATH=%q LookPath(%q) error %q, exec.LookPath's %q", path, name, gerr, werr)
				}
				for _, target := range []error{errNotFound, fs.ErrPermission, syscall.EISDIR, syscall.EACCES, syscall.ENOENT} {
					wantIs := errors.Is(werr, target)
					if target == errNotFound {
						wantIs = errors.Is(werr, exec.ErrNotFound)
					}
					if errors.Is(gerr, target) != wantIs {
						t.Errorf("PATH=%q LookPath(%q): errors.Is(%v) = %v, exec.LookPath's %v", path, name, target, !wantIs, wantIs)
					}
				}
				continue
			}
			if filepath.Clean(got) != filepath.Clean(want) {
				t.Errorf("PATH=%q LookPath(%q) = %q, exec.LookPath: %q", path, name, got, want)
			}
		}
	}
}

// The package comment's rule: nothing that would initialise this package late. A new import
// of fmt, strings, os/exec, encoding/json or x/sys/unix fails here, and with it the promise
// that a supervisor stops before most of the binary's initialisers.
func TestImportsKeepInitEarly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		switch p {
		case "fmt", "strings", "os/exec", "encoding/json", "golang.org/x/sys/unix", "path/filepath", "reflect", "log/slog":
			t.Errorf("the supervisor imports %s (directly or not), which initialises late; see the package comment", p)
		}
	}
}
