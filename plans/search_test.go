package plans

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// searchBadCases are the bad inputs of [load.search].
var searchBadCases = []struct {
	name string
	src  string
	want []want
}{
	{"no axis, no SLO", llmMin + "[load.search]\nmax_probes = 4\n",
		[]want{{"load.search.axis", 8, 0, []string{"needs axis", `"request_rate" or "concurrency"`}}, {"load.search.slo_ttft_p99", 8, 0, []string{"needs an SLO"}}}},
	{"unknown axis", llmMin + "[load.search]\naxis = \"rate\"\nslo_ttft_p99 = \"200ms\"\n",
		[]want{{"load.search.axis", 9, 1, []string{`unknown axis "rate"`}}}},
	{"too many probes", llmMin + "[load.search]\naxis = \"concurrency\"\nslo_tpot_p99 = \"50ms\"\nmax_probes = 11\n",
		[]want{{"load.search.max_probes", 11, 1, []string{"1 to 10 probes", "axis in [matrix]"}}}},
	{"bounds", llmMin + "[load.search]\naxis = \"concurrency\"\nslo_ttft_p99 = \"200ms\"\nmin = 2.5\nmax = 0\n",
		[]want{{"load.search.min", 11, 1, []string{"whole number", "write 3"}}, {"load.search.max", 12, 1, []string{"must be a number > 0"}}}},
	{"min above max", llmMin + "[load.search]\naxis = \"request_rate\"\nslo_ttft_p99 = \"200ms\"\nmin = 8\nmax = 4\n",
		[]want{{"load.search.min", 11, 1, []string{"min 8 is above max 4"}}}},
	{"axis also set", strings.Replace(llmMin, "input_len = [128]\n", "input_len = [128]\nrequest_rate = [4]\n", 1) + "[load.search]\naxis = \"request_rate\"\nslo_ttft_p99 = \"200ms\"\n",
		[]want{{"matrix.request_rate", 6, 1, []string{"[load.search] sets request_rate", "drop matrix.request_rate"}}}},
	{"negative SLO", llmMin + "[load.search]\naxis = \"request_rate\"\nslo_ttft_p99 = \"-1ms\"\n",
		[]want{{"load.search.slo_ttft_p99", 10, 1, []string{"must be > 0"}}}},
	{"unknown key", llmMin + "[load.search]\naxis = \"request_rate\"\nslo_ttft_p99 = \"200ms\"\nmax_probe = 3\n",
		[]want{{"load.search.max_probe", 11, 1, []string{`did you mean "max_probes"`}}}},
	{"ramp without rates", llmMin + "[load]\nramp_up_strategy = \"linear\"\n",
		[]want{{"load.ramp_up_start_rps", 8, 0, []string{"needs ramp_up_start_rps and ramp_up_end_rps"}}, {"load.ramp_up_end_rps", 8, 0, []string{"needs"}}}},
	{"ramp down, unknown", llmMin + "[load]\nramp_up_strategy = \"log\"\nramp_up_start_rps = 8\nramp_up_end_rps = 2\n",
		[]want{{"load.ramp_up_strategy", 9, 1, []string{`unknown ramp-up strategy "log"`}}, {"load.ramp_up_start_rps", 10, 1, []string{"above ramp_up_end_rps 2"}}}},
	{"exponential from 0", llmMin + "[load]\nramp_up_strategy = \"exponential\"\nramp_up_start_rps = 0\nramp_up_end_rps = 2\n",
		[]want{{"load.ramp_up_start_rps", 10, 1, []string{"cannot start at 0"}}}},
	{"ramp with a rate", llmMin + "[load]\nrequest_rate = 4\nramp_up_strategy = \"linear\"\nramp_up_start_rps = 1\nramp_up_end_rps = 2\n",
		[]want{{"load.request_rate", 9, 1, []string{"drop load.request_rate"}}}},
	{"rate without strategy", llmMin + "[load]\nramp_up_end_rps = 2\n",
		[]want{{"load.ramp_up_end_rps", 9, 1, []string{"only used with ramp_up_strategy"}}}},
	{"ramp and rate search", llmMin + "[load]\nramp_up_strategy = \"linear\"\nramp_up_start_rps = 1\nramp_up_end_rps = 2\n[load.search]\naxis = \"request_rate\"\nslo_ttft_p99 = \"1s\"\n",
		[]want{{"load.ramp_up_strategy", 9, 1, []string{"both set the rate"}}}},
	{"diffusion", serveMin + "model_type = \"diffusion\"\n[load.search]\naxis = \"request_rate\"\nslo_ttft_p99 = \"200ms\"\n",
		[]want{{"load.search", 8, 0, []string{"only used by LLM cells"}}}},
}

func TestSearchBadInputs(t *testing.T) {
	runBadCases(t, searchBadCases)
}

// A search plan gets its bounds and probe count by default, and its cells carry the search
// through cells.json.
func TestSearchDefaultsAndRoundTrip(t *testing.T) {
	p := mustParse(t, llmMin+"[load.search]\naxis = \"request_rate\"\nslo_ttft_p99 = \"200ms\"\n")
	s := p.Load.Search
	if s == nil || s.Axis != SearchRequestRate || s.MaxProbes != 10 || s.Min != DefaultSearchMinRate || s.Max != DefaultSearchMaxRate || s.SLOTTFTP99.Duration != 200*time.Millisecond {
		t.Fatalf("search %+v", s)
	}
	if p.Load.MaxConcurrency != DefaultSearchMaxConc {
		t.Errorf("a rate search without a concurrency: max_concurrency %d, want %d", p.Load.MaxConcurrency, DefaultSearchMaxConc)
	}
	p = mustParse(t, llmMin+"[load.search]\naxis = \"concurrency\"\nslo_tpot_p99 = \"40ms\"\nmax = 32\nmax_probes = 6\n")
	if s := p.Load.Search; s.Min != 1 || s.Max != 32 || s.MaxProbes != 6 {
		t.Errorf("concurrency search %+v: want min 1 (default), max 32, 6 probes", s)
	}
	// A lower max than the default min pulls the default min down with it.
	p = mustParse(t, llmMin+"[load.search]\naxis = \"request_rate\"\nslo_ttft_p99 = \"200ms\"\nmax = 0.2\n")
	if s := p.Load.Search; s.Min != 0.2 {
		t.Errorf("min %v, want 0.2 (max)", s.Min)
	}
	cells := p.Expand()
	b, err := json.Marshal(cells[0])
	if err != nil {
		t.Fatal(err)
	}
	var back Cell
	if err := json.Unmarshal(b, &back); err != nil || back.Load.Search == nil || *back.Load.Search != *p.Load.Search {
		t.Errorf("cells.json round trip: %s -> %+v (%v)", b, back.Load.Search, err)
	}
}
