package plans

import (
	"fmt"
	"strings"
	"time"
)

// validateProfile checks [profile] (the serve window: validate_serve.go).
func (d *decoder) validateProfile(p *Plan) {
	pr := p.Profile
	if k := path("profile", "profilers"); d.check(k...) {
		if len(pr.Profilers) == 0 {
			d.addKey(k, `empty; list at least one of "none", "torch", "nsys", or drop the key for the default ["none"]`)
		}
		seen, lits := map[string]int{}, map[string]int{}
		for i, s := range pr.Profilers {
			if !oneOf(s, Profilers) {
				d.addElem(k, i, s, fmt.Sprintf("unknown profiler %q; use %s", s, quoteList(Profilers)))
				continue
			}
			if j, dup := seen[s]; dup {
				d.addElemN(k, i, s, lits[s], fmt.Sprintf("profiler %q is listed twice (elements %d and %d); list it once and use matrix.repeats for more runs", s, j, i))
			}
			seen[s] = i
			lits[s]++
		}
	}
	if k := path("profile", "num_profiled_timesteps"); d.check(k...) {
		if n := pr.NumProfiledTimesteps; n <= 0 && n != -1 {
			d.addKey(k, fmt.Sprintf("%d; it must be > 0, or -1 to profile every denoising step", n))
		}
	}
	if k := path("profile", "max_trace_mb"); d.check(k...) && d.md.IsDefined(k...) {
		if n := pr.MaxTraceMB; n < TraceMBPerStep {
			d.addKey(k, fmt.Sprintf("%d MB is less than one profiled step (estimated at %d MB); give at least %d, or drop the key for no budget", n, TraceMBPerStep, TraceMBPerStep))
		}
	}
}

// validateNSys checks [nsys].
func (d *decoder) validateNSys(p *Plan) {
	pr := p.Profile
	ns := p.NSys
	if d.check("nsys") && d.nsysKeysSet() && !inList(pr.Profilers, ProfilerNsys) && d.check("profile", "profilers") {
		d.addKey([]string{"nsys"}, `nsys options given but profile.profilers has no "nsys"; add it or drop [nsys]`)
	}
	if k := path("nsys", "delay"); d.check(k...) {
		if ns.Delay.Duration < 0 {
			d.addKey(k, fmt.Sprintf("%v is negative; use \"0s\" or more", ns.Delay.Duration))
		} else if ns.Delay.Duration%time.Second != 0 {
			d.addKey(k, fmt.Sprintf("%v is not whole seconds; nsys --delay takes seconds, so use e.g. %q", ns.Delay.Duration, wholeSeconds(ns.Delay.Duration)))
		}
	}
	if k := path("nsys", "duration"); d.check(k...) && d.md.IsDefined(k...) {
		if ns.Duration.Duration <= 0 {
			d.addKey(k, fmt.Sprintf("%v; it must be > 0 (drop the key to capture until the process exits)", ns.Duration.Duration))
		} else if ns.Duration.Duration%time.Second != 0 {
			d.addKey(k, fmt.Sprintf("%v is not whole seconds; nsys --duration takes seconds, so use e.g. %q", ns.Duration.Duration, wholeSeconds(ns.Duration.Duration)))
		}
	}
	if k := path("nsys", "trace"); d.check(k...) {
		if len(ns.Trace) == 0 {
			d.addKey(k, `empty; list what nsys should trace, e.g. ["cuda", "nvtx", "osrt"], or drop the key for that default`)
		}
		seen, lits := map[string]int{}, map[string]int{}
		for i, s := range ns.Trace {
			if !oneOf(s, NSysTraces) {
				d.addElem(k, i, s, fmt.Sprintf("unknown nsys trace %q; use any of %s", s, strings.Join(NSysTraces, ", ")))
				continue
			}
			if j, dup := seen[s]; dup {
				d.addElemN(k, i, s, lits[s], fmt.Sprintf("%q is listed twice (elements %d and %d); list it once", s, j, i))
			}
			seen[s] = i
			lits[s]++
		}
		if _, none := seen["none"]; none && len(seen) > 1 {
			d.addKey(k, `"none" cannot be combined with other trace APIs; use ["none"] alone or drop it`)
		}
	}
	if k := path("nsys", "cuda_graph_trace"); d.check(k...) && !oneOf(ns.CudaGraphTrace, CudaGraphTraces) {
		d.addKey(k, fmt.Sprintf("unknown value %q; use %s (node traces each kernel inside a CUDA graph)", ns.CudaGraphTrace, quoteList(CudaGraphTraces)))
	}
}

// validateGate checks [gate].
func (d *decoder) validateGate(p *Plan) {
	if k := path("gate", "diffusers_fallback"); d.check(k...) && !oneOf(p.Gate.DiffusersFallback, DiffusersFallback) {
		d.addKey(k, fmt.Sprintf("unknown value %q; use %s", p.Gate.DiffusersFallback, quoteList(DiffusersFallback)))
	}
}

// nsysKeysSet reports whether [nsys] sets any key at all (an empty [nsys] header is harmless).
func (d *decoder) nsysKeysSet() bool { return d.tableKeysSet("nsys") }

// wholeSeconds rounds x to whole seconds (at least 1s) for a hint.
func wholeSeconds(x time.Duration) string {
	s := x.Round(time.Second)
	if s <= 0 {
		s = time.Second
	}
	return fmt.Sprintf("%ds", int64(s/time.Second))
}
