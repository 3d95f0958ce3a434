package plans

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// serveMin is the smallest valid serve plan: minimal with mode = "serve" (line 6).
const serveMin = minimal + "[backend]\nmode = \"serve\"\n"

// llmMin is the smallest valid LLM serve plan (input_len on line 5).
const llmMin = `name = "t"
[matrix]
model = ["Qwen/Qwen2.5-0.5B-Instruct"]
prompt = ["hello"]
input_len = [128]
[backend]
mode = "serve"
`

// serveBadCases are the bad inputs of the serve, [load], [compare] and [bundle] keys; FuzzParse
// seeds its corpus with them too.
var serveBadCases = []struct {
	name string
	src  string
	want []want
}{
	// [backend] serve keys
	{"unknown restart policy",
		serveMin + "restart = \"always\"\n",
		[]want{{"backend.restart", 7, 1, []string{`unknown value "always"`, `"shared", "per-cell"`}}}},
	{"port out of range",
		serveMin + "port = 70000\n",
		[]want{{"backend.port", 7, 1, []string{"port 70000 is outside 0..65535", "0 (the default) for a free port"}}}},
	{"negative port",
		serveMin + "port = -1\n",
		[]want{{"backend.port", 7, 1, []string{"outside 0..65535"}}}},
	{"port as a string",
		serveMin + "port = \"30000\"\n",
		[]want{{"backend.port", 7, 1, []string{"expected an integer", "without quotes"}}}},
	{"empty host and host with a port",
		serveMin + "host = \"\"\n",
		[]want{{"backend.host", 7, 1, []string{"empty", `"127.0.0.1"`}}}},
	{"host with a URL",
		serveMin + "host = \"http://localhost\"\n",
		[]want{{"backend.host", 7, 1, []string{"not a host name", "backend.port"}}}},
	{"zero ready_timeout",
		serveMin + "ready_timeout = \"0s\"\n",
		[]want{{"backend.ready_timeout", 7, 1, []string{"must be > 0", `"20m"`}}}},
	{"bare number ready_timeout",
		serveMin + "ready_timeout = 1200\n",
		[]want{{"backend.ready_timeout", 7, 1, []string{"bare number 1200", `"1200s"`}}}},
	{"unknown model type",
		serveMin + "model_type = \"vision\"\n",
		[]want{{"backend.model_type", 7, 1, []string{`unknown model type "vision"`, `"diffusion", "llm"`}}}},
	{"llm in a generate plan",
		minimal + "[backend]\nmodel_type = \"llm\"\n",
		[]want{{"backend.model_type", 6, 1, []string{`needs backend.mode = "serve"`, "diffusion models only"}}}},

	// token-length axes
	{"input_len: zero and duplicate",
		strings.Replace(llmMin, "[128]", "[0, 128, 128]", 1),
		[]want{
			{"matrix.input_len[0]", 5, 1, []string{"0 tokens", "must be > 0"}},
			{"matrix.input_len[2]", 5, 1, []string{"128 is listed twice (elements 1 and 2)"}},
		}},
	{"empty input_len axis",
		strings.Replace(llmMin, "[128]", "[]", 1),
		[]want{{"matrix.input_len", 5, 1, []string{"empty axis", "[128]"}}}},
	{"unknown sub-table below an LLM matrix",
		llmMin + "[matrix.x]\n",
		[]want{{"matrix.x", 8, 9, []string{`unknown key "x" in [matrix]`}}}},
	{"output_len with quoted numbers",
		strings.Replace(llmMin, "input_len = [128]", "output_len = [\"32\"]", 1),
		[]want{{"matrix.output_len", 5, 1, []string{"expected an array of integers", "without quotes"}}}},
	{"token lengths with a diffusion model",
		strings.Replace(llmMin, "mode = \"serve\"", "mode = \"serve\"\nmodel_type = \"diffusion\"", 1),
		[]want{{"matrix.input_len", 5, 1, []string{`only meaningful with backend.model_type = "llm"`, `"diffusion"`}}}},

	// [profile] window
	{"profiling window out of range",
		serveMin + "[profile]\nstart_step = -2\nnum_steps = 0\nflush_timeout = \"-1m\"\n",
		[]want{
			{"profile.start_step", 8, 1, []string{"-2", ">= 0, or -1"}},
			{"profile.num_steps", 9, 1, []string{"at least 1 step"}},
			{"profile.flush_timeout", 10, 1, []string{"must be > 0", `"10m"`}},
		}},
	{"profile_by_stage as a string",
		serveMin + "[profile]\nprofile_by_stage = \"true\"\n",
		[]want{{"profile.profile_by_stage", 8, 1, []string{"expected true or false", "without quotes"}}}},

	// [load]
	{"unknown load api",
		serveMin + "[load]\napi = \"chats\"\n",
		[]want{{"load.api", 8, 1, []string{`unknown API "chats"`, `"images", "videos", "generate", "completions", "chat"`}}}},
	{"images api with an llm",
		llmMin + "[load]\napi = \"images\"\n",
		[]want{{"load.api", 9, 1, []string{`API "images" needs backend.model_type = "diffusion", but it is "llm" (the default, from the matrix)`, `"generate", "completions" or "chat"`}}}},
	{"generate api with a diffusion model",
		serveMin + "[load]\napi = \"generate\"\n",
		[]want{{"load.api", 8, 1, []string{`API "generate" needs backend.model_type = "llm"`, `"images" or "videos"`}}}},
	{"load counts out of range",
		serveMin + "[load]\nwarmup = -1\nrequests = 0\nconcurrency = 0\nmax_error_rate = 1.5\nrequest_timeout = \"0s\"\n",
		[]want{
			{"load.warmup", 8, 1, []string{"-1", ">= 0"}},
			{"load.requests", 9, 1, []string{"at least 1 request"}},
			{"load.concurrency", 10, 1, []string{">= 1"}},
			{"load.max_error_rate", 11, 1, []string{"1.5 is outside 0..1", "0.1 for 10%"}},
			{"load.request_timeout", 12, 1, []string{"must be > 0"}},
		}},
	{"negative max_error_rate",
		serveMin + "[load]\nmax_error_rate = -0.1\n",
		[]want{{"load.max_error_rate", 8, 1, []string{"-0.1 is outside 0..1"}}}},
	{"max_error_rate as a percentage string",
		serveMin + "[load]\nmax_error_rate = \"10%\"\n",
		[]want{{"load.max_error_rate", 8, 1, []string{"expected a number between 0 and 1", "got a string"}}}},
	{"misspelled load key",
		serveMin + "[load]\nreqests = 5\n",
		[]want{{"load.reqests", 8, 1, []string{`unknown key "reqests" in [load]`, `did you mean "requests"`}}}},
	{"load key in the wrong table",
		serveMin + "concurrency = 4\n",
		[]want{{"backend.concurrency", 7, 1, []string{`"concurrency" belongs in [matrix] or [load]`}}}},
	{"upper-case load table",
		serveMin + "[Load]\nrequests = 5\n",
		[]want{{"Load", 7, 2, []string{"case-sensitive", `write "load"`}}}},

	// serve keys in a generate plan
	{"serve keys in a generate plan",
		minimal + "input_len = [128]\n[backend]\nport = 30000\nready_timeout = \"5m\"\n[profile]\nnum_steps = 3\nmerge_profiles = true\n[load]\nrequests = 3\n",
		[]want{
			{"matrix.input_len", 5, 1, []string{`only used when backend.mode = "serve"`}},
			{"backend.port", 7, 1, []string{`only used when backend.mode = "serve"`, `set mode = "serve"`}},
			{"backend.ready_timeout", 8, 1, []string{`only used when backend.mode = "serve"`}},
			{"profile.num_steps", 10, 1, []string{`only used when backend.mode = "serve"`}},
			{"profile.merge_profiles", 11, 1, []string{`only used when backend.mode = "serve"`}},
			{"load", 12, 2, []string{`[load] describes the requests sent to a server`}},
		}},
	{"a serve key in a generate plan is reported once, not also as out of range",
		minimal + "[backend]\nmode = \"generate\"\nport = 70000\n[load]\nrequests = 0\n",
		[]want{
			{"backend.port", 7, 1, []string{`only used when backend.mode = "serve"`}},
			{"load", 8, 2, []string{`only used when backend.mode = "serve"`}},
		}},

	// [compare]
	{"compare numbers out of range",
		minimal + "[compare]\nalpha = 0\nbaseline_runs = 0\nconsecutive = -1\n",
		[]want{
			{"compare.alpha", 6, 1, []string{"0 is outside (0, 0.5]", "0.05"}},
			{"compare.baseline_runs", 7, 1, []string{"at least 1 run"}},
			{"compare.consecutive", 8, 1, []string{">= 1"}},
		}},
	{"alpha too large",
		minimal + "[compare]\nalpha = 0.6\n",
		[]want{{"compare.alpha", 6, 1, []string{"0.6 is outside (0, 0.5]"}}}},
	{"alpha as a string",
		minimal + "[compare]\nalpha = \"5%\"\n",
		[]want{{"compare.alpha", 6, 1, []string{"expected a number such as 0.05", "got a string"}}}},
	{"misspelled compare key",
		minimal + "[compare]\ntolerance = { e2e = \"10%\" }\n",
		[]want{{"compare.tolerance", 6, 1, []string{`did you mean "tolerances"`}}}},
	{"unknown metric names get a did-you-mean or the list",
		minimal + "[compare.tolerances]\ne2 = \"10%\"\nlatency = \"10%\"\nDenoise_Step = \"10%\"\n",
		[]want{
			{"compare.tolerances.e2", 6, 1, []string{`unknown metric "e2" in [compare.tolerances]`, `did you mean "e2e"`}},
			{"compare.tolerances.latency", 7, 1, []string{`unknown metric "latency"`, "use one of e2e, stage, denoise_stage, non_denoise_stage, denoise_step, denoise_mean, peak_memory, request_latency, throughput"}},
			{"compare.tolerances.Denoise_Step", 8, 1, []string{`did you mean "denoise_step"`}},
		}},
	{"bad tolerance strings",
		minimal + `[compare.tolerances]
e2e = "15"
stage = "10% or 5 furlongs"
denoise_stage = "2000%"
non_denoise_stage = "-5%"
denoise_step = "10% or"
denoise_mean = "10% or 0ms"
request_latency = 0.1
`,
		[]want{
			{"compare.tolerances.e2e", 6, 1, []string{`tolerance "15" has no percentage`, `"10% or 120ms"`}},
			{"compare.tolerances.stage", 7, 1, []string{`"5 furlongs" is neither a duration`}},
			{"compare.tolerances.denoise_stage", 8, 1, []string{"2000% is outside 0%..1000%"}},
			{"compare.tolerances.non_denoise_stage", 9, 1, []string{"-5% is outside"}},
			{"compare.tolerances.denoise_step", 10, 1, []string{`nothing after "or"`}},
			{"compare.tolerances.denoise_mean", 11, 1, []string{"must be > 0", `drop " or 0ms"`}},
			{"compare.tolerances.request_latency", 12, 1, []string{`expected a string such as "10%"`, `write the percentage in quotes, e.g. "10%" for 0.1`}},
		}},
	{"tolerance floors must suit the metric",
		minimal + "[compare.tolerances]\npeak_memory = \"2% or 120ms\"\nstage = \"10% or 256MB\"\nthroughput = \"5% or 1s\"\n",
		[]want{
			{"compare.tolerances.peak_memory", 6, 1, []string{"needs a size floor"}},
			{"compare.tolerances.stage", 7, 1, []string{"stage is a time", "not a size"}},
			{"compare.tolerances.throughput", 8, 1, []string{"relative tolerance only"}},
		}},
	{"tolerances written as one string",
		minimal + "[compare]\ntolerances = \"10%\"\n",
		[]want{{"compare.tolerances", 6, 1, []string{"expected a table of strings", `e2e = "10%"`}}}},
	{"env written as one string",
		minimal + "[backend]\nenv = \"HF_HUB_OFFLINE=1\"\n",
		[]want{{"backend.env", 6, 1, []string{"expected a table of strings", "got a string"}}}},
	{"tolerance written as a sub-table",
		minimal + "[compare.tolerances.e2e]\nrel = \"10%\"\n",
		[]want{{"compare.tolerances.e2e", 5, 21, []string{"expected a string", "got a table"}}}},

	// [bundle]
	{"redact patterns that do not compile, are empty or match nothing",
		minimal + "[bundle]\nredact = [\"(unclosed\", \"\", \"a*\", \"ok-[0-9]+\"]\n",
		[]want{
			{"bundle.redact[1]", 6, 1, []string{"empty pattern"}}, // an empty literal cannot be found: the key's position
			{"bundle.redact[0]", 6, 11, []string{"not a valid regular expression", "missing closing )"}},
			{"bundle.redact[2]", 6, 28, []string{"matches the empty string"}},
		}},
	{"redact as one string",
		minimal + "[bundle]\nredact = \"secret\"\n",
		[]want{{"bundle.redact", 6, 1, []string{"expected an array of strings", "wrap the value in [ ]"}}}},
	{"misspelled bundle key",
		minimal + "[bundle]\nredacts = [\"x\"]\n",
		[]want{{"bundle.redacts", 6, 1, []string{`did you mean "redact"`}}}},
}

func TestServeBadInputs(t *testing.T) {
	runBadCases(t, serveBadCases)
}

// The defaults the serve, load and compare helpers code against.
func TestServeDefaults(t *testing.T) {
	p := mustParse(t, minimal)
	checks := []struct {
		name      string
		got, want any
	}{
		{"restart", p.Backend.Restart, "shared"},
		{"host", p.Backend.Host, "127.0.0.1"},
		{"port", p.Backend.Port, 0},
		{"ready_timeout", p.Backend.ReadyTimeout.Duration, 20 * time.Minute},
		{"model_type", p.Backend.ModelType, "diffusion"},
		{"input_len", p.Matrix.InputLen == nil, true},
		{"output_len", p.Matrix.OutputLen == nil, true},
		{"start_step", p.Profile.StartStep, -1},
		{"num_steps", p.Profile.NumSteps, 5},
		{"profile_by_stage", p.Profile.ProfileByStage, false},
		{"merge_profiles", p.Profile.MergeProfiles, false},
		{"flush_timeout", p.Profile.FlushTimeout.Duration, 10 * time.Minute},
		{"load.api", p.Load.API, "images"},
		{"load.warmup", p.Load.Warmup, 1},
		{"load.requests", p.Load.Requests, 5},
		{"load.concurrency", p.Load.Concurrency, 1},
		{"load.max_error_rate", p.Load.MaxErrorRate, 0.0},
		{"load.request_timeout", p.Load.RequestTimeout.Duration, 10 * time.Minute},
		{"compare.alpha", p.Compare.Alpha, 0.05},
		{"compare.baseline_runs", p.Compare.BaselineRuns, 5},
		{"compare.consecutive", p.Compare.Consecutive, 2},
		{"compare.tolerances", p.Compare.Tolerances == nil, true},
		{"bundle.redact", p.Bundle.Redact == nil, true},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if l := p.Expand()[0].Load; l != p.Load {
		t.Errorf("cell load = %+v, want the plan's %+v", l, p.Load)
	}

	// A token-length axis makes the plan an LLM plan, and an LLM's API is /generate.
	for _, src := range []string{llmMin, strings.Replace(llmMin, "input_len", "output_len", 1)} {
		p := mustParse(t, src)
		if p.Backend.ModelType != "llm" || p.Load.API != "generate" {
			t.Errorf("model_type %q, api %q; want llm, generate for\n%s", p.Backend.ModelType, p.Load.API, src)
		}
	}
	// An explicit model type picks the API even without the axes.
	if p := mustParse(t, serveMin+"model_type = \"llm\"\n"); p.Load.API != "generate" {
		t.Errorf("model_type llm: api %q, want generate", p.Load.API)
	}
	// Written values are kept, zeros included (warmup = 0 is not "unset").
	p = mustParse(t, serveMin+"port = 0\n[load]\nwarmup = 0\nmax_error_rate = 1\n[profile]\nstart_step = 0\n")
	if p.Load.Warmup != 0 || p.Load.MaxErrorRate != 1 || p.Profile.StartStep != 0 || p.Backend.Port != 0 {
		t.Errorf("explicit zeros not kept: load %+v, start_step %d", p.Load, p.Profile.StartStep)
	}
}

func TestServeExplicitValuesKept(t *testing.T) {
	p, err := Load("testdata/full-serve.toml")
	// A relative dataset_path comes out absolute, from the plan's directory.
	sample, _ := filepath.Abs(filepath.Join("testdata", "../../testdata/sharegpt-sample.json"))
	if err != nil {
		t.Fatal(err)
	}
	b, pr, l := p.Backend, p.Profile, p.Load
	if b.Restart != "per-cell" || b.Host != "127.0.0.1" || b.Port != 30000 || b.ReadyTimeout.Duration != 15*time.Minute || b.ModelType != "llm" {
		t.Errorf("backend = %+v", b)
	}
	if pr.StartStep != 10 || pr.NumSteps != 3 || !pr.ProfileByStage || !pr.MergeProfiles || pr.FlushTimeout.Duration != 5*time.Minute {
		t.Errorf("profile = %+v", pr)
	}
	want := LoadSpec{API: "completions", Warmup: 2, Requests: 8, Concurrency: 4, MaxErrorRate: 0.25, RequestTimeout: Duration{2 * time.Minute},
		RequestRate: 4, Burstiness: 0.5, MaxConcurrency: 16, Duration: Duration{time.Minute}, Dataset: "sharegpt",
		RandomRangeRatio: 0.5, DatasetPath: sample,
		SLOTTFT: Duration{200 * time.Millisecond}, SLOTPOT: Duration{50 * time.Millisecond}, FlushCache: false}
	if l != want {
		t.Errorf("load = %+v, want %+v", l, want)
	}
	if d := cmp.Diff([]int{128, 1024}, p.Matrix.InputLen); d != "" {
		t.Errorf("input_len (-want +got):\n%s", d)
	}

	p, err = Load("examples/full.toml")
	if err != nil {
		t.Fatal(err)
	}
	c := p.Compare
	if c.Alpha != 0.05 || c.BaselineRuns != 5 || c.Consecutive != 2 {
		t.Errorf("compare = %+v", c)
	}
	wantTol := map[string]Tolerance{
		"e2e":          {Rel: 0.15, Text: "15%"},
		"stage":        {Rel: 0.10, AbsNS: int64(120 * time.Millisecond), Text: "10% or 120ms"},
		"denoise_step": {Rel: 0.25, AbsNS: int64(5 * time.Millisecond), Text: "25% or 5ms"},
		"peak_memory":  {Rel: 0.02, AbsMB: 256, Text: "2% or 256MB"},
	}
	if d := cmp.Diff(wantTol, c.Tolerances, cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) < 1e-12 })); d != "" {
		t.Errorf("tolerances (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{`internal-[a-z0-9]+\.example\.com`, `ticket-[0-9]{6}`}, p.Bundle.Redact); d != "" {
		t.Errorf("redact (-want +got):\n%s", d)
	}
}

func TestParseTolerance(t *testing.T) {
	good := []struct {
		in   string
		want Tolerance
	}{
		{"10%", Tolerance{Rel: 0.10}},
		{"0%", Tolerance{}},
		{"12.5%", Tolerance{Rel: 0.125}},
		{"1000%", Tolerance{Rel: 10}},
		{" 10 % ", Tolerance{Rel: 0.10}},
		{"10% or 120ms", Tolerance{Rel: 0.10, AbsNS: 120e6}},
		{"10%  or  1m30s", Tolerance{Rel: 0.10, AbsNS: 90e9}},
		{"2% or 256MB", Tolerance{Rel: 0.02, AbsMB: 256}},
		{"2% or 256MiB", Tolerance{Rel: 0.02, AbsMB: 256}},
		{"2% or 1.5GB", Tolerance{Rel: 0.02, AbsMB: 1536}},
		{"2% or 2 GiB", Tolerance{Rel: 0.02, AbsMB: 2048}},
	}
	for _, g := range good {
		got, err := ParseTolerance(g.in)
		g.want.Text = g.in
		if err != nil || math.Abs(got.Rel-g.want.Rel) > 1e-12 || got.AbsNS != g.want.AbsNS || got.AbsMB != g.want.AbsMB || got.Text != g.in {
			t.Errorf("ParseTolerance(%q) = %+v, %v; want %+v", g.in, got, err, g.want)
		}
	}
	bad := map[string]string{
		"":                "has no percentage",
		"10":              "has no percentage",
		"0.1":             "has no percentage",
		"%":               "not a number of percent",
		"ten%":            "not a number of percent",
		"1e1%":            "not a number of percent",
		"NaN%":            "not a number of percent",
		"Inf%":            "not a number of percent",
		"0x10%":           "not a number of percent",
		"-1%":             "outside 0%..1000%",
		"1000.1%":         "outside 0%..1000%",
		"10% 120ms":       `is not "or <floor>"`,
		"10% orange":      `is not "or <floor>"`,
		"10% or":          `nothing after "or"`,
		"10% or 120":      "neither a duration",
		"10% or -5ms":     "must be > 0",
		"10% or 0s":       "must be > 0",
		"10% or MB":       "is not a size",
		"10% or 0MB":      "must be > 0",
		"10% or -1GB":     "must be > 0",
		"10% or 1e3MB":    "is not a size",
		"10% or 10TB":     "neither a duration",
		"10% or 5ms or 1": "neither a duration",
	}
	for in, msg := range bad {
		if got, err := ParseTolerance(in); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseTolerance(%q) = %+v, %v; want an error with %q", in, got, err, msg)
		}
	}
}

func TestCompareMetricsAreDocumented(t *testing.T) {
	doc := readDoc(t)
	for _, m := range CompareMetrics {
		if !strings.Contains(doc, "`"+m+"`") {
			t.Errorf("docs/plan.md does not document the metric %q", m)
		}
	}
	for table, keys := range schema {
		for _, k := range keys {
			if table != "" && !strings.Contains(doc, "| `"+k+"` |") {
				t.Errorf("docs/plan.md has no table row for %s.%s", table, k)
			}
		}
	}
}

func TestExpandLLM(t *testing.T) {
	p := mustParse(t, `name = "llm"
[backend]
mode = "serve"
[matrix]
model = ["Qwen/Qwen2.5-0.5B-Instruct"]
prompt = ["hello"]
seed = [0, 1]
input_len = [128, 1024]
output_len = [32]
[profile]
profilers = ["none", "torch"]
[load]
requests = 7
`)
	cells := p.Expand()
	// 2 seeds x 2 input lengths x 1 output length x 2 profilers; seed outside input_len,
	// output_len inside it, the profiler inside both.
	want := []string{
		"000-qwen2-5-0-5b-instruct-i128-o32-s0-none-r1",
		"001-qwen2-5-0-5b-instruct-i128-o32-s0-torch-r1",
		"002-qwen2-5-0-5b-instruct-i1024-o32-s0-none-r1",
		"003-qwen2-5-0-5b-instruct-i1024-o32-s0-torch-r1",
		"004-qwen2-5-0-5b-instruct-i128-o32-s1-none-r1",
		"005-qwen2-5-0-5b-instruct-i128-o32-s1-torch-r1",
		"006-qwen2-5-0-5b-instruct-i1024-o32-s1-none-r1",
		"007-qwen2-5-0-5b-instruct-i1024-o32-s1-torch-r1",
	}
	if d := cmp.Diff(want, ids(cells)); d != "" {
		t.Errorf("ids (-want +got):\n%s", d)
	}
	checkUnique(t, cells)
	c := cells[2]
	if c.InputLen != 1024 || c.OutputLen != 32 || c.Seed != 0 || c.Profiler != "none" || c.Load.Requests != 7 || c.Load.API != "generate" {
		t.Errorf("cell 2 = %+v", c)
	}
	wantKey := "qwen2-5-0-5b-instruct/default/defaultst/s0/p" + hash8("hello") + "/i1024/o32"
	if c.Key != wantKey || cells[3].Key != wantKey || cells[0].Key == wantKey {
		t.Errorf("keys: %q %q %q, want %q for cells 2 and 3 only", c.Key, cells[3].Key, cells[0].Key, wantKey)
	}

	// An LLM plan with a resolution axis keeps it in the ids; only output_len gives only -o.
	p = mustParse(t, strings.Replace(llmMin, "input_len = [128]", "output_len = [16, 64]\nresolution = [\"512x512\"]", 1))
	if d := cmp.Diff([]string{"000-qwen2-5-0-5b-instruct-512x512-o16-s0-none-r1", "001-qwen2-5-0-5b-instruct-512x512-o64-s0-none-r1"}, ids(p.Expand())); d != "" {
		t.Errorf("ids (-want +got):\n%s", d)
	}
	if k := p.Expand()[1].Key; !strings.HasSuffix(k, "/o64") || strings.Contains(k, "/i") {
		t.Errorf("key %q", k)
	}

	// Cells round-trip through cells.json with the new fields.
	data, err := json.Marshal(cells)
	if err != nil {
		t.Fatal(err)
	}
	var back []Cell
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(cells, back); d != "" {
		t.Errorf("round trip (-want +got):\n%s", d)
	}
}

// A diffusion serve plan expands exactly like the same generate plan: serve mode adds no id parts.
func TestServeIDsMatchGenerateIDs(t *testing.T) {
	gen, err := Load("examples/qwen-image.toml")
	if err != nil {
		t.Fatal(err)
	}
	src := strings.Replace(string(gen.Source), `mode = "generate"`, `mode = "serve"`, 1)
	serve := mustParse(t, src)
	if serve.Backend.Mode != "serve" {
		t.Fatalf("mode %q", serve.Backend.Mode)
	}
	g, s := gen.Expand(), serve.Expand()
	if d := cmp.Diff(ids(g), ids(s)); d != "" {
		t.Errorf("serve ids differ (-generate +serve):\n%s", d)
	}
	for i := range g {
		if g[i].Key != s[i].Key {
			t.Errorf("cell %d key %q vs %q", i, g[i].Key, s[i].Key)
		}
	}
}

func TestTokenAxesCountTowardMaxCells(t *testing.T) {
	var in, out []string
	for i := 1; i <= 101; i++ {
		in = append(in, strconv.Itoa(i))
		out = append(out, strconv.Itoa(i))
	}
	src := strings.Replace(llmMin, "input_len = [128]", "input_len = ["+strings.Join(in, ", ")+"]\noutput_len = ["+strings.Join(out, ", ")+"]", 1)
	e := parseErr(t, src)
	if len(e.Problems) != 1 || e.Problems[0].Key != "matrix" || !strings.Contains(e.Problems[0].Msg, "more than 10000 cells") {
		t.Errorf("101 x 101 token lengths: %v", e)
	}
}

func readDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../docs/plan.md")
	if err != nil {
		t.Fatalf("docs/plan.md: %v", err)
	}
	return string(b)
}
