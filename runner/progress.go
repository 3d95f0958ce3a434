package runner

import (
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
)

// Progress is told when cells start and end. cmd/runner picks a bar on a terminal and plain
// lines otherwise (CI, pipes), because progressbar writes '\r' frames even into files.
type Progress interface {
	Start(total int)
	CellStart(n, total int, c plans.Cell)
	CellEnd(n, total int, c plans.Cell, r *rundir.CellResult)
	Finish()
}

type nopProgress struct{}

func (nopProgress) Start(int)                                        {}
func (nopProgress) CellStart(int, int, plans.Cell)                   {}
func (nopProgress) CellEnd(int, int, plans.Cell, *rundir.CellResult) {}
func (nopProgress) Finish()                                          {}
