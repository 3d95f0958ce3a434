package runner

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/compare"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/bundle"
	"github.com/sglprof/runner/runner/secrets"
)

// Secrets planted in a simulated run: in the plan's env, in argv, in the process environment
// and in the log. None of them may survive in any byte of the bundle.
var (
	planToken   = "hf_PlanTokenAAAAAAAAAAAAAAAAAAAA"
	planPass    = "plan-db-pass-7781"
	envToken    = "hf_EnvTokenBBBBBBBBBBBBBBBBBBBBB"
	envAPIKey   = "sk-live-envapikey-99887766"
	urlPass     = "hunter2urlpass"
	argvToken   = "hf_ArgvTokenCCCCCCCCCCCCCCCCCCCC"
	argvURLPass = "argvurlpass42"
	awsKeyID    = "AKIAIOSFODNN7EXAMPLE"
	awsSecret   = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	bearer      = "eyJhbGciOiJIUzI1NiJ9.bearerpayload.sig"
	internal    = "internal-build42xyz"
	logToken    = "hf_LogTokenDDDDDDDDDDDDDDDDDDDDDD"
	logAssign   = "plainsecretvalue123"
	logFlag     = "s3cr3tflagvalue"
)

func allSecrets() []string {
	return []string{planToken, planPass, envToken, envAPIKey, urlPass, argvToken, argvURLPass, awsKeyID, awsSecret, bearer, internal, logToken, logAssign, logFlag}
}

var secretPlan = `name = "leaky"
[backend]
env = { HF_TOKEN = "` + planToken + `", DB_PASSWORD = "` + planPass + `" }
extra_args = ["--negative-prompt", "` + argvToken + ` https://carol:` + argvURLPass + `@hub.example.com/x"]
[matrix]
model = ["acme/unknown-model"]
prompt = ["a cat near ` + internal + `"]
num_inference_steps = [3]
[profile]
profilers = ["torch"]
[bundle]
redact = ["internal-[a-z0-9]+"]
`

func bundleSimOptions(t *testing.T, env []string) Options {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env = append([]string{"PATH=" + os.Getenv("PATH"), "RUNNER_SIM_TIME_SCALE=0"}, env...)
	return Options{Simulate: true, Exe: exe, Env: env, OutputDir: t.TempDir()}
}

// simRun runs a plan under the simulators and returns the run directory.
func simRun(t *testing.T, body string, env []string) string {
	t.Helper()
	p, err := plans.Parse("plan.toml", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	sum, err := Run(context.Background(), p, bundleSimOptions(t, env))
	if err != nil {
		t.Fatal(err)
	}
	return sum.RunDir
}

// secretEnv is the process environment of the leaky run and of the bundling.
func secretEnv() []string {
	return []string{
		"HF_TOKEN=" + envToken,
		"OPENAI_API_KEY=" + envAPIKey,
		"HF_ENDPOINT=https://alice:" + urlPass + "@hub.example.com",
	}
}

// readArchive returns every file of a .tar.gz, and the decompressed content of gzip members.
func readArchive(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	out := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = b
		if strings.HasSuffix(h.Name, ".gz") {
			zr, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				t.Fatalf("%s: %v", h.Name, err)
			}
			d, err := io.ReadAll(zr)
			if err != nil {
				t.Fatalf("%s: %v", h.Name, err)
			}
			out[h.Name+" (decompressed)"] = d
		}
	}
	return out
}

func TestBundleRedactsPlantedSecrets(t *testing.T) {
	run := simRun(t, secretPlan, secretEnv())
	cellDir := filepath.Join(run, rundir.CellsDir, "000-unknown-model-default-s0-torch-r1")
	// The log gets lines a real sglang or a user's wrapper could print.
	lf, err := os.OpenFile(filepath.Join(cellDir, rundir.LogFile), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{
		"export HF_TOKEN=" + logToken,
		"MY_SERVICE_TOKEN=" + logAssign + " ./launch.sh --admin-api-key " + logFlag,
		"curl -H 'Authorization: Bearer " + bearer + "' https://api.example.com",
		"aws key " + awsKeyID + " aws_secret_access_key=" + awsSecret,
		"ServerArgs(api_key='" + envAPIKey + "', tokenizer_path='Qwen/Qwen-Image', max_tokens=4096)",
		"fetching https://alice:" + urlPass + "@hub.example.com/model",
	} {
		if _, err := lf.WriteString(l + "\n"); err != nil {
			t.Fatal(err)
		}
	}
	lf.Close()

	// Raw run directory files do hold them: the test must be able to fail.
	raw, _ := os.ReadFile(filepath.Join(run, rundir.PlanFile))
	if !bytes.Contains(raw, []byte(planToken)) {
		t.Fatal("the planted plan token is not in the run's plan.toml; the test plants nothing")
	}
	rawCmd, _ := os.ReadFile(filepath.Join(cellDir, rundir.CommandFile))
	if !bytes.Contains(raw, []byte(argvToken)) {
		t.Fatal("the planted argv token is not in the run's plan.toml; the test plants nothing")
	}
	// The run directory's own command.json went through the catalogue when it was written.
	if bytes.Contains(rawCmd, []byte(argvToken)) {
		t.Error("the run directory's command.json holds the argv token")
	}

	out := filepath.Join(t.TempDir(), "b.tar.gz")
	res, err := bundle.Create(context.Background(), run, bundle.Options{Output: out, Env: secretEnv()})
	if err != nil {
		t.Fatal(err)
	}
	files := readArchive(t, out)
	for _, want := range []string{"README.md", "bundle.json", "plan.toml", "cells.json", "manifest.json",
		"cells/000-unknown-model-default-s0-torch-r1/log.txt", "cells/000-unknown-model-default-s0-torch-r1/command.json",
		"cells/000-unknown-model-default-s0-torch-r1/result.json", "cells/000-unknown-model-default-s0-torch-r1/perf.json"} {
		if _, ok := files[want]; !ok {
			t.Errorf("bundle lacks %s", want)
		}
	}
	for name, data := range files {
		for _, s := range allSecrets() {
			js, _ := json.Marshal(s)
			if bytes.Contains(data, []byte(s)) || bytes.Contains(data, js[1:len(js)-1]) {
				t.Errorf("%s still holds the secret %q", name, s)
			}
		}
	}
	// What a bug report needs is kept.
	log := string(files["cells/000-unknown-model-default-s0-torch-r1/log.txt"])
	for _, keep := range []string{"tokenizer_path='Qwen/Qwen-Image'", "max_tokens=4096", "Falling back to diffusers backend", "hub.example.com"} {
		if !strings.Contains(log, keep) {
			t.Errorf("redaction removed %q from the log", keep)
		}
	}
	// The README lists names and kinds, with counts.
	readme := string(files["README.md"])
	for _, want := range []string{"| env | HF_TOKEN |", "| env | DB_PASSWORD |", "| hf-token | hf-token |", "| bearer-token |", "| url-credential |", "| aws-key |", "| plan-pattern | plan pattern 1 |", "## Environment", "runner replay --simulate b.tar.gz", "diffusers-fallback"} {
		if !strings.Contains(readme, want) {
			t.Errorf("README lacks %q", want)
		}
	}
	kinds := map[string]bool{}
	for _, r := range res.Metadata.Redactions {
		kinds[r.Kind] = true
		if r.Count < 1 {
			t.Errorf("redaction %+v has no count", r)
		}
	}
	for _, k := range []string{secrets.KindEnv, secrets.KindHFToken, secrets.KindBearer, secrets.KindURLCreds, secrets.KindAWSKey, secrets.KindPlan, secrets.KindAssignment, secrets.KindFlag} {
		if !kinds[k] {
			t.Errorf("no %s redaction reported: %+v", k, res.Metadata.Redactions)
		}
	}
	// The redacted plan still decodes (replay needs it).
	if _, err := plans.Parse("plan.toml", files["plan.toml"]); err != nil {
		t.Errorf("redacted plan.toml no longer decodes: %v\n%s", err, files["plan.toml"])
	}
	for name, data := range files {
		if strings.HasSuffix(name, ".json") && !json.Valid(data) {
			t.Errorf("%s is no longer valid JSON after redaction", name)
		}
	}
}

func TestIssueBody(t *testing.T) {
	run := simRun(t, secretPlan, secretEnv())
	body, err := bundle.Issue(filepath.Join(run, rundir.CellsDir, "000-unknown-model-default-s0-torch-r1"), bundle.IssueOptions{Env: secretEnv()})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range allSecrets() {
		if strings.Contains(body, s) {
			t.Errorf("issue body holds the secret %q", s)
		}
	}
	for _, want := range []string{"### Describe the bug", "**invalid**", "diffusers-fallback", "Falling back to diffusers backend", "### Reproduction", "```toml", "name = \"leaky\"", "### Environment", "| sglang | 0.5.9-sim", "--model-path acme/unknown-model", "Redacted by runner"} {
		if !strings.Contains(body, want) {
			t.Errorf("issue body lacks %q:\n%s", want, body)
		}
	}
}

func TestBundleCellsAndErrors(t *testing.T) {
	run := simRun(t, `name = "two"
[matrix]
model = ["Qwen/Qwen-Image", "acme/unknown-model"]
prompt = ["a cat"]
num_inference_steps = [3]
`, nil)
	out := filepath.Join(t.TempDir(), "one.tar.gz")
	res, err := bundle.Create(context.Background(), run, bundle.Options{Output: out, Cells: []string{"001-unknown-model-default-s0-none-r1"}})
	if err != nil {
		t.Fatal(err)
	}
	files := readArchive(t, out)
	if _, ok := files["cells/000-qwen-image-default-s0-none-r1/log.txt"]; ok {
		t.Error("--cells 001 bundled cell 000 too")
	}
	if len(res.Metadata.Cells) != 1 || res.Metadata.Cells[0] != "001-unknown-model-default-s0-none-r1" {
		t.Errorf("cells = %v", res.Metadata.Cells)
	}
	// A cell directory selects its own cell.
	res, err = bundle.Create(context.Background(), filepath.Join(run, "cells", "000-qwen-image-default-s0-none-r1"), bundle.Options{Output: out + "2"})
	if err != nil || len(res.Metadata.Cells) != 1 || res.Metadata.Cells[0] != "000-qwen-image-default-s0-none-r1" {
		t.Errorf("cell dir: %v %+v", err, res)
	}
	for _, tc := range []struct {
		src   string
		cells []string
		want  string
	}{
		{t.TempDir(), nil, "has no cells.json"},
		{filepath.Join(run, "nope"), nil, "give a run directory"},
		{run, []string{"007-nothing"}, "the run has no cell 007-nothing; its cells are: 000-qwen-image-default-s0-none-r1, 001-unknown-model-default-s0-none-r1"},
	} {
		_, err := bundle.Create(context.Background(), tc.src, bundle.Options{Output: filepath.Join(t.TempDir(), "x.tar.gz"), Cells: tc.cells})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bundle.Create(%s, %v) = %v, want an error containing %q", tc.src, tc.cells, err, tc.want)
		}
	}
}

func TestBundleMaxSize(t *testing.T) {
	run := simRun(t, `name = "big"
[matrix]
model = ["Qwen/Qwen-Image"]
prompt = ["a cat"]
num_inference_steps = [4]
[profile]
profilers = ["torch"]
`, nil)
	cell := filepath.Join(run, "cells", "000-qwen-image-default-s0-torch-r1")
	// A log of incompressible lines, 1 MiB, so only truncation can make the bundle small.
	var big bytes.Buffer
	seed := uint64(1)
	for big.Len() < 1<<20 {
		seed = seed*6364136223846793005 + 1442695040888963407
		big.WriteString(strings.Repeat(string(rune('a'+seed>>59)), 1))
		for range 60 {
			seed = seed*6364136223846793005 + 1442695040888963407
			big.WriteByte(byte('!' + seed>>58))
		}
		big.WriteByte('\n')
	}
	if err := os.WriteFile(filepath.Join(cell, rundir.LogFile), big.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	full, err := bundle.Create(context.Background(), run, bundle.Options{Output: filepath.Join(dir, "full.tar.gz")})
	if err != nil {
		t.Fatal(err)
	}
	if full.Metadata.Traces != "slim" {
		t.Fatalf("traces = %q, want slim", full.Metadata.Traces)
	}
	// Under the full size by less than the slimmed trace: the traces go first.
	limit := full.Bytes - 4096
	res, err := bundle.Create(context.Background(), run, bundle.Options{Output: filepath.Join(dir, "notrace.tar.gz"), MaxSize: limit})
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes > limit || res.Metadata.Traces != "none" {
		t.Errorf("size %d traces %q, want <= %d and none", res.Bytes, res.Metadata.Traces, limit)
	}
	files := readArchive(t, res.Path)
	if !strings.Contains(string(files["README.md"]), "dropped to stay under --max-size") {
		t.Error("README does not say the trace was dropped")
	}
	if int64(len(files["cells/000-qwen-image-default-s0-torch-r1/log.txt"])) != int64(big.Len()) {
		t.Error("the log was cut although dropping the traces was enough")
	}
	// 300 KiB: only a cut log fits.
	res, err = bundle.Create(context.Background(), run, bundle.Options{Output: filepath.Join(dir, "cut.tar.gz"), MaxSize: 300 << 10})
	if err != nil {
		t.Fatal(err)
	}
	files = readArchive(t, res.Path)
	log := files["cells/000-qwen-image-default-s0-torch-r1/log.txt"]
	if len(log) >= big.Len() || !bytes.Contains(log, []byte("left out to stay under --max-size")) {
		t.Errorf("log not cut (%d bytes)", len(log))
	}
	if !bytes.HasPrefix(big.Bytes(), log[:1000]) || !bytes.HasSuffix(big.Bytes(), log[len(log)-1000:]) {
		t.Error("the cut log does not keep the head and the tail")
	}
	if !strings.Contains(string(files["README.md"]), "cut to its first and last") {
		t.Error("README does not say the log was cut")
	}
	// 20 KiB cannot hold even the cut bundle: a clear error, no file.
	_, err = bundle.Create(context.Background(), run, bundle.Options{Output: filepath.Join(dir, "tiny.tar.gz"), MaxSize: 20 << 10})
	if err == nil || !strings.Contains(err.Error(), "stays over --max-size") || !strings.Contains(err.Error(), "--cells") {
		t.Errorf("err = %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "tiny.tar.gz")); !os.IsNotExist(err) {
		t.Error("an over-size bundle was left behind")
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".*tmp*"))
	if len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestBundleWithTraces(t *testing.T) {
	run := simRun(t, `name = "tr"
[matrix]
model = ["Qwen/Qwen-Image"]
prompt = ["a cat"]
num_inference_steps = [4]
[profile]
profilers = ["torch", "nsys"]
`, nil)
	dir := t.TempDir()
	res, err := bundle.Create(context.Background(), run, bundle.Options{Output: filepath.Join(dir, "t.tar.gz"), WithTraces: true})
	if err != nil {
		t.Fatal(err)
	}
	files := readArchive(t, res.Path)
	var traceName string
	for n := range files {
		if strings.Contains(n, "/traces/") && strings.HasSuffix(n, ".trace.json.gz") {
			traceName = n
		}
	}
	if traceName == "" {
		t.Fatal("no trace in a --with-traces bundle")
	}
	orig, _ := filepath.Glob(filepath.Join(run, "cells", "000-qwen-image-default-s0-torch-r1", "traces", "*.trace.json.gz"))
	f, _ := os.Open(orig[0])
	zr, _ := gzip.NewReader(f)
	want, _ := io.ReadAll(zr)
	f.Close()
	if !bytes.Equal(files[traceName+" (decompressed)"], want) {
		t.Error("the full trace differs from the run's")
	}
	if _, ok := files["cells/001-qwen-image-default-s0-nsys-r1/nsys/report.nsys-rep"]; !ok {
		t.Error("--with-traces left out the nsys report although it holds no secret")
	}
	for _, n := range []string{"report_cuda_gpu_kern_sum.csv", "report_cuda_api_sum.csv", "report_nvtx_sum.csv"} {
		csv := files["cells/001-qwen-image-default-s0-nsys-r1/nsys/"+n]
		if len(csv) == 0 || !bytes.Contains(csv, []byte("Time (%)")) {
			t.Errorf("nsys summary %s missing or without nsys's header", n)
		}
	}
	if _, ok := files["cells/001-qwen-image-default-s0-nsys-r1/nsys/report.sqlite"]; ok {
		t.Error("the whole SQLite export was bundled")
	}
}

func TestBundleNeverFollowsLinksInTheRun(t *testing.T) {
	run := simRun(t, `name = "ln"
[matrix]
model = ["Qwen/Qwen-Image"]
prompt = ["a cat"]
num_inference_steps = [3]
`, nil)
	cell := filepath.Join(run, "cells", "000-qwen-image-default-s0-none-r1")
	secret := filepath.Join(t.TempDir(), "secret.txt")
	os.WriteFile(secret, []byte("TOPSECRET-FILE-CONTENT"), 0o600)
	os.Remove(filepath.Join(cell, rundir.TriageMD))
	if err := os.Symlink(secret, filepath.Join(cell, rundir.TriageMD)); err != nil {
		t.Skip(err)
	}
	res, err := bundle.Create(context.Background(), run, bundle.Options{Output: filepath.Join(t.TempDir(), "l.tar.gz")})
	if err != nil {
		t.Fatal(err)
	}
	for n, d := range readArchive(t, res.Path) {
		if bytes.Contains(d, []byte("TOPSECRET")) {
			t.Errorf("%s: a symlink in the run directory was followed", n)
		}
	}
}

func TestReadmeWorstRegressions(t *testing.T) {
	run := simRun(t, fallbackPlan, nil)
	res := compare.Result{Rows: []compare.Row{
		{Config: "qwen", Metric: "e2e", Unit: "ns", Base: compare.Stat{N: 6, Median: 1e9}, New: compare.Stat{N: 6, Median: 1.2e9}, DeltaPct: 20, Tolerance: "15%", Status: compare.StatusRegression},
		{Config: "qwen", Metric: "stage/DenoisingStage", Unit: "ns", Base: compare.Stat{N: 6, Median: 8e8}, New: compare.Stat{N: 6, Median: 1.2e9}, DeltaPct: 50, Tolerance: "10% or 120ms", Status: compare.StatusRegression},
		{Config: "qwen", Metric: "peak_memory", Unit: "MB", DeltaPct: 90, Status: compare.StatusOK},
	}}
	data, _ := json.Marshal(res)
	os.WriteFile(filepath.Join(run, rundir.CompareFile), data, 0o644)
	os.WriteFile(filepath.Join(run, rundir.CompareMD), []byte("| config | metric |\n"), 0o644)
	out := filepath.Join(t.TempDir(), "c.tar.gz")
	if _, err := bundle.Create(context.Background(), run, bundle.Options{Output: out}); err != nil {
		t.Fatal(err)
	}
	files := readArchive(t, out)
	readme := string(files["README.md"])
	i, j := strings.Index(readme, "| `qwen` | stage/DenoisingStage |"), strings.Index(readme, "| `qwen` | e2e |")
	if i < 0 || j < 0 || i > j {
		t.Errorf("worst regressions missing or not largest first:\n%s", readme)
	}
	if strings.Contains(readme, "| peak_memory |") {
		t.Error("a row that did not regress is listed as a regression")
	}
	if _, ok := files[rundir.CompareFile]; !ok {
		t.Error("compare.json not bundled")
	}
	if _, ok := files[rundir.CompareMD]; !ok {
		t.Error("compare.md not bundled")
	}
}

func TestBundleBigLogIsStreamedAndCut(t *testing.T) {
	run := simRun(t, `name = "biglog"
[matrix]
model = ["Qwen/Qwen-Image"]
prompt = ["a cat"]
num_inference_steps = [3]
`, nil)
	cell := filepath.Join(run, "cells", "000-qwen-image-default-s0-none-r1")
	// 9 MiB (over the in-memory limit), incompressible, with a token in the head and the tail.
	var big bytes.Buffer
	big.WriteString("first line export HF_TOKEN=" + logToken + "\n")
	seed := uint64(7)
	for big.Len() < 9<<20 {
		for range 80 {
			seed = seed*6364136223846793005 + 1442695040888963407
			big.WriteByte(byte('0' + seed>>59))
		}
		big.WriteByte('\n')
	}
	big.WriteString("last line Authorization: Bearer " + bearer + "\n")
	if err := os.WriteFile(filepath.Join(cell, rundir.LogFile), big.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := bundle.Create(context.Background(), run, bundle.Options{Output: filepath.Join(t.TempDir(), "b.tar.gz"), MaxSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	files := readArchive(t, res.Path)
	log := files["cells/000-qwen-image-default-s0-none-r1/log.txt"]
	if !bytes.HasPrefix(log, []byte("first line export HF_TOKEN=<redacted>\n")) || !bytes.HasSuffix(log, []byte("last line Authorization: Bearer <redacted>\n")) {
		t.Errorf("head or tail of the cut log is wrong: %q ... %q", log[:60], log[len(log)-60:])
	}
	if len(log) > 600<<10 {
		t.Errorf("log is %d bytes, want it cut to about 512 KiB", len(log))
	}
	for n, d := range files {
		if bytes.Contains(d, []byte(logToken)) || bytes.Contains(d, []byte(bearer)) {
			t.Errorf("%s holds a secret of the big log", n)
		}
	}
}

func TestBundlePlanThatNoLongerLoads(t *testing.T) {
	run := simRun(t, fallbackPlan, nil)
	// A plan key this runner does not know (as from a newer runner), with a secret beside it.
	os.WriteFile(filepath.Join(run, rundir.PlanFile), []byte(fallbackPlan+"future_key = 1\n[backend]\nenv = { API_TOKEN = \"tok-secret-value\" }\n"), 0o644)
	res, err := bundle.Create(context.Background(), run, bundle.Options{Output: filepath.Join(t.TempDir(), "b.tar.gz")})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Metadata.Warnings) != 1 || !strings.Contains(res.Metadata.Warnings[0], "plan.toml does not load") {
		t.Fatalf("warnings = %v", res.Metadata.Warnings)
	}
	files := readArchive(t, res.Path)
	if !strings.Contains(string(files["README.md"]), "**Warning:** plan.toml does not load") {
		t.Error("README does not warn")
	}
	if bytes.Contains(files["plan.toml"], []byte("tok-secret-value")) {
		t.Error("the built-in patterns did not redact the plan")
	}
}

// A Slurm run's batch scripts (slurm/job-<n>.sbatch, listed in the manifest) are in the bundle;
// a script path in the manifest that leaves the run directory is not followed.
func TestBundleIncludesSlurmScripts(t *testing.T) {
	run := simRun(t, `name = "sl"
[matrix]
model = ["Qwen/Qwen-Image"]
prompt = ["a cat"]
num_inference_steps = [2]
`, nil)
	var m rundir.Manifest
	if err := rundir.ReadJSON(filepath.Join(run, rundir.ManifestFile), &m); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "outside.sbatch")
	for _, f := range []string{filepath.Join(run, "slurm", "job-1.sbatch"), outside} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("#!/bin/bash\n#SBATCH --array=0-0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m.Slurm = []rundir.SlurmJob{{JobID: "7", Script: "slurm/job-1.sbatch", Cells: []string{"x"}}, {JobID: "8", Script: "../" + outside, Cells: []string{"x"}}}
	if err := rundir.WriteJSON(filepath.Join(run, rundir.ManifestFile), &m, nil); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "sl.tar.gz")
	if _, err := bundle.Create(context.Background(), run, bundle.Options{Output: out}); err != nil {
		t.Fatal(err)
	}
	files := readArchive(t, out)
	if !strings.Contains(string(files["slurm/job-1.sbatch"]), "--array=0-0") {
		t.Errorf("slurm/job-1.sbatch missing from the bundle; files: %v", slices.Sorted(maps.Keys(files)))
	}
	for name := range files {
		if strings.Contains(name, "outside") {
			t.Errorf("bundled %s from outside the run directory", name)
		}
	}
}
