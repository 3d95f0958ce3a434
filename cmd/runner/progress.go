package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner"
)

// The two progress displays of runner.Progress: a bar on a terminal, plain lines elsewhere.
// They are presentation, so they live with the terminal in cmd/runner.

// newLineProgress prints one plain line per cell start and end: what a log file or CI wants.
// Cells running side by side (GPU slots) print whole lines that never interleave.
func newLineProgress(w io.Writer) runner.Progress { return &lineProgress{w: w} }

type lineProgress struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *lineProgress) Start(total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "running %d cells\n", total)
}

func (p *lineProgress) CellStart(n, total int, c plans.Cell) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "[%d/%d] start %s\n", n+1, total, c.ID)
}

func (p *lineProgress) CellEnd(n, total int, c plans.Cell, r *rundir.CellResult) {
	line := fmt.Sprintf("[%d/%d] %s %s wall %.1fs", n+1, total, r.Verdict, c.ID, float64(r.Timings.WallNS)/1e9)
	if r.Timings.E2ENS > 0 {
		line += fmt.Sprintf(" e2e %.1f ms", float64(r.Timings.E2ENS)/1e6)
	}
	if len(r.GPUs) > 0 {
		line += " gpus " + strings.Trim(strings.Join(strings.Fields(fmt.Sprint(r.GPUs)), ","), "[]")
	}
	if len(r.Reasons) > 0 {
		line += " (" + r.Reasons[0].Code + ")"
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintln(p.w, line)
}

func (p *lineProgress) Finish() {}

// newBarProgress draws a progress bar over cells on a terminal, showing the running cells (one
// or, on GPU slots, several) and how long each has been running.
func newBarProgress(w io.Writer) runner.Progress { return &barProgress{w: w} }

type barProgress struct {
	w       io.Writer
	bar     *progressbar.ProgressBar
	mu      sync.Mutex
	running map[string]time.Time // cell id -> start
	status  map[string]string    // cell id -> transient status
	stop    chan struct{}
	done    sync.WaitGroup
}

func (p *barProgress) Start(total int) {
	p.bar = progressbar.NewOptions(total,
		progressbar.OptionSetWriter(p.w),
		progressbar.OptionShowCount(),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetWidth(24),
		progressbar.OptionFullWidth(),
	)
	p.running = map[string]time.Time{}
	p.status = map[string]string{}
	p.stop = make(chan struct{})
	p.done.Add(1)
	go func(stop chan struct{}) {
		defer p.done.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				p.mu.Lock()
				p.describe()
				p.mu.Unlock()
			}
		}
	}(p.stop)
}

// describe shows the running cells, oldest first; the caller holds mu.
func (p *barProgress) describe() {
	if p.bar == nil || len(p.running) == 0 {
		return
	}
	ids := make([]string, 0, len(p.running))
	for id := range p.running {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return p.running[ids[i]].Before(p.running[ids[j]]) })
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = id + " " + time.Since(p.running[id]).Truncate(time.Second).String()
		if st := p.status[id]; st != "" {
			parts[i] = id + " " + st
		}
	}
	d := parts[0]
	if len(parts) > 1 {
		d = fmt.Sprintf("%d running: %s", len(parts), strings.Join(parts, ", "))
	}
	p.bar.Describe(d)
}

func (p *barProgress) CellStart(n, total int, c plans.Cell) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running == nil {
		p.running, p.status = map[string]time.Time{}, map[string]string{}
	}
	p.running[c.ID] = time.Now()
	p.describe()
}

func (p *barProgress) CellEnd(n, total int, c plans.Cell, r *rundir.CellResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.running, c.ID)
	delete(p.status, c.ID)
	if r.Verdict != plans.VerdictOK {
		// Keep failures visible above the bar.
		_ = p.bar.Clear()
		fmt.Fprintf(p.w, "%s %s\n", r.Verdict, c.ID)
	}
	_ = p.bar.Add(1)
	p.describe()
}

func (p *barProgress) Finish() {
	if p.stop != nil {
		close(p.stop)
		p.done.Wait()
		p.stop = nil
	}
	if p.bar != nil {
		_ = p.bar.Finish()
		fmt.Fprintln(p.w)
	}
}

// Status prints a transient status of the current cell (e.g. "waiting for the profiler
// flush") as its own line, so a long wait is visible in CI logs.
func (p *lineProgress) Status(c plans.Cell, msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "       %s: %s\n", c.ID, msg)
}

// Status shows a transient status of the current cell in the bar's description.
func (p *barProgress) Status(c plans.Cell, msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.status != nil {
		p.status[c.ID] = msg
	}
	p.describe()
}
