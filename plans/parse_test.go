package plans

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

// minimal is the smallest valid plan; bad-input cases append to it or replace parts of it.
const minimal = `name = "t"
[matrix]
model = ["Qwen/Qwen-Image"]
prompt = ["a fox"]
`

func mustParse(t *testing.T, src string) *Plan {
	t.Helper()
	p, err := Parse("plan.toml", []byte(src))
	if err != nil {
		t.Fatalf("Parse: unexpected error:\n%v", err)
	}
	return p
}

func parseErr(t *testing.T, src string) *Error {
	t.Helper()
	p, err := Parse("plan.toml", []byte(src))
	if err == nil {
		t.Fatalf("Parse accepted an invalid plan: %+v", p)
	}
	var pe *Error
	if !errors.As(err, &pe) {
		t.Fatalf("error is %T, want *plans.Error: %v", err, err)
	}
	if p != nil {
		t.Errorf("Parse returned a plan together with an error")
	}
	return pe
}

// want describes one expected problem: the key, its position (0 = do not check) and words the
// message must contain.
type want struct {
	key       string
	line, col int
	msg       []string
}

// badCases are the bad inputs of the issue and more; FuzzParse seeds its corpus with them.
var badCases = []struct {
	name string
	src  string
	want []want // exactly these problems, in this order
}{
	{"syntax error keeps line and column",
		"name = \"t\"\n[matrix]\nmodel = [\"a\" \"b\"]\n",
		[]want{{"", 3, 14, []string{"TOML syntax error", "comma"}}}},
	{"syntax error unterminated string",
		"name = \"t\n",
		[]want{{"", 1, 0, []string{"TOML syntax error"}}}},
	{"slurm time smuggles an option",
		minimal + "[executor.slurm]\ntime = \"00:05:00 --chdir=/srv\"\n",
		[]want{{"executor.slurm.time", 6, 1, []string{"not a Slurm time limit"}}}},
	{"slurm extra_sbatch element is two options",
		minimal + "[executor.slurm]\nextra_sbatch = [\"--exclusive\", \"--exclusive --chdir=/srv\"]\n",
		[]want{{"executor.slurm.extra_sbatch[1]", 6, 0, []string{"not one sbatch option"}}}},
	{"unknown key names key and line",
		minimal + "[nsys]\ntrce = [\"cuda\"]\n",
		[]want{
			{"nsys", 5, 2, []string{`nsys options given but profile.profilers has no "nsys"; add it or drop [nsys]`}},
			{"nsys.trce", 6, 1, []string{`unknown key "trce"`, `did you mean "trace"`}},
		}},
	{"unknown top-level table",
		minimal + "\n[sweep]\nx = 1\n",
		[]want{{"sweep", 6, 2, []string{`unknown key "sweep"`, "valid keys are: name, output_dir"}}}},
	{"unknown dotted key",
		minimal + "extra.thing = 1\n",
		[]want{{"matrix.extra", 5, 1, []string{`unknown key "extra" in [matrix]`}}}},
	{"unknown key inside an inline table",
		"name = \"t\"\nmatrix = { model = [\"m\"], prompt = [\"p\"], modle = [\"x\"] }\n",
		[]want{{"matrix.modle", 2, 43, []string{`unknown key "modle"`, `did you mean "model"`}}}},
	{"key in the wrong table",
		minimal + "timeout = \"5m\"\n",
		[]want{{"matrix.timeout", 5, 1, []string{`belongs in [backend]`}}}},
	{"upper-case key does not fill the lower-case field",
		"name = \"t\"\n[matrix]\nMODEL = [\"Qwen/Qwen-Image\"]\nprompt = [\"p\"]\n",
		[]want{{"matrix.MODEL", 3, 1, []string{"case-sensitive", `write "model"`}}}},
	{"upper-case table",
		"name = \"t\"\n[Matrix]\nmodel = [\"m\"]\nprompt = [\"p\"]\n",
		[]want{{"Matrix", 2, 2, []string{"case-sensitive", `write "matrix"`}}}},
	{"wrong type: string for array",
		"name = \"t\"\n[matrix]\nmodel = \"Qwen/Qwen-Image\"\nprompt = [\"p\"]\n",
		[]want{{"matrix.model", 3, 1, []string{"expected an array of strings", "got a string", "wrap the value in [ ]"}}}},
	{"wrong type: quoted integers",
		minimal + "num_inference_steps = [\"50\"]\n",
		[]want{{"matrix.num_inference_steps", 5, 1, []string{"expected an array of integers", "without quotes"}}}},
	{"wrong type: table written as a value",
		minimal + "[profile]\nprofile_all_stages = \"yes\"\n",
		[]want{{"profile.profile_all_stages", 6, 1, []string{"expected true or false", "got a string"}}}},
	{"wrong type: backend is not a table",
		"name = \"t\"\nbackend = \"sglang\"\n[matrix]\nmodel = [\"m\"]\nprompt = [\"p\"]\n",
		[]want{{"backend", 2, 1, []string{"expected a table", "[backend]"}}}},
	{"wrong type: env value",
		minimal + "[backend]\nenv = { HF_HUB_OFFLINE = 1 }\n",
		[]want{{"backend.env.HF_HUB_OFFLINE", 6, 9, []string{"expected a string", "put the value in quotes"}}}},
	{"empty axis names the axis",
		minimal + "resolution = []\n",
		[]want{{"matrix.resolution", 5, 1, []string{"empty axis"}}}},
	{"empty model axis",
		"name = \"t\"\n[matrix]\nmodel = []\nprompt = [\"p\"]\n",
		[]want{{"matrix.model", 3, 1, []string{"empty axis", "at least one model"}}}},
	{"empty seed axis",
		minimal + "seed = []\n",
		[]want{{"matrix.seed", 5, 1, []string{"empty axis"}}}},
	{"empty profilers",
		minimal + "[profile]\nprofilers = []\n",
		[]want{{"profile.profilers", 6, 1, []string{"empty"}}}},
	{"missing required axes",
		"name = \"t\"\n[matrix]\nseed = [1]\n",
		[]want{
			{"matrix.model", 2, 2, []string{"required", `model = ["Qwen/Qwen-Image"]`}},
			{"matrix.prompt", 2, 2, []string{"required"}},
		}},
	{"missing name",
		"[matrix]\nmodel = [\"m\"]\nprompt = [\"p\"]\n",
		[]want{{"name", 0, 0, []string{"required"}}}},
	{"name not usable as a directory",
		strings.Replace(minimal, `"t"`, `"../etc"`, 1),
		[]want{{"name", 1, 1, []string{"cannot be used as a directory name"}}}},
	{"zero steps",
		minimal + "num_inference_steps = [0]\n",
		[]want{{"matrix.num_inference_steps[0]", 5, 1, []string{"must be > 0"}}}},
	{"negative steps",
		minimal + "num_inference_steps = [20, -5]\n",
		[]want{{"matrix.num_inference_steps[1]", 5, 1, []string{"-5 steps", "must be > 0"}}}},
	{"zero repeats",
		minimal + "repeats = 0\n",
		[]want{{"matrix.repeats", 5, 1, []string{"repeats = 0", ">= 1"}}}},
	{"negative repeats",
		minimal + "repeats = -2\n",
		[]want{{"matrix.repeats", 5, 1, []string{">= 1"}}}},
	{"negative seed",
		minimal + "seed = [-1]\n",
		[]want{{"matrix.seed[0]", 5, 1, []string{"negative"}}}},
	{"bad resolution points at the element",
		minimal + "resolution = [\n  \"1024x1024\",\n  \"1024*1024\",\n  \"0x512\",\n  \"-8x8\",\n  \"8k\",\n]\n",
		[]want{
			{"matrix.resolution[1]", 7, 3, []string{`"1024*1024"`, "neither WxH nor a preset"}},
			{"matrix.resolution[2]", 8, 3, []string{`"0x512"`, "between 1 and"}},
			{"matrix.resolution[3]", 9, 3, []string{`"-8x8"`}},
			{"matrix.resolution[4]", 10, 3, []string{`"8k"`, "720p, 1080p, 2k, 4k"}},
		}},
	{"same resolution twice",
		minimal + "resolution = [\"1920x1080\", \"1080p\"]\n",
		[]want{{"matrix.resolution[1]", 5, 28, []string{"same size as element 0"}}}},
	{"duplicate model",
		"name = \"t\"\n[matrix]\nmodel = [\"m\", \"m\"]\nprompt = [\"p\"]\n",
		[]want{{"matrix.model[1]", 3, 15, []string{"listed twice", "repeats"}}}},
	{"bare number duration",
		minimal + "[backend]\ntimeout = 30\n",
		[]want{{"backend.timeout", 6, 1, []string{"bare number 30", `use a string such as "30s"`}}}},
	{"unparsable duration",
		minimal + "[backend]\ngrace = \"ten seconds\"\n",
		[]want{{"backend.grace", 6, 1, []string{`"ten seconds" is not a duration`}}}},
	{"zero timeout",
		minimal + "[backend]\ntimeout = \"0s\"\n",
		[]want{{"backend.timeout", 6, 1, []string{"must be > 0"}}}},
	{"negative grace",
		minimal + "[backend]\ngrace = \"-1s\"\n",
		[]want{{"backend.grace", 6, 1, []string{"must be > 0"}}}},
	{"nsys delay not whole seconds, bare duration",
		minimal + "[profile]\nprofilers = [\"nsys\"]\n[nsys]\ndelay = \"1500ms\"\nduration = 30\n",
		[]want{
			{"nsys.delay", 8, 1, []string{"not whole seconds", `"2s"`}},
			{"nsys.duration", 9, 1, []string{"bare number 30"}},
		}},
	{"negative nsys delay",
		minimal + "[profile]\nprofilers = [\"nsys\"]\n[nsys]\ndelay = \"-2s\"\n",
		[]want{{"nsys.delay", 8, 1, []string{"negative"}}}},
	{"nsys options without the nsys profiler",
		minimal + "[profile]\nprofilers = [\"none\", \"torch\"]\n[nsys]\ndelay = \"10s\"\n",
		[]want{{"nsys", 7, 2, []string{`nsys options given but profile.profilers has no "nsys"; add it or drop [nsys]`}}}},
	{"nsys options as dotted keys without the nsys profiler",
		minimal + "nsys.delay = \"10s\"\n",
		[]want{{"matrix.nsys", 5, 1, []string{`unknown key "nsys" in [matrix]`}}}},
	{"unknown nsys trace and cuda graph mode",
		minimal + "[profile]\nprofilers = [\"nsys\"]\n[nsys]\ntrace = [\"cuda\", \"gpu\"]\ncuda_graph_trace = \"kernel\"\n",
		[]want{
			{"nsys.trace[1]", 8, 18, []string{`unknown nsys trace "gpu"`, "cuda, nvtx, osrt"}},
			{"nsys.cuda_graph_trace", 9, 1, []string{`"kernel"`, `"node", "graph"`}},
		}},
	{"nsys trace none mixed",
		minimal + "[profile]\nprofilers = [\"nsys\"]\n[nsys]\ntrace = [\"none\", \"cuda\"]\n",
		[]want{{"nsys.trace", 8, 1, []string{`"none" cannot be combined`}}}},
	{"unknown backend kind lists the valid ones",
		minimal + "[backend]\nkind = \"tensorrt\"\n",
		[]want{{"backend.kind", 6, 1, []string{`unknown backend kind "tensorrt"`, `"sglang", "vllm", "vllm-omni"`}}}},
	{"unknown mode, empty command",
		minimal + "[backend]\nmode = \"batch\"\ncommand = []\n",
		[]want{
			{"backend.mode", 6, 1, []string{`unknown mode "batch"`, `"generate", "serve"`}},
			{"backend.command", 7, 1, []string{"empty", "program to run"}},
		}},
	{"profilers: unknown and duplicate",
		minimal + "[profile]\nprofilers = [\"torch\", \"perf\", \"torch\"]\n",
		[]want{
			{"profile.profilers[1]", 6, 23, []string{`unknown profiler "perf"`}},
			{"profile.profilers[2]", 6, 31, []string{"listed twice"}},
		}},
	{"num_profiled_timesteps zero",
		minimal + "[profile]\nnum_profiled_timesteps = 0\n",
		[]want{{"profile.num_profiled_timesteps", 6, 1, []string{"> 0, or -1"}}}},
	{"gate value",
		minimal + "[gate]\ndiffusers_fallback = \"ignore\"\n",
		[]want{{"gate.diffusers_fallback", 6, 1, []string{`"fail", "warn"`}}}},
	{"env names",
		minimal + "[backend]\nenv = { \"A=B\" = \"1\", \"\" = \"2\" }\n",
		[]want{
			{`backend.env."A=B"`, 6, 9, []string{"contains '='"}},
			{`backend.env.""`, 6, 22, []string{"empty environment variable name"}},
		}},
	{"NUL bytes cannot be argv elements",
		"name = \"t\"\n[matrix]\nmodel = [\"m\"]\nprompt = [\"a\\u0000b\"]\n[backend]\nextra_args = [\"x\\u0000\"]\nenv = { A = \"\\u0000\" }\n",
		[]want{
			{"matrix.prompt[0]", 4, 1, []string{"NUL byte"}},
			{"backend.extra_args[0]", 6, 1, []string{"NUL byte"}},
			{"backend.env.A", 7, 9, []string{"NUL byte"}},
		}},
	{"too many cells",
		minimal + "repeats = 1000000\n",
		[]want{{"matrix", 2, 2, []string{"more than 10000 cells"}}}},
	{"several errors in one file are reported together, in file order",
		`name = "my plan"
[backend]
kind = "docker"
timeout = 30
[matrix]
model = "Qwen/Qwen-Image"
prompt = []
resolution = ["1024*1024"]
num_inference_steps = [0]
repeats = 0
bogus = 1
[nsys]
delay = "10s"
`,
		[]want{
			{"name", 1, 1, []string{"directory name"}},
			{"backend.kind", 3, 1, []string{"unknown backend kind"}},
			{"backend.timeout", 4, 1, []string{"bare number"}},
			{"matrix.model", 6, 1, []string{"expected an array"}},
			{"matrix.prompt", 7, 1, []string{"empty axis"}},
			{"matrix.resolution[0]", 8, 15, []string{"neither WxH"}},
			{"matrix.num_inference_steps[0]", 9, 1, []string{"> 0"}},
			{"matrix.repeats", 10, 1, []string{">= 1"}},
			{"matrix.bogus", 11, 1, []string{"unknown key"}},
			{"nsys", 12, 2, []string{"nsys options given"}},
		}},
}

func TestBadInputs(t *testing.T) {
	runBadCases(t, badCases)
}

// runBadCases checks that each source yields exactly the wanted problems, in order.
func runBadCases(t *testing.T, cases []struct {
	name string
	src  string
	want []want
}) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := parseErr(t, tc.src)
			if len(e.Problems) != len(tc.want) {
				t.Fatalf("got %d problems, want %d:\n%v", len(e.Problems), len(tc.want), e)
			}
			for i, w := range tc.want {
				g := e.Problems[i]
				if g.Key != w.key || (w.line != 0 && g.Line != w.line) || (w.col != 0 && g.Col != w.col) {
					t.Errorf("problem %d = %q at %d:%d, want %q at %d:%d\n%v", i, g.Key, g.Line, g.Col, w.key, w.line, w.col, e)
				}
				if w.line == 0 && g.Line != 0 {
					t.Errorf("problem %d has line %d, want none", i, g.Line)
				}
				for _, m := range w.msg {
					if !strings.Contains(g.Msg, m) {
						t.Errorf("problem %d message %q lacks %q", i, g.Msg, m)
					}
				}
			}
		})
	}
}

func TestErrorFormat(t *testing.T) {
	e := &Error{File: "p.toml", Problems: []Problem{
		{Key: "matrix.model", Line: 3, Col: 1, Msg: "m1"},
		{Key: "nsys.delay", Line: 7, Msg: "m2"},
		{Key: "name", Msg: "m3"},
		{Line: 2, Col: 5, Msg: "TOML syntax error: x"},
	}}
	want := "p.toml:3:1: matrix.model: m1\np.toml:7: nsys.delay: m2\np.toml: name: m3\np.toml:2:5: TOML syntax error: x"
	if got := e.Error(); got != want {
		t.Errorf("Error() =\n%s\nwant\n%s", got, want)
	}
	// The real thing: one line per problem, each starting with the file name.
	err := parseErr(t, "name = \"t\"\n[matrix]\nmodel = []\nprompt = []\n")
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 2 || lines[0] != "plan.toml:3:1: matrix.model: empty axis; list at least one model, e.g. model = [\"Qwen/Qwen-Image\"] under [matrix]" ||
		!strings.HasPrefix(lines[1], "plan.toml:4:1: matrix.prompt: empty axis") {
		t.Errorf("unexpected error text:\n%v", err)
	}
}

func TestDefaults(t *testing.T) {
	p := mustParse(t, minimal)
	checks := []struct {
		name      string
		got, want any
	}{
		{"output_dir", p.OutputDir, "runs"},
		{"kind", p.Backend.Kind, "sglang"},
		{"mode", p.Backend.Mode, "generate"},
		{"command", strings.Join(p.Backend.Command, " "), "sglang"},
		{"timeout", p.Backend.Timeout.Duration, 20 * time.Minute},
		{"grace", p.Backend.Grace.Duration, 10 * time.Second},
		{"repeats", p.Matrix.Repeats, 1},
		{"seed", len(p.Matrix.Seed) == 1 && p.Matrix.Seed[0] == 0, true},
		{"resolution absent", p.Matrix.Resolution == nil, true},
		{"steps absent", p.Matrix.NumInferenceSteps == nil, true},
		{"profilers", strings.Join(p.Profile.Profilers, ","), "none"},
		{"num_profiled_timesteps", p.Profile.NumProfiledTimesteps, 5},
		{"profile_all_stages", p.Profile.ProfileAllStages, false},
		{"nsys.trace", strings.Join(p.NSys.Trace, ","), "cuda,nvtx,osrt"},
		{"nsys.cuda_graph_trace", p.NSys.CudaGraphTrace, "node"},
		{"nsys.delay", p.NSys.Delay.Duration, time.Duration(0)},
		{"gate", p.Gate.DiffusersFallback, "fail"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	cells := p.Expand()
	if len(cells) != 1 {
		t.Fatalf("got %d cells, want 1", len(cells))
	}
	c := cells[0]
	if c.ID != "000-qwen-image-default-s0-none-r1" || c.Resolution != (Resolution{}) || c.Steps != 0 || c.Seed != 0 {
		t.Errorf("default cell = %+v", c)
	}
	if c.Key != "qwen-image/default/defaultst/s0/p"+hash8("a fox") {
		t.Errorf("default key = %q", c.Key)
	}
}

func TestExplicitValuesKept(t *testing.T) {
	p := mustParse(t, minimal+`repeats = 2
seed = [7]
[backend]
kind = "vllm-omni"
mode = "serve"
command = ["/venv/bin/python", "-m", "sglang"]
timeout = "1h30m"
grace = "250ms"
[profile]
profilers = ["nsys", "torch"]
num_profiled_timesteps = -1
profile_all_stages = true
[nsys]
delay = "0s"
duration = "20s"
trace = ["none"]
cuda_graph_trace = "graph"
[gate]
diffusers_fallback = "warn"
`)
	if p.Backend.Kind != "vllm-omni" || p.Backend.Mode != "serve" || len(p.Backend.Command) != 3 ||
		p.Backend.Timeout.Duration != 90*time.Minute || p.Backend.Grace.Duration != 250*time.Millisecond ||
		p.Matrix.Repeats != 2 || p.Matrix.Seed[0] != 7 || p.Profile.NumProfiledTimesteps != -1 ||
		!p.Profile.ProfileAllStages || p.NSys.Duration.Duration != 20*time.Second || p.NSys.Trace[0] != "none" ||
		p.NSys.CudaGraphTrace != "graph" || p.Gate.DiffusersFallback != "warn" {
		t.Errorf("explicit values not kept: %+v", p)
	}
	if got := p.Expand()[0].Profiler; got != "nsys" {
		t.Errorf("profiler order not kept: first cell uses %q", got)
	}
}

// Prompts go to sglang as one argv element, never through a shell, so anything a TOML string
// can hold (but NUL) must survive byte for byte.
func TestPromptsByteExact(t *testing.T) {
	want := []string{
		`She said "hi" and 'bye'`,
		`$(rm -rf /) ; echo $HOME && ` + "`id`",
		"line one\nline two\n\ttabbed",
		"雪の中の狐 — café, naïve, 🦊",
		`back\slash \n not a newline`,
		"  leading and trailing spaces  ",
	}
	src := `name = "t"
[matrix]
model = ["Qwen/Qwen-Image"]
prompt = [
  "She said \"hi\" and 'bye'",
  '$(rm -rf /) ; echo $HOME && ` + "`id`" + `',
  """line one
line two
	tabbed""",
  "雪の中の狐 — café, naïve, \U0001F98A",
  'back\slash \n not a newline',
  "  leading and trailing spaces  ",
]
`
	p := mustParse(t, src)
	if len(p.Matrix.Prompt) != len(want) {
		t.Fatalf("got %d prompts, want %d", len(p.Matrix.Prompt), len(want))
	}
	for i := range want {
		if p.Matrix.Prompt[i] != want[i] {
			t.Errorf("prompt %d = %q, want %q", i, p.Matrix.Prompt[i], want[i])
		}
	}
	for i, c := range p.Expand() {
		if c.Prompt != want[i] {
			t.Errorf("cell %d prompt = %q, want %q", i, c.Prompt, want[i])
		}
	}
	if string(p.Source) != src {
		t.Errorf("Source is not the exact input")
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "p.toml")
	if err := os.WriteFile(f, []byte(minimal), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := Load(f)
	if err != nil {
		t.Fatal(err)
	}
	if p.Path != f || string(p.Source) != minimal {
		t.Errorf("Path/Source not kept: %q %q", p.Path, p.Source)
	}

	_, err = Load(filepath.Join(dir, "missing.toml"))
	if err == nil || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "check the path") {
		t.Errorf("missing file: err = %v", err)
	}

	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("name = \"t\"\n[matrix]\nmodel = []\nprompt = [\"p\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(bad)
	var pe *Error
	if !errors.As(err, &pe) || pe.File != bad || !strings.HasPrefix(err.Error(), bad+":3:1: matrix.model:") {
		t.Errorf("invalid file: err = %v", err)
	}
}

// TestExamples loads every shipped example: each must validate and expand.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob("examples/*.toml")
	if err != nil || len(files) < 2 {
		t.Fatalf("examples: %v %v", files, err)
	}
	for _, f := range files {
		p, err := Load(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		cells := p.Expand()
		if len(cells) == 0 || len(cells) > 32 {
			t.Errorf("%s: %d cells", f, len(cells))
		}
		checkUnique(t, cells)
	}
}

// full.toml exists to show every key a generate plan may set; testdata/full-serve.toml sets
// the serve-only ones, which a generate plan must not. Together they use every key.
func TestFullExampleUsesEveryKey(t *testing.T) {
	var mds []toml.MetaData
	for _, f := range []string{"examples/full.toml", "testdata/full-serve.toml", "testdata/full-vllm.toml", "testdata/full-attach.toml", "testdata/full-search.toml", "testdata/full-engines.toml"} {
		var v map[string]any
		md, err := toml.DecodeFile(f, &v)
		if err != nil {
			t.Fatal(err)
		}
		mds = append(mds, md)
		if _, err := Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	for table, keys := range schema {
		for _, k := range keys {
			path := []string{k}
			if table != "" {
				path = append(strings.Split(table, "."), k) // "executor.slurm" is a sub-table
			}
			if strings.Join(path, ".") == "profile.profile_stages" {
				continue // known so that the plan can say why it refuses it (validateProfilerOptions)
			}
			// IsDefined does not look inside arrays of tables ([[matrix.exclude]]); Keys does.
			defined := func(md toml.MetaData) bool {
				return md.IsDefined(path...) || slices.ContainsFunc(md.Keys(), func(k toml.Key) bool { return slices.Equal(k, path) })
			}
			if !slices.ContainsFunc(mds, defined) {
				t.Errorf("none of examples/full.toml or testdata/full-*.toml sets %s", strings.Join(path, "."))
			}
		}
	}
	p, err := Load("examples/full.toml")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(p.Expand()); n > 16 {
		t.Errorf("full.toml expands to %d cells; keep it <= 16 so simulated runs stay quick", n)
	}
	if len(p.Matrix.Resolution) < 2 || len(p.Matrix.Seed) < 2 || len(p.Backend.Env) == 0 {
		t.Errorf("full.toml should show two resolutions, two seeds and env: %+v", p.Matrix)
	}
	if d := p.NSys.Delay.Duration; d < time.Second || d > 2*time.Second || p.NSys.Duration.Duration > 10*time.Second {
		t.Errorf("full.toml nsys window %v+%v too long for the simulator", d, p.NSys.Duration.Duration)
	}
}

func TestParseResolution(t *testing.T) {
	good := []struct {
		in   string
		want Resolution
		str  string
	}{
		{"1024x1024", Resolution{Width: 1024, Height: 1024}, "1024x1024"},
		{"1024X768", Resolution{Width: 1024, Height: 768}, "1024x768"},
		{"1328x768", Resolution{Width: 1328, Height: 768}, "1328x768"},
		{"17x9", Resolution{Width: 17, Height: 9}, "17x9"},
		{"720p", Resolution{1280, 720, "720p"}, "720p"},
		{"1080P", Resolution{1920, 1080, "1080p"}, "1080p"},
		{"2k", Resolution{2560, 1440, "2k"}, "2k"},
		{"4K", Resolution{3840, 2160, "4k"}, "4k"},
	}
	for _, g := range good {
		r, err := ParseResolution(g.in)
		if err != nil || r != g.want || r.String() != g.str {
			t.Errorf("ParseResolution(%q) = %+v (%q), %v; want %+v (%q)", g.in, r, r.String(), err, g.want, g.str)
		}
	}
	for _, bad := range []string{"", "x", "1024", "1024x", "x1024", "0x0", "0x512", "512x0", "-8x8", "+8x8",
		"1024*1024", "1024x1024x3", "8k", "1024.5x1024", "99999999999999999999x1", "100000x100", "１０２４x1024"} {
		if r, err := ParseResolution(bad); err == nil {
			t.Errorf("ParseResolution(%q) = %+v, want an error", bad, r)
		}
	}
	if s := (Resolution{}).String(); s != "default" {
		t.Errorf("zero resolution String() = %q", s)
	}
}

// [executor] gpus: the TOML type decides. A string is "all" or GPU ids, so "0" and "3" name one
// GPU each (as CUDA_VISIBLE_DEVICES reads them); an integer is a count of GPUs 0..N-1.
func TestExecutorGPUsStringIsAListIntegerACount(t *testing.T) {
	for _, tc := range []struct {
		gpus string
		want []int
	}{
		{`"0"`, []int{0}},
		{`"3"`, []int{3}},
		{`"1,3"`, []int{1, 3}},
		{`3`, []int{0, 1, 2}},
		{`1`, []int{0}},
	} {
		p := mustParse(t, minimal+"[executor]\ngpus = "+tc.gpus+"\n")
		got, err := p.Executor.GPUIDs(-1)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("gpus = %s: %v %v, want %v", tc.gpus, got, err, tc.want)
		}
	}
	// A count beyond the machine's GPUs, and a GPU id beyond them, are refused.
	if _, err := (Executor{GPUCount: 4}).GPUIDs(2); err == nil {
		t.Error("gpus = 4 on a 2-GPU machine accepted")
	}
	if _, err := (Executor{GPUs: "3"}).GPUIDs(2); err == nil || !strings.Contains(err.Error(), "names GPU 3") {
		t.Errorf(`gpus = "3" on a 2-GPU machine: %v`, err)
	}
	for _, src := range []string{"gpus = 0", "gpus = -2"} {
		pe := parseErr(t, minimal+"[executor]\n"+src+"\n")
		if len(pe.Problems) != 1 || pe.Problems[0].Line != 6 || !strings.Contains(pe.Problems[0].Msg, "at least 1") {
			t.Errorf("%s: %v", src, pe)
		}
	}
}

// TestSlurmDirectiveValues: every [executor.slurm] value that becomes an #SBATCH directive is
// checked at validation, before anything is created: a value that would be read as two options
// (time = "00:05:00 --chdir=/srv"), that is not the option's form, or an extra_sbatch element
// that is not one option or sets what the runner sets itself. What sbatch accepts passes.
func TestSlurmDirectiveValues(t *testing.T) {
	good := minimal + `[executor.slurm]
partition = "gpu,gpu-large"
account = "perf_team"
qos = "normal"
time = "1-12:00:00"
mem = "64G"
constraint = "h100&[ib|roce]"
extra_sbatch = ["--exclusive", "--gres=gpu:2", "--comment=nightly run #3", "-k", "--open-mode=append", "--wait-all-nodes=1"]
`
	mustParse(t, good)
	for _, tm := range []string{"90", "30:00", "01:30:00", "2-0", "2-12:30", "UNLIMITED", "infinite"} {
		mustParse(t, minimal+"[executor.slurm]\ntime = \""+tm+"\"\n")
	}
	for _, tc := range []struct{ src, key, word string }{
		{`time = "00:05:00 --chdir=/srv"`, "executor.slurm.time", "time limit"},
		{`time = "1h"`, "executor.slurm.time", "time limit"},
		{`partition = "gpu --chdir=/srv"`, "executor.slurm.partition", "partition name"},
		{`account = "a\"b"`, "executor.slurm.account", "account name"},
		{`qos = "normal,high"`, "executor.slurm.qos", "QOS name"},
		{`mem = "64 G"`, "executor.slurm.mem", "size"},
		{`constraint = "h100 #x"`, "executor.slurm.constraint", "node features"},
		{`extra_sbatch = ["--exclusive --chdir=/srv"]`, "executor.slurm.extra_sbatch[0]", "not one sbatch option"},
		{`extra_sbatch = ["--comment=a\nb"]`, "executor.slurm.extra_sbatch[0]", "not one sbatch option"},
		{`extra_sbatch = ["-N 2"]`, "executor.slurm.extra_sbatch[0]", "not one sbatch option"},
		{`extra_sbatch = ["exclusive"]`, "executor.slurm.extra_sbatch[0]", "not one sbatch option"},
		{`extra_sbatch = ["--exclusive", "--job-name=x"]`, "executor.slurm.extra_sbatch[1]", "runner sets itself"},
		{`extra_sbatch = ["--job=x"]`, "executor.slurm.extra_sbatch[0]", "runner sets itself"},
		{`extra_sbatch = ["--output=/tmp/x"]`, "executor.slurm.extra_sbatch[0]", "runner sets itself"},
		{`extra_sbatch = ["--wait"]`, "executor.slurm.extra_sbatch[0]", "runner sets itself"},
		{`extra_sbatch = ["-J"]`, "executor.slurm.extra_sbatch[0]", "runner sets itself"},
		{`extra_sbatch = ["--comment=my HetJob"]`, "executor.slurm.extra_sbatch[0]", "heterogeneous"},
	} {
		pe := parseErr(t, minimal+"[executor.slurm]\n"+tc.src+"\n")
		if len(pe.Problems) != 1 || pe.Problems[0].Key != tc.key || !strings.Contains(pe.Problems[0].Msg, tc.word) {
			t.Errorf("%s: %v; want one problem at %s saying %q", tc.src, pe, tc.key, tc.word)
		}
	}
}
