package runner

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/secrets"
)

// fakeSecret is a fresh value of no known credential shape: only the run's redactor, which
// knows the variables it was given and the plan's patterns, can recognise it.
func fakeSecret(t *testing.T) string {
	t.Helper()
	return "zq" + rand.Text()[:20]
}

// The run directory's files go through the run's redactor: the plan's [bundle] redact
// patterns, the values of secret-named variables of the plan's [backend.env] and of the
// runner's environment, wherever they appear in free text: a check_env that
// prints HF_TOKEN's value, a plan value passed as an innocent argument.
func TestRunDirRedactsRunSecrets(t *testing.T) {
	hf, wandb, planTok, pattern := fakeSecret(t), fakeSecret(t), fakeSecret(t), "corpint-"+fakeSecret(t)
	opts := simOptions(t)
	opts.Env = append(opts.Env, "HF_TOKEN="+hf, "WANDB_API_KEY="+wandb)
	newSMI(t, &opts, nil, false)
	fakeVenv(t, &opts, `echo "sglang: 0.4.6"; echo "token in free text: $HF_TOKEN"; echo "wandb key: $WANDB_API_KEY"`, torchVersions)
	plan := `name = "redact"
[backend]
env = { SERVICE_TOKEN = "` + planTok + `" }
extra_args = ["--negative-prompt", "` + planTok + ` ` + pattern + `"]
[bundle]
redact = ["corpint-[A-Za-z0-9]+"]
[matrix]
model = ["Qwen/Qwen-Image"]
prompt = ["a cat"]
num_inference_steps = [4]
`
	sum, err := Run(t.Context(), testPlan(t, plan), opts)
	if err != nil {
		t.Fatal(err)
	}
	man, err := os.ReadFile(filepath.Join(sum.RunDir, rundir.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	// The stand-in ran and printed in free text: the test can fail.
	if !bytes.Contains(man, []byte("token in free text: "+secrets.Redacted)) || !bytes.Contains(man, []byte("wandb key: "+secrets.Redacted)) {
		t.Errorf("manifest.json lacks check_env's redacted lines:\n%s", man)
	}
	files := map[string][]byte{rundir.ManifestFile: man}
	files[rundir.CellsFile], _ = os.ReadFile(filepath.Join(sum.RunDir, rundir.CellsFile))
	cmds, _ := filepath.Glob(filepath.Join(sum.RunDir, rundir.CellsDir, "*", rundir.CommandFile))
	if len(cmds) == 0 {
		t.Fatal("no command.json")
	}
	for _, c := range cmds {
		files[c], _ = os.ReadFile(c)
	}
	for name, data := range files {
		for what, v := range map[string]string{"HF_TOKEN of the environment": hf, "WANDB_API_KEY of the environment": wandb, "SERVICE_TOKEN of [backend.env]": planTok, "a [bundle] redact pattern": pattern} {
			if bytes.Contains(data, []byte(v)) {
				t.Errorf("%s survives in %s", what, name)
			}
		}
	}
}

// TestRunDirKeepsNonSecretNames: variables whose names only contain a marker (TOKENIZER_PATH,
// MAX_TOKENS) are not secrets, so their values, which are also the model path and a count,
// are kept in cells.json and command.json (a redacted --model-path broke replay).
func TestRunDirKeepsNonSecretNames(t *testing.T) {
	opts := simOptions(t)
	opts.Env = append(opts.Env, "MAX_TOKENS=131072")
	plan := `name = "keep"
[backend]
env = { TOKENIZER_PATH = "Qwen/Qwen-Image", MAX_NEW_TOKENS = "4096" }
[matrix]
model = ["Qwen/Qwen-Image"]
prompt = ["a cat"]
num_inference_steps = [4]
`
	sum, err := Run(t.Context(), testPlan(t, plan), opts)
	if err != nil {
		t.Fatal(err)
	}
	cells, err := os.ReadFile(filepath.Join(sum.RunDir, rundir.CellsFile))
	if err != nil {
		t.Fatal(err)
	}
	cmds, _ := filepath.Glob(filepath.Join(sum.RunDir, rundir.CellsDir, "*", rundir.CommandFile))
	if len(cmds) == 0 {
		t.Fatal("no command.json")
	}
	cmd, _ := os.ReadFile(cmds[0])
	for name, data := range map[string][]byte{"cells.json": cells, "command.json": cmd} {
		if bytes.Contains(data, []byte(secrets.Redacted)) {
			t.Errorf("%s redacts something in a run without secrets:\n%s", name, data)
		}
		if !bytes.Contains(data, []byte("Qwen/Qwen-Image")) {
			t.Errorf("%s lacks the model path", name)
		}
	}
	if !bytes.Contains(cells, []byte("4096")) {
		t.Error("cells.json lacks MAX_NEW_TOKENS's value")
	}
}
