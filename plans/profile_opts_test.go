package plans

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// vllmMin is the smallest valid vLLM-Omni serve plan ([profile] on line 8).
const vllmMin = serveMin + "kind = \"vllm-omni\"\n[profile]\n"

// profileOptBadCases are the bad inputs of the profiler options.
var profileOptBadCases = []struct {
	name string
	src  string
	want []want
}{
	{"unknown, duplicate and CUDA_PROFILER activities",
		llmMin + "[profile]\nactivities = [\"GPU\", \"cpu\", \"GPU\", \"CUDA_PROFILER\"]\n",
		[]want{
			{"profile.activities[1]", 9, 22, []string{`unknown activity "cpu"`, `"CPU", "GPU", "MEM"`}},
			{"profile.activities[2]", 9, 29, []string{"listed twice"}},
			{"profile.activities[3]", 9, 36, []string{`unknown activity "CUDA_PROFILER"`, "nsys capture range"}},
		}},
	{"activities without GPU",
		llmMin + "[profile]\nactivities = [\"CPU\"]\n",
		[]want{{"profile.activities", 9, 1, []string{`no "GPU"`, "no kernels"}}}},
	{"empty activities",
		llmMin + "[profile]\nactivities = []\n",
		[]want{{"profile.activities", 9, 1, []string{"empty"}}}},
	{"MEM on a diffusion server",
		serveMin + "[profile]\nactivities = [\"GPU\", \"MEM\"]\n",
		[]want{{"profile.activities", 8, 1, []string{`"MEM": the diffusion server's profiler ignores it`}}}},
	{"activities on vLLM-Omni",
		vllmMin + "activities = [\"GPU\"]\n",
		[]want{{"profile.activities", 9, 1, []string{"takes no activities"}}}},
	// sglang's default profiler never reads profile_stages (only SGLANG_PROFILE_V2's does, and
	// it cannot be stopped by /stop_profile): a "decode only" window would trace prefill too.
	{"profile stages on the LLM server",
		llmMin + "[profile]\nprofile_stages = [\"decode\"]\n",
		[]want{{"profile.profile_stages", 9, 1, []string{"default profiler ignores it", "SGLANG_PROFILE_V2", "-EXTEND", "drop the key"}}}},
	{"profile stages on a diffusion server",
		serveMin + "[profile]\nprofile_stages = [\"decode\"]\n",
		[]want{{"profile.profile_stages", 8, 1, []string{"LLM forward stages", `"diffusion"`}}}},
	{"with_stack as a string",
		llmMin + "[profile]\nwith_stack = \"yes\"\n",
		[]want{{"profile.with_stack", 9, 1, []string{"expected true or false"}}}},
	{"with_stack in a generate plan",
		minimal + "[profile]\nwith_stack = true\n",
		[]want{{"profile.with_stack", 6, 1, []string{`only used when backend.mode = "serve"`}}}},
	{"vllm_profiler_config on sglang",
		llmMin + "[profile.vllm_profiler_config]\nignore_frontend = true\n",
		[]want{{"profile.vllm_profiler_config", 8, 10, []string{`backend.kind is "sglang"`}}}},
	{"unknown vllm profiler key",
		vllmMin + "[profile.vllm_profiler_config]\ntorch_profiler_dir = \"/tmp\"\n",
		[]want{{"profile.vllm_profiler_config.torch_profiler_dir", 10, 1, []string{"unknown key"}}}},
	{"negative delay_iterations",
		vllmMin + "[profile.vllm_profiler_config]\ndelay_iterations = -1\n",
		[]want{{"profile.vllm_profiler_config.delay_iterations", 10, 1, []string{"requires >= 0"}}}},
	// vLLM's ProfilerConfig: active_iterations = Field(default=5, ge=1).
	{"no active iterations",
		vllmMin + "[profile.vllm_profiler_config]\nactive_iterations = 0\n",
		[]want{{"profile.vllm_profiler_config.active_iterations", 10, 1, []string{"requires >= 1"}}}},
}

func TestProfilerOptionsBadInputs(t *testing.T) {
	runBadCases(t, profileOptBadCases)
}

func TestProfilerOptionsKept(t *testing.T) {
	p, err := Load("testdata/full-vllm.toml")
	if err != nil {
		t.Fatal(err)
	}
	c := p.Expand()[0]
	want := map[string]any{"torch_profiler_with_flops": true, "torch_profiler_use_gzip": true, "torch_profiler_dump_cuda_time_total": false,
		"torch_profiler_with_memory": true, "ignore_frontend": true, "delay_iterations": 2, "max_iterations": 10,
		"warmup_iterations": 1, "active_iterations": 3, "wait_iterations": 0}
	if d := cmp.Diff(want, c.Profile.VLLM.Fields()); d != "" {
		t.Errorf("vllm_profiler_config (-want +got):\n%s", d)
	}
	if c.Profile.WithStack == nil || !*c.Profile.WithStack || c.Profile.RecordShapes == nil || *c.Profile.RecordShapes {
		t.Errorf("with_stack/record_shapes = %v/%v", c.Profile.WithStack, c.Profile.RecordShapes)
	}
	p, err = Load("testdata/full-serve.toml")
	if err != nil {
		t.Fatal(err)
	}
	c = p.Expand()[0]
	if d := cmp.Diff([]string{"CPU", "GPU", "MEM"}, c.Profile.Activities); d != "" || len(c.Profile.ProfileStages) != 0 {
		t.Errorf("activities %v, stages %v", c.Profile.Activities, c.Profile.ProfileStages)
	}
}
