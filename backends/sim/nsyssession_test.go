package sim

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The session commands behave as nsys's: a session exists only while its launch runs, a
// collection cannot start twice, and stop needs a started collection.
func TestNSysSessionErrors(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	ctx := context.Background()
	run := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		rc := NSys(ctx, args, map[string]string{}, &out, &errb)
		return rc, out.String() + errb.String()
	}
	if rc, out := run("start", "--session=nosuch", "-o", filepath.Join(t.TempDir(), "r")); rc == 0 || !strings.Contains(out, "session 'nosuch' does not exist") {
		t.Fatalf("start without a session: rc %d, %s", rc, out)
	}
	// A session as a running launch records it (this test process stands in for the launch).
	dir := sessionDir("s1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	act := filepath.Join(dir, "activity.jsonl")
	os.WriteFile(act, []byte(`{"k":"kernel","s":100,"e":200,"n":1}`+"\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "session.json"), []byte(`{"pid":`+itoa(os.Getpid())+`,"activity":"`+act+`","trace":"cuda","start_ns":1}`), 0o644)
	if rc, out := run("stop", "--session=s1"); rc == 0 || !strings.Contains(out, "no collection is started") {
		t.Fatalf("stop without start: rc %d, %s", rc, out)
	}
	rep := filepath.Join(t.TempDir(), "r.nsys-rep")
	if rc, out := run("start", "--session=s1", "--output="+rep); rc != 0 {
		t.Fatalf("start: rc %d, %s", rc, out)
	}
	if rc, out := run("start", "--session=s1", "--output="+rep); rc == 0 || !strings.Contains(out, "already started") {
		t.Fatalf("start twice: rc %d, %s", rc, out)
	}
	// Activity before start is not in the window; activity between start and stop is.
	f, _ := os.OpenFile(act, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"k":"kernel","s":300,"e":400,"n":1}` + "\n")
	f.Close()
	if rc, out := run("stop", "--session=s1"); rc != 0 {
		t.Fatalf("stop: rc %d, %s", rc, out)
	}
	r, err := readReport(rep)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kernels) != 1 || r.Kernels[0].Start != 300 {
		t.Fatalf("report kernels %+v, want only the one after start", r.Kernels)
	}
	if rc, _ := run("stop", "--session=s1"); rc == 0 {
		t.Fatal("a second stop succeeded")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
