package rundir

// ParityFile is parity.json: the settings that differ between the engines of an engine axis
// (written before the first cell runs; absent for a plan without the axis).
const ParityFile = "parity.json"

// Parity is the parity check of a plan with an engine axis: for each configuration that more
// than one engine serves, the result-changing settings on which their servers, as configured,
// differ. An empty Rows means they agree on every setting the check knows.
type Parity struct {
	// Engines are the engines compared, in the plan's order; every row has a value per engine.
	Engines []string `json:"engines"`
	// Checked are the settings the check compares, in table order.
	Checked []string    `json:"checked"`
	Rows    []ParityRow `json:"rows"`
}

// ParityRow is one setting of one configuration (its key without the engine part) on which the
// engines differ.
type ParityRow struct {
	Config  string   `json:"config"`
	Setting string   `json:"setting"`
	Values  []string `json:"values"` // one per Engines
}
