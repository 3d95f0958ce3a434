package plans

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/sglprof/runner/plans/infile"
)

// MaxPlanBytes bounds a plan file: plans are a few KiB, so a larger file is not a plan (a
// trace or a dataset passed by mistake) and is refused before it is read into memory.
const MaxPlanBytes = 16 << 20

// Load reads and parses the plan file at path. On success the plan keeps Path and the file's
// exact bytes in Source. A plan that is invalid yields a *Error listing every problem. The file
// is read through plans/infile: one that is not a regular file (a FIFO) or is larger than
// MaxPlanBytes is refused without being read.
func Load(path string) (*Plan, error) {
	data, err := infile.ReadFile(path, MaxPlanBytes)
	if err != nil {
		return nil, fmt.Errorf("read plan: %w; check the path to the plan file", err)
	}
	p, err := Parse(path, data)
	if err != nil {
		return nil, err
	}
	p.Path = path
	return p, nil
}

// Parse decodes, defaults and validates a plan. name is the plan file's path (a relative
// dataset_path starts at its directory) and names the file in error messages. Every problem in
// the file is reported at once in a *Error; a TOML syntax error stops decoding, so it is
// reported alone.
func Parse(name string, data []byte) (*Plan, error) {
	return ParseWith(name, data, ParseOptions{})
}

// ParseOptions change how ParseWith reads a copy of a plan that no longer sits where it was
// written: a run directory's plan.toml or a bundle's. Relative paths in the plan start at the
// directory of the file it was copied from, which the copy's own directory is not.
type ParseOptions struct {
	// DatasetPath, when not empty, is the file a sharegpt plan's load.dataset_path names,
	// already resolved: the path a run recorded when it started (cells.json "dataset"), or a
	// bundle's copy of that file. The plan's own dataset_path is then not resolved again.
	DatasetPath string
}

// ParseWith is Parse with opts.
func ParseWith(name string, data []byte, opts ParseOptions) (*Plan, error) {
	d := &decoder{src: string(data), file: name, opts: opts, bad: map[string]bool{}, reported: map[string]bool{}}
	if pr, deep := nestingProblem(d.src); deep {
		return nil, &Error{File: name, Problems: []Problem{pr}}
	}
	p := d.decode()
	if !d.syntax {
		// Validate even after type errors, so the user sees every problem at once; values that
		// failed to decode are skipped by the checks (see decoder.bad).
		applyDefaults(p, d)
		d.validate(p)
	}
	if len(d.problems) > 0 {
		sortProblems(d.problems)
		if d.dropped > 0 {
			d.problems = append(d.problems, Problem{Msg: fmt.Sprintf(
				"and %d more problems not listed (only the first %d are); fix these and check the plan again with `runner plan`",
				d.dropped, MaxProblems)})
		}
		return nil, &Error{File: name, Problems: d.problems}
	}
	p.Source = append([]byte(nil), data...)
	return p, nil
}

// schema lists the keys each table accepts, in documentation order. backend.env is free-form.
// compare.tolerances is keyed by metric name, checked against CompareMetrics.
var schema = map[string][]string{
	"": {"name", "output_dir", "backend", "matrix", "profile", "nsys", "gate", "load", "compare", "bundle", "executor"},
	"backend": {"kind", "mode", "command", "extra_args", "engine_args", "env", "timeout", "grace",
		"restart", "host", "port", "ready_timeout", "model_type", "url"},
	"matrix": {"model", "prompt", "resolution", "num_inference_steps", "seed", "repeats", "input_len", "output_len",
		"server_args", "args", "concurrency", "request_rate", "engine", "exclude", "include"},
	"profile": {"profilers", "num_profiled_timesteps", "profile_all_stages", "max_trace_mb",
		"start_step", "num_steps", "profile_by_stage", "merge_profiles", "flush_timeout",
		"activities", "with_stack", "record_shapes", "profile_stages", "vllm_profiler_config"},
	"nsys": {"delay", "duration", "trace", "cuda_graph_trace", "capture_range", "capture_range_end"},
	"gate": {"diffusers_fallback", "busy_gpu", "busy_wait", "require_locked_clocks"},
	"load": {"api", "warmup", "requests", "concurrency", "max_error_rate", "request_timeout",
		"request_rate", "burstiness", "max_concurrency", "duration", "dataset", "random_range_ratio",
		"dataset_path", "slo_ttft", "slo_tpot", "search", "ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps"},
	"compare":  {"alpha", "baseline_runs", "consecutive", "tolerances"},
	"bundle":   {"redact"},
	"executor": executorKeys,
	// Sub-tables are listed by their dotted name.
	"executor.slurm":               slurmKeys,
	"profile.vllm_profiler_config": vllmProfilerKeys,
	"matrix.exclude":               ruleKeys,
	"matrix.include":               ruleKeys,
	"load.search":                  searchKeys,
}

// The raw types mirror the plan with every value delayed (toml.Primitive), so that one value of
// the wrong type is one problem instead of aborting the whole decode, and so that a table
// written as a scalar (`backend = "x"`) is reported like any other type error.
type rawPlan struct {
	Name      toml.Primitive `toml:"name"`
	OutputDir toml.Primitive `toml:"output_dir"`
	Backend   toml.Primitive `toml:"backend"`
	Matrix    toml.Primitive `toml:"matrix"`
	Profile   toml.Primitive `toml:"profile"`
	NSys      toml.Primitive `toml:"nsys"`
	Gate      toml.Primitive `toml:"gate"`
	Load      toml.Primitive `toml:"load"`
	Compare   toml.Primitive `toml:"compare"`
	Bundle    toml.Primitive `toml:"bundle"`
	Executor  toml.Primitive `toml:"executor"`
}

type rawBackend struct {
	Kind       toml.Primitive `toml:"kind"`
	Mode       toml.Primitive `toml:"mode"`
	Command    toml.Primitive `toml:"command"`
	ExtraArgs  toml.Primitive `toml:"extra_args"`
	EngineArgs toml.Primitive `toml:"engine_args"`
	Env        toml.Primitive `toml:"env"`
	Timeout    toml.Primitive `toml:"timeout"`
	Grace      toml.Primitive `toml:"grace"`

	Restart      toml.Primitive `toml:"restart"`
	Host         toml.Primitive `toml:"host"`
	Port         toml.Primitive `toml:"port"`
	ReadyTimeout toml.Primitive `toml:"ready_timeout"`
	ModelType    toml.Primitive `toml:"model_type"`
}

type rawMatrix struct {
	Model             toml.Primitive `toml:"model"`
	Prompt            toml.Primitive `toml:"prompt"`
	Resolution        toml.Primitive `toml:"resolution"`
	NumInferenceSteps toml.Primitive `toml:"num_inference_steps"`
	Seed              toml.Primitive `toml:"seed"`
	Repeats           toml.Primitive `toml:"repeats"`
	InputLen          toml.Primitive `toml:"input_len"`
	OutputLen         toml.Primitive `toml:"output_len"`
	ServerArgs        toml.Primitive `toml:"server_args"`
	Args              toml.Primitive `toml:"args"`
	Concurrency       toml.Primitive `toml:"concurrency"`
	RequestRate       toml.Primitive `toml:"request_rate"`
	Engine            toml.Primitive `toml:"engine"`
	Exclude           toml.Primitive `toml:"exclude"`
	Include           toml.Primitive `toml:"include"`
}

type rawProfile struct {
	Profilers            toml.Primitive `toml:"profilers"`
	NumProfiledTimesteps toml.Primitive `toml:"num_profiled_timesteps"`
	ProfileAllStages     toml.Primitive `toml:"profile_all_stages"`
	MaxTraceMB           toml.Primitive `toml:"max_trace_mb"`
	StartStep            toml.Primitive `toml:"start_step"`
	NumSteps             toml.Primitive `toml:"num_steps"`
	ProfileByStage       toml.Primitive `toml:"profile_by_stage"`
	MergeProfiles        toml.Primitive `toml:"merge_profiles"`
	FlushTimeout         toml.Primitive `toml:"flush_timeout"`
}

type rawNSys struct {
	Delay          toml.Primitive `toml:"delay"`
	Duration       toml.Primitive `toml:"duration"`
	Trace          toml.Primitive `toml:"trace"`
	CudaGraphTrace toml.Primitive `toml:"cuda_graph_trace"`
}

type rawGate struct {
	DiffusersFallback   toml.Primitive `toml:"diffusers_fallback"`
	BusyGPU             toml.Primitive `toml:"busy_gpu"`
	BusyWait            toml.Primitive `toml:"busy_wait"`
	RequireLockedClocks toml.Primitive `toml:"require_locked_clocks"`
}

type rawLoad struct {
	API            toml.Primitive `toml:"api"`
	Warmup         toml.Primitive `toml:"warmup"`
	Requests       toml.Primitive `toml:"requests"`
	Concurrency    toml.Primitive `toml:"concurrency"`
	MaxErrorRate   toml.Primitive `toml:"max_error_rate"`
	RequestTimeout toml.Primitive `toml:"request_timeout"`

	RequestRate      toml.Primitive `toml:"request_rate"`
	Burstiness       toml.Primitive `toml:"burstiness"`
	MaxConcurrency   toml.Primitive `toml:"max_concurrency"`
	Duration         toml.Primitive `toml:"duration"`
	Dataset          toml.Primitive `toml:"dataset"`
	RandomRangeRatio toml.Primitive `toml:"random_range_ratio"`
	DatasetPath      toml.Primitive `toml:"dataset_path"`
	SLOTTFT          toml.Primitive `toml:"slo_ttft"`
	SLOTPOT          toml.Primitive `toml:"slo_tpot"`
	Clients          toml.Primitive `toml:"clients"`
	TraceSlowdown    toml.Primitive `toml:"trace_slowdown"`
	Search           toml.Primitive `toml:"search"`
	RampUpStrategy   toml.Primitive `toml:"ramp_up_strategy"`
	RampUpStartRPS   toml.Primitive `toml:"ramp_up_start_rps"`
	RampUpEndRPS     toml.Primitive `toml:"ramp_up_end_rps"`
	FlushCache       toml.Primitive `toml:"flush_cache"`
}

type rawCompare struct {
	Alpha        toml.Primitive `toml:"alpha"`
	BaselineRuns toml.Primitive `toml:"baseline_runs"`
	Consecutive  toml.Primitive `toml:"consecutive"`
	Tolerances   toml.Primitive `toml:"tolerances"`
}

type rawBundle struct {
	Redact toml.Primitive `toml:"redact"`
}

// decoder carries the state of one Parse: the metadata of the decode, the problems so far, and
// which keys already have a problem (so one mistake is reported once, not again by every check
// that depends on it).
type decoder struct {
	src      string
	file     string // the plan's path as given to Parse (relative dataset paths start at its directory)
	opts     ParseOptions
	lines    []string
	md       toml.MetaData
	syntax   bool
	problems []Problem
	// bad holds dotted keys whose value is not used: it failed to decode, or a wrong-case key
	// folded onto it (BurntSushi matches struct fields case-insensitively, so `MODEL` fills
	// `model`, and with both present which one wins is random). Checks under them are skipped.
	bad map[string]bool
	// reported holds dotted unknown keys already reported.
	reported map[string]bool
	pos      *positions
	// dropped counts the problems found beyond MaxProblems.
	dropped int
}

func (d *decoder) decode() *Plan {
	p := &Plan{}
	var raw rawPlan
	md, err := toml.Decode(d.src, &raw)
	if err != nil {
		d.syntax = true
		d.syntaxError(err)
		return p
	}
	d.md = md
	d.checkCase()

	if d.present([]string{"backend"}) {
		d.decodeBackend(raw.Backend, p)
	}
	if d.present([]string{"matrix"}) {
		d.decodeMatrix(raw.Matrix, p)
	}
	if d.present([]string{"profile"}) {
		d.decodeProfile(raw.Profile, p)
	}
	if d.present([]string{"nsys"}) {
		d.decodeNSys(raw.NSys, p)
	}
	if d.present([]string{"gate"}) {
		d.decodeGate(raw.Gate, p)
	}
	if d.present([]string{"load"}) {
		d.decodeLoad(raw.Load, p)
	}
	if d.present([]string{"compare"}) {
		d.decodeCompare(raw.Compare, p)
	}
	if d.present([]string{"bundle"}) {
		d.decodeBundle(raw.Bundle, p)
	}
	d.decodeExecutor(raw.Executor, &p.Executor)
	decodeField(d, path("name"), raw.Name, &p.Name, `a string such as "qwen-image"`)
	decodeField(d, path("output_dir"), raw.OutputDir, &p.OutputDir, `a string such as "runs"`)

	d.checkUndecoded()
	return p
}

// decodeBackend decodes [backend].
func (d *decoder) decodeBackend(prim toml.Primitive, p *Plan) {
	var rb rawBackend
	if d.decodeTable([]string{"backend"}, prim, &rb) {
		b := &p.Backend
		decodeField(d, path("backend", "kind"), rb.Kind, &b.Kind, `a string: "sglang", "vllm" or "vllm-omni"`)
		decodeField(d, path("backend", "mode"), rb.Mode, &b.Mode, `a string: "generate" or "serve"`)
		decodeField(d, path("backend", "command"), rb.Command, &b.Command, `an array of strings such as ["sglang"]`)
		decodeField(d, path("backend", "extra_args"), rb.ExtraArgs, &b.ExtraArgs, `an array of strings such as ["--backend", "sglang"]`)
		decodeField(d, path("backend", "engine_args"), rb.EngineArgs, &b.EngineArgs, `a table of arrays such as { vllm = ["--generation-config", "vllm"] }`)
		d.decodeEnv(rb.Env, b)
		decodeField(d, path("backend", "timeout"), rb.Timeout, &b.Timeout, `a duration string such as "20m"`)
		decodeField(d, path("backend", "grace"), rb.Grace, &b.Grace, `a duration string such as "10s"`)
		decodeField(d, path("backend", "restart"), rb.Restart, &b.Restart, `a string: "shared" or "per-cell"`)
		decodeField(d, path("backend", "host"), rb.Host, &b.Host, `a string such as "127.0.0.1"`)
		decodeField(d, path("backend", "port"), rb.Port, &b.Port, `an integer such as 30000 (or 0 for a free port)`)
		decodeField(d, path("backend", "ready_timeout"), rb.ReadyTimeout, &b.ReadyTimeout, `a duration string such as "20m"`)
		decodeField(d, path("backend", "model_type"), rb.ModelType, &b.ModelType, `a string: "diffusion" or "llm"`)
		d.decodeAttach(prim, b)
	}
}

// decodeMatrix decodes [matrix].
func (d *decoder) decodeMatrix(prim toml.Primitive, p *Plan) {
	var rm rawMatrix
	if d.decodeTable([]string{"matrix"}, prim, &rm) {
		m := &p.Matrix
		decodeField(d, path("matrix", "model"), rm.Model, &m.Model, `an array of strings such as ["Qwen/Qwen-Image"]`)
		decodeField(d, path("matrix", "prompt"), rm.Prompt, &m.Prompt, `an array of strings such as ["a red fox"]`)
		decodeField(d, path("matrix", "resolution"), rm.Resolution, &m.Resolution, `an array of strings such as ["1024x1024", "720p"]`)
		decodeField(d, path("matrix", "num_inference_steps"), rm.NumInferenceSteps, &m.NumInferenceSteps, `an array of integers such as [50]`)
		decodeField(d, path("matrix", "seed"), rm.Seed, &m.Seed, `an array of integers such as [0, 1]`)
		decodeField(d, path("matrix", "repeats"), rm.Repeats, &m.Repeats, `an integer such as 3`)
		decodeField(d, path("matrix", "input_len"), rm.InputLen, &m.InputLen, `an array of integers such as [128, 1024] (tokens)`)
		decodeField(d, path("matrix", "output_len"), rm.OutputLen, &m.OutputLen, `an array of integers such as [32] (tokens)`)
		d.decodeLLMMatrix(&rm, m)
		d.decodeEngine(&rm, m)
		m.Exclude = d.decodeRules("exclude", rm.Exclude)
		m.Include = d.decodeRules("include", rm.Include)
	}
}

// decodeProfile decodes [profile].
func (d *decoder) decodeProfile(prim toml.Primitive, p *Plan) {
	var rp rawProfile
	if d.decodeTable([]string{"profile"}, prim, &rp) {
		pr := &p.Profile
		decodeField(d, path("profile", "profilers"), rp.Profilers, &pr.Profilers, `an array of strings such as ["none", "torch", "nsys"]`)
		decodeField(d, path("profile", "num_profiled_timesteps"), rp.NumProfiledTimesteps, &pr.NumProfiledTimesteps, `an integer such as 5 (or -1 for all steps)`)
		decodeField(d, path("profile", "profile_all_stages"), rp.ProfileAllStages, &pr.ProfileAllStages, `true or false`)
		decodeField(d, path("profile", "max_trace_mb"), rp.MaxTraceMB, &pr.MaxTraceMB, `an integer number of MB such as 2048`)
		decodeField(d, path("profile", "start_step"), rp.StartStep, &pr.StartStep, `an integer such as 10 (or -1 to let the server choose)`)
		decodeField(d, path("profile", "num_steps"), rp.NumSteps, &pr.NumSteps, `an integer such as 5`)
		decodeField(d, path("profile", "profile_by_stage"), rp.ProfileByStage, &pr.ProfileByStage, `true or false`)
		decodeField(d, path("profile", "merge_profiles"), rp.MergeProfiles, &pr.MergeProfiles, `true or false`)
		decodeField(d, path("profile", "flush_timeout"), rp.FlushTimeout, &pr.FlushTimeout, `a duration string such as "10m"`)
		d.decodeProfilerOptions(prim, pr)
	}
}

// decodeNSys decodes [nsys].
func (d *decoder) decodeNSys(prim toml.Primitive, p *Plan) {
	var rn rawNSys
	if d.decodeTable([]string{"nsys"}, prim, &rn) {
		n := &p.NSys
		decodeField(d, path("nsys", "delay"), rn.Delay, &n.Delay, `a duration string such as "10s"`)
		decodeField(d, path("nsys", "duration"), rn.Duration, &n.Duration, `a duration string such as "30s"`)
		decodeField(d, path("nsys", "trace"), rn.Trace, &n.Trace, `an array of strings such as ["cuda", "nvtx", "osrt"]`)
		decodeField(d, path("nsys", "cuda_graph_trace"), rn.CudaGraphTrace, &n.CudaGraphTrace, `a string: "node" or "graph"`)
		d.decodeNSysCapture(prim, n)
	}
}

// decodeGate decodes [gate].
func (d *decoder) decodeGate(prim toml.Primitive, p *Plan) {
	var rg rawGate
	if d.decodeTable([]string{"gate"}, prim, &rg) {
		decodeField(d, path("gate", "diffusers_fallback"), rg.DiffusersFallback, &p.Gate.DiffusersFallback, `a string: "fail" or "warn"`)
		d.decodeGPUGate(rg, &p.Gate)
	}
}

// decodeLoad decodes [load].
func (d *decoder) decodeLoad(prim toml.Primitive, p *Plan) {
	var rl rawLoad
	if d.decodeTable([]string{"load"}, prim, &rl) {
		l := &p.Load
		decodeField(d, path("load", "api"), rl.API, &l.API, `a string: "images", "videos", "generate", "completions" or "chat"`)
		decodeField(d, path("load", "warmup"), rl.Warmup, &l.Warmup, `an integer such as 1`)
		decodeField(d, path("load", "requests"), rl.Requests, &l.Requests, `an integer such as 5`)
		decodeField(d, path("load", "concurrency"), rl.Concurrency, &l.Concurrency, `an integer such as 1`)
		d.decodeFloat(path("load", "max_error_rate"), rl.MaxErrorRate, &l.MaxErrorRate, `a number between 0 and 1 such as 0.1`)
		decodeField(d, path("load", "request_timeout"), rl.RequestTimeout, &l.RequestTimeout, `a duration string such as "10m"`)
		d.decodeLLMLoad(&rl, l)
		d.decodeSearch(rl.Search, l)
		decodeField(d, path("load", "ramp_up_strategy"), rl.RampUpStrategy, &l.RampUpStrategy, `a string: "linear" or "exponential"`)
		d.decodeFloat(path("load", "ramp_up_start_rps"), rl.RampUpStartRPS, &l.RampUpStartRPS, `a number of requests/s such as 1`)
		d.decodeFloat(path("load", "ramp_up_end_rps"), rl.RampUpEndRPS, &l.RampUpEndRPS, `a number of requests/s such as 16`)
	}
}

// decodeCompare decodes [compare].
func (d *decoder) decodeCompare(prim toml.Primitive, p *Plan) {
	var rc rawCompare
	if d.decodeTable([]string{"compare"}, prim, &rc) {
		c := &p.Compare
		d.decodeFloat(path("compare", "alpha"), rc.Alpha, &c.Alpha, `a number such as 0.05`)
		decodeField(d, path("compare", "baseline_runs"), rc.BaselineRuns, &c.BaselineRuns, `an integer such as 5`)
		decodeField(d, path("compare", "consecutive"), rc.Consecutive, &c.Consecutive, `an integer such as 2`)
		d.decodeTolerances(rc.Tolerances, c)
	}
}

// decodeBundle decodes [bundle].
func (d *decoder) decodeBundle(prim toml.Primitive, p *Plan) {
	var rbu rawBundle
	if d.decodeTable([]string{"bundle"}, prim, &rbu) {
		decodeField(d, path("bundle", "redact"), rbu.Redact, &p.Bundle.Redact, `an array of strings (regular expressions) such as ["internal-[a-z0-9]+"]`)
	}
}

func path(k ...string) []string { return k }

// present reports whether the exact key was written in the file and can be trusted.
func (d *decoder) present(k []string) bool {
	return !d.underBad(k) && d.md.IsDefined(k...)
}

func (d *decoder) underBad(k []string) bool {
	for i := 1; i <= len(k); i++ {
		s := toml.Key(k[:i]).String()
		if d.bad[s] || d.reported[s] {
			return true
		}
	}
	return false
}

func (d *decoder) decodeTable(k []string, prim toml.Primitive, dst any) bool {
	if err := d.md.PrimitiveDecode(prim, dst); err != nil {
		d.typeError(k, prim, err, fmt.Sprintf("a table; write it as a [%s] section", toml.Key(k)))
		return false
	}
	return true
}

// decodeField decodes one value into dst, only when the key was written. On a type error dst
// is left untouched (a half-decoded array would trigger misleading follow-up problems).
func decodeField[T any](d *decoder, k []string, prim toml.Primitive, dst *T, expect string) bool {
	if !d.present(k) {
		return false
	}
	var v T
	if err := d.md.PrimitiveDecode(prim, &v); err != nil {
		d.typeError(k, prim, err, expect)
		return false
	}
	*dst = v
	return true
}

func (d *decoder) decodeEnv(prim toml.Primitive, b *Backend) {
	k := path("backend", "env")
	if !d.present(k) {
		return
	}
	raw, ok := d.decodeMap(k, prim, `a table of strings such as { HF_HUB_OFFLINE = "1" }`)
	if !ok {
		return
	}
	names := make([]string, 0, len(raw))
	for n := range raw {
		names = append(names, n)
	}
	sort.Strings(names)
	b.Env = make(map[string]string, len(raw))
	for _, n := range names {
		var s string
		if decodeField(d, path("backend", "env", n), raw[n], &s, `a string (environment values are strings: write "1", not 1)`) {
			b.Env[n] = s
		}
	}
}

// decodeMap decodes a table whose keys are the user's. BurntSushi decodes a scalar into a map
// without an error (leaving it empty), so `env = "x"` would silently mean no variables; the
// value's type is checked first.
func (d *decoder) decodeMap(k []string, prim toml.Primitive, expect string) (map[string]toml.Primitive, bool) {
	var v any
	_ = d.md.PrimitiveDecode(prim, &v)
	var raw map[string]toml.Primitive
	err := d.md.PrimitiveDecode(prim, &raw)
	if _, isTable := v.(map[string]any); err == nil && !isTable {
		err = fmt.Errorf("not a table")
	}
	if err != nil {
		d.typeError(k, prim, err, expect)
		return nil, false
	}
	return raw, true
}

// decodeFloat decodes a number. TOML keeps integers and floats apart, but `max_error_rate = 1`
// or `alpha = 0` means the number all the same, so an integer is accepted too.
func (d *decoder) decodeFloat(k []string, prim toml.Primitive, dst *float64, expect string) {
	if !d.present(k) {
		return
	}
	var i int64
	if err := d.md.PrimitiveDecode(prim, &i); err == nil {
		*dst = float64(i)
		return
	}
	decodeField(d, k, prim, dst, expect)
}

// decodeTolerances decodes [compare.tolerances]: metric name -> tolerance string. Names are
// checked here (not in the schema) so that an unknown one gets a did-you-mean from
// CompareMetrics; each value is parsed by ParseTolerance.
func (d *decoder) decodeTolerances(prim toml.Primitive, c *Compare) {
	k := path("compare", "tolerances")
	if !d.present(k) {
		return
	}
	raw, ok := d.decodeMap(k, prim, `a table of strings such as { e2e = "10%", stage = "10% or 120ms" }`)
	if !ok {
		return
	}
	names := make([]string, 0, len(raw))
	for n := range raw {
		names = append(names, n)
	}
	sort.Strings(names)
	c.Tolerances = make(map[string]Tolerance, len(raw))
	for _, n := range names {
		kn := path("compare", "tolerances", n)
		if !inList(CompareMetrics, n) {
			d.bad[toml.Key(kn).String()] = true
			msg := fmt.Sprintf("unknown metric %q in [compare.tolerances]", n)
			if s := closest(n, CompareMetrics); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			} else {
				msg += "; use one of " + strings.Join(CompareMetrics, ", ")
			}
			d.addKey(kn, msg)
			continue
		}
		var s string
		if !decodeField(d, kn, raw[n], &s, `a string such as "10%" or "10% or 120ms"`) {
			continue
		}
		t, err := ParseTolerance(s)
		if err == nil {
			err = t.fits(n)
		}
		if err != nil {
			d.bad[toml.Key(kn).String()] = true
			d.addKey(kn, err.Error())
			continue
		}
		c.Tolerances[n] = t
	}
}

var lineRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^toml: line (\d+)`) })

// typeError records a value of the wrong type. The line is the one BurntSushi reports (from a
// ParseError for errors our UnmarshalTOML returned, from the message text otherwise).
func (d *decoder) typeError(k []string, prim toml.Primitive, err error, expect string) {
	d.bad[toml.Key(k).String()] = true
	if !d.room() {
		return
	}
	line := 0
	var msg string
	var pe toml.ParseError
	if errors.As(err, &pe) {
		line = pe.Position.Line
		msg = pe.Message
	} else {
		if m := lineRE().FindStringSubmatch(err.Error()); m != nil {
			line, _ = strconv.Atoi(m[1])
		}
		var v any
		_ = d.md.PrimitiveDecode(prim, &v)
		msg = fmt.Sprintf("expected %s, got %s%s", expect, describe(v), fixHint(k, v, expect))
	}
	d.addAt(k, line, msg)
}

// describe names the TOML type of a decoded value for messages.
func describe(v any) string {
	switch v := v.(type) {
	case string:
		return "a string"
	case int64:
		return fmt.Sprintf("an integer (%d)", v)
	case float64:
		return fmt.Sprintf("a float (%v)", v)
	case bool:
		return fmt.Sprintf("a boolean (%v)", v)
	case time.Time:
		return "a date/time"
	case []map[string]any:
		return "an array of tables"
	case map[string]any:
		return "a table"
	case []any:
		if len(v) == 0 {
			return "an empty array"
		}
		for _, e := range v {
			if _, ok := e.(string); !ok {
				return "an array holding " + describe(e)
			}
		}
		return "an array of strings"
	case nil:
		return "nothing"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// fixHint says what to change for the common mistakes.
func fixHint(k []string, v any, expect string) string {
	wantArray := strings.HasPrefix(expect, "an array")
	last := k[len(k)-1]
	if len(k) == 3 && k[0] == "compare" && k[1] == "tolerances" {
		// A bare number is a fraction (0.1) or a percentage (10); the text form says which.
		switch v := v.(type) {
		case float64:
			return fmt.Sprintf("; write the percentage in quotes, e.g. \"%v%%\" for %v", v*100, v)
		case int64:
			return fmt.Sprintf("; write the percentage in quotes, e.g. \"%d%%\"", v)
		}
	}
	switch v := v.(type) {
	case string:
		if wantArray && (last == "command" || last == "extra_args") && len(strings.Fields(v)) > 1 {
			return fmt.Sprintf("; write one element per argument: [%s]", quoteList(strings.Fields(v)))
		}
		if wantArray {
			return "; wrap the value in [ ] to make a one-element list"
		}
		if strings.HasPrefix(expect, "an integer") {
			if _, err := strconv.Atoi(v); err == nil {
				return "; write the number without quotes"
			}
		}
		if expect == "true or false" && (v == "true" || v == "false") {
			return "; write it without quotes"
		}
	case int64, bool:
		if wantArray {
			return "; wrap the value in [ ] to make a one-element list"
		}
		if strings.Contains(expect, "string") {
			return "; put the value in quotes"
		}
	case float64:
		if wantArray {
			return "; wrap the value in [ ] to make a one-element list"
		}
		if strings.HasPrefix(expect, "an integer") {
			return "; use a whole number"
		}
	case []any:
		for _, e := range v {
			switch e.(type) {
			case string:
				if strings.Contains(expect, "integers") {
					return "; write every element as a number without quotes"
				}
			case float64:
				if strings.Contains(expect, "integers") {
					return "; use whole numbers"
				}
				if strings.Contains(expect, "strings") {
					return "; quote every element"
				}
			case int64, bool:
				if strings.Contains(expect, "strings") {
					return "; quote every element"
				}
			}
		}
	}
	return ""
}

func (d *decoder) syntaxError(err error) {
	var pe toml.ParseError
	if !errors.As(err, &pe) {
		d.problems = append(d.problems, Problem{Msg: "cannot read TOML: " + err.Error()})
		return
	}
	line, col := pe.Position.Line, 0
	// BurntSushi's Col is off at line boundaries; derive line and column from the byte offset
	// when it agrees with the reported line (an error on a newline is reported on the next
	// line; the offset then says "end of the previous line", which is where the fix goes).
	if l, c, ok := lineCol(d.src, pe.Position.Start); ok && l <= line && l >= line-1 {
		line, col = l, c
	}
	msg := "TOML syntax error: " + pe.Message
	// A bracket or quote left open is reported where the parser gives up, often lines later;
	// say where the value it was reading began.
	if pe.LastKey != "" {
		k := strings.Split(pe.LastKey, ".")
		if kl := d.keyLineBefore(k[len(k)-1], line); kl > 0 && kl < line {
			msg += fmt.Sprintf(" (reading the value of %s, which starts on line %d: is a closing bracket or quote missing there?)", pe.LastKey, kl)
		}
	}
	d.problems = append(d.problems, Problem{Line: line, Col: col, Msg: msg})
}

// lineCol converts a byte offset into a 1-based line and column.
func lineCol(src string, off int) (int, int, bool) {
	if off <= 0 || off > len(src) {
		return 0, 0, false
	}
	before := src[:off]
	line := strings.Count(before, "\n") + 1
	return line, off - (strings.LastIndexByte(before, '\n') + 1) + 1, true
}

// keyLineBefore finds the last line at or before line that assigns key seg ("seg =").
func (d *decoder) keyLineBefore(seg string, line int) int {
	lines := strings.Split(d.src, "\n")
	for l := min(line, len(lines)); l >= 1; l-- {
		t := strings.TrimSpace(lines[l-1])
		for _, tok := range []string{seg, `"` + seg + `"`, `'` + seg + `'`} {
			if rest, ok := strings.CutPrefix(t, tok); ok && strings.HasPrefix(strings.TrimSpace(rest), "=") {
				return l
			}
		}
	}
	return 0
}

// knownKey reports whether the exact dotted key is part of the schema.
func knownKey(k []string) bool {
	if len(k) == 0 {
		return false
	}
	if len(k) >= 3 && k[0] == "backend" && k[1] == "env" {
		return true // env names are the user's; their values are type-checked separately
	}
	if len(k) >= 3 && k[0] == "compare" && k[1] == "tolerances" {
		return true // metric names are checked by decodeTolerances, with a did-you-mean
	}
	if len(k) == 3 && schema[k[0]+"."+k[1]] != nil {
		return inList(schema[k[0]+"."+k[1]], k[2])
	}
	if len(k) > 2 {
		return false
	}
	parent := ""
	if len(k) == 2 {
		if !inList(schema[""], k[0]) || schema[k[0]] == nil {
			return false
		}
		parent = k[0]
	}
	return inList(schema[parent], k[len(k)-1])
}

func inList(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// firstUnknown returns the shortest prefix of k that is not a schema key ("a" for "a.b.c").
func firstUnknown(k []string) []string {
	for i := 1; i <= len(k); i++ {
		if !knownKey(k[:i]) {
			return k[:i]
		}
	}
	return nil
}

// checkCase catches keys that differ from a schema key only in case. BurntSushi decodes them
// into the field anyway (it falls back to a case-insensitive match), so they never show up in
// Undecoded and would silently set the value.
func (d *decoder) checkCase() {
	for _, k := range d.md.Keys() {
		u := firstUnknown(k)
		if u == nil {
			continue
		}
		us := toml.Key(u).String()
		if d.reported[us] {
			continue
		}
		parent := ""
		if len(u) == 2 {
			parent = u[0]
		}
		if len(u) > 2 {
			continue
		}
		for _, s := range schema[parent] {
			if strings.EqualFold(s, u[len(u)-1]) {
				want := append(append([]string(nil), u[:len(u)-1]...), s)
				d.bad[toml.Key(want).String()] = true
				d.reported[us] = true
				d.addKey(u, fmt.Sprintf("unknown key %q: keys are case-sensitive; write %q", u[len(u)-1], s))
				break
			}
		}
	}
}

// checkUndecoded turns every key BurntSushi left undecoded into a problem naming the key and
// its line. Keys below one already reported, or below a value that failed to decode, are part
// of that problem and are skipped.
func (d *decoder) checkUndecoded() {
	for _, k := range d.md.Undecoded() {
		u := firstUnknown(k)
		if u == nil {
			continue // a known key left undecoded only because its table failed to decode
		}
		if d.underBad(u[:len(u)-1]) || d.underBad(u) {
			continue
		}
		d.reported[toml.Key(u).String()] = true
		if !d.room() {
			continue // the message (a did-you-mean search) is not worth building
		}
		d.addKey(u, unknownMsg(u))
	}
}

func unknownMsg(u []string) string {
	last := u[len(u)-1]
	parent := ""
	where := "at the top of the file"
	if len(u) == 2 {
		parent = u[0]
		where = "in [" + parent + "]"
	}
	if len(u) == 3 && schema[u[0]+"."+u[1]] != nil {
		// A sub-table of the schema, such as [executor.slurm].
		parent = u[0] + "." + u[1]
		where = "in [" + parent + "]"
	} else if len(u) > 2 {
		return fmt.Sprintf("unknown key %q; [%s] has no sub-table %q", last, toml.Key(u[:len(u)-2]), u[len(u)-2])
	}
	valid := schema[parent]
	if s := closest(last, valid); s != "" {
		return fmt.Sprintf("unknown key %q %s; did you mean %q?", last, where, s)
	}
	// A key in the wrong table is the other common mistake (e.g. `name` written after [gate]).
	var homes []string
	name := ""
	for _, t := range schema[""] {
		if t == parent {
			continue
		}
		for _, k := range schema[t] {
			if strings.EqualFold(k, last) {
				homes, name = append(homes, "["+t+"]"), k
			}
		}
	}
	if len(homes) > 0 {
		return fmt.Sprintf("unknown key %q %s; %q belongs in %s: move it below that header", last, where, name, strings.Join(homes, " or "))
	}
	if parent != "" && inList(schema[""], last) && schema[last] == nil {
		return fmt.Sprintf("unknown key %q %s; it belongs at the top of the file, before the first [table]", last, where)
	}
	return fmt.Sprintf("unknown key %q %s; valid keys are: %s", last, where, strings.Join(valid, ", "))
}

// closest returns the valid key within edit distance 2 of s, if any.
func closest(s string, valid []string) string {
	best, bestD := "", 3
	for _, v := range valid {
		if dd := editDistance(strings.ToLower(s), v); dd < bestD {
			best, bestD = v, dd
		}
	}
	return best
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			c = min(c, prev[j]+1, cur[j-1]+1)
			cur[j] = c
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
