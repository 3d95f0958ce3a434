package plans

import (
	"fmt"

	"github.com/BurntSushi/toml"
)

// Profiler options of a serve window: what a user sets on the profiler
// besides when it runs. sglang takes them in the body of POST /start_profile (ProfileReqInput),
// vLLM-Omni in --profiler-config (vLLM's ProfilerConfig). docs/upstream.md names the fields.

// Activities are the [profile] activities the runner accepts: the torch profiler's CPU and
// GPU activities and sglang's MEM (a CUDA memory history snapshot). sglang also knows
// CUDA_PROFILER (cudaProfilerStart, for nsys), RPD (ROCm) and XPU; a name it does not know it
// silently ignores, so the plan refuses it instead.
var Activities = []string{"CPU", "GPU", "MEM"}

// ProfileStages are the stages sglang's profile_stages selects (the forward modes of its
// stage-based profile manager).
var ProfileStages = []string{"prefill", "decode"}

// VLLMProfilerConfig is [profile.vllm_profiler_config]: the keys of vLLM's ProfilerConfig that
// the runner does not set itself (it sets profiler, torch_profiler_dir and, from with_stack and
// record_shapes, torch_profiler_with_stack and torch_profiler_record_shapes). Unset keys are
// not sent, so vLLM's defaults apply.
type VLLMProfilerConfig struct {
	WithFlops         *bool `toml:"torch_profiler_with_flops" json:"torch_profiler_with_flops,omitempty"`
	UseGzip           *bool `toml:"torch_profiler_use_gzip" json:"torch_profiler_use_gzip,omitempty"`
	DumpCudaTimeTotal *bool `toml:"torch_profiler_dump_cuda_time_total" json:"torch_profiler_dump_cuda_time_total,omitempty"`
	WithMemory        *bool `toml:"torch_profiler_with_memory" json:"torch_profiler_with_memory,omitempty"`
	IgnoreFrontend    *bool `toml:"ignore_frontend" json:"ignore_frontend,omitempty"`
	DelayIterations   *int  `toml:"delay_iterations" json:"delay_iterations,omitempty"`
	MaxIterations     *int  `toml:"max_iterations" json:"max_iterations,omitempty"`
	// The torch profiler's schedule (newer vLLM): wait, then warmup, then active iterations.
	WarmupIterations *int `toml:"warmup_iterations" json:"warmup_iterations,omitempty"`
	ActiveIterations *int `toml:"active_iterations" json:"active_iterations,omitempty"`
	WaitIterations   *int `toml:"wait_iterations" json:"wait_iterations,omitempty"`
}

// Fields returns the set keys under their vLLM names, for --profiler-config.
func (v VLLMProfilerConfig) Fields() map[string]any {
	m := map[string]any{}
	for k, p := range map[string]*bool{
		"torch_profiler_with_flops": v.WithFlops, "torch_profiler_use_gzip": v.UseGzip,
		"torch_profiler_dump_cuda_time_total": v.DumpCudaTimeTotal, "torch_profiler_with_memory": v.WithMemory,
		"ignore_frontend": v.IgnoreFrontend,
	} {
		if p != nil {
			m[k] = *p
		}
	}
	for k, p := range map[string]*int{"delay_iterations": v.DelayIterations, "max_iterations": v.MaxIterations,
		"warmup_iterations": v.WarmupIterations, "active_iterations": v.ActiveIterations, "wait_iterations": v.WaitIterations} {
		if p != nil {
			m[k] = *p
		}
	}
	return m
}

// vllmProfilerKeys is the schema of [profile.vllm_profiler_config].
var vllmProfilerKeys = []string{"torch_profiler_with_flops", "torch_profiler_use_gzip", "torch_profiler_dump_cuda_time_total",
	"torch_profiler_with_memory", "ignore_frontend", "delay_iterations", "max_iterations",
	"warmup_iterations", "active_iterations", "wait_iterations"}

type rawProfileOpts struct {
	Activities    toml.Primitive `toml:"activities"`
	WithStack     toml.Primitive `toml:"with_stack"`
	RecordShapes  toml.Primitive `toml:"record_shapes"`
	ProfileStages toml.Primitive `toml:"profile_stages"`
	VLLM          toml.Primitive `toml:"vllm_profiler_config"`
}

type rawVLLMProfiler struct {
	WithFlops         toml.Primitive `toml:"torch_profiler_with_flops"`
	UseGzip           toml.Primitive `toml:"torch_profiler_use_gzip"`
	DumpCudaTimeTotal toml.Primitive `toml:"torch_profiler_dump_cuda_time_total"`
	WithMemory        toml.Primitive `toml:"torch_profiler_with_memory"`
	IgnoreFrontend    toml.Primitive `toml:"ignore_frontend"`
	DelayIterations   toml.Primitive `toml:"delay_iterations"`
	MaxIterations     toml.Primitive `toml:"max_iterations"`
	WarmupIterations  toml.Primitive `toml:"warmup_iterations"`
	ActiveIterations  toml.Primitive `toml:"active_iterations"`
	WaitIterations    toml.Primitive `toml:"wait_iterations"`
}

// decodeProfilerOptions decodes the profiler options of [profile] (prim is the table).
func (d *decoder) decodeProfilerOptions(prim toml.Primitive, pr *Profile) {
	var ro rawProfileOpts
	if d.md.PrimitiveDecode(prim, &ro) != nil {
		return // decodeProfile reported the table
	}
	decodeField(d, path("profile", "activities"), ro.Activities, &pr.Activities, `an array of strings such as ["CPU", "GPU"]`)
	decodeField(d, path("profile", "with_stack"), ro.WithStack, &pr.WithStack, `true or false`)
	decodeField(d, path("profile", "record_shapes"), ro.RecordShapes, &pr.RecordShapes, `true or false`)
	decodeField(d, path("profile", "profile_stages"), ro.ProfileStages, &pr.ProfileStages, `an array of strings such as ["decode"]`)
	k := path("profile", "vllm_profiler_config")
	if !d.present(k) {
		return
	}
	var rv rawVLLMProfiler
	if !d.decodeTable(k, ro.VLLM, &rv) {
		return
	}
	v := &pr.VLLM
	b := `true or false`
	decodeField(d, path("profile", "vllm_profiler_config", "torch_profiler_with_flops"), rv.WithFlops, &v.WithFlops, b)
	decodeField(d, path("profile", "vllm_profiler_config", "torch_profiler_use_gzip"), rv.UseGzip, &v.UseGzip, b)
	decodeField(d, path("profile", "vllm_profiler_config", "torch_profiler_dump_cuda_time_total"), rv.DumpCudaTimeTotal, &v.DumpCudaTimeTotal, b)
	decodeField(d, path("profile", "vllm_profiler_config", "torch_profiler_with_memory"), rv.WithMemory, &v.WithMemory, b)
	decodeField(d, path("profile", "vllm_profiler_config", "ignore_frontend"), rv.IgnoreFrontend, &v.IgnoreFrontend, b)
	decodeField(d, path("profile", "vllm_profiler_config", "delay_iterations"), rv.DelayIterations, &v.DelayIterations, `an integer such as 0`)
	decodeField(d, path("profile", "vllm_profiler_config", "max_iterations"), rv.MaxIterations, &v.MaxIterations, `an integer such as 0`)
	decodeField(d, path("profile", "vllm_profiler_config", "warmup_iterations"), rv.WarmupIterations, &v.WarmupIterations, `an integer such as 2`)
	decodeField(d, path("profile", "vllm_profiler_config", "active_iterations"), rv.ActiveIterations, &v.ActiveIterations, `an integer such as 5`)
	decodeField(d, path("profile", "vllm_profiler_config", "wait_iterations"), rv.WaitIterations, &v.WaitIterations, `an integer such as 0`)
}

// validateProfilerOptions checks the profiler options against the server they go to: sglang
// takes activities, with_stack, record_shapes and (LLM only) profile_stages; vLLM-Omni takes
// with_stack, record_shapes and [profile.vllm_profiler_config]. They are serve keys (serveOnly).
func (d *decoder) validateProfilerOptions(p *Plan) {
	pr := p.Profile
	kindOK := d.check("backend", "kind")
	vllm := kindOK && (p.Backend.Kind == "vllm-omni" || p.Backend.Kind == KindVLLM)
	if k := path("profile", "activities"); d.check(k...) && d.md.IsDefined(k...) {
		switch {
		case vllm:
			d.addKey(k, `vLLM-Omni's profiler (--profiler-config) takes no activities: it records CPU and GPU; drop the key`)
		case len(pr.Activities) == 0:
			d.addKey(k, `empty; list torch-profiler activities such as ["CPU", "GPU"], or drop the key for that default`)
		default:
			d.uniqueOf(k, pr.Activities, Activities, "activity", activityHint)
			if inList(pr.Activities, "MEM") && d.check("backend", "model_type") && p.Backend.ModelType == ModelTypeDiffusion {
				d.addKey(k, `"MEM": the diffusion server's profiler ignores it (it knows CPU and GPU only); drop it`)
			}
			if !inList(pr.Activities, "GPU") {
				d.addKey(k, `has no "GPU": the window would record no kernels and the cell's trace check fails; add "GPU"`)
			}
		}
	}
	if k := path("profile", "profile_stages"); d.check(k...) && d.md.IsDefined(k...) {
		switch {
		case vllm:
			d.addKey(k, `vLLM-Omni's profiler has no stages; drop the key`)
		case d.check("backend", "model_type") && p.Backend.ModelType != ModelTypeLLM:
			d.addKey(k, fmt.Sprintf(`profile_stages selects LLM forward stages (prefill, decode); backend.model_type is %q; drop the key`, p.Backend.ModelType))
		default:
			d.addKey(k, profileStagesRefused)
		}
	}
	k := path("profile", "vllm_profiler_config")
	if !d.check(k...) || !d.md.IsDefined(k...) {
		return
	}
	if kindOK && !vllm {
		d.addKey(k, fmt.Sprintf(`vLLM's ProfilerConfig options, but backend.kind is %q; drop the table (sglang takes with_stack and record_shapes under [profile])`, p.Backend.Kind))
		return
	}
	for _, f := range []struct {
		key string
		v   *int
		min int
	}{{"delay_iterations", pr.VLLM.DelayIterations, 0}, {"max_iterations", pr.VLLM.MaxIterations, 0},
		{"warmup_iterations", pr.VLLM.WarmupIterations, 0}, {"active_iterations", pr.VLLM.ActiveIterations, 1}, {"wait_iterations", pr.VLLM.WaitIterations, 0}} {
		if k := path("profile", "vllm_profiler_config", f.key); d.check(k...) && f.v != nil && *f.v < f.min {
			d.addKey(k, fmt.Sprintf("%d; vLLM's ProfilerConfig requires >= %d", *f.v, f.min))
		}
	}
}

// profileStagesRefused says why the plan refuses profile_stages: sglang reads the field only
// in its SGLANG_PROFILE_V2 profiler (off by default), which implements no /stop_profile, no
// start_step and no merge_profiles, so the runner's window cannot drive it; the default
// profiler ignores the field and writes every stage.
const profileStagesRefused = `sglang's default profiler ignores it (only the SGLANG_PROFILE_V2 profiler reads it, and that one has no /stop_profile, which the runner's window needs): with profile_by_stage = true every window writes both an -EXTEND (prefill) and a -DECODE trace; drop the key and read the stage you want from its trace`

const activityHint = `; "CUDA_PROFILER" is not a torch-profiler activity (it only brackets an nsys capture range)`

// uniqueOf checks that every element of vals is one of valid, once.
func (d *decoder) uniqueOf(k []string, vals, valid []string, what, hint string) {
	seen, lits := map[string]int{}, map[string]int{}
	for i, s := range vals {
		if !oneOf(s, valid) {
			h := ""
			if s == "CUDA_PROFILER" {
				h = hint
			}
			d.addElem(k, i, s, fmt.Sprintf("unknown %s %q; use any of %s%s", what, s, quoteList(valid), h))
			continue
		}
		if j, dup := seen[s]; dup {
			d.addElemN(k, i, s, lits[s], fmt.Sprintf("%q is listed twice (elements %d and %d); list it once", s, j, i))
		}
		seen[s] = i
		lits[s]++
	}
}

// TraceMBPerStep is the stated estimate of the torch trace one profiled step writes (MB), the
// figure [profile] max_trace_mb divides by: an SGLang diffusion denoising step or LLM forward
// step with stacks and shapes, as its gzipped trace, is of this order, and over-estimating
// only profiles fewer steps. Each torch cell's result.json records what it measured
// (trace_mb_per_step), to check the figure against.
const TraceMBPerStep = 64

// TraceSteps is how many steps a torch cell profiles and the field that sets it: the
// diffusion generate cell's num_profiled_timesteps (-1, every step, counts as the cell's
// steps, or 50 when the model's default applies), or the serve window's num_steps. It is 0,
// nil for a cell that profiles no steps (none, nsys).
func TraceSteps(c *Cell) (int, *int) {
	if c.Profiler != ProfilerTorch {
		return 0, nil
	}
	if c.Backend.Mode == "serve" {
		return c.Profile.NumSteps, &c.Profile.NumSteps
	}
	n := c.Profile.NumProfiledTimesteps
	if n == -1 {
		n = c.Steps
		if n <= 0 {
			n = assumedDefaultSteps
		}
	}
	return n, &c.Profile.NumProfiledTimesteps
}

// assumedDefaultSteps stands for a model's own step count when the plan leaves it unset.
const assumedDefaultSteps = 50

// capTraceSteps lowers a torch cell's profiled steps to what max_trace_mb holds at
// TraceMBPerStep each (at least one), and records the step count it had.
func capTraceSteps(c *Cell) {
	if c.Profile.MaxTraceMB <= 0 {
		return
	}
	n, field := TraceSteps(c)
	limit := max(c.Profile.MaxTraceMB/TraceMBPerStep, 1)
	if field == nil || n <= limit {
		return
	}
	c.Profile.StepsCappedFrom = n
	*field = limit
}
