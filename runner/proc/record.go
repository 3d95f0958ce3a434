package proc

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sglprof/runner/runner/proc/internal/supervisor"
)

// RecordFile is the name of the process record a cell's supervisor keeps in
// the cell's directory while the cell runs (Spec.Record). It is removed
// when the supervisor finishes; one that is still there after the runner
// ended means the runner, and perhaps the supervisor, were killed, and
// Record.Reap kills what is left of it.
const RecordFile = "processes.json"

// TokenEnv is the environment variable that carries a record's process
// token (Record.Token) into every process of a supervised run: Run sets it
// for the supervisor, whose child and their descendants inherit it. A
// process's environment as it started (/proc/PID/environ) holds the token
// only when it was handed down from that run (or placed on purpose by
// someone who read the record, which only its owner can), so finding it there
// shows that the runner started the process; a pid and start time, which
// anyone can read in /proc and write into a planted record, show nothing.
const TokenEnv = supervisor.TokenEnv

// ProcessID names one process across pid reuse: its pid and its start time
// (field 22 of /proc/<pid>/stat, in clock ticks since boot).
type ProcessID struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// Record is the content of RecordFile, which the supervisor writes
// (supervisor.EncodeRecord).
type Record struct {
	Supervisor ProcessID   `json:"supervisor"`
	Processes  []ProcessID `json:"processes"`
	// Token is the random token the supervised run put in its processes'
	// environment (TokenEnv); Reap signals only processes that carry it.
	Token string `json:"token"`
}

// tokenBytes is the size of a process token: 128 random bits, which nobody
// guesses.
const tokenBytes = 16

// newToken returns a fresh process token from crypto/rand.
func newToken() (string, error) {
	b := make([]byte, tokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("process token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// validToken reports whether t has the form newToken gives: anything else
// (empty, short, other characters) was not written by a runner, and an
// empty one would match any environment that merely sets TokenEnv.
func validToken(t string) bool {
	if len(t) != 2*tokenBytes {
		return false
	}
	for _, c := range t {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// withToken returns env (ours when nil) with TokenEnv set to token, any
// inherited value removed (a runner started inside another run's cell gives
// its own children its own token).
func withToken(env []string, token string) []string {
	if env == nil {
		env = os.Environ()
	}
	out := make([]string, 0, len(env)+1)
	for _, e := range env {
		if !strings.HasPrefix(e, TokenEnv+"=") {
			out = append(out, e)
		}
	}
	return append(out, TokenEnv+"="+token)
}

// Stat is what the process layer reads of /proc/<pid>/stat (the supervisor's reading, whose
// fields it has: State, PPID, PGRP, Start and Flags).
type Stat supervisor.Stat

// ReadStat reads /proc/<pid>/stat; ok is false when the process is gone or
// the file cannot be parsed.
func ReadStat(pid int) (Stat, bool) {
	st, ok := supervisor.ReadStat(pid)
	return Stat(st), ok
}

// Descendants lists the live (non-zombie) descendants of pid, by walking
// the parent links of every process in /proc (the supervisor's walk).
func Descendants(pid int) []ProcessID {
	ds := supervisor.Descendants(pid)
	out := make([]ProcessID, len(ds))
	for i, d := range ds {
		out[i] = ProcessID(d)
	}
	return out
}

func readProcDir() ([]string, error) {
	names, err := supervisor.ReadProcDir()
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	return names, nil
}

// Spared is a live process that a record names (or that descends from one
// it names) and that Reap left alone, with the reason, for the caller to
// report.
type Spared struct {
	PID int
	// Name is the process's command name (/proc/PID/comm), for people.
	Name string
	// Why says why nothing shows that the runner started it.
	Why string
}

// Reap kills with SIGKILL what a killed run left running of the processes
// the record names, and returns how many it killed and the live processes
// it left alone. A record is data anyone can write (a run directory may have
// been edited), so a process is signalled only when it proves it belongs to
// the record's run: it still has the recorded start time (the pid was not
// reused), and its environment carries the record's token (TokenEnv). The
// supervisor is handled first (so that it adopts nothing more), then every
// other recorded process; the live descendants of one that proved itself
// are each checked the same way before they are signalled. A process that
// does not prove itself is left alone with the reason, and so are its
// descendants; a record without a valid token kills nothing. `runner run
// --resume` calls it before running anything, so that a server the killed
// run left listening does not hold the port or the GPU.
func (r Record) Reap() (killed int, spared []Spared) {
	self := os.Getpid()
	seen := map[int]bool{}
	spare := func(id ProcessID, why string) {
		spared = append(spared, Spared{PID: id.PID, Name: comm(id.PID), Why: why})
	}
	tokenOK := validToken(r.Token)
	for _, id := range append([]ProcessID{r.Supervisor}, r.Processes...) {
		if id.PID <= 1 || id.PID == self || seen[id.PID] {
			continue
		}
		seen[id.PID] = true
		st, ok := ReadStat(id.PID)
		switch {
		case !ok || st.State == 'Z' || st.State == 'X':
			continue // gone: nothing to do
		case st.Start != id.Start:
			spare(id, reusedPID)
			continue
		case !tokenOK:
			spare(id, "the record holds no process token (an older runner wrote it, or it was edited), so nothing shows that the runner started this process")
			continue
		}
		ds := Descendants(id.PID) // before the kill: then they move to another parent
		if ok, why := signalOurs(id, r.Token); !ok {
			if why != "" {
				spare(id, why)
			}
			continue
		}
		killed++
		for _, d := range ds {
			if d.PID == self || seen[d.PID] {
				continue
			}
			seen[d.PID] = true
			if ok, why := signalOurs(d, r.Token); ok {
				killed++
			} else if why != "" {
				spare(d, "it descends from a process of the run, but "+why)
			}
		}
	}
	return killed, spared
}

// reusedPID is why a live pid with another start time than the record's is
// left alone.
const reusedPID = "the pid now belongs to another process (it started at another time than the record says)"

// signalOurs sends SIGKILL to id and reports true when id is still running
// with its recorded start time and carries token in its environment;
// otherwise it says why it did not ("" when id is gone). The process is held
// by a pidfd while it is checked, so a pid reused between the check and the
// signal cannot redirect the signal to another process.
func signalOurs(id ProcessID, token string) (bool, string) {
	fd, err := unix.PidfdOpen(id.PID, 0)
	switch {
	case errors.Is(err, syscall.ESRCH):
		return false, ""
	case err != nil:
		fd = -1 // no pidfd on this kernel: kill(2) below, right after the check
	default:
		defer unix.Close(fd)
	}
	st, ok := ReadStat(id.PID)
	if !ok || st.State == 'Z' || st.State == 'X' {
		return false, ""
	}
	if st.Start != id.Start {
		return false, reusedPID
	}
	has, err := carriesToken(id.PID, token)
	if err != nil {
		// A process that exits between the stat above and this read is gone, not spared: its
		// /proc entry answers ESRCH (or vanishes) once it is a zombie or reaped.
		if st, ok := ReadStat(id.PID); errors.Is(err, syscall.ESRCH) || errors.Is(err, fs.ErrNotExist) ||
			!ok || st.State == 'Z' || st.State == 'X' || st.Start != id.Start {
			return false, ""
		}
		return false, fmt.Sprintf("its environment cannot be read (%v), so nothing shows that the runner started it", err)
	}
	if !has {
		return false, "its environment does not carry the record's process token (" + TokenEnv + "), so the runner did not start it"
	}
	if fd >= 0 {
		err = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	} else {
		err = syscall.Kill(id.PID, syscall.SIGKILL)
	}
	switch {
	case errors.Is(err, syscall.ESRCH):
		return false, "" // it ended meanwhile
	case err != nil:
		return false, fmt.Sprintf("SIGKILL failed: %v", err)
	}
	return true, ""
}

// carriesToken reports whether process pid's environment as it started
// holds TokenEnv=token.
func carriesToken(pid int, token string) (bool, error) {
	want := TokenEnv + "=" + token
	return scanEnviron(pid, func(kv []byte) bool { return string(kv) == want })
}

// comm is process pid's command name, or "" when it cannot be read.
func comm(pid int) string {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return ""
	}
	defer f.Close()
	b := make([]byte, 64) // the kernel keeps 16 bytes of it
	n, _ := io.ReadFull(f, b)
	return strings.TrimSpace(string(b[:n]))
}
