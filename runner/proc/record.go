package proc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/sglprof/runner/runner/infile"
)

// RecordFile is the name of the process record a cell's supervisor keeps in
// the cell's directory while the cell runs (Spec.Record). It is removed
// when the supervisor finishes; one that is still there after the runner
// ended means the runner, and perhaps the supervisor, were killed, and
// ReapRecorded kills what is left.
const RecordFile = "processes.json"

// maxRecord bounds a process record read back: the supervisor writes a line per process, so a
// larger file is not its record.
const maxRecord = 16 << 20

// ProcessID names one process across pid reuse: its pid and its start time
// (field 22 of /proc/<pid>/stat, in clock ticks since boot).
type ProcessID struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// Record is the content of RecordFile.
type Record struct {
	Supervisor ProcessID   `json:"supervisor"`
	Processes  []ProcessID `json:"processes"`
}

func (r Record) encode() []byte {
	b, _ := json.MarshalIndent(r, "", "  ")
	return append(b, '\n')
}

// Stat is what the process layer reads of /proc/<pid>/stat.
type Stat struct {
	State byte
	PPID  int
	PGRP  int
	Start uint64
}

// ReadStat reads /proc/<pid>/stat; ok is false when the process is gone or
// the file cannot be parsed.
func ReadStat(pid int) (Stat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, false
	}
	return parseStat(b)
}

// parseStat parses "pid (comm) state ppid pgrp ... starttime ...";
// comm may hold spaces and parentheses, so fields are counted from the last
// ')'. starttime is field 22, the 20th after comm.
func parseStat(b []byte) (Stat, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return Stat{}, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, false
	}
	ppid, e1 := strconv.Atoi(string(f[1]))
	pg, e2 := strconv.Atoi(string(f[2]))
	start, e3 := strconv.ParseUint(string(f[19]), 10, 64)
	if e1 != nil || e2 != nil || e3 != nil {
		return Stat{}, false
	}
	return Stat{State: f[0][0], PPID: ppid, PGRP: pg, Start: start}, true
}

// Descendants lists the live (non-zombie) descendants of pid, by walking
// the parent links of every process in /proc.
func Descendants(pid int) []ProcessID {
	names, err := readProcDir()
	if err != nil {
		return nil
	}
	kids := map[int][]ProcessID{}
	for _, n := range names {
		p, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		st, ok := ReadStat(p)
		if !ok || st.State == 'Z' || st.State == 'X' {
			continue
		}
		kids[st.PPID] = append(kids[st.PPID], ProcessID{PID: p, Start: st.Start})
	}
	var out []ProcessID
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

func readProcDir() ([]string, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	return names, nil
}

// alive reports whether id is still the same running process.
func (id ProcessID) alive() bool {
	st, ok := ReadStat(id.PID)
	return ok && st.Start == id.Start && st.State != 'Z' && st.State != 'X'
}

// ReapRecorded finds the process records (RecordFile) left in the cell
// directories under dir by a runner that was killed, kills with SIGKILL
// every recorded process that still runs (the same pid and start time, so
// a reused pid is spared) together with its live descendants, and removes
// the records. It returns the number of processes killed. `runner run
// --resume` calls it before running anything, so that a server the killed
// run left listening does not hold the port or the GPU.
func ReapRecorded(dir string) (int, error) {
	var recs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable parts hold no record we could use
		}
		if d.IsDir() && strings.Count(strings.TrimPrefix(p, dir), string(filepath.Separator)) > 3 {
			return fs.SkipDir // records sit in cell directories, near the top
		}
		// Only a regular file is a record: a FIFO planted under the name would block the read.
		if d.Type().IsRegular() && d.Name() == RecordFile {
			recs = append(recs, p)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("look for process records in %s: %w", dir, err)
	}
	killed := 0
	var errs []error
	for _, p := range recs {
		b, err := infile.ReadFile(p, maxRecord)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var r Record
		if err := json.Unmarshal(b, &r); err != nil {
			errs = append(errs, fmt.Errorf("process record %s: %w; remove it by hand after checking that none of its processes runs", p, err))
			continue
		}
		killed += r.kill()
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return killed, errors.Join(errs...)
}

// kill stops the recorded supervisor first (so that it adopts nothing
// more), then every recorded process still alive and their descendants.
func (r Record) kill() int {
	n := 0
	ids := append([]ProcessID{r.Supervisor}, r.Processes...)
	for _, id := range ids {
		if id.PID <= 1 || !id.alive() {
			continue
		}
		ds := Descendants(id.PID)
		if syscall.Kill(id.PID, syscall.SIGKILL) == nil {
			n++
		}
		for _, d := range ds {
			if d.alive() && syscall.Kill(d.PID, syscall.SIGKILL) == nil {
				n++
			}
		}
	}
	return n
}
