package plans

import "testing"

// attachBadCases are the bad inputs of backend.url.
var attachBadCases = []struct {
	name string
	src  string
	want []want
}{
	{"url without scheme",
		llmMin + "url = \"10.0.0.5:30000\"\n",
		[]want{{"backend.url", 8, 1, []string{"is not a URL", `"http://host:port"`}}}},
	{"url with another scheme",
		llmMin + "url = \"grpc://h:30000\"\n",
		[]want{{"backend.url", 8, 1, []string{"scheme must be http or https"}}}},
	{"url with a path",
		llmMin + "url = \"http://h:30000/v1\"\n",
		[]want{{"backend.url", 8, 1, []string{"base URL only"}}}},
	{"url with server flags",
		llmMin + "url = \"http://h:30000\"\nport = 30000\nextra_args = [\"--tp-size\", \"2\"]\n",
		[]want{
			{"backend.port", 9, 1, []string{"attaches to a running server", "port"}},
			{"backend.extra_args", 10, 1, []string{"extra_args the runner does not set"}},
		}},
	{"url with nsys",
		llmMin + "url = \"http://h:30000\"\n[profile]\nprofilers = [\"nsys\"]\n",
		[]want{{"profile.profilers", 10, 1, []string{`"nsys" needs a server the runner starts`}}}},
	{"url with torch on vLLM-Omni",
		serveMin + "kind = \"vllm-omni\"\nurl = \"http://h:8091\"\n[profile]\nprofilers = [\"torch\"]\n",
		[]want{{"profile.profilers", 10, 1, []string{"attached vLLM or vLLM-Omni server"}}}},
	{"url with torch on vLLM",
		llmMin + "kind = \"vllm\"\nurl = \"http://h:8000\"\n[profile]\nprofilers = [\"torch\"]\n",
		[]want{{"profile.profilers", 11, 1, []string{"attached vLLM or vLLM-Omni server"}}}},
	{"url in a generate plan",
		minimal + "[backend]\nurl = \"http://h:1\"\n",
		[]want{{"backend.url", 6, 1, []string{`only used when backend.mode = "serve"`}}}},
}

func TestAttachBadInputs(t *testing.T) {
	runBadCases(t, attachBadCases)
}

func TestAttachKept(t *testing.T) {
	p, err := Load("testdata/full-attach.toml")
	if err != nil {
		t.Fatal(err)
	}
	if c := p.Expand()[0]; c.Backend.URL != "http://10.0.0.5:30000" {
		t.Fatalf("url %q", c.Backend.URL)
	}
}

func TestAttachRefusesNumSteps(t *testing.T) {
	runBadCases(t, []struct {
		name string
		src  string
		want []want
	}{{"url with num_steps",
		llmMin + "url = \"http://h:30000\"\n[profile]\nnum_steps = 3\n",
		[]want{{"profile.num_steps", 10, 1, []string{"drop num_steps"}}}}})
}

// capture-range keys.
var captureBadCases = []struct {
	name string
	src  string
	want []want
}{
	{"unknown capture range",
		llmMin + "[profile]\nprofilers = [\"nsys\"]\n[nsys]\ncapture_range = \"nvtx\"\n",
		[]want{{"nsys.capture_range", 11, 1, []string{`unknown value "nvtx"`, `"none", "cudaProfilerApi"`}}}},
	{"shutdown end",
		llmMin + "[profile]\nprofilers = [\"nsys\"]\n[nsys]\ncapture_range = \"cudaProfilerApi\"\ncapture_range_end = \"repeat-shutdown:2\"\n",
		[]want{{"nsys.capture_range_end", 12, 1, []string{"-shutdown variants end the server"}}}},
	{"end without a range",
		llmMin + "[profile]\nprofilers = [\"nsys\"]\n[nsys]\ncapture_range_end = \"stop\"\n",
		[]want{{"nsys.capture_range_end", 11, 1, []string{`only used with capture_range = "cudaProfilerApi"`}}}},
	{"capture range with a delay",
		llmMin + "[profile]\nprofilers = [\"nsys\"]\n[nsys]\ncapture_range = \"cudaProfilerApi\"\ndelay = \"2s\"\n",
		[]want{{"nsys.delay", 12, 1, []string{"drop delay"}}}},
	{"capture range in a generate plan",
		minimal + "[profile]\nprofilers = [\"nsys\"]\n[nsys]\ncapture_range = \"cudaProfilerApi\"\n",
		[]want{{"nsys.capture_range", 8, 1, []string{`only used when backend.mode = "serve"`}}}},
}

func TestCaptureRangeBadInputs(t *testing.T) {
	runBadCases(t, captureBadCases)
	p, err := Load("testdata/full-vllm.toml")
	if err != nil {
		t.Fatal(err)
	}
	if p.NSys.CaptureRange != CaptureRangeCudaAPI || p.NSys.CaptureRangeEnd != "repeat" {
		t.Fatalf("nsys %+v", p.NSys)
	}
	p, err = Load("testdata/full-serve.toml")
	if err != nil || p.NSys.CaptureRangeEnd != "" {
		t.Fatalf("no capture range: end %q, %v", p.NSys.CaptureRangeEnd, err)
	}
}

// [load] flush_cache defaults to true for a server the runner starts and to false for an
// attached one (flushing someone else's cache is a side effect the plan must ask for); a written
// value wins either way, and every cell carries it.
func TestFlushCacheDefaults(t *testing.T) {
	url := "url = \"http://h:30000\"\n"
	for _, tc := range []struct {
		name, src string
		want      bool
	}{
		{"launched", llmMin, true},
		{"launched, off", llmMin + "[load]\nflush_cache = false\n", false},
		{"attached", llmMin + url, false},
		{"attached, asked for", llmMin + url + "[load]\nflush_cache = true\n", true},
	} {
		p := mustParse(t, tc.src)
		if p.Load.FlushCache != tc.want {
			t.Errorf("%s: flush_cache %v, want %v", tc.name, p.Load.FlushCache, tc.want)
		}
		for _, c := range p.Expand() {
			if c.Load.FlushCache != tc.want {
				t.Errorf("%s: cell %s flush_cache %v, want %v", tc.name, c.ID, c.Load.FlushCache, tc.want)
			}
		}
	}
	runBadCases(t, []struct {
		name string
		src  string
		want []want
	}{
		{"flush_cache not a bool", llmMin + "[load]\nflush_cache = \"yes\"\n",
			[]want{{"load.flush_cache", 9, 1, []string{"true or false"}}}},
		{"flush_cache on a diffusion server", serveMin + "model_type = \"diffusion\"\n[load]\nflush_cache = true\n",
			[]want{{"load.flush_cache", 9, 1, []string{"only used by LLM cells"}}}},
	})
}
