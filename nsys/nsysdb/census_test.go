package nsysdb

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprof/runner/nsys/nsysgen"
)

// The advice for an export without kernels follows what it holds: an empty capture (a --delay
// past the end of the run) must not be told to add the --trace=cuda it already had.
func TestCensusAdvice(t *testing.T) {
	rt := []nsysgen.Runtime{{Start: 1, End: 2, PID: 1, TID: 1, Correlation: 1, Name: "cudaMalloc_v3020"}}
	nvtx := []nsysgen.NVTX{{Start: 1, End: 5, PID: 1, TID: 1, Text: "step"}}
	for _, tc := range []struct {
		name   string
		e      nsysgen.Export
		want   Census
		advice string
	}{
		{"nothing", nsysgen.Export{}, Census{}, "collection began after the application had finished"},
		{"cuda calls, no kernel", nsysgen.Export{Runtime: rt}, Census{Runtime: 1}, "launched no kernel while nsys collected"},
		{"nvtx only", nsysgen.Export{NVTX: nvtx}, Census{NVTX: 1}, "--trace=cuda,nvtx"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "r.sqlite")
			if err := nsysgen.Write(path, tc.e); err != nil {
				t.Fatal(err)
			}
			c, err := CensusOf(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			if c != tc.want {
				t.Errorf("census = %+v, want %+v", c, tc.want)
			}
			if a := c.NoKernelsAdvice(); !strings.Contains(a, tc.advice) {
				t.Errorf("advice %q, want it to contain %q", a, tc.advice)
			}
			_, err = Read(context.Background(), path, ReadOptions{})
			if !errors.Is(err, ErrNoKernels) || !strings.Contains(err.Error(), tc.advice) {
				t.Errorf("Read: %v; want ErrNoKernels with %q", err, tc.advice)
			}
			if tc.name == "nothing" && strings.Contains(err.Error(), "--trace=cuda") {
				t.Errorf("Read of an empty capture advises --trace=cuda: %v", err)
			}
		})
	}
	path, _ := writeSample(t, "")
	if c, err := CensusOf(context.Background(), path); err != nil || c.Kernels == 0 || c.NoKernelsAdvice() != "" {
		t.Errorf("sample export: census %+v, %v; want kernels and no advice", c, err)
	}
}
