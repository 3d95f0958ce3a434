package plans

import (
	"fmt"
	"sort"
	"strings"
)

// Problem is one thing wrong with a plan file. Line and Col are 1-based; 0 means unknown (a key
// that is required but absent has no position).
type Problem struct {
	Key  string `json:"key,omitempty"` // dotted key, e.g. "matrix.resolution[1]"
	Line int    `json:"line,omitempty"`
	Col  int    `json:"col,omitempty"`
	Msg  string `json:"message"`
}

// String formats the problem without the file name: "<line>:<col>: <key>: <message>", leaving
// out what is unknown.
func (p Problem) String() string {
	var b strings.Builder
	if p.Line > 0 {
		fmt.Fprintf(&b, "%d:", p.Line)
		if p.Col > 0 {
			fmt.Fprintf(&b, "%d:", p.Col)
		}
		b.WriteByte(' ')
	}
	if p.Key != "" {
		b.WriteString(p.Key)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Error is returned by Parse and Load when a plan file is invalid. It holds every problem found
// in the file, so a user fixes them in one pass instead of one per run.
type Error struct {
	File     string    `json:"file,omitempty"`
	Problems []Problem `json:"problems"`
}

// Error prints one problem per line as "<file>:<line>:<col>: <key>: <message>", the format
// editors and CI log scanners already understand.
func (e *Error) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		if e.File != "" {
			b.WriteString(e.File)
			if p.Line > 0 {
				b.WriteByte(':')
			} else {
				b.WriteString(": ")
			}
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// sortProblems orders problems by position so the output reads like the file; problems without
// a position (absent required keys) come last, in the order they were found.
func sortProblems(ps []Problem) {
	sort.SliceStable(ps, func(i, j int) bool {
		a, b := ps[i], ps[j]
		if (a.Line == 0) != (b.Line == 0) {
			return b.Line == 0
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
}
