package rundir

import "github.com/sglprof/runner/plans"

// Cells is cells.json: every cell of the run and the exact process it runs, in run order.
// `runner run --resume` and bundles read the cells from it.
type Cells struct {
	Cells []CellRecord `json:"cells"`
}

// CellRecord is one entry of cells.json: the cell and the exact process it runs.
type CellRecord struct {
	Cell   plans.Cell `json:"cell"`
	Dir    string     `json:"dir"` // relative to the run directory
	Launch Launch     `json:"launch"`
	NSys   *NSysFiles `json:"nsys,omitempty"`
}

// NSysFiles are the report paths of an nsys cell, relative to the cell directory.
type NSysFiles struct {
	Report string `json:"report"` // without the .nsys-rep suffix, as passed to -o
}
