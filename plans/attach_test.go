package plans

import "testing"

// attachBadCases are the bad inputs of backend.url (issue 13 item 8).
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
		[]want{{"profile.profilers", 10, 1, []string{"attached vLLM-Omni server"}}}},
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
