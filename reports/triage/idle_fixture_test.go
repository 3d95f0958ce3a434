package triage

import (
	"context"
	"math"
	"os"
	"sort"
	"strings"
	"testing"
)

// rawIdle is an independent idle breakdown of one device of a Kineto trace, computed straight
// from the raw JSON events (no reader, no linking, float µs): sort the device's GPU ops by
// start, merge them into busy intervals, and classify each gap by the earliest launch call
// (runtime event of the same correlation id) among all ops starting at its end.
type rawIdle struct {
	window, busy, host, kern, other float64 // µs
}

func rawIdleOf(t *testing.T, path string, device int) rawIdle {
	t.Helper()
	var doc struct {
		TraceEvents []struct {
			Ph   string  `json:"ph"`
			Cat  string  `json:"cat"`
			Name string  `json:"name"`
			TS   float64 `json:"ts"`
			Dur  float64 `json:"dur"`
			Args struct {
				Device      *int   `json:"device"`
				Correlation *int64 `json:"correlation"`
			} `json:"args"`
		} `json:"traceEvents"`
	}
	decodeGzipJSON(t, path, &doc)
	type op struct {
		s, e float64
		corr int64
	}
	launch := map[int64]float64{}
	var ops []op
	for _, e := range doc.TraceEvents {
		if e.Ph != "X" {
			continue
		}
		a := e.Args
		switch e.Cat {
		case "cuda_runtime", "cuda_driver":
			if a.Correlation != nil {
				if l, ok := launch[*a.Correlation]; !ok || e.TS < l {
					launch[*a.Correlation] = e.TS
				}
			}
		case "kernel", "gpu_memcpy", "gpu_memset":
			if a.Device != nil && *a.Device == device && e.Dur >= 0 {
				c := int64(-1)
				if a.Correlation != nil {
					c = *a.Correlation
				}
				ops = append(ops, op{e.TS, e.TS + e.Dur, c})
			}
		}
	}
	if len(ops) == 0 {
		t.Fatalf("%s: no GPU ops on device %d", path, device)
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].s < ops[j].s })
	// earliest launch among the ops starting at each time
	first := map[float64]float64{}
	for _, o := range ops {
		if o.e <= o.s {
			continue
		}
		l, ok := launch[o.corr]
		if !ok {
			l = math.Inf(1)
		}
		if v, seen := first[o.s]; !seen || l < v {
			first[o.s] = l
		}
	}
	var r rawIdle
	lo, hi := ops[0].s, ops[0].e
	for _, o := range ops {
		hi = math.Max(hi, o.e)
	}
	r.window = hi - lo
	reach := lo
	for _, o := range ops {
		if o.e <= o.s {
			continue
		}
		if o.s > reach {
			g := o.s - reach
			switch {
			case first[o.s] > reach && !math.IsInf(first[o.s], 1):
				r.host += g
			case g < float64(KernelWaitThresholdNS)/1e3:
				r.kern += g
			default:
				r.other += g
			}
			r.busy += o.e - o.s
			reach = o.e
			continue
		}
		if o.e > reach {
			r.busy += o.e - reach
			reach = o.e
		}
	}
	r.other += hi - reach
	return r
}

// TestIdleMatchesRawSweep: on the real Kineto fixtures, the idle breakdown of the whole device
// (one stage) equals the raw-event computation above within 0.1 % of the window (busy) or of
// the idle time (its parts), and its three parts sum to window − busy. The 25 MB CUDA-graph
// fixture takes 3.5 s to decode with encoding/json, so it runs only with TRIAGE_ALL_FIXTURES=1
// (it matched to the ns when added: docs/triage.md).
func TestIdleMatchesRawSweep(t *testing.T) {
	names := []string{
		"tracelens-mi300x-sglang-qwen3-8b-decode-hipgraph.json.gz",
		"hta-a100-ddp-nccl-rank0.json.gz",
	}
	if os.Getenv("TRIAGE_ALL_FIXTURES") != "" {
		names = append(names, "hta-a100-cudagraph-multistream-rank0.json.gz")
	}
	for _, name := range names {
		t.Run(strings.SplitN(name, "-", 3)[1], func(t *testing.T) {
			p := fixture(t, name)
			in := Inputs{Files: []Input{{Path: p, Stage: "all", Rank: NoRank}}}
			rep, err := Analyze(context.Background(), in, Options{Open: openKineto})
			if err != nil {
				t.Fatal(err)
			}
			s := rep.Stages[0]
			if s.Idle == nil {
				t.Fatal("no idle breakdown")
			}
			id := s.Idle
			idle := id.WindowUS - id.BusyUS
			if sum := id.HostWaitUS + id.KernelWaitUS + id.OtherUS; math.Abs(sum-idle) > 0.001*idle {
				t.Errorf("parts sum to %.3f µs, window − busy is %.3f µs", sum, idle)
			}
			want := rawIdleOf(t, p, rep.Inputs[0].Device)
			t.Logf("product: window %.3f busy %.3f host %.3f kernel %.3f other %.3f µs", id.WindowUS, id.BusyUS, id.HostWaitUS, id.KernelWaitUS, id.OtherUS)
			t.Logf("raw:     window %.3f busy %.3f host %.3f kernel %.3f other %.3f µs", want.window, want.busy, want.host, want.kern, want.other)
			for _, c := range []struct {
				what      string
				got, want float64
				of        float64
			}{
				{"window", id.WindowUS, want.window, want.window},
				{"busy", id.BusyUS, want.busy, want.window},
				{"host wait", id.HostWaitUS, want.host, want.window - want.busy},
				{"kernel wait", id.KernelWaitUS, want.kern, want.window - want.busy},
				{"other", id.OtherUS, want.other, want.window - want.busy},
			} {
				if math.Abs(c.got-c.want) > 0.001*c.of {
					t.Errorf("%s = %.3f µs, raw events give %.3f µs", c.what, c.got, c.want)
				}
			}
		})
	}
}
