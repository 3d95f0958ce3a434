package proc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// The process table seen from the outside: who listens on a port, what a process runs and
// what its environment says. Serve mode uses these to name the owner of a port it cannot
// bind and to find a server's processes that left its group (they carry a marker variable).

// PortOwner finds the pid listening on TCP port (IPv4 or IPv6): the socket inodes in
// /proc/net/tcp{,6} in state LISTEN, then the process holding one of them in /proc/<pid>/fd.
// ok is false when no listener is found or its process cannot be read (another user's).
func PortOwner(port int) (pid int, ok bool) {
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, ino := range listenInodes(b, port) {
			inodes["socket:["+ino+"]"] = true
		}
	}
	if len(inodes) == 0 {
		return 0, false
	}
	names, _ := readProcDir()
	for _, name := range names {
		p, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		fds, err := os.ReadDir("/proc/" + name + "/fd")
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink("/proc/" + name + "/fd/" + fd.Name()); err == nil && inodes[l] {
				return p, true
			}
		}
	}
	return 0, false
}

// listenInodes parses /proc/net/tcp or tcp6 and returns the socket inodes listening on port
// (state 0A). Lines that do not parse are skipped.
func listenInodes(b []byte, port int) []string {
	var out []string
	lines := strings.Split(string(b), "\n")
	if len(lines) > 0 {
		lines = lines[1:] // the header
	}
	for _, line := range lines {
		fs := strings.Fields(line)
		if len(fs) < 10 || fs[3] != "0A" {
			continue
		}
		i := strings.LastIndexByte(fs[1], ':')
		if i < 0 {
			continue
		}
		if p, err := strconv.ParseUint(fs[1][i+1:], 16, 16); err == nil && int(p) == port && fs[9] != "0" {
			out = append(out, fs[9])
		}
	}
	return out
}

// Cmdline is the command line of pid, arguments separated by spaces ("" when unreadable).
func Cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// EnvOf returns the value of key in the environment of pid ("" when absent or unreadable).
func EnvOf(pid int, key string) string {
	var val string
	_, _ = scanEnviron(pid, func(kv []byte) bool {
		k, v, ok := bytes.Cut(kv, []byte("="))
		if ok && string(k) == key {
			val = string(v)
		}
		return ok && string(k) == key
	})
	return val
}

// Bounds of what scanEnviron reads. The kernel limits one element to 128 KiB
// (MAX_ARG_STRLEN) and a process's arguments and environment together to a
// quarter of its stack limit (2 MiB by default); more is not an environment
// the runner gave.
const (
	maxEnvEntry = 1 << 20
	maxEnviron  = 16 << 20
)

// scanEnviron calls fn with each element (KEY=VALUE) of process pid's
// environment as it started (/proc/PID/environ) until fn returns true, and
// reports whether it did. It reads in chunks, so memory stays bounded
// whatever the process holds: a larger environment or element is an error.
func scanEnviron(pid int, fn func(kv []byte) bool) (bool, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false, err
	}
	defer f.Close()
	return scanEnv(f, maxEnviron, fn)
}

// scanEnv is scanEnviron on any NUL-separated list of at most limit bytes.
func scanEnv(r io.Reader, limit int64, fn func(kv []byte) bool) (bool, error) {
	sc := bufio.NewScanner(&cappedReader{r: r, left: limit})
	sc.Buffer(make([]byte, 0, 64<<10), maxEnvEntry)
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		if i := bytes.IndexByte(data, 0); i >= 0 {
			return i + 1, data[:i], nil
		}
		if atEOF && len(data) > 0 {
			return len(data), data, nil // a last element without its NUL
		}
		return 0, nil, nil
	})
	for sc.Scan() {
		if fn(sc.Bytes()) {
			return true, nil
		}
	}
	return false, sc.Err()
}

// cappedReader reads r and fails once more than left bytes came.
type cappedReader struct {
	r    io.Reader
	left int64
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.left < 0 {
		return 0, errors.New("environment larger than the kernel allows")
	}
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left < 0 {
		return 0, errors.New("environment larger than the kernel allows")
	}
	return n, err
}

// PidsWithEnv lists the processes other than ours whose environment has key=value; none for
// an empty value, which would match every process without the variable.
func PidsWithEnv(key, value string) []int {
	if value == "" {
		return nil
	}
	var out []int
	self := os.Getpid()
	names, _ := readProcDir()
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid == self {
			continue
		}
		if EnvOf(pid, key) == value {
			out = append(out, pid)
		}
	}
	return out
}

// KillMarked kills with SIGKILL every process other than ours whose environment has
// key=value, and returns their pids: the processes of a server that left its process group.
func KillMarked(key, value string) []int {
	pids := PidsWithEnv(key, value)
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	return pids
}
