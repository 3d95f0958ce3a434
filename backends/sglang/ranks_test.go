package sglang

import (
	"testing"

	"github.com/sglprof/runner/plans"
)

// TestTraceRanks pins which ranks upstream exports per profiling window: a per-request
// diffusion profile writes rank 0 only however many GPUs serve (the runner used to expect one
// trace per --num-gpus and failed every multi-GPU torch cell); server windows write every rank.
func TestTraceRanks(t *testing.T) {
	cell := func(mt string, extra ...string) plans.Cell {
		c := plans.Cell{}
		c.Backend.ModelType = mt
		c.Backend.ExtraArgs = extra
		return c
	}
	cases := []struct {
		c    plans.Cell
		w    TraceWindow
		want int
	}{
		{cell(ModelTypeDiffusion, "--num-gpus", "2"), WindowPerRequest, 1},
		{cell(ModelTypeDiffusion, "--num-gpus=4", "--profile-all-stages"), WindowPerRequest, 1},
		{cell(ModelTypeDiffusion, "--num-gpus", "2"), WindowStartStop, 2},
		{cell(ModelTypeDiffusion, "--num-gpus=4", "--num-gpus", "8"), WindowStartStop, 8},
		{cell(ModelTypeDiffusion), WindowStartStop, 1},
		{cell(ModelTypeLLM, "--tp-size", "4", "--num-gpus=2"), WindowStartStop, 4},
		{cell(ModelTypeLLM, "--tp=2"), WindowStartStop, 2},
		{cell(ModelTypeLLM, "--tp-size", "x"), WindowStartStop, 1},
		{cell(ModelTypeLLM, "--tp-size"), WindowStartStop, 1},
		{cell(ModelTypeLLM), WindowStartStop, 1},
	}
	for _, tc := range cases {
		if got := TraceRanks(tc.c, tc.w); got != tc.want {
			t.Errorf("TraceRanks(%s %q, %d) = %d, want %d", tc.c.Backend.ModelType, tc.c.Backend.ExtraArgs, tc.w, got, tc.want)
		}
	}
}
