package plans

import (
	"fmt"
	"regexp"
	"strings"
)

// serveOnly are the keys that only a serve plan uses. A generate plan that sets one is
// rejected: the value would silently do nothing, and the user believes it took effect.
var serveOnly = [][]string{
	{"backend", "restart"}, {"backend", "host"}, {"backend", "port"}, {"backend", "ready_timeout"},
	{"matrix", "input_len"}, {"matrix", "output_len"},
	{"profile", "start_step"}, {"profile", "num_steps"}, {"profile", "profile_by_stage"},
	{"profile", "merge_profiles"}, {"profile", "flush_timeout"},
	{"profile", "activities"}, {"profile", "with_stack"}, {"profile", "record_shapes"},
	{"profile", "profile_stages"}, {"profile", "vllm_profiler_config"}, {"backend", "url"},
	{"nsys", "capture_range"}, {"nsys", "capture_range_end"},
}

// serveOnlyMsg is the problem for a serve key in a generate plan.
const serveOnlyMsg = `only used when backend.mode = "serve"; set mode = "serve" under [backend], or drop it`

// validateServe checks the serve keys: [backend] restart/host/port/ready_timeout/model_type,
// the token-length axes, the /start_profile window of [profile], and [load].
func (d *decoder) validateServe(p *Plan) {
	generate := d.rejectServeKeys(p)
	modelTypeOK := d.validateServeBackend(p, generate)
	d.validateTokenAxes(p, modelTypeOK)
	d.validateWindow(p)
	d.validateLoad(p, modelTypeOK)
}

// rejectServeKeys reports whether the plan is a generate plan, and if so rejects every serve
// key it sets.
func (d *decoder) rejectServeKeys(p *Plan) bool {
	generate := d.check("backend", "mode") && p.Backend.Mode == "generate"
	if generate {
		for _, k := range serveOnly {
			if d.check(k...) && d.md.IsDefined(k...) {
				d.addKey(k, serveOnlyMsg)
				d.bad[strings.Join(k, ".")] = true // its own checks would only repeat the point
			}
		}
		if d.check("load") && d.tableKeysSet("load") {
			d.addKey([]string{"load"}, `[load] describes the requests sent to a server: `+serveOnlyMsg)
			d.bad["load"] = true
		}
	}
	return generate
}

// validateServeBackend checks the serve keys of [backend] and reports whether model_type is
// valid (and so may be relied on by the checks that depend on it).
func (d *decoder) validateServeBackend(p *Plan, generate bool) bool {
	b := p.Backend
	if k := path("backend", "restart"); d.check(k...) && !oneOf(b.Restart, Restarts) {
		d.addKey(k, fmt.Sprintf("unknown value %q; use %s (shared: cells with the same model and server arguments share one server)", b.Restart, quoteList(Restarts)))
	}
	if k := path("backend", "host"); d.check(k...) {
		if strings.TrimSpace(b.Host) == "" {
			d.addKey(k, `empty; give the address the server listens on, e.g. "127.0.0.1", or drop the key for that default`)
		} else if strings.ContainsAny(b.Host, " \t\n/\x00") {
			d.addKey(k, fmt.Sprintf("%q is not a host name or address; write only the host, e.g. \"127.0.0.1\" (the port goes in backend.port)", b.Host))
		}
	}
	if k := path("backend", "port"); d.check(k...) && (b.Port < 0 || b.Port > 65535) {
		d.addKey(k, fmt.Sprintf("port %d is outside 0..65535; use e.g. 30000, or 0 (the default) for a free port", b.Port))
	}
	d.positiveDuration(path("backend", "ready_timeout"), b.ReadyTimeout, `"20m"`)
	modelTypeOK := false
	if k := path("backend", "model_type"); d.check(k...) {
		switch {
		case !oneOf(b.ModelType, ModelTypes):
			d.addKey(k, fmt.Sprintf("unknown model type %q; use %s", b.ModelType, quoteList(ModelTypes)))
		case generate && b.ModelType == ModelTypeLLM && d.md.IsDefined(k...):
			d.addKey(k, `"llm" needs backend.mode = "serve": sglang generate runs diffusion models only`)
		default:
			modelTypeOK = true
		}
	}
	return modelTypeOK
}

// validateTokenAxes checks input_len and output_len: the LLM serve counterpart of resolution
// and steps.
func (d *decoder) validateTokenAxes(p *Plan, modelTypeOK bool) {
	b, m := p.Backend, p.Matrix
	for _, ax := range []struct {
		key  string
		vals []int
	}{{"input_len", m.InputLen}, {"output_len", m.OutputLen}} {
		k := path("matrix", ax.key)
		if !d.check(k...) || ax.vals == nil {
			continue
		}
		if modelTypeOK && b.ModelType != ModelTypeLLM {
			d.addKey(k, fmt.Sprintf(`token lengths are only meaningful with backend.model_type = "llm" (it is %q); set it, or drop the axis`, b.ModelType))
			continue
		}
		if len(ax.vals) == 0 {
			d.addKey(k, "empty axis; list at least one length in tokens such as [128], or drop the key")
			continue
		}
		seen := map[int]int{}
		for i, n := range ax.vals {
			if n <= 0 {
				d.addElem(k, i, "", fmt.Sprintf("%d tokens: a length must be > 0, e.g. 128", n))
				continue
			}
			if j, dup := seen[n]; dup {
				d.addElem(k, i, "", fmt.Sprintf("%d is listed twice (elements %d and %d); list each value once", n, j, i))
			}
			seen[n] = i
		}
	}
}

// validateWindow checks the /start_profile window of [profile].
func (d *decoder) validateWindow(p *Plan) {
	pr := p.Profile
	if k := path("profile", "start_step"); d.check(k...) && pr.StartStep < -1 {
		d.addKey(k, fmt.Sprintf("%d; it must be >= 0, or -1 (the default) to open the window at once", pr.StartStep))
	}
	if k := path("profile", "num_steps"); d.check(k...) && pr.NumSteps < 1 {
		d.addKey(k, fmt.Sprintf("%d; the profiling window must cover at least 1 step, e.g. 5", pr.NumSteps))
	}
	d.positiveDuration(path("profile", "flush_timeout"), pr.FlushTimeout, `"10m"`)
}

// validateLoad checks [load].
func (d *decoder) validateLoad(p *Plan, modelTypeOK bool) {
	b, l := p.Backend, p.Load
	if k := path("load", "api"); d.check(k...) {
		switch {
		case !oneOf(l.API, LoadAPIs):
			if l.API != "" || d.md.IsDefined(k...) {
				d.addKey(k, fmt.Sprintf("unknown API %q; use %s", l.API, quoteList(LoadAPIs)))
			}
		case modelTypeOK:
			need := ModelTypeDiffusion
			if l.API == APIGenerate || l.API == APICompletions || l.API == APIChat {
				need = ModelTypeLLM
			}
			if b.ModelType != need && d.md.IsDefined(k...) {
				why := ""
				if !d.md.IsDefined("backend", "model_type") {
					why = " (the default, from the matrix)"
				}
				d.addKey(k, fmt.Sprintf("API %q needs backend.model_type = %q, but it is %q%s; %s", l.API, need, b.ModelType, why, apiHint(b.ModelType)))
			}
		}
	}
	if k := path("load", "warmup"); d.check(k...) && l.Warmup < 0 {
		d.addKey(k, fmt.Sprintf("%d; it must be >= 0 (0 sends no warm-up request)", l.Warmup))
	}
	if k := path("load", "requests"); d.check(k...) && l.Requests < 1 {
		d.addKey(k, fmt.Sprintf("%d; a cell must measure at least 1 request, e.g. 5", l.Requests))
	}
	if k := path("load", "concurrency"); d.check(k...) && l.Concurrency < 1 {
		d.addKey(k, fmt.Sprintf("%d; it must be >= 1 (1 sends one request at a time)", l.Concurrency))
	}
	if k := path("load", "max_error_rate"); d.check(k...) && !(l.MaxErrorRate >= 0 && l.MaxErrorRate <= 1) {
		d.addKey(k, fmt.Sprintf("%v is outside 0..1; it is a fraction of the measured requests, e.g. 0.1 for 10%%", l.MaxErrorRate))
	}
	d.positiveDuration(path("load", "request_timeout"), l.RequestTimeout, `"10m"`)
}

func apiHint(modelType string) string {
	if modelType == ModelTypeLLM {
		return `use "generate", "completions" or "chat" for an LLM`
	}
	return `use "images" or "videos" for a diffusion model`
}

// validateCompare checks [compare]; tolerances were checked while decoding.
func (d *decoder) validateCompare(p *Plan) {
	c := p.Compare
	if k := path("compare", "alpha"); d.check(k...) && !(c.Alpha > 0 && c.Alpha <= 0.5) {
		d.addKey(k, fmt.Sprintf("%v is outside (0, 0.5]; it is the significance level of the Mann-Whitney test, e.g. 0.05", c.Alpha))
	}
	if k := path("compare", "baseline_runs"); d.check(k...) && c.BaselineRuns < 1 {
		d.addKey(k, fmt.Sprintf("%d; the rolling baseline needs at least 1 run, e.g. 5", c.BaselineRuns))
	}
	if k := path("compare", "consecutive"); d.check(k...) && c.Consecutive < 1 {
		d.addKey(k, fmt.Sprintf("%d; it must be >= 1 (1 flags a regression on the first violation)", c.Consecutive))
	}
}

// validateBundle checks that every [bundle] redact pattern compiles and redacts something.
func (d *decoder) validateBundle(p *Plan) {
	k := path("bundle", "redact")
	if !d.check(k...) {
		return
	}
	for i, s := range p.Bundle.Redact {
		if s == "" {
			d.addElem(k, i, "", `empty pattern; give a regular expression such as "internal-[a-z0-9]+", or remove the element`)
			continue
		}
		re, err := regexp.Compile(s)
		if err != nil {
			d.addElem(k, i, s, fmt.Sprintf("not a valid regular expression (Go RE2 syntax): %v", err))
			continue
		}
		if re.MatchString("") {
			d.addElem(k, i, s, fmt.Sprintf("%q matches the empty string, so it would put <redacted> between every character; make it match at least one character (e.g. + instead of *)", s))
		}
	}
}
