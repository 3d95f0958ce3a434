package runner

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sglprof/runner/backends/sglang"
)

// listenForever listens on a free loopback port, prints it and waits to be killed.
func listenForever() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.Exit(1)
	}
	fmt.Println(ln.Addr().(*net.TCPAddr).Port)
	select {}
}

// The hint for a port held by a server an earlier run left behind names the server's process
// group, not its pid (`kill -TERM -4814` for group 4813). The listener here is not
// its group's leader, as a server under a wrapper or the supervisor is not.
func TestPortOwnerHintNamesProcessGroup(t *testing.T) {
	leader := exec.Command("sleep", "60")
	leader.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := leader.Start(); err != nil {
		t.Skip("cannot start sleep:", err)
	}
	pgid := leader.Process.Pid
	defer func() { _ = syscall.Kill(-pgid, syscall.SIGKILL); _ = leader.Wait() }()

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	srv := exec.Command(exe)
	srv.Env = append(os.Environ(), "RUNNER_TEST_LISTEN=1", sglang.EnvServerMarker+"=/runs/earlier#0")
	srv.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	if srv.Process.Pid == pgid {
		t.Fatal("the listener leads its group; the test needs it not to")
	}
	msg := describePortOwner(port, "/runs/this")
	if want := fmt.Sprintf("kill -TERM -%d`", pgid); !strings.Contains(msg, want) {
		t.Fatalf("hint = %q, want %q", msg, want)
	}
	if !strings.Contains(msg, "pid "+strconv.Itoa(srv.Process.Pid)) || !strings.Contains(msg, "/runs/earlier") {
		t.Fatalf("message = %q, want the listener's pid and its run", msg)
	}
}

// TestFreePortsSpans: a flag spanning N ports (the diffusion scheduler with --dp-size N, which
// --strict-ports checks at scheduler_port + r for each replica r) gets N consecutive free ports,
// none shared with another flag's or the HTTP port.
func TestFreePortsSpans(t *testing.T) {
	avoid, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	ports, err := freePorts([]int{3, 1, 2}, avoid)
	if err != nil {
		t.Fatal(err)
	}
	if len(ports) != 3 {
		t.Fatalf("ports %v", ports)
	}
	seen := map[int]bool{avoid: true}
	for i, span := range []int{3, 1, 2} {
		for r := range span {
			p := ports[i] + r
			if seen[p] {
				t.Errorf("port %d is in two runs (or is the HTTP port): %v", p, ports)
			}
			seen[p] = true
			if err := portFree(p); err != nil {
				t.Errorf("port %d of run %d is not free: %v", p, i, err)
			}
		}
	}
}
