package rundir

import "github.com/sglprof/runner/plans"

// Cells is cells.json: every cell of the run and the exact process it runs, in run order.
// `runner run --resume` and bundles read the cells from it.
type Cells struct {
	// Dataset is the file a sharegpt plan's load.dataset_path named, resolved once when the
	// run started (a relative path from the plan file's directory): plan.toml keeps the path
	// as written, and the run directory is not where it starts. Readers of the run's plan
	// (ReadPlan) read this file, and compare it with what was recorded (InputFile.Changed).
	Dataset *InputFile   `json:"dataset,omitempty"`
	Cells   []CellRecord `json:"cells"`
}

// InputFile is a file a run reads that lives outside the run directory: its absolute path,
// and its size and SHA-256 when the run started (Fingerprint).
type InputFile struct {
	Path   string `json:"path"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256,omitempty"`
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
