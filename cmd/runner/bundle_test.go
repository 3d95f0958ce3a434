package main

import (
	"slices"
	"testing"

	"github.com/sglprof/runner/runner/bundle"
)

// runner bundle prints one line per kind of left-out file, not one per file.
func TestOmissionLines(t *testing.T) {
	nsysWhy, sqlWhy := "the nsys report is a full trace", "the SQLite export is summarised"
	var om []bundle.Omission
	for _, c := range []string{"001", "002", "003"} {
		om = append(om, bundle.Omission{Path: "cells/" + c + "/nsys/report.sqlite", Reason: sqlWhy},
			bundle.Omission{Path: "cells/" + c + "/nsys/report.nsys-rep", Reason: nsysWhy})
	}
	om = append(om, bundle.Omission{Path: "cells/004/log.txt", Reason: "cut"})
	want := []string{
		"left out: 3 files (cells/001/nsys/report.sqlite and 2 more, listed in bundle.json): " + sqlWhy,
		"left out: 3 files (cells/001/nsys/report.nsys-rep and 2 more, listed in bundle.json): " + nsysWhy,
		"left out: cells/004/log.txt: cut",
	}
	if got := omissionLines(om); !slices.Equal(got, want) {
		t.Errorf("got\n%q\nwant\n%q", got, want)
	}
}
