package proc

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Issue 14: a grandchild that leaves the process group and the session (setsid) survived the
// cell and kept its port. Under the supervisor, a cell that ends normally takes every
// descendant with it, the escapee included.
func TestSetsidGrandchildDiesWithTheCell(t *testing.T) {
	needSh(t)
	if _, err := os.Stat("/usr/bin/setsid"); err != nil {
		t.Skip("no setsid")
	}
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "log.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pidFile := filepath.Join(dir, "pid")
	script := `setsid /bin/sh -c 'echo $$ > ` + pidFile + `.tmp; mv ` + pidFile + `.tmp ` + pidFile + `; exec sleep 3600' &
while [ ! -s ` + pidFile + ` ]; do sleep 0.01; done; echo main done`
	res := Run(context.Background(), Spec{Argv: []string{"/bin/sh", "-c", script}, Log: f, OnLine: func(Line) {}}, testLogger(t))
	if res.ExitCode != 0 {
		t.Fatalf("exit %d", res.ExitCode)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil || pid <= 0 {
		t.Fatalf("pid file %q", b)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if st, ok := ReadStat(pid); ok && st.PGRP == syscall.Getpgrp() {
		t.Fatal("the grandchild did not leave the group; the test proves nothing")
	}
	waitFor(t, 5*time.Second, "the setsid grandchild to be killed", func() bool { return gone(pid) })
}
