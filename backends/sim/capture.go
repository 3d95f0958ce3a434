package sim

import "os"

// nsys capture ranges in the simulated servers. Under the nsys simulator a
// server reports its GPU work to the activity file (activity.go); a cudaProfilerStart or
// cudaProfilerStop call becomes a cap record, and nsys --capture-range=cudaProfilerApi keeps
// only the activity between them. SGLang's LLM scheduler calls them for /start_profile and
// /stop_profile with activities ["CUDA_PROFILER"] (scheduler_profiler_mixin.py); vLLM calls
// them for /start_profile and /stop_profile when --profiler-config names the cuda profiler.

// openServerActivity opens the activity file of a server under nsys (an LLM server, or vLLM-Omni
// once its model is resolved); the caller closes it.
func (s *server) openServerActivity() *activityWriter {
	path := s.env[EnvNSysActivity]
	if path == "" {
		return nil
	}
	a, err := openActivity(path)
	if err != nil {
		s.log.log("WARNING: %v", err)
		return nil
	}
	a.put(&actRec{K: "proc", PID: int32(os.Getpid()), Name: "python3"})
	a.put(&actRec{K: "gpu", Dev: 0, Name: "NVIDIA H100 80GB HBM3"})
	a.flush()
	s.act = &gen{act: a, prof: s.prof, tp: 1, model: s.model, k: s.k}
	return a
}

// llmKernel records the GPU work of one LLM forward pass of stage (EXTEND or DECODE) between
// start and end on the simulated clock.
func (s *server) llmKernel(stage string, start, end int64) {
	if s.act == nil {
		return
	}
	name := "void flashinfer::BatchDecodeWithPagedKVCacheKernel<128, 8, 4>"
	if stage == "EXTEND" {
		name = "void flashinfer::BatchPrefillWithPagedKVCacheKernel<128, 16, 4>"
	}
	s.actMu.Lock()
	defer s.actMu.Unlock()
	a := s.act.act
	a.put(&actRec{K: "kernel", S: start, E: end, Dev: 0, Str: 7, N: a.name(name), G: [3]int32{132, 1, 1}, B: [3]int32{128, 1, 1}})
	a.flush()
}

// cudaProfiler records a cudaProfilerStart (start) or cudaProfilerStop call now.
func (s *server) cudaProfiler(start bool) {
	if s.act == nil {
		return
	}
	s.actMu.Lock()
	defer s.actMu.Unlock()
	s.act.act.cudaProfiler(start, s.clk.now())
	if start {
		s.log.log("[sim] cudaProfilerStart")
	} else {
		s.log.log("[sim] cudaProfilerStop")
	}
}
