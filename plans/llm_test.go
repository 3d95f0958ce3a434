package plans

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// llmBadCases are the bad inputs of the LLM benchmark keys (issue 15's "Bad input").
var llmBadCases = []struct {
	name string
	src  string
	want []want
}{
	{"rate zero", llmMin + "[load]\nrequest_rate = 0\n",
		[]want{{"load.request_rate", 9, 1, []string{"must be > 0", `"inf"`}}}},
	{"rate negative", llmMin + "[load]\nrequest_rate = -2.5\n",
		[]want{{"load.request_rate", 9, 1, []string{"-2.5", "must be > 0"}}}},
	{"rate word", llmMin + "[load]\nrequest_rate = \"fast\"\n",
		[]want{{"load.request_rate", 9, 1, []string{`"fast" is not a request rate`}}}},
	{"burstiness zero", llmMin + "[load]\nburstiness = 0\n",
		[]want{{"load.burstiness", 9, 1, []string{"must be > 0", "Poisson"}}}},
	{"slo not a duration", llmMin + "[load]\nslo_ttft = \"fast\"\nslo_tpot = 50\n",
		[]want{{"load.slo_ttft", 9, 0, []string{"not a duration"}}, {"load.slo_tpot", 10, 0, []string{"ambiguous"}}}},
	{"slo negative", llmMin + "[load]\nslo_tpot = \"-5ms\"\n",
		[]want{{"load.slo_tpot", 9, 1, []string{"must be > 0"}}}},
	{"unknown dataset", llmMin + "[load]\ndataset = \"wiki\"\n",
		[]want{{"load.dataset", 9, 1, []string{`unknown dataset "wiki"`, `"random", "sharegpt", "prefix"`}}}},
	{"sharegpt without a path", llmMin + "[load]\ndataset = \"sharegpt\"\n",
		[]want{{"load.dataset_path", 8, 0, []string{"needs dataset_path"}}}},
	{"sharegpt path missing", llmMin + "[load]\ndataset = \"sharegpt\"\ndataset_path = \"nope.json\"\n",
		[]want{{"load.dataset_path", 10, 1, []string{"nope.json", "no such file"}}}},
	{"sharegpt bad record", llmMin + "[load]\ndataset = \"sharegpt\"\ndataset_path = \"testdata/sharegpt-bad.json\"\n",
		[]want{{"load.dataset_path", 10, 1, []string{"sharegpt-bad.json: record 1", `"broken"`, "not the ShareGPT layout"}}}},
	{"sharegpt record of the wrong type", llmMin + "[load]\ndataset = \"sharegpt\"\ndataset_path = \"testdata/sharegpt-numid.json\"\n",
		[]want{{"load.dataset_path", 10, 1, []string{"record 0: field \"id\" is a number; want a string"}}}},
	{"dataset_path without sharegpt", llmMin + "[load]\ndataset_path = \"x.json\"\n",
		[]want{{"load.dataset_path", 9, 1, []string{`only used with dataset = "sharegpt"`}}}},
	{"mooncake without a path", llmMin + "[load]\ndataset = \"mooncake\"\n",
		[]want{{"load.dataset_path", 8, 0, []string{`dataset = "mooncake" needs dataset_path`, "Mooncake trace"}}}},
	{"mooncake bad line", llmMin + "[load]\ndataset = \"mooncake\"\ndataset_path = \"testdata/mooncake-bad.jsonl\"\n",
		[]want{{"load.dataset_path", 10, 1, []string{"mooncake-bad.jsonl:2", "3 hash_ids for 10 input tokens"}}}},
	{"trace_slowdown without mooncake", llmMin + "[load]\ntrace_slowdown = 2.0\n",
		[]want{{"load.trace_slowdown", 9, 1, []string{`only used with dataset = "mooncake"`}}}},
	{"too many clients", llmMin + "[load]\nclients = 100\n",
		[]want{{"load.clients", 9, 1, []string{"between 1 and 64"}}}},
	{"clients over the concurrency cap", llmMin + "[load]\nclients = 4\nmax_concurrency = 2\n",
		[]want{{"load.clients", 9, 1, []string{"4 clients cannot share max_concurrency = 2"}}}},
	{"range ratio", llmMin + "[load]\nrandom_range_ratio = 1.5\n",
		[]want{{"load.random_range_ratio", 9, 1, []string{"outside (0, 1]"}}}},
	{"llm key on a diffusion server", serveMin + "model_type = \"diffusion\"\n[load]\nburstiness = 2\n",
		[]want{{"load.burstiness", 9, 1, []string{"only used by LLM cells"}}}},
	{"empty server arg", llmMin + "[matrix.server_args]\ntp-size = []\n",
		[]want{{"matrix.server_args.tp-size", 9, 1, []string{"empty axis", "--tp-size"}}}},
	{"duplicate server arg", llmMin + "[matrix.server_args]\ntp-size = [\"2\", \"2\"]\n",
		[]want{{"matrix.server_args.tp-size[1]", 9, 17, []string{"listed twice"}}}},
	{"server arg with dashes", llmMin + "[matrix.server_args]\n\"--tp-size\" = [\"2\"]\n",
		[]want{{"matrix.server_args.--tp-size", 9, 1, []string{`without its dashes: "tp-size"`}}}},
	{"mixed booleans", llmMin + "[matrix.server_args]\nenable-x = [true, \"no\"]\n",
		[]want{{"matrix.server_args.enable-x", 9, 1, []string{"mixes booleans"}}}},
	{"empty concurrency axis", strings.Replace(llmMin, "input_len = [128]\n", "input_len = [128]\nconcurrency = []\n", 1),
		[]want{{"matrix.concurrency", 6, 1, []string{"empty axis"}}}},
	{"duplicate concurrency", strings.Replace(llmMin, "input_len = [128]\n", "input_len = [128]\nconcurrency = [8, 8]\n", 1),
		[]want{{"matrix.concurrency[1]", 6, 0, []string{"listed twice"}}}},
	{"rate axis", strings.Replace(llmMin, "input_len = [128]\n", "input_len = [128]\nrequest_rate = [0, \"inf\", \"inf\"]\n", 1),
		[]want{{"matrix.request_rate[0]", 6, 0, []string{"must be > 0"}}, {"matrix.request_rate[2]", 6, 0, []string{"inf is listed twice"}}}},
	{"args in a serve plan", serveMin + "[matrix.args]\nenable-torch-compile = [true]\n",
		[]want{{"matrix.args", 7, 9, []string{"write [matrix.server_args]"}}}},
	{"server args in a generate plan", minimal + "[matrix.server_args]\ntp-size = [\"1\"]\n",
		[]want{{"matrix.server_args", 5, 9, []string{`only used when backend.mode = "serve"`}}}},
}

func TestLLMBadInputs(t *testing.T) {
	runBadCases(t, llmBadCases)
}

const llmSweep = `name = "sweep"
[backend]
mode = "serve"
[matrix]
model = ["Qwen/Qwen2.5-0.5B-Instruct"]
prompt = ["hello"]
input_len = [128]
output_len = [32]
concurrency = [1, 8]
request_rate = [4, "inf"]
[matrix.server_args]
tp-size = ["1", "2"]
enable-torch-compile = [true, false]
`

// An LLM plan needs no prompt (its dataset makes them), and an LLM-only key without
// backend.model_type makes the plan an LLM plan instead of one error per key.
func TestLLMPlanWithoutPromptOrModelType(t *testing.T) {
	p := mustParse(t, `name = "t"
[backend]
mode = "serve"
[matrix]
model = ["Qwen/Qwen2.5-0.5B-Instruct"]
request_rate = [2, 4]
[load]
burstiness = 2
max_concurrency = 4
`)
	if p.Backend.ModelType != ModelTypeLLM || p.Load.API != APIGenerate {
		t.Errorf("model_type %q, api %q; want llm, generate", p.Backend.ModelType, p.Load.API)
	}
	cells := p.Expand()
	if len(cells) != 2 {
		t.Fatalf("%d cells, want 2", len(cells))
	}
	for _, c := range cells {
		if c.Prompt != "" || strings.Contains(c.Key, "/p") {
			t.Errorf("cell %s: prompt %q, key %q; want no prompt and no prompt hash", c.ID, c.Prompt, c.Key)
		}
	}
	// A diffusion plan still needs its prompt.
	_, err := Parse("p.toml", []byte(strings.Replace(serveMin, "prompt = [\"a fox\"]\n", "", 1)))
	if err == nil || !strings.Contains(err.Error(), "matrix.prompt: required") {
		t.Errorf("diffusion plan without a prompt: err = %v, want matrix.prompt required", err)
	}
}

func TestExpandLLMAxes(t *testing.T) {
	p := mustParse(t, llmSweep)
	cells := p.Expand()
	if len(cells) != 16 {
		t.Fatalf("got %d cells, want 2·2·2·2 = 16", len(cells))
	}
	c := cells[0]
	if want := "000-qwen2-5-0-5b-instruct-i128-o32-tp-size-1-enable-torch-compile-c1-r4-s0-none-r1"; c.ID != want {
		t.Errorf("id = %q, want %q", c.ID, want)
	}
	if want := "qwen2-5-0-5b-instruct/default/defaultst/s0/pbef41f20/i128/o32/tp-size=1/enable-torch-compile=true/c1/r4"; !strings.HasPrefix(c.Key, "qwen2-5-0-5b-instruct/") || !strings.HasSuffix(c.Key, "/i128/o32/tp-size=1/enable-torch-compile=true/c1/r4") {
		t.Errorf("key = %q, want like %q", c.Key, want)
	}
	if !slices.Equal(c.ServerArgs, []string{"--tp-size", "1", "--enable-torch-compile"}) || !slices.Equal(c.Backend.ExtraArgs, c.ServerArgs) {
		t.Errorf("server args %q, extra args %q", c.ServerArgs, c.Backend.ExtraArgs)
	}
	if c.Load.Concurrency != 1 || c.Load.RequestRate != 4 {
		t.Errorf("load = %+v", c.Load)
	}
	last := cells[15]
	if !strings.Contains(last.ID, "-tp-size-2-no-enable-torch-compile-c8-rinf-") || !slices.Equal(last.ServerArgs, []string{"--tp-size", "2"}) ||
		last.Load.Concurrency != 8 || last.Load.RequestRate != 0 {
		t.Errorf("last cell %q: args %q, load %+v", last.ID, last.ServerArgs, last.Load)
	}
	// Distinct ids and keys, and the shared plan slices are not aliased between cells.
	ids, keys := map[string]bool{}, map[string]bool{}
	for _, c := range cells {
		ids[c.ID], keys[c.Key] = true, true
	}
	if len(ids) != 16 || len(keys) != 16 {
		t.Errorf("%d ids and %d keys, want 16 each", len(ids), len(keys))
	}
	if len(p.Backend.ExtraArgs) != 0 {
		t.Errorf("expansion changed the plan's extra_args: %q", p.Backend.ExtraArgs)
	}
}

// A plan without the new axes keeps its ids (the goldens of other tests pin the rest).
func TestExpandLLMNoAxesKeepsIDs(t *testing.T) {
	p := mustParse(t, llmMin)
	if got := p.Expand()[0].ID; got != "000-qwen2-5-0-5b-instruct-i128-s0-none-r1" {
		t.Errorf("id = %q", got)
	}
	if p.Load.Burstiness != 1 || p.Load.Dataset != "random" || p.Load.RandomRangeRatio != 1 || p.Load.RequestRate != 0 {
		t.Errorf("defaults: %+v", p.Load)
	}
}

func TestLoadRateInf(t *testing.T) {
	p := mustParse(t, llmMin+"[load]\nrequest_rate = \"inf\"\napi = \"chat\"\n")
	if p.Load.RequestRate != 0 || p.Load.API != "chat" {
		t.Errorf("load = %+v", p.Load)
	}
	p = mustParse(t, llmMin+"[load]\nrequest_rate = 2.5\n")
	if p.Load.RequestRate != 2.5 {
		t.Errorf("rate = %v", p.Load.RequestRate)
	}
}

// FuzzShareGPTRecords: any input either streams records or fails with an error naming the
// file; it never panics, and a record handed to fn always has its conversations list.
func FuzzShareGPTRecords(f *testing.F) {
	for _, s := range []string{
		`[{"id": "a", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}]`,
		`[{"id": "b", "turns": []}]`, `[]`, `{}`, `[1]`, `[{"conversations": [{"value": ""}, {"value": "x"}]}]`, ``, `[`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := ShareGPTRecords(strings.NewReader(string(data)), "f.json", func(_ int, rec ShareGPTRecord) error {
			if rec.Conversations == nil {
				t.Fatal("a record without conversations reached fn")
			}
			return nil
		})
		if err != nil && !strings.HasPrefix(err.Error(), "f.json") {
			t.Fatalf("error %q does not name the file", err)
		}
	})
}

// [matrix.args] is the generate counterpart: its flags land on sglang generate's command line.
func TestExpandGenerateArgs(t *testing.T) {
	p := mustParse(t, minimal+"[matrix.args]\nenable-torch-compile = [false, true]\nvae-cpu-offload = [\"1\"]\n")
	cells := p.Expand()
	if len(cells) != 2 {
		t.Fatalf("%d cells", len(cells))
	}
	if want := "000-qwen-image-default-no-enable-torch-compile-vae-cpu-offload-1-s0-none-r1"; cells[0].ID != want {
		t.Errorf("id %q, want %q", cells[0].ID, want)
	}
	if !slices.Equal(cells[1].Backend.ExtraArgs, []string{"--enable-torch-compile", "--vae-cpu-offload", "1"}) {
		t.Errorf("extra args %q", cells[1].Backend.ExtraArgs)
	}
}

// cells.json round-trips the LLM benchmark's fields (rates, durations, server args).
func TestLLMCellsJSONRoundTrip(t *testing.T) {
	p, err := Load("testdata/full-serve.toml")
	if err != nil {
		t.Fatal(err)
	}
	cells := p.Expand()
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
	if !strings.Contains(string(data), `"slo_ttft":"200ms"`) || !strings.Contains(string(data), `"server_args":["--tp-size","1"]`) {
		t.Errorf("cells.json lacks the LLM fields:\n%s", data[:min(len(data), 3000)])
	}
}

// A relative dataset_path starts at the plan file's directory and comes out absolute, whatever
// the working directory: a run's records name the file that later readers (a Slurm task, a
// --resume from elsewhere) open. A copy of the plan that sits elsewhere (a run directory's
// plan.toml) reads the file it is given (ParseOptions.DatasetPath) instead.
func TestDatasetPathResolvedOnce(t *testing.T) {
	dir := t.TempDir()
	sample, err := os.ReadFile(filepath.Join("..", "testdata", "sharegpt-sample.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ds1.json"), sample, 0o644); err != nil {
		t.Fatal(err)
	}
	src := llmMin + "[load]\ndataset = \"sharegpt\"\ndataset_path = \"ds1.json\"\n"
	if err := os.WriteFile(filepath.Join(dir, "plan.toml"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	// A relative plan path from another working directory.
	t.Chdir(filepath.Dir(dir))
	p, err := Load(filepath.Join(filepath.Base(dir), "plan.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "ds1.json"); p.Load.DatasetPath != want {
		t.Errorf("dataset_path = %q, want %q (absolute, from the plan's directory)", p.Load.DatasetPath, want)
	}
	// The run directory's copy, parsed with the recorded file.
	copyDir := t.TempDir()
	p, err = ParseWith(filepath.Join(copyDir, "plan.toml"), []byte(src), ParseOptions{DatasetPath: filepath.Join(dir, "ds1.json")})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "ds1.json"); p.Load.DatasetPath != want {
		t.Errorf("with the recorded path: dataset_path = %q, want %q", p.Load.DatasetPath, want)
	}
	// The recorded file gone: the error says it was the run's file, at the plan's line.
	_, err = ParseWith(filepath.Join(copyDir, "plan.toml"), []byte(src), ParseOptions{DatasetPath: filepath.Join(copyDir, "gone.json")})
	var perr *Error
	if !errors.As(err, &perr) || len(perr.Problems) != 1 || perr.Problems[0].Line != 10 ||
		!strings.Contains(perr.Problems[0].Msg, "gone.json") || !strings.Contains(perr.Problems[0].Msg, "the file the run read its dataset from") {
		t.Errorf("recorded file missing: %v", err)
	}
}
