package sglang

import (
	"strconv"
	"strings"

	"github.com/sglprof/runner/plans"
)

// TraceWindow is how a torch profile was opened; it decides which ranks export a trace.
type TraceWindow int

const (
	// WindowPerRequest is a diffusion request that carries its own profiling switch:
	// `sglang generate --profile` or a server request with "profile": true. Upstream's
	// PipelineExecutor.profile_execution (runtime/pipelines_core/executors/pipeline_executor.py)
	// starts the profiler on the rank that equals dump_rank (0) only, in the denoise-only and
	// the full-stages (--profile-all-stages) mode alike, and SGLDiffusionProfiler._export_trace
	// (runtime/utils/profiler.py) writes only when the current rank is the dump rank, so one
	// `<request_id>-<mode>-global-rank0.trace.json.gz` appears however many GPUs serve.
	WindowPerRequest TraceWindow = iota
	// WindowStartStop is POST /start_profile ... /stop_profile. The LLM scheduler of every
	// tensor-parallel rank exports `<profile_id>-TP-<r>.trace.json.gz`; the diffusion server's
	// /stop_profile stops with dump_rank=None ("Save for all ranks",
	// runtime/entrypoints/http_server.py), so every GPU worker exports its own rank.
	WindowStartStop
)

// TraceRanks is the number of distinct ranks whose traces a torch profile of cell c leaves,
// as upstream writes them (see TraceWindow): 1 for a per-request diffusion profile; the
// tensor-parallel size (--tp-size/--tp) for an LLM server window; --num-gpus for a diffusion
// server window. Sizes come from backend.extra_args; absent or unreadable means 1.
func TraceRanks(c plans.Cell, w TraceWindow) int {
	if ModelType(c) == ModelTypeLLM {
		return intFlag(c.Backend.ExtraArgs, 1, "--tp-size", "--tp")
	}
	if w == WindowPerRequest {
		return 1
	}
	return intFlag(c.Backend.ExtraArgs, 1, "--num-gpus")
}

// intFlag returns the last positive value of any of flags in args ("--f N" or "--f=N", as
// argparse's last-one-wins), else def.
func intFlag(args []string, def int, flags ...string) int {
	v := def
	for i, a := range args {
		for _, f := range flags {
			s, ok := "", false
			switch {
			case a == f && i+1 < len(args):
				s, ok = args[i+1], true
			case strings.HasPrefix(a, f+"="):
				s, ok = a[len(f)+1:], true
			}
			if !ok {
				continue
			}
			if n, err := strconv.Atoi(s); err == nil && n > 0 {
				v = n
			}
		}
	}
	return v
}
