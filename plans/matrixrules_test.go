package plans

import (
	"fmt"
	"strings"
	"testing"
)

const rulesBase = `
name = "rules"
[matrix]
model = ["Qwen/Qwen-Image"]
prompt = ["a cat"]
resolution = ["1024x1024", "1328x768"]
num_inference_steps = [8]
repeats = 3
[profile]
profilers = ["none", "torch", "nsys"]
`

func cellIDs(p *Plan) []string {
	var ids []string
	for _, c := range p.Expand() {
		ids = append(ids, c.ID)
	}
	return ids
}

// TestMatrixRulesOneNsysCell: exclude every nsys cell, then include back repeat 1 of one
// resolution: one nsys cell instead of six, every other cell as the full matrix has it, the
// cells numbered in order, and ids and keys as the full matrix gives them (so history and
// compare match them with runs of the full matrix).
func TestMatrixRulesOneNsysCell(t *testing.T) {
	full := mustParse(t, rulesBase)
	p := mustParse(t, rulesBase+`
[[matrix.exclude]]
profiler = "nsys"
[[matrix.include]]
profiler = "nsys"
resolution = "1024x1024"
repeat = 1
`)
	cells := p.Expand()
	if got, want := len(cells), len(full.Expand())-5; got != want {
		t.Fatalf("%d cells, want %d: %v", got, want, cellIDs(p))
	}
	nsys := 0
	keys := map[string]bool{}
	for _, c := range full.Expand() {
		keys[c.Key] = true
	}
	for i, c := range cells {
		if c.Index != i || !strings.HasPrefix(c.ID, fmt.Sprintf("%03d-", i)) {
			t.Errorf("cell %d has index %d and id %s", i, c.Index, c.ID)
		}
		if !keys[c.Key] {
			t.Errorf("cell %s has key %s, which the full matrix does not", c.ID, c.Key)
		}
		if c.Profiler == ProfilerNsys {
			nsys++
			if c.Repeat != 1 || c.Resolution.String() != "1024x1024" {
				t.Errorf("nsys cell %s: repeat %d resolution %v", c.ID, c.Repeat, c.Resolution)
			}
		}
	}
	if nsys != 1 {
		t.Errorf("%d nsys cells, want 1: %v", nsys, cellIDs(p))
	}
	// A preset names the same resolution as its WxH form.
	q := mustParse(t, strings.Replace(rulesBase, `"1328x768"`, `"720p"`, 1)+`
[[matrix.exclude]]
resolution = "1280x720"
profiler = "torch"
`)
	for _, c := range q.Expand() {
		if c.Profiler == ProfilerTorch && c.Resolution.String() == "1280x720" {
			t.Errorf("cell %s survived an exclude of 1280x720 torch cells", c.ID)
		}
	}
}

// TestMatrixRulesRefused: a rule with an unknown key, a value no axis has, a repeat beyond the
// plan's, no key at all, or rules that leave no cell are refused with the key and the fix.
func TestMatrixRulesRefused(t *testing.T) {
	for _, tc := range []struct{ name, rules, want string }{
		{"unknown key", "[[matrix.exclude]]\nprofilr = \"nsys\"\n", `profilr`},
		{"value of no axis", "[[matrix.exclude]]\nprofiler = \"nsy\"\n", `profiler = "nsy" is not a value of the plan's profiler ("none", "torch", "nsys")`},
		{"resolution of no axis", "[[matrix.include]]\nresolution = \"720p\"\n", `resolution = "720p" is not a value`},
		{"repeat out of range", "[[matrix.exclude]]\nrepeat = 4\n", `repeat = 4 is not a repeat of this plan (1 to 3)`},
		{"wrong type", "[[matrix.exclude]]\nrepeat = \"1\"\n", `matrix.exclude.repeat`},
		{"no key", "[[matrix.exclude]]\n", `gives no key, so it matches every cell`},
		{"nothing left", "[[matrix.exclude]]\nmodel = \"Qwen/Qwen-Image\"\n", `the exclude rules leave no cell`},
		{"not an array of tables", "", ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := rulesBase + tc.rules
			if tc.name == "not an array of tables" {
				src = strings.Replace(rulesBase, "repeats = 3", "repeats = 3\nexclude = \"nsys\"", 1)
				tc.want = "[[matrix.exclude]]"
			}
			_, err := Parse("plan.toml", []byte(src))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
}
