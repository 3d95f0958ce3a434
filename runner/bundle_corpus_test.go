package runner

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/bundle"
)

// family is one credential format of the corpus: text builds the line that carries secret
// (what a user, a library or a backend would write), secret is the part that must not survive.
type family struct {
	name   string
	secret string
	text   string
}

const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// randStr is n random characters of set: every sample is new, none is a real credential.
func randStr(r *rand.Rand, set string, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = set[r.IntN(len(set))]
	}
	return string(b)
}

// corpus builds one sample of every credential family the issue names (and a few the
// catalogue knows), fresh for place, so that a survivor says where it came from.
func corpus(r *rand.Rand) []family {
	b64 := alnum + "+/"
	var pem []string
	for range 6 {
		pem = append(pem, randStr(r, b64, 64))
	}
	pemBody := strings.Join(pem, "\n")
	var out []family
	add := func(name, secret, text string) { out = append(out, family{name, secret, text}) }
	s := randStr(r, alnum, 36)
	add("github-pat", "ghp_"+s, "using ghp_"+s+" for the clone")
	s = randStr(r, alnum+"_", 82)
	add("github-fine-grained-pat", "github_pat_"+s, "token github_pat_"+s)
	add("pem", pemBody, "-----BEGIN RSA PRIVATE KEY-----\n"+pemBody+"\n-----END RSA PRIVATE KEY-----")
	s = randStr(r, alnum, 48)
	add("sk-key", "sk-"+s, "key sk-"+s+" in use")
	s = randStr(r, alnum, 40)
	add("url-token-user", s, "https://"+s+"@git.example.com/org/repo.git")
	s = randStr(r, alnum, 24)
	add("url-user-pass", s, "https://deploy:"+s+"@hub.example.com/x")
	s = randStr(r, alnum, 30)
	add("query-access-token", s, "GET https://api.example.com/v1/models?access_token="+s+"&x=1")
	s = randStr(r, alnum, 30)
	add("query-token", s, "https://cdn.example.com/a.bin?token="+s)
	s = randStr(r, alnum, 30)
	add("query-api-key", s, "https://maps.example.com/q?lang=en&api_key="+s)
	// Query parameters and fragments, flags and YAML keys named like a secret (IsSecretName).
	s = randStr(r, alnum, 30)
	add("query-hf-token", s, "https://hub.example.com/api/models/x?hf_token="+s+"&rev=main")
	s = randStr(r, alnum, 30)
	add("fragment-access-token", s, "https://app.example.com/callback#access_token="+s+"&state=xyz")
	s = randStr(r, alnum, 30)
	add("flag-underscore", s, "--hf_token "+s)
	s = randStr(r, alnum, 30)
	add("yaml-hf-token", s, "hf_token: "+s)
	s = randStr(r, alnum, 32)
	add("json-api-key", s, `{"openai_api_key": "`+s+`", "model": "x"}`)
	s = randStr(r, alnum, 16)
	add("password-colon", s, "password: "+s)
	s = randStr(r, alnum, 32)
	add("x-api-key", s, "x-api-key: "+s)
	s = randStr(r, alnum, 18)
	add("curl-u", s, "curl -u admin:"+s+" https://example.com/upload")
	s = randStr(r, alnum, 34)
	add("hf-token", "hf_"+s, "hf_"+s)
	s = randStr(r, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)
	add("aws-key-id", "AKIA"+s, "AKIA"+s)
	s = randStr(r, alnum, 40)
	add("bearer", s, "Authorization: Bearer "+s)
	// What only the plan's [bundle] redact pattern (corpusPattern) knows is secret.
	s = randStr(r, alnum, 20)
	add("plan-pattern", "corpint-"+s, "ticket corpint-"+s+" filed")
	return out
}

// shaped are the families whose secret carries its own format (a prefix and a length): the
// ones that can still be recognised in a file name, where sanitising has replaced the context
// ("password: ", "Bearer ", "https://…@") the other families are recognised by with '_'.
var shaped = map[string]bool{"github-pat": true, "github-fine-grained-pat": true, "sk-key": true, "hf-token": true, "aws-key-id": true}

// outputName is the file a generation of prompt is saved under, built the way sglang and its
// simulator build it (backends/sim saveOutputs: <prompt[:100]>_<YYYYmmdd-HHMMSS>_<sha8>, every
// byte but [A-Za-z0-9._-] replaced with '_'): a key in the prompt follows a '_'.
func outputName(prompt string) string {
	if len(prompt) > 100 {
		prompt = prompt[:100]
	}
	b := []byte(prompt)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return "outputs/" + string(b) + "_20260101-000000_ab12cd34.png"
}

// corpusPattern is the corpus plan's [bundle] redact pattern.
const corpusPattern = `corpint-[A-Za-z0-9]{20}`

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	js, _ := json.Marshal(s) // JSON string escapes are TOML basic string escapes
	return string(js)
}

// TestSecretCorpus plants every credential family in every place a secret can enter a run —
// the plan's env and argv, the runner's environment, the backend's log, a trace's args, the
// perf dump, the prompt and the output file named after the prompt (the shaped families) — and asserts that no sample survives in the run directory's
// cells.json, command.json and manifest.json, in the default bundle, in a --with-traces
// bundle or in an --issue body.
func TestSecretCorpus(t *testing.T) {
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 14))
	places := map[string][]family{}
	for _, p := range []string{"plan-env", "argv", "env", "log", "trace", "perf", "prompt"} {
		places[p] = corpus(rng)
	}
	// A file named after a prompt that holds a key: the log line and result.json name it.
	for _, f := range corpus(rng) {
		if shaped[f.name] {
			places["file-name"] = append(places["file-name"], f)
		}
	}
	var planEnv, procEnv, argv, prompt []string
	for i, f := range places["plan-env"] {
		planEnv = append(planEnv, fmt.Sprintf("APP_SETTING_%d = %s", i, tomlString(f.text)))
	}
	for i, f := range places["env"] {
		procEnv = append(procEnv, fmt.Sprintf("SGLANG_EXTRA_%d=%s", i, f.text))
	}
	for _, f := range places["argv"] {
		argv = append(argv, f.text)
	}
	for _, f := range places["prompt"] {
		prompt = append(prompt, f.text)
	}
	plan := `name = "corpus"
[backend]
env = { ` + strings.Join(planEnv, ", ") + ` }
extra_args = ["--negative-prompt", ` + tomlString(strings.Join(argv, " ; ")) + `]
[matrix]
model = ["Qwen/Qwen-Image"]
prompt = [` + tomlString("a cat; "+strings.Join(prompt, " ; ")) + `]
num_inference_steps = [3]
[profile]
profilers = ["torch"]
[bundle]
redact = [` + tomlString(corpusPattern) + `]
`
	run := simRun(t, plan, procEnv)
	cells, _ := filepath.Glob(filepath.Join(run, rundir.CellsDir, "*"))
	if len(cells) != 1 {
		t.Fatalf("want one cell, got %v", cells)
	}
	cell := cells[0]
	plant(t, cell, places)

	// The raw plan holds the argv samples: the test can fail.
	raw, _ := os.ReadFile(filepath.Join(run, rundir.PlanFile))
	if !bytes.Contains(raw, []byte(places["argv"][0].secret)) {
		t.Fatal("plan.toml does not hold the planted samples; the test plants nothing")
	}

	outputs := map[string][]byte{}
	for _, f := range []string{rundir.CellsFile, rundir.ManifestFile} {
		outputs["run/"+f], _ = os.ReadFile(filepath.Join(run, f))
	}
	outputs["run/cell/command.json"], _ = os.ReadFile(filepath.Join(cell, rundir.CommandFile))
	for _, withTraces := range []bool{false, true} {
		out := filepath.Join(t.TempDir(), "b.tar.gz")
		if _, err := bundle.Create(context.Background(), run, bundle.Options{Output: out, Env: procEnv, WithTraces: withTraces}); err != nil {
			t.Fatal(err)
		}
		for n, d := range readArchive(t, out) {
			outputs[fmt.Sprintf("bundle(with-traces=%v)/%s", withTraces, n)] = d
		}
	}
	body, err := bundle.Issue(cell, bundle.IssueOptions{Env: procEnv})
	if err != nil {
		t.Fatal(err)
	}
	outputs["issue"] = []byte(body)
	if _, ok := outputs["bundle(with-traces=true)/cells/"+filepath.Base(cell)+"/perf.json"]; !ok {
		t.Error("the bundle holds no perf.json: the perf place is not checked")
	}

	for name, data := range outputs {
		if strings.HasSuffix(name, ".json") && !json.Valid(data) {
			t.Errorf("%s is no longer valid JSON after redaction", name)
		}
	}
	survivors := 0
	for place, fams := range places {
		for _, f := range fams {
			for _, part := range strings.Split(f.secret, "\n") {
				js, _ := json.Marshal(part)
				for name, data := range outputs {
					if bytes.Contains(data, []byte(part)) || bytes.Contains(data, js[1:len(js)-1]) {
						survivors++
						t.Errorf("%s sample planted in %s survives in %s", f.name, place, name)
					}
				}
			}
		}
	}
	t.Logf("%d families x %d places, %d outputs, %d survivors", len(places["log"]), len(places), len(outputs), survivors)
}

// plant writes the log, trace and perf samples into a finished cell.
func plant(t *testing.T, cell string, places map[string][]family) {
	t.Helper()
	lf, err := os.OpenFile(filepath.Join(cell, rundir.LogFile), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range places["log"] {
		fmt.Fprintf(lf, "[2026-11-24 10:00:00] %s\n", f.text)
	}
	var names []string
	for _, f := range places["file-name"] {
		names = append(names, outputName("a cat "+f.secret))
		fmt.Fprintf(lf, "[2026-11-24 10:00:01] Output saved to %s\n", names[len(names)-1])
	}
	lf.Close()
	rp := filepath.Join(cell, rundir.ResultFile)
	res, err := os.ReadFile(rp)
	if err != nil {
		t.Fatal(err)
	}
	var rm map[string]any
	if err := json.Unmarshal(res, &rm); err != nil {
		t.Fatal(err)
	}
	rm["outputs"] = names
	res, _ = json.MarshalIndent(rm, "", "  ")
	if err := os.WriteFile(rp, res, 0o644); err != nil {
		t.Fatal(err)
	}

	// Trace args: one more event whose args hold every sample.
	traces, _ := filepath.Glob(filepath.Join(cell, "traces", "*.trace.json.gz"))
	if len(traces) == 0 {
		t.Fatal("the simulated cell has no trace")
	}
	args := map[string]string{}
	for i, f := range places["trace"] {
		args[fmt.Sprintf("arg%d", i)] = f.text
	}
	ev, _ := json.Marshal(map[string]any{"ph": "X", "name": "user_annotation", "ts": 1, "dur": 1, "pid": 1, "tid": 1, "args": args})
	rewriteGz(t, traces[0], func(b []byte) []byte {
		i := bytes.Index(b, []byte(`"traceEvents"`))
		j := bytes.IndexByte(b[i:], '[')
		if i < 0 || j < 0 {
			t.Fatal("trace without traceEvents")
		}
		k := i + j + 1
		return append(append(append(append([]byte{}, b[:k]...), ev...), ','), b[k:]...)
	})

	// The perf dump: a field the perf writer does not know, holding every sample.
	pp := filepath.Join(cell, rundir.PerfFile)
	perf, err := os.ReadFile(pp)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(perf, &m); err != nil {
		t.Fatal(err)
	}
	var notes []string
	for _, f := range places["perf"] {
		notes = append(notes, f.text)
	}
	m["notes"] = notes
	perf, _ = json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(pp, perf, 0o644); err != nil {
		t.Fatal(err)
	}
}

func rewriteGz(t *testing.T, path string, edit func([]byte) []byte) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if _, err := b.ReadFrom(zr); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	zw.Write(edit(b.Bytes()))
	zw.Close()
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
