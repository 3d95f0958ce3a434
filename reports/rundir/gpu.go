package rundir

import "time"

// The GPU records of result.json (CellResult.GPU) and manifest.json (Manifest.GPUEnv). runner/gpu
// produces them from nvidia-smi and the interpreter and names them with aliases; runner fills
// GPUCheck and GPUEnv.

// GPUState is one device's state at one moment. Fields nvidia-smi reports as "[N/A]" or
// "[Not Supported]" are -1 (numbers) or empty.
type GPUState struct {
	Index       int      `json:"index"`
	UUID        string   `json:"uuid"`
	UtilPct     int      `json:"utilization_pct"`
	MemUsedMiB  int      `json:"memory_used_mib"`
	SMClockMHz  int      `json:"sm_clock_mhz"`
	MaxSMMHz    int      `json:"max_sm_clock_mhz"`
	Throttle    uint64   `json:"throttle_reasons_mask"`
	Reasons     []string `json:"throttle_reasons,omitempty"`
	Persistence string   `json:"persistence_mode,omitempty"`
	PowerW      float64  `json:"power_draw_w"`
	TempC       int      `json:"temperature_c"`
}

// GPUApp is one compute process on a GPU.
type GPUApp struct {
	PID     int    `json:"pid"`
	Name    string `json:"process_name"`
	UsedMiB int    `json:"used_memory_mib"`
	GPUUUID string `json:"gpu_uuid"`
	// GPU is the index of GPUUUID in the snapshot it came with, -1 when unknown.
	GPU int `json:"gpu"`
}

// GPUSnapshot is what one probe saw. Error is set when the probe could not be read; GPUs and Apps
// then hold whatever was read before it failed.
type GPUSnapshot struct {
	At     time.Time  `json:"at"`
	GPUs   []GPUState `json:"gpus,omitempty"`
	Apps   []GPUApp   `json:"apps,omitempty"`
	Error  string     `json:"error,omitempty"`
	WallNS int64      `json:"wall_ns"`
}

// Available reports whether the snapshot was read.
func (s GPUSnapshot) Available() bool { return s.Error == "" }

// GPUVersions are the library versions a maintainer asks for first, as the interpreter reports
// them; a library it cannot import is absent.
type GPUVersions struct {
	Python     string `json:"python,omitempty"`
	Torch      string `json:"torch,omitempty"`
	CUDA       string `json:"cuda_runtime,omitempty"`
	Triton     string `json:"triton,omitempty"`
	FlashInfer string `json:"flashinfer,omitempty"`
	NCCL       string `json:"nccl,omitempty"`
	SGLang     string `json:"sglang,omitempty"`
}

// GPUDevice is one GPU's fixed configuration. Fields nvidia-smi cannot report ("[N/A]") are kept
// as it printed them, so the manifest says "[N/A]" rather than guessing.
type GPUDevice struct {
	Index      int    `json:"index"`
	Name       string `json:"name"`
	Driver     string `json:"driver_version"`
	MIG        string `json:"mig_mode"`
	ECC        string `json:"ecc_mode"`
	PowerLimit string `json:"power_limit"`
	MaxSMClock string `json:"max_sm_clock"`
}

// GPUCheck is what the GPU noise guard saw around one cell (runner/gpucheck.go).
type GPUCheck struct {
	// Devices are the GPU indices the cell uses (its CUDA_VISIBLE_DEVICES); empty means all.
	Devices []int `json:"devices,omitempty"`
	// Start is the snapshot before the cell (a serve cell's, before its server started or
	// when it reused one), Client the one before a serve cell's client phase, End the one
	// after the cell. Each holds SM clock and max, throttle reasons, persistence mode,
	// temperature and power per GPU, or the reason it could not be read.
	Start  *GPUSnapshot `json:"start,omitempty"`
	Client *GPUSnapshot `json:"client_start,omitempty"`
	End    *GPUSnapshot `json:"end,omitempty"`
	// Foreign are the compute processes that were not the runner's on the cell's GPUs.
	Foreign []GPUApp `json:"foreign,omitempty"`
	// WaitedNS is how long busy_gpu = "wait" waited for them.
	WaitedNS int64 `json:"waited_ns,omitempty"`
	// ClocksLocked is checked under [gate] require_locked_clocks; ClockError says why it
	// could not be.
	ClocksLocked *bool  `json:"clocks_locked,omitempty"`
	ClockError   string `json:"clock_error,omitempty"`
	// Leaked lists memory held after the cell by nobody, or by the cell's own leftovers.
	Leaked []string `json:"leaked,omitempty"`
	// CheckNS is the time the checks added to the cell, waiting excluded.
	CheckNS int64 `json:"check_ns"`
}

// GPUEnv is what a maintainer asks for: devices, topology, clock locks, check_env and library
// versions (runner/gpuenv.go).
type GPUEnv struct {
	Devices       []GPUDevice `json:"devices,omitempty"`
	DevicesError  string      `json:"devices_error,omitempty"`
	Topology      string      `json:"topology,omitempty"`
	TopologyError string      `json:"topology_error,omitempty"`
	// ClocksLocked is whether application clocks were locked when the run started.
	ClocksLocked *bool  `json:"clocks_locked,omitempty"`
	ClockError   string `json:"clock_error,omitempty"`
	// Interpreter is the Python next to backend.command; InterpreterNote says why there is
	// none (a command that is not Python-based).
	Interpreter     string `json:"interpreter,omitempty"`
	InterpreterNote string `json:"interpreter_note,omitempty"`
	// CheckEnv is the output of `python -m sglang.check_env`; CheckEnvError says why it is
	// missing or incomplete (no sglang, a crash, the timeout).
	CheckEnv      string      `json:"check_env,omitempty"`
	CheckEnvError string      `json:"check_env_error,omitempty"`
	CheckEnvNS    int64       `json:"check_env_ns,omitempty"`
	Versions      GPUVersions `json:"versions"`
	VersionsError string      `json:"versions_error,omitempty"`
}
