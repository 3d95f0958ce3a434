package gpu

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sglprof/runner/reports/rundir"
)

// eachRecord calls fn with the 1-based line number and the fields of every non-empty line of
// nvidia-smi's --format=csv,noheader output. want > 0 is the exact field count (a line with
// another count is an error quoting it); want <= 0 leaves the count to fn.
func eachRecord(out []byte, want int, fn func(n int, f []string) error) error {
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		f := splitCSV(line)
		if want > 0 && len(f) != want {
			return fmt.Errorf("line %d: %d fields, want %d: %q", n, len(f), want, clip(line))
		}
		if err := fn(n, f); err != nil {
			return err
		}
	}
	return sc.Err()
}

// ParseGPUs reads `nvidia-smi --query-gpu=GPUQuery --format=csv,noheader`: one line per GPU,
// fields separated by ", ", numbers with their units ("35 %", "1980 MHz", "70.12 W"). A field
// nvidia-smi cannot report ("[N/A]", "[Not Supported]") becomes -1. A line with the wrong number
// of fields, or an index or clock that is not a number, is an error that quotes the line: an
// nvidia-smi that prints something else must not be read as an idle GPU.
func ParseGPUs(out []byte) ([]rundir.GPUState, error) {
	var gpus []rundir.GPUState
	err := eachRecord(out, 10, func(n int, f []string) error {
		g := rundir.GPUState{UUID: f[1], Persistence: f[7]}
		var err error
		if g.Index, err = strconv.Atoi(f[0]); err != nil || g.Index < 0 {
			return fmt.Errorf("line %d: GPU index %q is not a number", n, clip(f[0]))
		}
		num := func(s, unit string) (int, error) {
			v, err := number(s, unit)
			return int(v), err
		}
		for _, x := range []struct {
			dst  *int
			s    string
			unit string
		}{{&g.UtilPct, f[2], "%"}, {&g.MemUsedMiB, f[3], "MiB"}, {&g.SMClockMHz, f[4], "MHz"},
			{&g.MaxSMMHz, f[5], "MHz"}, {&g.TempC, f[9], ""}} {
			if *x.dst, err = num(x.s, x.unit); err != nil {
				return fmt.Errorf("line %d: %w", n, err)
			}
		}
		if g.PowerW, err = number(f[8], "W"); err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
		if g.Throttle, err = mask(f[6]); err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
		g.Reasons = ReasonNames(g.Throttle)
		gpus = append(gpus, g)
		return nil
	})
	if err != nil {
		return gpus, err
	}
	if len(gpus) == 0 {
		return nil, errors.New("no GPU listed")
	}
	return gpus, nil
}

// ParseApps reads `nvidia-smi --query-compute-apps=AppsQuery --format=csv,noheader`. nvidia-smi
// does not quote fields, so a process name with ", " in it is rebuilt from the middle fields:
// the pid is first and the memory and UUID are last. No line at all means no compute process.
func ParseApps(out []byte) ([]rundir.GPUApp, error) {
	var apps []rundir.GPUApp
	err := eachRecord(out, -4, func(n int, f []string) error {
		if strings.HasPrefix(f[0], "No running") {
			return nil
		}
		if len(f) < 4 {
			return fmt.Errorf("line %d: %d fields, want 4: %q", n, len(f), clip(strings.Join(f, ", ")))
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil || pid <= 0 {
			return fmt.Errorf("line %d: pid %q is not a number", n, clip(f[0]))
		}
		mem, err := number(f[len(f)-2], "MiB")
		if err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
		apps = append(apps, rundir.GPUApp{
			PID:     pid,
			Name:    strings.Join(f[1:len(f)-2], ", "),
			UsedMiB: int(mem),
			GPUUUID: f[len(f)-1],
			GPU:     -1,
		})
		return nil
	})
	return apps, err
}

// ParseClockLock reads `nvidia-smi -q -d CLOCK,PERFORMANCE` and reports whether the clocks of
// every GPU listed are pinned. A GPU counts as pinned when any of these holds:
//   - its Applications Clocks differ from its Default Applications Clocks (`nvidia-smi -ac`);
//   - Auto Boost is Off (the clock no longer floats between base and boost);
//   - the "Applications Clocks Setting" clock event reason is Active (how `nvidia-smi -lgc`
//     shows: the locked ceiling holds the clock below what the GPU would boost to).
//
// Output with no "Applications Clocks" section at all is an error: the state could not be read.
func ParseClockLock(out []byte) (bool, error) {
	type gpuState struct {
		app, def   string
		boostOff   bool
		reasonLock bool
	}
	var gpus []*gpuState
	var cur *gpuState
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		raw := sc.Text()
		line := strings.TrimSpace(raw)
		if strings.HasPrefix(raw, "GPU ") {
			cur = &gpuState{}
			gpus = append(gpus, cur)
			section = ""
			continue
		}
		if cur == nil || line == "" {
			continue
		}
		k, v, hasColon := strings.Cut(line, ":")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !hasColon || v == "" {
			section = k
			continue
		}
		switch {
		case section == "Applications Clocks" && k == "Graphics":
			cur.app = v
		case section == "Default Applications Clocks" && k == "Graphics":
			cur.def = v
		case section == "Clock Policy" && k == "Auto Boost":
			cur.boostOff = strings.EqualFold(v, "Off")
		case k == "Applications Clocks Setting" && strings.EqualFold(v, "Active"):
			cur.reasonLock = true
		}
	}
	if err := sc.Err(); err != nil {
		return false, err
	}
	if len(gpus) == 0 {
		return false, errors.New("no GPU section in nvidia-smi -q output")
	}
	for i, g := range gpus {
		if g.app == "" || g.def == "" {
			return false, fmt.Errorf("GPU %d: no Applications Clocks in nvidia-smi -q output", i)
		}
		if g.app == g.def && !g.boostOff && !g.reasonLock {
			return false, nil
		}
	}
	return true, nil
}

// splitCSV splits one nvidia-smi CSV line on commas and trims each field.
func splitCSV(line string) []string {
	f := strings.Split(line, ",")
	for i := range f {
		f[i] = strings.TrimSpace(f[i])
	}
	return f
}

// number reads "35 %", "1980 MHz", "70.12 W" or a bare number; "[N/A]"-style values are -1.
func number(s, unit string) (float64, error) {
	if notReported(s) {
		return -1, nil
	}
	v := strings.TrimSpace(strings.TrimSuffix(s, unit))
	x, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number of %s", clip(s), unitName(unit))
	}
	return x, nil
}

// mask reads a throttle-reason mask printed as hex ("0x0000000000000004").
func mask(s string) (uint64, error) {
	if notReported(s) {
		return 0, nil
	}
	h, ok := strings.CutPrefix(strings.ToLower(s), "0x")
	if !ok {
		return 0, fmt.Errorf("throttle reasons %q are not a hex mask", clip(s))
	}
	m, err := strconv.ParseUint(h, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("throttle reasons %q are not a hex mask", clip(s))
	}
	return m, nil
}

func notReported(s string) bool {
	s = strings.Trim(s, "[]")
	return s == "N/A" || s == "Not Supported" || s == "Unknown Error" || s == "Insufficient Permissions"
}

func unitName(u string) string {
	if u == "" {
		return "units"
	}
	return u
}

func clip(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}
