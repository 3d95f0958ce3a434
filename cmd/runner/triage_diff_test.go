package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// oracleOp is what the independent count keeps of a trace: per GPU op name, the launches and
// the summed duration in ns, on the device with the most GPU time.
type oracleOp struct {
	count int
	ns    int64
}

// kernelOracle reads a Kineto trace with encoding/json alone (no code of the runner's) and
// sums the GPU ops (kernels, memcpys, memsets) by name on the busiest device, naming them as
// triage's canonical names do for these traces: whitespace collapsed and the trailing C++
// parameter list dropped (not for Memcpy/Memset, whose parentheses name the direction).
func kernelOracle(t *testing.T, path string) map[string]oracleOp {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) > 2 && raw[0] == 0x1f && raw[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		if raw, err = io.ReadAll(zr); err != nil {
			t.Fatal(err)
		}
	}
	var doc struct {
		TraceEvents []struct {
			Ph   string          `json:"ph"`
			Cat  string          `json:"cat"`
			Name string          `json:"name"`
			Dur  json.Number     `json:"dur"`
			Args json.RawMessage `json:"args"`
		} `json:"traceEvents"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	byDev := map[int64]map[string]oracleOp{}
	devNS := map[int64]int64{}
	for _, e := range doc.TraceEvents {
		switch strings.ToLower(e.Cat) {
		case "kernel", "gpu_memcpy", "gpu_memset":
		default:
			continue
		}
		if e.Ph != "X" {
			continue
		}
		var args struct {
			Device int64 `json:"device"`
		}
		_ = json.Unmarshal(e.Args, &args)
		r, ok := new(big.Rat).SetString(string(e.Dur))
		if !ok {
			t.Fatalf("%s: dur %q", path, e.Dur)
		}
		ns, _ := new(big.Float).SetRat(r.Mul(r, big.NewRat(1000, 1))).Float64()
		d := int64(math.Round(ns))
		name := oracleCanon(e.Name)
		if byDev[args.Device] == nil {
			byDev[args.Device] = map[string]oracleOp{}
		}
		o := byDev[args.Device][name]
		o.count++
		o.ns += d
		byDev[args.Device][name] = o
		devNS[args.Device] += d
	}
	best, bestNS := int64(-1), int64(-1)
	for dev, ns := range devNS {
		if ns > bestNS {
			best, bestNS = dev, ns
		}
	}
	return byDev[best]
}

func oracleCanon(name string) string {
	s := strings.Join(strings.Fields(name), " ")
	if strings.HasPrefix(s, "Memcpy ") || strings.HasPrefix(s, "Memset ") || !strings.HasSuffix(s, ")") {
		return s
	}
	depth := 0
	for i := len(s) - 1; i >= 0; i-- {
		switch s[i] {
		case ')':
			depth++
		case '(':
			depth--
			if depth == 0 {
				return strings.TrimSpace(s[:i])
			}
		}
	}
	return s
}

// perturb writes a copy of a Kineto trace in which every launch of the op named slow lasts
// 1.3 times as long (exact decimal arithmetic) and every launch of gone is dropped.
func perturb(t *testing.T, src, dst, slow, gone string) {
	t.Helper()
	raw, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(zr)
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	evs := doc["traceEvents"].([]any)
	kept := evs[:0]
	var slowed, dropped int
	for _, e := range evs {
		ev, _ := e.(map[string]any)
		cat, _ := ev["cat"].(string)
		name, _ := ev["name"].(string)
		if cat == "kernel" && ev["ph"] == "X" {
			switch oracleCanon(name) {
			case gone:
				dropped++
				continue
			case slow:
				r, _ := new(big.Rat).SetString(string(ev["dur"].(json.Number)))
				ev["dur"] = json.Number(r.Mul(r, big.NewRat(13, 10)).FloatString(3))
				slowed++
			}
		}
		kept = append(kept, e)
	}
	if slowed == 0 || dropped == 0 {
		t.Fatalf("perturb: slowed %d, dropped %d launches; pick names the trace has", slowed, dropped)
	}
	doc["traceEvents"] = kept
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

type diffJSON struct {
	Diff struct {
		Stages []struct {
			Stage            string  `json:"stage"`
			BaseKernelTimeUS float64 `json:"base_kernel_time_us"`
			NewKernelTimeUS  float64 `json:"new_kernel_time_us"`
			Kernels          []struct {
				Name        string  `json:"name"`
				BaseName    string  `json:"base_name"`
				BaseTotalUS float64 `json:"base_total_us"`
				NewTotalUS  float64 `json:"new_total_us"`
				BaseCount   int     `json:"base_count"`
				NewCount    int     `json:"new_count"`
				DeltaUS     float64 `json:"delta_us"`
				Status      string  `json:"status"`
			} `json:"kernels"`
		} `json:"stages"`
	} `json:"diff"`
}

// runner triage --diff A B --format json on real public traces: every kernel's base and new
// totals and launch counts equal an independent count of each file, and the stage totals are
// the sums of the kernel totals. Two pairs: two different real traces (HTA's DDP and CUDA-graph
// A100 traces), and TraceLens's MI300X decode step against a copy with its largest kernel 30 %
// slower and one kernel gone.
func TestTriageDiffFixturesOracle(t *testing.T) {
	dir := fixturesDir()
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("the real traces live in ../shared/fixtures beside the checkout (%v)", err)
	}
	mi := filepath.Join(dir, "tracelens-mi300x-sglang-qwen3-8b-decode-hipgraph.json.gz")
	// The MI300X step's largest kernel and a small one, by the oracle itself.
	miOps := kernelOracle(t, mi)
	var big, small string
	for n, o := range miOps {
		if strings.HasPrefix(n, "Memcpy") {
			continue
		}
		if big == "" || o.ns > miOps[big].ns {
			big = n
		}
		if small == "" || o.ns < miOps[small].ns {
			small = n
		}
	}
	perturbed := filepath.Join(t.TempDir(), "mi300x-slow.json")
	perturb(t, mi, perturbed, big, small)

	for _, c := range []struct{ name, base, cur string }{
		{"two-real-traces", filepath.Join(dir, "hta-a100-ddp-nccl-rank0.json.gz"), filepath.Join(dir, "hta-a100-cudagraph-multistream-rank0.json.gz")},
		{"perturbed", mi, perturbed},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run([]string{"runner", "triage", "--diff", c.base, c.cur, "--format", "json"}, stdio{in: strings.NewReader(""), out: &out, err: &errb}); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			var d diffJSON
			if err := json.Unmarshal(out.Bytes(), &d); err != nil {
				t.Fatal(err)
			}
			want := [2]map[string]oracleOp{kernelOracle(t, c.base), kernelOracle(t, c.cur)}
			got := [2]map[string]oracleOp{{}, {}}
			ns := func(us float64) int64 { return int64(math.Round(us * 1e3)) }
			for _, s := range d.Diff.Stages {
				var stage [2]int64
				for _, k := range s.Kernels {
					bname := k.Name
					if k.BaseName != "" {
						bname = k.BaseName
					}
					for side, name := range [2]string{bname, k.Name} {
						count, total := k.BaseCount, k.BaseTotalUS
						if side == 1 {
							count, total = k.NewCount, k.NewTotalUS
						}
						if count == 0 {
							continue
						}
						o := got[side][name]
						o.count += count
						o.ns += ns(total)
						got[side][name] = o
						stage[side] += ns(total)
					}
				}
				if stage[0] != ns(s.BaseKernelTimeUS) || stage[1] != ns(s.NewKernelTimeUS) {
					t.Errorf("stage %s: kernels sum to %d / %d ns, the stage totals are %v / %v µs", s.Stage, stage[0], stage[1], s.BaseKernelTimeUS, s.NewKernelTimeUS)
				}
			}
			for side, label := range [2]string{"base", "new"} {
				if len(got[side]) != len(want[side]) {
					t.Errorf("%s: the diff has %d kernel names, the independent count %d", label, len(got[side]), len(want[side]))
				}
				for name, w := range want[side] {
					if g := got[side][name]; g != w {
						t.Errorf("%s kernel %q: diff says %d launches, %d ns; independent count %d launches, %d ns", label, name, g.count, g.ns, w.count, w.ns)
					}
				}
			}
			if c.name == "perturbed" {
				var bigRow, smallRow bool
				for _, s := range d.Diff.Stages {
					for _, k := range s.Kernels {
						switch k.Name {
						case big:
							bigRow = true
							if r := k.NewTotalUS / k.BaseTotalUS; k.Status != "changed" || k.BaseCount != k.NewCount || math.Abs(r-1.3) > 1e-6 {
								t.Errorf("slowed kernel: %+v (ratio %v), want changed by 1.3 with the same launches", k, r)
							}
						case small:
							smallRow = true
							if k.Status != "removed" {
								t.Errorf("dropped kernel: %+v, want removed", k)
							}
						}
					}
				}
				if !bigRow || !smallRow {
					t.Errorf("slowed kernel listed: %v, dropped kernel listed: %v", bigRow, smallRow)
				}
			}
		})
	}
}

// kernelshift FILE CATEGORY MIN MAX: in the compare JSON FILE, every kernel of category
// CATEGORY in every stage of every kernel_diff that ran on both sides changed its total time by
// MIN to MAX percent with the same launch count, and there is at least one such kernel.
func cmdKernelShift(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 4 {
		ts.Fatalf("usage: kernelshift FILE CATEGORY MIN MAX")
	}
	lo, err1 := strconv.ParseFloat(args[2], 64)
	hi, err2 := strconv.ParseFloat(args[3], 64)
	if err1 != nil || err2 != nil {
		ts.Fatalf("kernelshift: MIN and MAX are percentages")
	}
	var res struct {
		KernelDiff []struct {
			Config string `json:"config"`
			Diff   *struct {
				Stages []struct {
					Stage   string `json:"stage"`
					Kernels []struct {
						Name        string  `json:"name"`
						Category    string  `json:"category"`
						BaseTotalUS float64 `json:"base_total_us"`
						NewTotalUS  float64 `json:"new_total_us"`
						BaseCount   int     `json:"base_count"`
						NewCount    int     `json:"new_count"`
					} `json:"kernels"`
				} `json:"stages"`
			} `json:"diff"`
		} `json:"kernel_diff"`
	}
	data, err := os.ReadFile(ts.MkAbs(args[0]))
	if err != nil {
		ts.Fatalf("kernelshift: %v", err)
	}
	if err := json.Unmarshal(data, &res); err != nil {
		ts.Fatalf("kernelshift: %s: %v", args[0], err)
	}
	n := 0
	for _, kd := range res.KernelDiff {
		if kd.Diff == nil {
			continue
		}
		for _, s := range kd.Diff.Stages {
			for _, k := range s.Kernels {
				if k.Category != args[1] || k.BaseCount == 0 || k.NewCount == 0 {
					continue
				}
				n++
				p := (k.NewTotalUS/k.BaseTotalUS - 1) * 100
				if p < lo || p > hi || k.BaseCount != k.NewCount {
					ts.Fatalf("kernelshift: %s %s %s: %+.2f%% (want %v..%v), launches %d → %d", kd.Config, s.Stage, k.Name, p, lo, hi, k.BaseCount, k.NewCount)
				}
				ts.Logf("%s %s: %+.2f%%, launches %d", s.Stage, k.Name, p, k.NewCount)
			}
		}
	}
	if n == 0 {
		ts.Fatalf("kernelshift: no %s kernel on both sides of a kernel diff in %s", args[1], args[0])
	}
}
