package supervisor

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

// Proc names one process across pid reuse: its pid and its start time (field 22 of
// /proc/<pid>/stat, in clock ticks since boot). It has the fields of proc.ProcessID, which
// converts from it.
type Proc struct {
	PID   int
	Start uint64
}

// Stat is what is read of /proc/<pid>/stat. It has the fields of proc.Stat, which converts from
// it.
type Stat struct {
	State byte
	PPID  int
	PGRP  int
	Start uint64
	// Flags are the kernel's PF_* flags of the process (field 9).
	Flags uint64
}

// ReadStat reads /proc/<pid>/stat; ok is false when the process is gone or the file cannot be
// parsed.
func ReadStat(pid int) (Stat, bool) {
	var buf [1024]byte
	b, ok := readSmall([]byte("/proc/"+strconv.Itoa(pid)+"/stat"), buf[:])
	if !ok {
		return Stat{}, false
	}
	return ParseStat(b)
}

// ParseStat parses "pid (comm) state ppid pgrp ... starttime ..."; comm may hold spaces and
// parentheses, so fields are counted from the last ')'. starttime is field 22, the 20th after
// comm.
func ParseStat(b []byte) (Stat, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return Stat{}, false
	}
	// The fields after comm, split on blanks without allocating: the supervisor parses every
	// process of the machine this way.
	var f [20][]byte
	n := 0
	for rest := b[i+1:]; n < len(f); {
		for len(rest) > 0 && isBlank(rest[0]) {
			rest = rest[1:]
		}
		if len(rest) == 0 {
			break
		}
		j := 0
		for j < len(rest) && !isBlank(rest[j]) {
			j++
		}
		f[n], rest = rest[:j], rest[j:]
		n++
	}
	if n < 20 || len(f[0]) != 1 {
		return Stat{}, false
	}
	ppid, ok1 := atoiBytes(f[1])
	pg, ok2 := atoiBytes(f[2])
	flags, e2 := strconv.ParseUint(unsafeString(f[6]), 10, 64)
	start, e3 := strconv.ParseUint(unsafeString(f[19]), 10, 64)
	if !ok1 || !ok2 || e2 != nil || e3 != nil {
		return Stat{}, false
	}
	return Stat{State: f[0][0], PPID: ppid, PGRP: pg, Start: start, Flags: flags}, true
}

func isBlank(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// atoiBytes parses a decimal int (with an optional sign) without copying.
func atoiBytes(b []byte) (int, bool) {
	n, err := strconv.Atoi(unsafeString(b))
	return n, err == nil
}

// unsafeString views b as a string for a call that does not keep it.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// Descendants lists the live (non-zombie) descendants of pid, by walking the parent links of
// every process in /proc. The supervisor calls it while a cell runs, so it reads each stat file
// into one reused buffer instead of allocating per process (this kernel has no
// /proc/PID/task/TID/children to walk down from pid instead).
func Descendants(pid int) []Proc {
	names, err := ReadProcDir()
	if err != nil {
		return nil
	}
	kids := map[int][]Proc{}
	buf := make([]byte, 1024)
	path := make([]byte, 0, 32)
	for _, n := range names {
		p, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		path = append(append(append(path[:0], "/proc/"...), n...), "/stat"...)
		b, ok := readSmall(path, buf)
		if !ok {
			continue
		}
		st, ok := ParseStat(b)
		if !ok || st.State == 'Z' || st.State == 'X' {
			continue
		}
		kids[st.PPID] = append(kids[st.PPID], Proc{PID: p, Start: st.Start})
	}
	var out []Proc
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, k := range kids[p] {
			out = append(out, k)
			queue = append(queue, k.PID)
		}
	}
	return out
}

// readSmall reads a small /proc file into buf with one read, as the kernel writes a stat file
// whole; ok is false when the file is gone or does not fit.
func readSmall(path, buf []byte) ([]byte, bool) {
	fd, err := syscall.Open(unsafeString(path), syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	defer syscall.Close(fd)
	n, err := syscall.Read(fd, buf)
	if err != nil || n <= 0 || n == len(buf) {
		return nil, false
	}
	return buf[:n], true
}

// ReadProcDir lists the names in /proc (the pids among them).
func ReadProcDir() ([]string, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Readdirnames(-1)
}

// pfExiting is PF_EXITING of <linux/sched.h>: the process is in exit().
const pfExiting = 0x4

// sigkillBit is SIGKILL's bit in the pending masks of /proc/<pid>/status.
const sigkillBit = 1 << (9 - 1)

// Dying reports whether process pid is already on its way out: it is exiting (PF_EXITING),
// or a SIGKILL is pending, sent but not yet acted on (the stop ladder's kill of the group, which
// on a loaded machine a process can take longer than the leftover grace to act on). Such a
// process outlives nothing: it was killed with the rest.
func Dying(pid int) bool {
	if st, ok := ReadStat(pid); !ok || st.State == 'Z' || st.State == 'X' || st.Flags&pfExiting != 0 {
		return true
	}
	var buf [4096]byte
	b, ok := readSmall([]byte("/proc/"+strconv.Itoa(pid)+"/status"), buf[:])
	return ok && killPending(b)
}

// killPending reports whether a /proc/<pid>/status text has SIGKILL pending, for the thread
// (SigPnd) or the process (ShdPnd).
func killPending(status []byte) bool {
	for _, key := range []string{"\nSigPnd:", "\nShdPnd:"} {
		i := bytes.Index(status, []byte(key))
		if i < 0 {
			continue
		}
		v := status[i+len(key):]
		for len(v) > 0 && isBlank(v[0]) {
			v = v[1:]
		}
		j := 0
		for j < len(v) && !isBlank(v[j]) {
			j++
		}
		if mask, err := strconv.ParseUint(unsafeString(v[:j]), 16, 64); err == nil && mask&sigkillBit != 0 {
			return true
		}
	}
	return false
}
