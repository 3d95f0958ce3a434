package sglang

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprof/runner/plans"
)

func TestExpectedRanks(t *testing.T) {
	c := plans.Cell{}
	c.Backend.ExtraArgs = []string{"--tp-size", "4", "--num-gpus=2"}
	if n := ExpectedRanks(c, true); n != 4 {
		t.Fatalf("llm ranks %d", n)
	}
	if n := ExpectedRanks(c, false); n != 2 {
		t.Fatalf("diffusion ranks %d", n)
	}
	if n := ExpectedRanks(plans.Cell{}, true); n != 1 {
		t.Fatalf("default ranks %d", n)
	}
}

func writeGz(t *testing.T, path, body string, truncate bool) {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(body))
	zw.Close()
	data := b.Bytes()
	if truncate {
		data = data[:len(data)/2]
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCheckServeTraces(t *testing.T) {
	dir := t.TempDir()
	if _, problems := CheckServeTraces(dir, 1); len(problems) != 1 || !strings.Contains(problems[0], "no *.trace.json.gz") {
		t.Fatalf("empty dir problems %v", problems)
	}
	kernel := `{"traceEvents":[{"ph":"X","cat":"kernel","name":"k"}]}`
	writeGz(t, filepath.Join(dir, "p-1.5-TP-0.trace.json.gz"), kernel, false)
	if names, problems := CheckServeTraces(dir, 1); len(names) != 1 || len(problems) != 0 {
		t.Fatalf("good trace: %v %v", names, problems)
	}
	if _, problems := CheckServeTraces(dir, 2); len(problems) != 1 || !strings.Contains(problems[0], "1 rank(s) found, 2 expected") {
		t.Fatalf("missing rank: %v", problems)
	}
	writeGz(t, filepath.Join(dir, "p-1.5-TP-1.trace.json.gz"), `{"traceEvents":[{"ph":"X","cat":"cpu_op"}]}`, false)
	writeGz(t, filepath.Join(dir, "merged-1.5.trace.json.gz"), kernel, true)
	_, problems := CheckServeTraces(dir, 2)
	joined := strings.Join(problems, "\n")
	if len(problems) != 2 || !strings.Contains(joined, "TP-1.trace.json.gz has no kernel events") || !strings.Contains(joined, "merged-1.5.trace.json.gz: truncated") {
		t.Fatalf("problems %v", problems)
	}
}

func TestStartProfileBody(t *testing.T) {
	c := plans.Cell{ID: "007-x"}
	c.Profile.StartStep, c.Profile.NumSteps, c.Profile.ProfileByStage = -1, 5, true
	b := StartProfileBody(c, "/abs/traces")
	if _, ok := b["start_step"]; ok {
		t.Fatal("start_step -1 must not be sent")
	}
	if b["num_steps"] != 5 || b["output_dir"] != "/abs/traces" || b["profile_prefix"] != "007-x" || b["profile_by_stage"] != true {
		t.Fatalf("body %v", b)
	}
	c.Profile.StartStep = 3
	if StartProfileBody(c, "/t")["start_step"] != 3 {
		t.Fatal("start_step 3 not sent")
	}
}
