package rundir

import (
	"encoding/json"
	"time"
)

// ServerRecord is servers/<n>/server.json: one server of serve mode, how it started and how
// it stopped.
type ServerRecord struct {
	N             int               `json:"n"`
	Kind          string            `json:"kind"` // sglang | vllm-omni
	Argv          []string          `json:"argv"`
	Env           map[string]string `json:"env"`
	Dir           string            `json:"dir"`
	Port          int               `json:"port"`
	PID           int               `json:"pid"`
	ModelType     string            `json:"model_type"`
	ServedModel   string            `json:"served_model,omitempty"`
	Cells         []string          `json:"cells"`
	Start         time.Time         `json:"start"`
	ReadyNS       int64             `json:"ready_ns,omitempty"`
	End           time.Time         `json:"end"`
	Failure       string            `json:"failure,omitempty"`
	StoppedWith   string            `json:"stopped_with,omitempty"`
	ExitCode      int               `json:"exit_code"`
	Signal        string            `json:"signal,omitempty"`
	Leftovers     int               `json:"leftovers"`
	Strays        []int             `json:"strays,omitempty"` // processes with our marker outside the group, killed
	PortFree      bool              `json:"port_free"`
	GPUMemBefore  string            `json:"gpu_mem_before"` // MiB per GPU, or "unavailable: why"
	GPUMemAfter   string            `json:"gpu_mem_after"`
	ReadinessNote string            `json:"readiness_note,omitempty"`
	// URL and Info describe a server the runner attached to (backend.url) instead of
	// starting it: no argv, pid or teardown; Info is its server-info route's answer.
	URL  string          `json:"url,omitempty"`
	Info json.RawMessage `json:"info,omitempty"`
}
