package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/bundle"
	"github.com/sglprof/runner/runner/exitcode"
	"github.com/sglprof/runner/runner/secrets"
)

// dataToken is a credential inside a prompt of the dataset; internalName matches the plan's
// [bundle] redact pattern, which applies only when the bundle can load the run's plan.
const (
	dataToken    = "hf_DataTokenEEEEEEEEEEEEEEEEEEEEE"
	internalName = "internal-dataset77"
)

// datasetPlan reads ds1.json from the plan file's directory.
const datasetPlan = `name = "ds"
[backend]
mode = "serve"
model_type = "llm"
[matrix]
model = ["meta-llama/Llama-3.1-8B-Instruct"]
prompt = ["hello"]
input_len = [32]
output_len = [8]
repeats = 2
[load]
requests = 2
dataset = "sharegpt"
dataset_path = "ds1.json"
[bundle]
redact = ["internal-[a-z0-9]+"]
`

// shareGPT is a ShareGPT file of n conversations whose prompts end with extra.
func shareGPT(n int, extra func(i int) string) []byte {
	type turn struct {
		From  string `json:"from"`
		Value string `json:"value"`
	}
	type conv struct {
		ID            string `json:"id"`
		Conversations []turn `json:"conversations"`
	}
	var cs []conv
	for i := range n {
		cs = append(cs, conv{ID: fmt.Sprint("c", i), Conversations: []turn{
			{"human", fmt.Sprintf("Question %d: how does a kettle know when the water boils? %s", i, extra(i))},
			{"gpt", fmt.Sprintf("Answer %d: a bimetallic strip bends with the steam's heat and opens the switch.", i)}}})
	}
	b, _ := json.MarshalIndent(cs, "", " ")
	return b
}

// datasetRun writes the plan and dataset into their own directory, runs it from another
// working directory (the plan named by a relative path) and returns the run directory and the
// dataset's path.
func datasetRun(t *testing.T, dataset []byte) (run, ds string) {
	t.Helper()
	a := t.TempDir()
	ds = filepath.Join(a, "ds1.json")
	if err := os.WriteFile(ds, dataset, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a, "plan.toml"), []byte(datasetPlan), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	rel, err := filepath.Rel(".", filepath.Join(a, "plan.toml"))
	if err != nil {
		rel = filepath.Join(a, "plan.toml")
	}
	p, err := plans.Load(rel)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := Run(context.Background(), p, bundleSimOptions(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	if sum.ExitCode != exitcode.OK {
		t.Fatalf("the run failed: exit %d", sum.ExitCode)
	}
	return sum.RunDir, ds
}

// A relative dataset_path: the bundle holds the run's dataset, redacted with the built-in
// patterns and the plan's [bundle] redact patterns, and its replay reads that copy. A dataset
// over MaxDataset is left out and the bundle says so; its replay reads the file the run
// recorded, or says where it was. (A FIFO in the dataset's place is refused by the plan check's
// and the bundle's regular-file reader.)
func TestBundleCarriesDataset(t *testing.T) {
	run, ds := datasetRun(t, shareGPT(4, func(int) string { return "My token is " + dataToken + " on " + internalName + "." }))
	out := filepath.Join(t.TempDir(), "b.tar.gz")
	res, err := bundle.Create(context.Background(), run, bundle.Options{Output: out})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Metadata.Warnings) > 0 {
		t.Errorf("warnings: %v", res.Metadata.Warnings)
	}
	files := readArchive(t, out)
	got, ok := files["dataset/ds1.json"]
	switch {
	case !ok || res.Metadata.Dataset != "dataset/ds1.json":
		t.Fatalf("the dataset is not bundled (bundle.json dataset %q, omitted %v)", res.Metadata.Dataset, res.Metadata.Omitted)
	case bytes.Contains(got, []byte(dataToken)) || bytes.Contains(got, []byte(internalName)):
		t.Errorf("a secret survived in the bundled dataset:\n%s", got)
	case !bytes.Contains(got, []byte(secrets.Redacted)) || !bytes.Contains(got, []byte("bimetallic strip")):
		t.Errorf("the bundled dataset is not the run's, redacted:\n%s", got)
	}
	for name, b := range files {
		if bytes.Contains(b, []byte(dataToken)) {
			t.Errorf("%s holds the dataset's token", name)
		}
	}

	var buf bytes.Buffer
	opts := replayOpts(t, &buf)
	rep, err := Replay(context.Background(), out, opts)
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, buf.String())
	}
	if rep.ExitCode == exitcode.CellsFailed || len(rep.Cells) != 2 || !rep.Cells[0].VerdictReproduced || !rep.Cells[1].VerdictReproduced {
		t.Errorf("replay: exit %d, cells %+v\n%s", rep.ExitCode, rep.Cells, buf.String())
	}
	cells, err := rundir.ReadCells(rep.RunDir)
	if want := filepath.Join(opts.Output, "bundle", "dataset", "ds1.json"); err != nil || cells.Dataset == nil || cells.Dataset.Path != want {
		t.Errorf("the replay's dataset: %+v %v, want the bundled copy %s", cells, err, want)
	}

	// Over MaxDataset: left out, and said so.
	small := filepath.Join(t.TempDir(), "small.tar.gz")
	res, err = bundle.Create(context.Background(), run, bundle.Options{Output: small, MaxDataset: 100})
	if err != nil {
		t.Fatal(err)
	}
	files = readArchive(t, small)
	if _, ok := files["dataset/ds1.json"]; ok || res.Metadata.Dataset != "" {
		t.Error("a dataset over MaxDataset was bundled")
	}
	if !hasOmission(res.Metadata.Omitted, "dataset/ds1.json", "over --max-dataset-size 100 B") ||
		!strings.Contains(string(files[bundle.ReadmeFile]), "over --max-dataset-size") {
		t.Errorf("the bundle does not say the dataset was left out: %+v", res.Metadata.Omitted)
	}
	// Its replay reads the recorded file while it is there, and otherwise says where it was.
	buf.Reset()
	if _, err := Replay(context.Background(), small, replayOpts(t, &buf)); err != nil || !strings.Contains(buf.String(), "reading "+ds+", the file the run recorded") {
		t.Errorf("replay without the bundled dataset: %v\n%s", err, buf.String())
	}
	if err := os.Rename(ds, ds+".moved"); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	_, err = Replay(context.Background(), small, replayOpts(t, &buf))
	var ue *exitcode.UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "the bundle left out the dataset") || !strings.Contains(err.Error(), ds+" is not here") {
		t.Errorf("replay without any dataset: %v", err)
	}
}

// The dataset is the last thing --max-size drops: after the traces and the logs' middles.
func TestBundleMaxSizeDropsDatasetLast(t *testing.T) {
	// Prompts of random letters: about 400 KiB that compress to no less than 250 KiB.
	rng := rand.New(rand.NewPCG(1, 2))
	run, _ := datasetRun(t, shareGPT(400, func(int) string {
		b := make([]byte, 1000)
		for i := range b {
			b[i] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[rng.IntN(62)]
		}
		return string(b)
	}))
	res, err := bundle.Create(context.Background(), run, bundle.Options{Output: filepath.Join(t.TempDir(), "b.tar.gz"), MaxSize: 100 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if res.Metadata.Dataset != "" || !hasOmission(res.Metadata.Omitted, "dataset/ds1.json", "dropped to stay under --max-size") {
		t.Errorf("dataset %q, omitted %+v; want it dropped for --max-size", res.Metadata.Dataset, res.Metadata.Omitted)
	}
}

func hasOmission(os []bundle.Omission, path, reason string) bool {
	for _, o := range os {
		if o.Path == path && strings.Contains(o.Reason, reason) {
			return true
		}
	}
	return false
}
