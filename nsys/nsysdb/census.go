package nsysdb

import (
	"context"
	"fmt"
)

// Census counts the rows of the event tables of an export: what the capture holds, without
// reading it. It tells an export whose window opened after the application ended (nothing at
// all) from one traced without CUDA (NVTX or OS runtime events, no CUDA ones) and from one
// whose application launched no kernel while nsys collected (CUDA calls, no kernels), so that
// each gets its own advice.
type Census struct {
	Kernels int64 `json:"kernels"` // CUPTI_ACTIVITY_KIND_KERNEL
	Runtime int64 `json:"runtime"` // CUPTI_ACTIVITY_KIND_RUNTIME: CUDA runtime calls
	NVTX    int64 `json:"nvtx"`    // NVTX_EVENTS
	OSRT    int64 `json:"osrt"`    // OSRT_API: OS runtime calls
	Memops  int64 `json:"memops"`  // CUPTI_ACTIVITY_KIND_MEMCPY and _MEMSET
}

// Empty reports whether the capture holds no event of any kind.
func (c Census) Empty() bool { return c.Kernels+c.Runtime+c.NVTX+c.OSRT+c.Memops == 0 }

// NoKernelsAdvice says why an export without kernels has none and what to do, from what it
// does hold: "" when it has kernels.
func (c Census) NoKernelsAdvice() string {
	switch {
	case c.Kernels > 0:
		return ""
	case c.Empty():
		return "collection began after the application had finished (a --delay longer than the run) or ended before it started; shorten --delay, or drop it"
	case c.Runtime > 0 || c.Memops > 0:
		return "the application made CUDA calls but launched no kernel while nsys collected; move --delay/--duration so the window covers the GPU work"
	}
	return "the capture holds NVTX or OS runtime events but no CUDA activity: re-profile with `nsys profile --trace=cuda,nvtx ...`"
}

// CensusOf counts the event tables of the export at path (a table the export lacks counts 0:
// lazy exports omit empty tables).
func CensusOf(ctx context.Context, path string) (Census, error) {
	r, _, err := openReader(ctx, path, ReadOptions{})
	if err != nil {
		return Census{}, err
	}
	defer r.db.Close()
	if err := r.tables(); err != nil {
		return Census{}, err
	}
	return r.census()
}

// census counts the event tables of an open export whose tables are known.
func (r *reader) census() (Census, error) {
	var c Census
	for _, t := range []struct {
		table string
		n     *int64
	}{
		{"CUPTI_ACTIVITY_KIND_KERNEL", &c.Kernels}, {"CUPTI_ACTIVITY_KIND_RUNTIME", &c.Runtime},
		{"NVTX_EVENTS", &c.NVTX}, {"OSRT_API", &c.OSRT},
		{"CUPTI_ACTIVITY_KIND_MEMCPY", &c.Memops}, {"CUPTI_ACTIVITY_KIND_MEMSET", &c.Memops},
	} {
		if !r.has(t.table) {
			continue
		}
		var n int64
		// The table name comes from the list above, never from the file.
		if err := r.db.QueryRowContext(r.ctx, fmt.Sprintf(`SELECT count(*) FROM "%s"`, t.table)).Scan(&n); err != nil {
			return c, r.wrap(t.table, err)
		}
		*t.n += n
	}
	return c, nil
}
