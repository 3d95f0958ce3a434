package runner

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/exitcode"
)

// The executor decides where and when a cell's process runs; what a cell does (launch, gate,
// collect, triage, result.json) is runCell's, the same for every executor.
//
// The local executor runs one cell at a time unless [executor] gpus is set. Then cells run side
// by side on GPU slots: each cell holds gpus_per_cell GPUs (or its own --num-gpus / --tp-size)
// and gets them as CUDA_VISIBLE_DEVICES, and a GPU is never given to two cells at once. Two
// kinds of cell still run alone, holding every slot: nsys cells (a system-wide trace would
// record the neighbours' kernels and its sampling would slow them) and serve cells (a shared
// server outlives cells, so they stay in the serve session's order).

// resolveExecutor picks the executor of the run's cells before anything is created: Slurm
// (checked to be reachable), or local with the GPU slots of [executor] gpus, checked against
// the GPUs nvidia-smi reports when it can be read, and against what each cell needs (none: one
// cell at a time).
func resolveExecutor(ctx context.Context, p *plans.Plan, cells []plans.Cell, opts *Options) error {
	e := p.Executor
	if opts.Executor != "" {
		e.Kind = opts.Executor
	}
	if e.Kind == plans.ExecutorSlurm {
		opts.onSlurm = true
		if e.HasGPUs() {
			// Only reachable through --executor slurm (the plan refuses kind = "slurm" with
			// gpus): the plan's slots are for its local runs, so this run goes on without them.
			opts.Logger.Warn("executor slurm: [executor] gpus is for the local executor and is ignored under Slurm; each task gets the GPUs of [executor.slurm] gpus_per_task")
		}
		return checkSlurm(ctx, opts)
	}
	if opts.Detach {
		return &exitcode.UsageError{Err: errors.New("--detach needs the Slurm executor ([executor] kind = \"slurm\" or --executor slurm)")}
	}
	if !e.HasGPUs() {
		return nil
	}
	visible := -1
	// The run's GPU guard owns nvidia-smi: a hang here costs its one timeout for the whole run.
	snap := opts.guard().snapshot(ctx, nil)
	if len(snap.GPUs) > 0 {
		visible = len(snap.GPUs)
	} else if !opts.Simulate {
		opts.Logger.Warn("executor.gpus: nvidia-smi could not be read; the GPU list is not checked against the machine", "err", snap.Error)
	}
	ids, err := e.GPUIDs(visible)
	if err != nil {
		return &exitcode.UsageError{Err: fmt.Errorf("[executor] %w", err)}
	}
	if err := cellsFit(cells, ids, e.GPUsPerCell); err != nil {
		return err
	}
	opts.gpus = ids
	return nil
}

// cellsFit refuses, before anything runs, a cell that needs more GPUs than the slots have: the
// pool cannot give them, and a cell started on fewer than its --num-gpus / --tp-size fails
// late (invalid device ordinal) after the sweep has spent its time. Serve cells do not use the
// slots (they run in the serve session's order), so they are not checked.
func cellsFit(cells []plans.Cell, ids []int, perCell int) error {
	for _, c := range cells {
		if c.Backend.Mode == backends.ModeServe {
			continue
		}
		if need := cellGPUs(c, perCell); need > len(ids) {
			why := "its --num-gpus / --tp-size"
			if perCell > 0 {
				why = "[executor] gpus_per_cell"
			}
			return &exitcode.UsageError{Err: fmt.Errorf("cell %s needs %d GPUs (%s), but [executor] gpus gives %d (%s); give the executor more GPUs or lower %s",
				c.ID, need, why, len(ids), gpuList(ids), why)}
		}
	}
	return nil
}

// executorKind names the executor resolveExecutor chose, as the manifest records it.
func (o *Options) executorKind() string {
	if o.onSlurm {
		return plans.ExecutorSlurm
	}
	return plans.ExecutorLocal
}

// cellGPUs is how many GPUs cell c holds on a slot: the larger of gpus_per_cell (when the plan
// sets it) and the cell's own --num-gpus or --tp-size, at least 1.
func cellGPUs(c plans.Cell, perCell int) int {
	// gpus_per_cell raises a cell's share, never lowers it below what its own --num-gpus /
	// --tp-size asks for: fewer GPUs than ranks fails the cell with "invalid device ordinal".
	n := max(perCell, 1)
	args := c.Backend.ExtraArgs
	for i, a := range args {
		for _, flag := range []string{"--num-gpus", "--tp-size", "--tp"} {
			v, ok := "", false
			switch {
			case a == flag && i+1 < len(args):
				v, ok = args[i+1], true
			case strings.HasPrefix(a, flag+"="):
				v, ok = strings.TrimPrefix(a, flag+"="), true
			}
			if k, err := strconv.Atoi(v); ok && err == nil && k > n {
				n = k
			}
		}
	}
	return n
}

// gpuPool hands out GPU indices to cells; a GPU is held by at most one cell at a time.
type gpuPool struct {
	mu   sync.Mutex
	free []int
	all  int
	// wake is closed and replaced whenever GPUs are returned, so waiters re-check.
	wake chan struct{}
}

func newGPUPool(ids []int) *gpuPool {
	return &gpuPool{free: slices.Clone(ids), all: len(ids), wake: make(chan struct{})}
}

// acquire takes n GPUs (the lowest free indices, so assignments are reproducible), waiting
// until they are free; it returns nil when ctx ends first.
func (p *gpuPool) acquire(ctx context.Context, n int) []int {
	n = min(n, p.all)
	for {
		p.mu.Lock()
		if len(p.free) >= n {
			slices.Sort(p.free)
			got := slices.Clone(p.free[:n])
			p.free = slices.Delete(p.free, 0, n)
			p.mu.Unlock()
			return got
		}
		wake := p.wake
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		}
	}
}

func (p *gpuPool) release(ids []int) {
	p.mu.Lock()
	p.free = append(p.free, ids...)
	close(p.wake)
	p.wake = make(chan struct{})
	p.mu.Unlock()
}

// runOnSlots runs the cells recs[todo] side by side on the GPU pool, in plan order: a cell
// starts when the GPUs it needs are free (a big cell is not overtaken by smaller ones behind
// it, so the order of results stays the plan's). It reports whether the run was interrupted.
func runOnSlots(ctx context.Context, recs []cellRecord, todo []int, pool *gpuPool, perCell int, opts *Options) bool {
	var wg sync.WaitGroup
	var mu sync.Mutex
	interrupted := false
	for n, i := range todo {
		rec := recs[i]
		need := cellGPUs(rec.Cell, perCell)
		if rec.Cell.Profiler == plans.ProfilerNsys {
			need = pool.all // nsys cells run alone (see above)
		}
		ids := pool.acquire(ctx, need)
		mu.Lock()
		stop := interrupted
		mu.Unlock()
		if ids == nil || stop {
			if ids != nil {
				pool.release(ids)
			}
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer pool.release(ids)
			res := runCellOn(ctx, n, len(todo), withGPUs(rec, ids), opts)
			res.GPUs = ids
			if res.Verdict == plans.VerdictInterrupted {
				mu.Lock()
				interrupted = true
				mu.Unlock()
			}
			finishCell(n, len(todo), rec, res, opts)
		}()
	}
	wg.Wait()
	return interrupted || ctx.Err() != nil
}

// withGPUs returns rec with CUDA_VISIBLE_DEVICES set to ids (the launch's own map is copied, so
// cells.json keeps what the plan asked for).
func withGPUs(rec cellRecord, ids []int) cellRecord {
	env := make(map[string]string, len(rec.Launch.Env)+1)
	for k, v := range rec.Launch.Env {
		env[k] = v
	}
	env["CUDA_VISIBLE_DEVICES"] = gpuList(ids)
	rec.Launch.Env = env
	return rec
}

// gpuList writes GPU indices as CUDA_VISIBLE_DEVICES does: "0,1".
func gpuList(ids []int) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(id)
	}
	return strings.Join(s, ",")
}

// runCellOn runs one local cell between its progress start and its result.
func runCellOn(ctx context.Context, n, total int, rec cellRecord, opts *Options) *cellResult {
	opts.Progress.CellStart(n, total, rec.Cell)
	return runCell(ctx, rec, opts)
}

// finishCell writes a cell's result.json and reports its end; every executor ends a cell here.
func finishCell(n, total int, rec cellRecord, res *cellResult, opts *Options) {
	recordTraceSize(rec, res)
	if err := rundir.WriteJSON(filepath.Join(rec.abs, rundir.ResultFile), &res.CellResult, nil); err != nil {
		// A full disk: the cell's record is lost, so it cannot count as measured. The summary
		// still shows it (from memory), and --resume runs it again.
		opts.Logger.Error("cannot write result", "cell", rec.Cell.ID, "err", err)
		res.CellResult = unwritten(res.CellResult, err)
		opts.lost.add(rec.Cell.ID, &res.CellResult)
	}
	opts.Progress.CellEnd(n, total, rec.Cell, &res.CellResult)
}
