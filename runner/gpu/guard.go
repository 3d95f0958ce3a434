package gpu

import (
	"fmt"
	"sort"
	"strings"

	"github.com/sglprof/runner/reports/rundir"
)

// Foreign returns the compute processes that are not the cell's own: own reports whether a pid
// belongs to the cell's process tree (the runner knows it; nil means nothing is the cell's).
// They are sorted by GPU, then pid, so warnings read the same every run.
func Foreign(apps []rundir.GPUApp, own func(pid int) bool) []rundir.GPUApp {
	var out []rundir.GPUApp
	for _, a := range apps {
		if own != nil && own(a.PID) {
			continue
		}
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].GPU != out[j].GPU {
			return out[i].GPU < out[j].GPU
		}
		return out[i].PID < out[j].PID
	})
	return out
}

// BusyMessage is the text of a gpu-busy warning: every foreign process with its pid, name,
// memory and GPU, so the user can find and stop it.
func BusyMessage(apps []rundir.GPUApp) string {
	parts := make([]string, len(apps))
	for i, a := range apps {
		where := "GPU " + a.GPUUUID
		if a.GPU >= 0 {
			where = fmt.Sprintf("GPU %d", a.GPU)
		}
		mem := "memory unknown"
		if a.UsedMiB >= 0 {
			mem = fmt.Sprintf("%d MiB", a.UsedMiB)
		}
		parts[i] = fmt.Sprintf("pid %d (%s, %s) on %s", a.PID, a.Name, mem, where)
	}
	return "another compute process holds the cell's GPU: " + strings.Join(parts, "; ") +
		"; its kernels compete with the cell's, so timings are not comparable"
}

// Throttled returns the GPUs whose clocks were capped for power or heat, with a message naming
// each one's reasons; the message is empty when none was.
func Throttled(gpus []rundir.GPUState) string {
	var parts []string
	for _, g := range gpus {
		if c := g.Throttle & Capping; c != 0 {
			parts = append(parts, fmt.Sprintf("GPU %d %s (SM %d of %d MHz, %d °C)",
				g.Index, strings.Join(ReasonNames(c), "+"), g.SMClockMHz, g.MaxSMMHz, g.TempC))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "clocks capped for power or heat: " + strings.Join(parts, "; ")
}

// LeakThresholdMiB is how much more memory a GPU may hold after a cell than before it without
// a process to account for it before the difference is called leaked. Below it the reading is
// allocator noise of the driver itself.
const LeakThresholdMiB = 1024

// Leaked compares the snapshots taken before and after a cell: memory in use on a GPU that no
// listed compute process holds, and that grew by more than LeakThresholdMiB over the cell, is
// memory nobody owns (a leaked context, a zombie scheduler). The growth of the unattributed
// memory is what counts, not all that is held after: a neighbour holding 30 GiB throughout (or,
// in serve mode, the cell's own server) must neither hide a leak nor be one. It also names the
// cell's own processes that still hold a GPU after the cell ended. The result is one message
// per finding.
func Leaked(before, after rundir.GPUSnapshot, own func(pid int) bool) []string {
	if !before.Available() || !after.Available() {
		return nil
	}
	var out []string
	for _, a := range after.Apps {
		if own != nil && own(a.PID) {
			out = append(out, fmt.Sprintf("pid %d (%s) of the cell still holds %d MiB on GPU %d after the cell ended", a.PID, a.Name, a.UsedMiB, a.GPU))
		}
	}
	heldBefore, heldAfter := heldMiB(before.Apps), heldMiB(after.Apps)
	prev := map[int]int{}
	for _, g := range before.GPUs {
		prev[g.Index] = g.MemUsedMiB
	}
	for _, g := range after.GPUs {
		b, ok := prev[g.Index]
		if !ok || b < 0 || g.MemUsedMiB < 0 {
			continue
		}
		unownedBefore := b - heldBefore[g.Index]
		unownedAfter := g.MemUsedMiB - heldAfter[g.Index]
		if grew := unownedAfter - unownedBefore; grew > LeakThresholdMiB {
			out = append(out, fmt.Sprintf("GPU %d holds %d MiB more after the cell than before it that no process owns (%d → %d MiB in use, %d → %d MiB held by listed processes): leaked", g.Index, grew, b, g.MemUsedMiB, heldBefore[g.Index], heldAfter[g.Index]))
		}
	}
	return out
}

// heldMiB is the memory the listed compute processes hold, per GPU index.
func heldMiB(apps []rundir.GPUApp) map[int]int {
	held := map[int]int{}
	for _, a := range apps {
		if a.GPU >= 0 && a.UsedMiB > 0 {
			held[a.GPU] += a.UsedMiB
		}
	}
	return held
}
