package runner

import (
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/rundir"
)

// TestCauseLine: the terminal shows one reason per cell, the root cause, never the quoted log
// text, and says where the others are.
func TestCauseLine(t *testing.T) {
	long := strings.Repeat("CUDA out of memory. ", 20)
	ev := []rundir.Evidence{{Line: 23, Text: long}}
	cases := []struct {
		name string
		rs   []rundir.Reason
		want string
	}{
		{"none", nil, ""},
		{"consequences after the cause", []rundir.Reason{
			{Code: "exit-status", Message: "sglang exited with status 1.", Lines: ev},
			{Code: "cuda-oom", Message: "CUDA ran out of memory.", Lines: ev},
			{Code: "perf-dump-missing", Message: "no dump"},
		}, "cuda-oom: CUDA ran out of memory. (log.txt line 23; 2 more in cells/c/result.json)"},
		{"interrupted first", []rundir.Reason{
			{Code: "interrupted", Message: "stopped by the user"},
			{Code: "exit-status", Message: "sglang exited with status 130."},
			{Code: "trace-missing", Message: "no trace"},
		}, "interrupted: stopped by the user (2 more in cells/c/result.json)"},
		{"only consequences", []rundir.Reason{
			{Code: "exit-status", Message: "sglang exited with status 1."},
		}, "exit-status: sglang exited with status 1."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := causeLine(c.rs, "cells/c")
			if got != c.want {
				t.Errorf("causeLine = %q, want %q", got, c.want)
			}
			if strings.Contains(got, long) {
				t.Errorf("the log line's text is quoted: %q", got)
			}
		})
	}
}
