package plans

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func hash8(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:8]
}

// checkUnique asserts ids are unique, and also unique without their index prefix: the rest of
// the id alone must tell cells apart (that is what the -m, -p and -st parts are for).
func checkUnique(t *testing.T, cells []Cell) {
	t.Helper()
	ids := map[string]bool{}
	rest := map[string]bool{}
	for i, c := range cells {
		if c.Index != i {
			t.Errorf("cell %d has Index %d", i, c.Index)
		}
		if ids[c.ID] {
			t.Errorf("duplicate id %q", c.ID)
		}
		ids[c.ID] = true
		_, r, _ := strings.Cut(c.ID, "-")
		if rest[r] {
			t.Errorf("two cells differ only by index: %q", c.ID)
		}
		rest[r] = true
	}
}

func ids(cells []Cell) []string {
	out := make([]string, len(cells))
	for i, c := range cells {
		out[i] = c.ID
	}
	return out
}

func TestExpandDesignExample(t *testing.T) {
	p, err := Load("examples/qwen-image.toml")
	if err != nil {
		t.Fatal(err)
	}
	cells := p.Expand()
	// 1 model x 1 prompt x 2 resolutions x 1 steps x 1 seed x 3 profilers x 3 repeats
	if len(cells) != 18 {
		t.Fatalf("got %d cells, want 18", len(cells))
	}
	want := []string{
		"000-qwen-image-1024x1024-s0-none-r1",
		"001-qwen-image-1024x1024-s0-none-r2",
		"002-qwen-image-1024x1024-s0-none-r3",
		"003-qwen-image-1024x1024-s0-torch-r1",
		"004-qwen-image-1024x1024-s0-torch-r2",
		"005-qwen-image-1024x1024-s0-torch-r3",
		"006-qwen-image-1024x1024-s0-nsys-r1",
	}
	if d := cmp.Diff(want, ids(cells)[:len(want)]); d != "" {
		t.Errorf("ids (-want +got):\n%s", d)
	}
	if last := cells[17].ID; last != "017-qwen-image-1328x768-s0-nsys-r3" {
		t.Errorf("last id = %q", last)
	}
	c := cells[4]
	if c.Model != "Qwen/Qwen-Image" || c.Resolution != (Resolution{Width: 1024, Height: 1024}) || c.Steps != 50 ||
		c.Seed != 0 || c.Profiler != "torch" || c.Repeat != 2 || c.Prompt != "A Logo With Bold Large Text: SGL Diffusion" {
		t.Errorf("cell 4 = %+v", c)
	}
	wantKey := "qwen-image/1024x1024/50st/s0/p" + hash8(c.Prompt)
	for _, i := range []int{0, 4, 8} {
		if cells[i].Key != wantKey {
			t.Errorf("cell %d key = %q, want %q (profiler and repeat must not change the key)", i, cells[i].Key, wantKey)
		}
	}
	if cells[9].Key == wantKey {
		t.Errorf("different resolutions share key %q", wantKey)
	}
	// Every cell carries the plan's settings.
	if c.Backend.Timeout.Duration != 20*time.Minute || c.Backend.Env["SGLANG_DIFFUSION_SYNC_STAGE_PROFILING"] != "1" ||
		strings.Join(c.Backend.ExtraArgs, " ") != "--backend sglang" || c.NSys.Delay.Duration != 10*time.Second ||
		c.Profile.NumProfiledTimesteps != 5 || c.Gate.DiffusersFallback != "fail" {
		t.Errorf("cell settings not copied: %+v", c)
	}
}

func TestExpandOrderAndOptionalParts(t *testing.T) {
	p := mustParse(t, `name = "t"
[matrix]
model = ["Qwen/Qwen-Image", "black-forest-labs/FLUX.1-dev"]
prompt = ["a", "b"]
resolution = ["1024x1024", "720p"]
num_inference_steps = [20, 50]
seed = [0, 1]
repeats = 2
[profile]
profilers = ["none", "torch"]
`)
	cells := p.Expand()
	if len(cells) != 2*2*2*2*2*2*2 {
		t.Fatalf("got %d cells", len(cells))
	}
	wantFirst := []string{
		"000-qwen-image-1024x1024-20st-p0-s0-none-r1",
		"001-qwen-image-1024x1024-20st-p0-s0-none-r2",
		"002-qwen-image-1024x1024-20st-p0-s0-torch-r1",
		"003-qwen-image-1024x1024-20st-p0-s0-torch-r2",
		"004-qwen-image-1024x1024-20st-p0-s1-none-r1",
	}
	if d := cmp.Diff(wantFirst, ids(cells)[:5]); d != "" {
		t.Errorf("order (-want +got):\n%s", d)
	}
	// Outer axes: steps change every 8 cells, resolution every 16, prompt every 32, model every 64.
	for _, x := range []struct {
		i  int
		id string
	}{
		{8, "008-qwen-image-1024x1024-50st-p0-s0-none-r1"},
		{16, "016-qwen-image-720p-20st-p0-s0-none-r1"},
		{32, "032-qwen-image-1024x1024-20st-p1-s0-none-r1"},
		{64, "064-flux-1-dev-1024x1024-20st-p0-s0-none-r1"},
		{127, "127-flux-1-dev-720p-50st-p1-s1-torch-r2"},
	} {
		if cells[x.i].ID != x.id {
			t.Errorf("cell %d = %q, want %q", x.i, cells[x.i].ID, x.id)
		}
	}
	if k := cells[16].Key; k != "qwen-image/1280x720/20st/s0/p"+hash8("a") {
		t.Errorf("preset key = %q (keys use the size, not the preset name)", k)
	}
	checkUnique(t, cells)
	keys := map[string]int{}
	for _, c := range cells {
		keys[c.Key]++
	}
	if len(keys) != 32 {
		t.Errorf("got %d distinct keys, want 32 (model x prompt x res x steps x seed)", len(keys))
	}
	for k, n := range keys {
		if n != 4 {
			t.Errorf("key %q has %d cells, want 4 (profilers x repeats)", k, n)
		}
	}
}

func TestIDsStableAcrossRereads(t *testing.T) {
	src := `name = "t"
[matrix]
model = ["Qwen/Qwen-Image", "Tongyi-MAI/Z-Image-Turbo"]
prompt = ["x", "y"]
seed = [3, 1, 2]
[profile]
profilers = ["torch", "none"]
`
	a := mustParse(t, src).Expand()
	// Same plan written differently: comments, spacing, key order, quoting.
	b := mustParse(t, `name = "t" # re-formatted
[profile]
profilers = [ "torch",   "none" ]   # comment

[matrix]
seed = [3,
  1, 2]
prompt = ['x', 'y']
model = ["Qwen/Qwen-Image", "Tongyi-MAI/Z-Image-Turbo"]
`).Expand()
	for i := 0; i < 5; i++ {
		c := mustParse(t, src).Expand()
		if d := cmp.Diff(a, c); d != "" {
			t.Fatalf("re-read %d differs (-first +again):\n%s", i, d)
		}
	}
	if d := cmp.Diff(a, b); d != "" {
		t.Errorf("re-formatted plan gives other cells (-a +b):\n%s", d)
	}
	if a[0].ID != "000-qwen-image-default-p0-s3-torch-r1" {
		t.Errorf("first id = %q", a[0].ID)
	}
	checkUnique(t, a)
	// Keys are stable across plans: the same configuration in another plan has the same key.
	other := mustParse(t, `name = "other"
[matrix]
model = ["Qwen/Qwen-Image"]
prompt = ["y"]
seed = [1]
`).Expand()
	found := false
	for _, c := range a {
		if c.Key == other[0].Key {
			found = true
		}
	}
	if !found {
		t.Errorf("key %q of the same configuration not found in the first plan", other[0].Key)
	}
}

func TestModelSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Qwen/Qwen-Image":                  "qwen-image",
		"black-forest-labs/FLUX.1-dev":     "flux-1-dev",
		"Wan-AI/Wan2.1-T2V-1.3B-Diffusers": "wan2-1-t2v-1-3b-diffusers",
		"/data/models/My Model__v2/":       "my-model-v2",
		`C:\models\Z-Image`:                "z-image",
		"--weird--":                        "weird",
		"雪":                                "model",
		"":                                 "model",
		strings.Repeat("a", 100):           strings.Repeat("a", 48),
	} {
		if got := ModelSlug(in); got != want {
			t.Errorf("ModelSlug(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSharedSlugsGetModelIndex(t *testing.T) {
	p := mustParse(t, `name = "t"
[matrix]
model = ["Qwen/Qwen-Image", "/local/qwen-image", "black-forest-labs/FLUX.1-dev"]
prompt = ["p"]
`)
	cells := p.Expand()
	got := ids(cells)
	want := []string{
		"000-qwen-image-m0-default-s0-none-r1",
		"001-qwen-image-m1-default-s0-none-r1",
		"002-flux-1-dev-default-s0-none-r1",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ids (-want +got):\n%s", d)
	}
	if cells[0].Key == cells[1].Key {
		t.Errorf("two models share key %q", cells[0].Key)
	}
}

// Cells are self-contained: changing one must not change the plan or another cell.
func TestCellsAreIndependentCopies(t *testing.T) {
	p := mustParse(t, minimal+"seed = [0, 1]\n[backend]\nenv = { A = \"1\" }\nextra_args = [\"--x\"]\n")
	cells := p.Expand()
	cells[0].Backend.Env["A"] = "changed"
	cells[0].Backend.ExtraArgs[0] = "changed"
	cells[0].Backend.Command[0] = "changed"
	cells[0].Profile.Profilers[0] = "changed"
	cells[0].NSys.Trace[0] = "changed"
	if p.Backend.Env["A"] != "1" || cells[1].Backend.Env["A"] != "1" || cells[1].Backend.ExtraArgs[0] != "--x" ||
		p.Backend.Command[0] != "sglang" || p.Profile.Profilers[0] != "none" || cells[1].NSys.Trace[0] != "cuda" {
		t.Errorf("cells share memory with the plan or each other")
	}
}

// cells.json is written by the runner and read back by --resume: it must round-trip exactly,
// durations included (as strings).
func TestCellsJSONRoundTrip(t *testing.T) {
	p, err := Load("examples/full.toml")
	if err != nil {
		t.Fatal(err)
	}
	cells := p.Expand()
	data, err := json.MarshalIndent(cells, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"timeout": "10m0s"`) || !strings.Contains(string(data), `"delay": "1s"`) {
		t.Errorf("durations are not written as strings:\n%s", data[:min(len(data), 2000)])
	}
	var back []Cell
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(cells, back); d != "" {
		t.Errorf("round trip (-want +got):\n%s", d)
	}
}

func TestDurationJSON(t *testing.T) {
	for _, s := range []string{`"30s"`, `"1h30m0s"`, `"0s"`, `"250ms"`} {
		var d Duration
		if err := json.Unmarshal([]byte(s), &d); err != nil {
			t.Errorf("%s: %v", s, err)
			continue
		}
		b, _ := json.Marshal(d)
		if string(b) != s {
			t.Errorf("%s round-trips to %s", s, b)
		}
	}
	var d Duration
	if err := json.Unmarshal([]byte(`""`), &d); err != nil || d.Duration != 0 {
		t.Errorf(`"" = %v, %v`, d, err)
	}
	for _, bad := range []string{`30`, `"30"`, `"abc"`, `null1`} {
		if err := json.Unmarshal([]byte(bad), &d); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
