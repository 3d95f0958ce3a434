package sim

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKnobsFileAddsKnobsTheEnvironmentLacks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "knobs")
	if err := os.WriteFile(path, []byte("# a step\nRUNNER_SIM_SLOWDOWN=DenoisingStage=1.10\n\nRUNNER_SIM_RUN_CV = 0.02\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{EnvKnobsFile: path, EnvRunCV: "0"}
	if err := applyKnobsFile(env); err != nil {
		t.Fatal(err)
	}
	if env[EnvSlowdown] != "DenoisingStage=1.10" {
		t.Errorf("slowdown = %q, want the file's DenoisingStage=1.10", env[EnvSlowdown])
	}
	if env[EnvRunCV] != "0" {
		t.Errorf("run CV = %q, want the environment's 0 to win over the file", env[EnvRunCV])
	}
}

func TestKnobsFileRefusesWhatIsNotAKnob(t *testing.T) {
	for name, text := range map[string]string{
		"not a knob":   "PATH=/tmp\n",
		"no value":     "RUNNER_SIM_SLOWDOWN\n",
		"recursive":    "RUNNER_SIM_KNOBS_FILE=/etc/passwd\n",
		"empty name":   "RUNNER_SIM_=1\n",
		"spaced names": "RUNNER_SIM_A B=1\n",
	} {
		if _, err := parseKnobs([]byte(text)); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%s: err = %v, want an error naming line 1", name, err)
		}
	}
}

func TestMainReportsAMissingKnobsFile(t *testing.T) {
	env := map[string]string{EnvKnobsFile: filepath.Join(t.TempDir(), "absent")}
	var stderr bytes.Buffer
	code, ok := Main(t.Context(), []string{"sglang", "version"}, env, &bytes.Buffer{}, &stderr)
	if !ok || code != 2 || !strings.Contains(stderr.String(), EnvKnobsFile) {
		t.Errorf("code %d ok %v stderr %q, want exit 2 naming %s", code, ok, stderr.String(), EnvKnobsFile)
	}
	if _, set := env[EnvSlowdown]; set || len(env) != 1 {
		t.Errorf("Main changed its caller's environment map: %v", env)
	}
}

func FuzzParseKnobs(f *testing.F) {
	f.Add([]byte("RUNNER_SIM_SLOWDOWN=DenoisingStage=1.1\n# c\n"))
	f.Add([]byte("x"))
	f.Fuzz(func(t *testing.T, data []byte) {
		knobs, err := parseKnobs(data)
		if err != nil {
			return
		}
		for k := range knobs {
			if !strings.HasPrefix(k, "RUNNER_SIM_") || k == EnvKnobsFile {
				t.Fatalf("accepted knob %q", k)
			}
		}
	})
}
