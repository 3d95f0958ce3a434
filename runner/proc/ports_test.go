package proc

import (
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestListenInodes(t *testing.T) {
	tcp := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:7A69 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0000000000000000 100 0 0 10 0
   1: 0100007F:7A69 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 4343 1 0000000000000000 20 4 30 10 -1
   2: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 99 1 0000000000000000 100 0 0 10 0
garbage
`
	got := listenInodes([]byte(tcp), 31337)
	if len(got) != 1 || got[0] != "4242" {
		t.Fatalf("inodes %v", got)
	}
	tcp6 := "  sl  local_address                         remote_address                        st\n   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 777 1\n"
	if got := listenInodes([]byte(tcp6), 8080); len(got) != 1 || got[0] != "777" {
		t.Fatalf("tcp6 inodes %v", got)
	}
}

func FuzzListenInodes(f *testing.F) {
	f.Add([]byte("h\n 0: 0100007F:7A69 00000000:0000 0A 0 0 0 0 0 4242 1\n"), 31337)
	f.Add([]byte(""), 0)
	f.Add([]byte("h\n0: :::: 0A a b c d e f g\n"), 1)
	f.Fuzz(func(t *testing.T, b []byte, port int) {
		for _, ino := range listenInodes(b, port) {
			if ino == "" || ino == "0" {
				t.Fatalf("empty inode from %q", b)
			}
		}
	})
}

func TestPortOwnerFindsOurListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pid, ok := PortOwner(ln.Addr().(*net.TCPAddr).Port)
	if !ok || pid != os.Getpid() {
		t.Fatalf("owner %d %v, want %d", pid, ok, os.Getpid())
	}
	if !strings.Contains(Cmdline(pid), os.Args[0]) {
		t.Fatalf("cmdline %q", Cmdline(pid))
	}
}

func TestKillMarkedKillsOnlyMarkedProcesses(t *testing.T) {
	mark := "RUNNER_PROC_TEST_MARK"
	value := t.Name() + strconv.Itoa(os.Getpid())
	marked := exec.Command("sleep", "30")
	marked.Env = append(os.Environ(), mark+"="+value)
	other := exec.Command("sleep", "30")
	other.Env = append(os.Environ(), mark+"=other")
	for _, c := range []*exec.Cmd{marked, other} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	defer other.Process.Kill()
	// Between fork and execve /proc/<pid>/environ is still the parent's: wait for the exec of
	// both children (their environment carries the mark) before asking who is marked.
	deadline := time.Now().Add(10 * time.Second)
	for EnvOf(marked.Process.Pid, mark) != value || EnvOf(other.Process.Pid, mark) != "other" {
		if time.Now().After(deadline) {
			t.Fatalf("EnvOf = %q after 10s", EnvOf(marked.Process.Pid, mark))
		}
		runtime.Gosched()
	}
	if got := KillMarked(mark, value); !slices.Equal(got, []int{marked.Process.Pid}) {
		t.Fatalf("killed %v, want [%d]", got, marked.Process.Pid)
	}
	if err := marked.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("marked process: %v", err)
	}
	if other.ProcessState != nil || syscall.Kill(other.Process.Pid, 0) != nil {
		t.Fatal("an unmarked process was killed")
	}
	other.Process.Kill()
	other.Wait()
}
