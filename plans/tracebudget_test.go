package plans

import (
	"strings"
	"testing"
)

// [profile] max_trace_mb caps each torch cell's profiled steps at TraceMBPerStep each and
// records what the plan asked for; none and nsys cells, and cells within the budget, keep
// theirs.
func TestMaxTraceMBCapsProfiledSteps(t *testing.T) {
	p := mustParse(t, minimal+"num_inference_steps = [30]\n[profile]\nprofilers = [\"none\", \"torch\"]\nnum_profiled_timesteps = -1\nmax_trace_mb = 200\n")
	cells := p.Expand()
	none, torch := cells[0], cells[1]
	if none.Profile.StepsCappedFrom != 0 || none.Profile.NumProfiledTimesteps != -1 {
		t.Errorf("none cell: %+v; want it untouched", none.Profile)
	}
	if want := 200 / TraceMBPerStep; torch.Profile.NumProfiledTimesteps != want || torch.Profile.StepsCappedFrom != 30 {
		t.Errorf("torch cell: steps %d capped from %d; want %d capped from 30 (every step of 30)",
			torch.Profile.NumProfiledTimesteps, torch.Profile.StepsCappedFrom, want)
	}

	serve := mustParse(t, serveMin+"[profile]\nprofilers = [\"torch\"]\nnum_steps = 10\nmax_trace_mb = 64\n").Expand()[0]
	if serve.Profile.NumSteps != 1 || serve.Profile.StepsCappedFrom != 10 {
		t.Errorf("serve torch cell: num_steps %d capped from %d; want 1 from 10", serve.Profile.NumSteps, serve.Profile.StepsCappedFrom)
	}

	within := mustParse(t, minimal+"[profile]\nprofilers = [\"torch\"]\nnum_profiled_timesteps = 2\nmax_trace_mb = 4096\n").Expand()[0]
	if within.Profile.NumProfiledTimesteps != 2 || within.Profile.StepsCappedFrom != 0 {
		t.Errorf("cell within the budget: %+v; want 2 steps, not capped", within.Profile)
	}

	_, err := Parse("p.toml", []byte(minimal+"[profile]\nprofilers = [\"torch\"]\nmax_trace_mb = 10\n"))
	if err == nil || !strings.Contains(err.Error(), "profile.max_trace_mb: 10 MB is less than one profiled step") {
		t.Errorf("max_trace_mb = 10: %v; want a refusal naming one step's estimate", err)
	}
}
