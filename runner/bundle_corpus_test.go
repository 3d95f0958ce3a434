package runner

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
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
	// Passwords of command lines, as a setup line, a wrapper script or a log writes them, and
	// variables whose name says password in other words (PGPASSWORD, MYSQL_PWD, DB_PASS,
	// REDIS_AUTH).
	s = randStr(r, alnum, 20)
	add("mysql-attached-p", s, "mysql -u root -p"+s+" -h db.example.com app")
	s = randStr(r, alnum, 20)
	add("mysql-quoted-p", s, "mariadb -uroot -p'"+s+"' -e 'select 1'")
	s = randStr(r, alnum, 20)
	add("docker-login-p", s, "docker login -u bob -p "+s+" registry.example.com")
	s = randStr(r, alnum, 20)
	add("docker-login-password", s, "docker login --username bob --password "+s+" registry.example.com")
	s = randStr(r, alnum, 20)
	add("docker-login-password-eq", s, "podman login --password="+s+" quay.io")
	s = randStr(r, alnum, 20)
	add("sshpass-p", s, "sshpass -p "+s+" ssh -p 22 bob@gpu-node-1 nvidia-smi")
	s, s2 := randStr(r, alnum, 12), randStr(r, alnum, 12)
	add("sshpass-quoted", s+"\n"+s2, `sshpass -p "`+s+" "+s2+`" scp -P 2222 x bob@h:`)
	s = randStr(r, "0123456789abcdef", 40)
	add("wandb-login", s, "wandb login "+s)
	s = randStr(r, alnum, 20)
	add("pgpassword-prefix", s, "PGPASSWORD="+s+" psql -h db.example.com -U app")
	s = randStr(r, alnum, 20)
	add("mysql-pwd-prefix", s, "MYSQL_PWD="+s+" mysql -u root app")
	s = randStr(r, alnum, 20)
	add("db-pass", s, "export DB_PASS="+s)
	s = randStr(r, alnum, 20)
	add("redis-auth", s, "REDIS_AUTH="+s+" redis-cli ping")
	s = randStr(r, alnum+"/+", 40)
	add("aws-configure-set", s, "aws configure set aws_secret_access_key "+s)
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
	// Variables of [backend.env] whose name says password in other words, with values of no
	// particular shape.
	for _, name := range []string{"PGPASSWORD", "MYSQL_PWD", "DB_PASS", "REDIS_AUTH", "SSHPASS", "REDISCLI_AUTH"} {
		s := randStr(rng, alnum, 14)
		places["plan-env-name"] = append(places["plan-env-name"], family{name, s, s})
	}
	// The plan's backend.command, one argument to an element and one element to a line (the
	// simulator replaces it, so nothing of it runs): no line holds both a flag and its value.
	secret := func(name string, n int, set string) string {
		s := randStr(rng, set, n)
		places["command"] = append(places["command"], family{"command " + name, s, s})
		return s
	}
	command := []string{
		"sshpass", "-p", secret("sshpass -p", 18, alnum),
		"ssh", "-p", "22", "bob@gpu-node-1",
		"env", "PGPASSWORD=" + secret("PGPASSWORD", 18, alnum), "MYSQL_PWD=" + secret("MYSQL_PWD", 18, alnum),
		"sh", "-c", "mysql -p" + secret("mysql -pX", 18, alnum) + " -e 'select 1' && docker login -u bob -p " +
			secret("docker login -p", 18, alnum) + " registry.example.com && wandb login " + secret("wandb login", 40, "0123456789abcdef"),
		"docker", "login", "--password", secret("docker login --password", 18, alnum),
		"aws", "configure", "set", "aws_secret_access_key", secret("aws configure set", 40, alnum),
		"sglang",
	}
	var commandTOML []string
	for _, a := range command {
		commandTOML = append(commandTOML, "  "+tomlString(a)+",\n")
	}
	var planEnv, procEnv, argv, prompt []string
	for i, f := range places["plan-env"] {
		planEnv = append(planEnv, fmt.Sprintf("APP_SETTING_%d = %s", i, tomlString(f.text)))
	}
	for _, f := range places["plan-env-name"] {
		planEnv = append(planEnv, fmt.Sprintf("%s = %s", f.name, tomlString(f.text)))
	}
	for i, f := range places["env"] {
		procEnv = append(procEnv, fmt.Sprintf("SGLANG_EXTRA_%d=%s", i, f.text))
	}
	for _, f := range places["argv"] {
		argv = append(argv, f.text)
	}
	argv = append(argv, corpusKeep...)
	for _, f := range places["prompt"] {
		prompt = append(prompt, f.text)
	}
	plan := `name = "corpus"
[backend]
env = { ` + strings.Join(planEnv, ", ") + ` }
command = [
` + strings.Join(commandTOML, "") + `]
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
	lf, err := os.OpenFile(filepath.Join(cell, rundir.LogFile), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range corpusKeep {
		fmt.Fprintf(lf, "[2026-11-24 10:00:02] %s\n", k)
	}
	lf.Close()

	// The raw plan holds the argv samples: the test can fail.
	raw, _ := os.ReadFile(filepath.Join(run, rundir.PlanFile))
	if !bytes.Contains(raw, []byte(places["argv"][0].secret)) {
		t.Fatal("plan.toml does not hold the planted samples; the test plants nothing")
	}

	outputs := corpusOutputs(t, run, cell, procEnv, rundir.CellsFile, rundir.ManifestFile)
	if _, ok := outputs["bundle(with-traces=true)/cells/"+filepath.Base(cell)+"/perf.json"]; !ok {
		t.Error("the bundle holds no perf.json: the perf place is not checked")
	}
	checkSurvivors(t, places, outputs)
	// No false positive: a port flag, counts, paths and a password prompt stay as they were,
	// in the run directory's argv and in the bundled log.
	logName := "bundle(with-traces=false)/cells/" + filepath.Base(cell) + "/" + rundir.LogFile
	for _, k := range corpusKeep {
		js, _ := json.Marshal(k)
		if !bytes.Contains(outputs["run/"+rundir.CellsFile], js[1:len(js)-1]) {
			t.Errorf("%q was redacted in the run directory's %s", k, rundir.CellsFile)
		}
		if !bytes.Contains(outputs[logName], []byte(k)) {
			t.Errorf("%q was redacted in the bundled %s", k, rundir.LogFile)
		}
	}
}

// corpusOutputs is every file a secret of a run must not reach: the run directory's files
// named by runFiles and the cell's command.json, every file of a default and of a
// --with-traces bundle, and the --issue body of cell.
func corpusOutputs(t *testing.T, run, cell string, env []string, runFiles ...string) map[string][]byte {
	t.Helper()
	outputs := map[string][]byte{}
	for _, f := range runFiles {
		b, err := os.ReadFile(filepath.Join(run, f))
		if err != nil {
			t.Fatal(err)
		}
		outputs["run/"+filepath.ToSlash(f)] = b
	}
	if b, err := os.ReadFile(filepath.Join(cell, rundir.CommandFile)); err == nil {
		outputs["run/cell/command.json"] = b // a serve cell has none
	}
	for _, withTraces := range []bool{false, true} {
		out := filepath.Join(t.TempDir(), "b.tar.gz")
		if _, err := bundle.Create(context.Background(), run, bundle.Options{Output: out, Env: env, WithTraces: withTraces}); err != nil {
			t.Fatal(err)
		}
		for n, d := range readArchive(t, out) {
			outputs[fmt.Sprintf("bundle(with-traces=%v)/%s", withTraces, n)] = d
		}
	}
	body, err := bundle.Issue(cell, bundle.IssueOptions{Env: env})
	if err != nil {
		t.Fatal(err)
	}
	outputs["issue"] = []byte(body)
	return outputs
}

// checkSurvivors fails t for every line of every sample of places found in outputs, as
// written or as a JSON string holds it, and for every .json output that redaction left
// invalid.
func checkSurvivors(t *testing.T, places map[string][]family, outputs map[string][]byte) {
	t.Helper()
	for name, data := range outputs {
		if strings.HasSuffix(name, ".json") && !json.Valid(data) {
			t.Errorf("%s is no longer valid JSON after redaction", name)
		}
	}
	survivors, n := 0, 0
	for place, fams := range places {
		n += len(fams)
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
	t.Logf("%d samples in %d places, %d outputs, %d survivors", n, len(places), len(outputs), survivors)
}

// corpusKeep are texts that look like the command lines of the corpus but hold no secret: a
// port flag (-p of ssh and docker run), mysql's -p with a space (it prompts; the next word is
// the database), counts and paths. TestSecretCorpus plants them in the argv and the log and
// asserts they survive.
var corpusKeep = []string{
	"ssh -p 22 bob@gpu-node-1", "docker run -p 8080:80 nginx", "sshpass -f /etc/pw ssh -p 2222 host",
	"mysql -u root -p appdb", "wandb login --relogin", "SGLANG_MAX_TOKENS=4096",
	"TOKENIZER_PATH=/models/Qwen/Qwen-Image", "PWD=/home/bob", "auth_type=basic", "first_pass=3",
	"Qwen/Qwen-Image", "aws configure set region us-east-1",
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

// TestSecretCorpusAttachedServer: what an attached server says about itself (its
// server-info answer: sglang's server_args hold api_key and hf_token, and a URL may carry a
// password) is recorded in servers/<n>/server.json and the manifest; no sample of it, nor of
// the corpus planted in it, survives in those files, in a bundle or in an --issue body.
func TestSecretCorpusAttachedServer(t *testing.T) {
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 22))
	places := map[string][]family{"server-info": corpus(rng)}
	apiKey, hfToken, urlPass := randStr(rng, alnum, 24), randStr(rng, alnum, 30), randStr(rng, alnum, 16)
	places["server-args"] = []family{{"api_key", apiKey, apiKey}, {"hf_token", hfToken, hfToken}, {"url-password", urlPass, urlPass}}
	var notes []string
	for _, f := range places["server-info"] {
		notes = append(notes, f.text)
	}
	info, _ := json.Marshal(map[string]any{
		"model_path": "m", "api_key": apiKey, "hf_token": hfToken, "tokenizer_path": "Qwen/Qwen3-8B",
		"model_loader_extra_config": "https://bob:" + urlPass + "@hub.example.com/m", "notes": notes,
	})
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) {})
	mux.HandleFunc("/get_server_info", func(w http.ResponseWriter, _ *http.Request) { w.Write(info) })
	mux.HandleFunc("/generate", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for k := 1; k <= 4; k++ {
			fmt.Fprintf(w, "data: {\"text\": \"%s\", \"meta_info\": {\"prompt_tokens\": 8, \"completion_tokens\": %d}}\n\n", strings.Repeat("x", k), k)
		}
		io.WriteString(w, "data: [DONE]\n\n")
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	run := simRun(t, `name = "corpus-attach"
[backend]
mode = "serve"
model_type = "llm"
url = "`+srv.URL+`"
ready_timeout = "10s"
[matrix]
model = ["m"]
prompt = ["hi"]
input_len = [8]
output_len = [4]
[load]
warmup = 0
requests = 1
[profile]
profilers = ["none"]
[bundle]
redact = [`+tomlString(corpusPattern)+`]
`, nil)
	cells, _ := filepath.Glob(filepath.Join(run, rundir.CellsDir, "*"))
	if len(cells) != 1 {
		t.Fatalf("want one cell, got %v", cells)
	}
	server := filepath.Join(rundir.ServersDir, "1", rundir.ServerFile)
	outputs := corpusOutputs(t, run, cells[0], nil, rundir.CellsFile, rundir.ManifestFile, server)
	// The server's record holds its info (the test can fail), and the bundle holds the record.
	if !bytes.Contains(outputs["run/"+filepath.ToSlash(server)], []byte(`"tokenizer_path": "Qwen/Qwen3-8B"`)) {
		t.Fatalf("server.json does not hold the server's info:\n%s", outputs["run/"+filepath.ToSlash(server)])
	}
	if _, ok := outputs["bundle(with-traces=false)/"+filepath.ToSlash(server)]; !ok {
		t.Error("the bundle holds no server.json: the place is not checked")
	}
	checkSurvivors(t, places, outputs)
}
