package plans

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/BurntSushi/toml"
)

// Executor kinds: where a cell's process runs.
const (
	ExecutorLocal = "local" // on this machine, one at a time or side by side on GPU slots
	ExecutorSlurm = "slurm" // as tasks of a Slurm job array
)

// Executors lists the valid [executor] kind values.
var Executors = []string{ExecutorLocal, ExecutorSlurm}

// GPUsAll is the [executor] gpus value that means every GPU nvidia-smi reports.
const GPUsAll = "all"

// Executor is the [executor] table: where cells run and how many run at once. The per-cell
// lifecycle is the same whichever executor runs it; an executor only decides where and when.
type Executor struct {
	// Kind is "local" (default) or "slurm".
	Kind string `toml:"kind" json:"kind,omitempty"`
	// GPUs are the GPUs local cells share out when gpus is a TOML string, as written: "all" or
	// a list of GPU ids such as "0,1,2,3" or "3" (GPU 3 alone). Empty (and GPUCount 0) keeps
	// the one-cell-at-a-time behaviour.
	GPUs string `toml:"gpus" json:"gpus,omitempty"`
	// GPUCount is gpus written as a TOML integer: a count N, meaning GPUs 0..N-1. A quoted
	// number is a GPU id, not a count, so that "0" and "3" name one GPU as CUDA_VISIBLE_DEVICES
	// would read them.
	GPUCount int `toml:"-" json:"gpu_count,omitempty"`
	// GPUsPerCell is how many GPUs one cell holds; 0 means 1, or the cell's own --num-gpus /
	// --tp-size when its arguments give one.
	GPUsPerCell int `toml:"gpus_per_cell" json:"gpus_per_cell,omitempty"`
	// Slurm is [executor.slurm], used when Kind is "slurm".
	Slurm SlurmSpec `toml:"slurm" json:"slurm,omitzero"`
}

// SlurmSpec is [executor.slurm]: the sbatch options of the run's job array.
type SlurmSpec struct {
	Partition   string   `toml:"partition" json:"partition,omitempty"`
	Account     string   `toml:"account" json:"account,omitempty"`
	QOS         string   `toml:"qos" json:"qos,omitempty"`
	Time        string   `toml:"time" json:"time,omitempty"` // sbatch --time, e.g. "01:00:00"
	GPUsPerTask int      `toml:"gpus_per_task" json:"gpus_per_task,omitempty"`
	CPUsPerTask int      `toml:"cpus_per_task" json:"cpus_per_task,omitempty"`
	Mem         string   `toml:"mem" json:"mem,omitempty"`
	Constraint  string   `toml:"constraint" json:"constraint,omitempty"`
	MaxParallel int      `toml:"max_parallel" json:"max_parallel,omitempty"`
	ExtraSbatch []string `toml:"extra_sbatch" json:"extra_sbatch,omitempty"`
	Setup       []string `toml:"setup" json:"setup,omitempty"` // shell lines run on the node first
}

type rawExecutor struct {
	Kind        toml.Primitive `toml:"kind"`
	GPUs        toml.Primitive `toml:"gpus"`
	GPUsPerCell toml.Primitive `toml:"gpus_per_cell"`
	Slurm       toml.Primitive `toml:"slurm"`
}

type rawSlurm struct {
	Partition   toml.Primitive `toml:"partition"`
	Account     toml.Primitive `toml:"account"`
	QOS         toml.Primitive `toml:"qos"`
	Time        toml.Primitive `toml:"time"`
	GPUsPerTask toml.Primitive `toml:"gpus_per_task"`
	CPUsPerTask toml.Primitive `toml:"cpus_per_task"`
	Mem         toml.Primitive `toml:"mem"`
	Constraint  toml.Primitive `toml:"constraint"`
	MaxParallel toml.Primitive `toml:"max_parallel"`
	ExtraSbatch toml.Primitive `toml:"extra_sbatch"`
	Setup       toml.Primitive `toml:"setup"`
}

// executorKeys and slurmKeys are the schema of [executor] and [executor.slurm].
var (
	executorKeys = []string{"kind", "gpus", "gpus_per_cell", "slurm"}
	slurmKeys    = []string{"partition", "account", "qos", "time", "gpus_per_task", "cpus_per_task",
		"mem", "constraint", "max_parallel", "extra_sbatch", "setup"}
)

// decodeExecutor decodes [executor] and [executor.slurm].
func (d *decoder) decodeExecutor(prim toml.Primitive, e *Executor) {
	k := path("executor")
	if !d.present(k) {
		return
	}
	var re rawExecutor
	if !d.decodeTable(k, prim, &re) {
		return
	}
	decodeField(d, path("executor", "kind"), re.Kind, &e.Kind, `a string: "local" or "slurm"`)
	d.decodeGPUs(re.GPUs, e)
	decodeField(d, path("executor", "gpus_per_cell"), re.GPUsPerCell, &e.GPUsPerCell, `an integer such as 1`)
	if !d.present(path("executor", "slurm")) {
		return
	}
	var rs rawSlurm
	if !d.decodeTable(path("executor", "slurm"), re.Slurm, &rs) {
		return
	}
	s := &e.Slurm
	str := `a string such as "gpu"`
	decodeField(d, path("executor", "slurm", "partition"), rs.Partition, &s.Partition, str)
	decodeField(d, path("executor", "slurm", "account"), rs.Account, &s.Account, str)
	decodeField(d, path("executor", "slurm", "qos"), rs.QOS, &s.QOS, str)
	decodeField(d, path("executor", "slurm", "time"), rs.Time, &s.Time, `a string such as "01:00:00" (sbatch --time)`)
	decodeField(d, path("executor", "slurm", "gpus_per_task"), rs.GPUsPerTask, &s.GPUsPerTask, `an integer such as 1`)
	decodeField(d, path("executor", "slurm", "cpus_per_task"), rs.CPUsPerTask, &s.CPUsPerTask, `an integer such as 8`)
	decodeField(d, path("executor", "slurm", "mem"), rs.Mem, &s.Mem, `a string such as "64G" (sbatch --mem)`)
	decodeField(d, path("executor", "slurm", "constraint"), rs.Constraint, &s.Constraint, `a string such as "h100"`)
	decodeField(d, path("executor", "slurm", "max_parallel"), rs.MaxParallel, &s.MaxParallel, `an integer such as 2`)
	decodeField(d, path("executor", "slurm", "extra_sbatch"), rs.ExtraSbatch, &s.ExtraSbatch, `an array of strings such as ["--exclusive"]`)
	decodeField(d, path("executor", "slurm", "setup"), rs.Setup, &s.Setup, `an array of strings (shell lines) such as ["module load cuda"]`)
}

// decodeGPUs accepts gpus as a string ("all", or GPU ids: "0,1,2,3", "3") or an integer
// count (4: GPUs 0..3). The TOML type decides, so "3" is GPU 3 and 3 is three GPUs.
func (d *decoder) decodeGPUs(prim toml.Primitive, e *Executor) {
	k := path("executor", "gpus")
	if !d.present(k) {
		return
	}
	var n int
	if err := d.md.PrimitiveDecode(prim, &n); err == nil {
		if n <= 0 {
			d.addKey(k, fmt.Sprintf(`executor.gpus = %d: a count must be at least 1; or list GPU ids as a string, e.g. "0"`, n))
			return
		}
		e.GPUCount = n
		return
	}
	decodeField(d, k, prim, &e.GPUs, `"all", a list of GPU ids such as "0,1,2,3", or a count such as 4`)
}

// HasGPUs reports whether [executor] gpus is set (a list, "all" or a count).
func (e Executor) HasGPUs() bool { return e.GPUs != "" || e.GPUCount > 0 }

// GPUIDs resolves [executor] gpus into GPU indices: the count (GPUs 0..N-1) or the string
// (ParseGPUs). visible is how many GPUs the machine reports, -1 when unknown.
func (e Executor) GPUIDs(visible int) ([]int, error) {
	if e.GPUCount > 0 {
		if visible >= 0 && e.GPUCount > visible {
			return nil, fmt.Errorf("gpus = %d, but nvidia-smi reports %d GPU(s)", e.GPUCount, visible)
		}
		return seq(e.GPUCount), nil
	}
	return ParseGPUs(e.GPUs, visible)
}

var gpuListRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^\s*\d+\s*(,\s*\d+\s*)*$`) })

// ParseGPUs resolves a gpus string into GPU indices: "all" or a list of ids ("0,1,2,3", "3";
// a count is a TOML integer, see Executor.GPUIDs). visible is how many GPUs the machine
// reports (nvidia-smi), or -1 when that is unknown; "all" needs it. A list that names a GPU
// twice, or a GPU beyond what the machine reports, is an error.
func ParseGPUs(s string, visible int) ([]int, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return nil, nil
	case s == GPUsAll:
		if visible < 0 {
			return nil, fmt.Errorf(`gpus = "all" needs nvidia-smi to count the GPUs, and it could not be read; list them instead, e.g. gpus = "0,1,2,3"`)
		}
		if visible == 0 {
			return nil, fmt.Errorf(`gpus = "all", but nvidia-smi reports no GPU`)
		}
		return seq(visible), nil
	}
	if !gpuListRE().MatchString(s) {
		return nil, fmt.Errorf(`gpus = %q: want "all", a list of GPU ids such as "0,1,2,3", or a count such as 4 (unquoted)`, s)
	}
	seen := map[int]bool{}
	var ids []int
	for _, f := range strings.Split(s, ",") {
		id, _ := strconv.Atoi(strings.TrimSpace(f))
		if seen[id] {
			return nil, fmt.Errorf("gpus = %q names GPU %d twice", s, id)
		}
		if visible >= 0 && id >= visible {
			return nil, fmt.Errorf("gpus = %q names GPU %d, but nvidia-smi reports %d GPU(s) (0..%d)", s, id, visible, visible-1)
		}
		seen[id] = true
		ids = append(ids, id)
	}
	return ids, nil
}

func seq(n int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	return ids
}

// validateExecutor checks [executor]; the GPU count against the machine is checked at run time.
func (d *decoder) validateExecutor(p *Plan) {
	e := &p.Executor
	if e.Kind == "" {
		e.Kind = ExecutorLocal
	} else if !inList(Executors, e.Kind) {
		d.addKey(path("executor", "kind"), fmt.Sprintf("executor.kind = %q is not a valid executor; use one of %s", e.Kind, quoteList(Executors)))
	}
	if e.GPUs != "" {
		if _, err := ParseGPUs(e.GPUs, -1); err != nil && e.GPUs != GPUsAll {
			d.addKey(path("executor", "gpus"), err.Error())
		}
	}
	if e.GPUsPerCell < 0 {
		d.addKey(path("executor", "gpus_per_cell"), fmt.Sprintf("executor.gpus_per_cell = %d must be at least 1 (or left out)", e.GPUsPerCell))
	}
	if ids, err := e.GPUIDs(-1); err == nil && len(ids) > 0 && e.GPUsPerCell > len(ids) {
		d.addKey(path("executor", "gpus_per_cell"), fmt.Sprintf("executor.gpus_per_cell = %d is more than the %d GPU(s) of executor.gpus; no cell could start", e.GPUsPerCell, len(ids)))
	}
	s := &e.Slurm
	for _, f := range []struct {
		key string
		v   int
	}{{"gpus_per_task", s.GPUsPerTask}, {"cpus_per_task", s.CPUsPerTask}, {"max_parallel", s.MaxParallel}} {
		if f.v < 0 {
			d.addKey(path("executor", "slurm", f.key), fmt.Sprintf("executor.slurm.%s = %d must not be negative", f.key, f.v))
		}
	}
	if e.Kind == ExecutorSlurm && e.HasGPUs() {
		d.addKey(path("executor", "gpus"), `executor.gpus is for kind = "local"; with Slurm, ask for GPUs with [executor.slurm] gpus_per_task`)
	}
	d.validateSlurmValues(s)
}

// The forms of the [executor.slurm] values that become #SBATCH directives. Each is what sbatch
// itself accepts for the option, narrowed to characters that cannot end or split a directive
// (no whitespace, quotes, '#', '\'), so a value is one option's value and never smuggles
// another option in (time = "00:05:00 --chdir=/srv").
var (
	// slurmTimeRE: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or no limit.
	slurmTimeRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^(\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2}|(?i:unlimited|infinite))$`)
	})
	// slurmNameRE: a partition, account or QOS name (a partition may be a comma list).
	slurmNameRE     = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_.-]+$`) })
	slurmNameListRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*$`) })
	// slurmMemRE: a size with an optional unit (K, M, G, T), e.g. "64G"; 0 means all of a node's.
	slurmMemRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^\d+[KMGTkmgt]?$`) })
	// slurmConstraintRE: node features joined by & | , with counts (*2), brackets and parentheses.
	slurmConstraintRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_.:&|,*!()\[\]-]+$`) })
	// sbatchOptionRE: one extra_sbatch element: a long option with or without "=value", or a
	// short option without a value. The value may hold anything but a line break (it is quoted).
	sbatchOptionRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^(--[A-Za-z0-9][A-Za-z0-9-]*(=[^\x00-\x1f\x7f]*)?|-[A-Za-z])$`)
	})
)

// sbatchReserved are the sbatch options the runner sets itself or that break its use of sbatch:
// the array's job name (it finds the array by it), --array, --output (the tasks' output files),
// --wrap (the script is the job), --wait and --test-only (sbatch must submit and return).
// sbatch also takes any unambiguous prefix of a long option, so a prefix of one is refused too.
var sbatchReserved = []string{"job-name", "array", "output", "wrap", "wait", "test-only"}

// sbatchReservedShort are the short forms of sbatchReserved.
const sbatchReservedShort = "JaoW"

// validateSlurmValues checks every [executor.slurm] value that becomes an #SBATCH directive,
// before anything is created: sbatch's own error would come after the run directory exists, and
// a value with a space in it would be read as two options.
func (d *decoder) validateSlurmValues(s *SlurmSpec) {
	for _, f := range []struct {
		key, v string
		re     *regexp.Regexp
		want   string
	}{
		{"partition", s.Partition, slurmNameListRE(), `a partition name such as "gpu" (or a list: "gpu,gpu-large")`},
		{"account", s.Account, slurmNameRE(), `an account name such as "perf"`},
		{"qos", s.QOS, slurmNameRE(), `a QOS name such as "normal"`},
		{"time", s.Time, slurmTimeRE(), `a Slurm time limit: minutes ("90"), "HH:MM:SS" ("01:30:00"), "D-HH:MM:SS" ("1-12:00:00") or "UNLIMITED"`},
		{"mem", s.Mem, slurmMemRE(), `a size such as "64G" (K, M, G or T; a bare number is MB)`},
		{"constraint", s.Constraint, slurmConstraintRE(), `node features such as "h100" or "h100&ib", without spaces`},
	} {
		if f.v != "" && !f.re.MatchString(f.v) {
			d.addKey(path("executor", "slurm", f.key), fmt.Sprintf("executor.slurm.%s = %q is not %s", f.key, f.v, f.want))
		}
	}
	k := path("executor", "slurm", "extra_sbatch")
	for i, x := range s.ExtraSbatch {
		name, _, _ := strings.Cut(strings.TrimLeft(x, "-"), "=")
		lower := strings.ToLower(x)
		switch {
		case !sbatchOptionRE().MatchString(x):
			d.addElem(k, i, x, fmt.Sprintf(`%q is not one sbatch option: give each option as its own element, "--name" or "--name=value" (e.g. "--exclusive", "--gres=gpu:2"), without a line break`, x))
		case strings.Contains(lower, "hetjob") || strings.Contains(lower, "packjob"):
			d.addElem(k, i, x, fmt.Sprintf("%q contains the word sbatch may take for the separator of a heterogeneous job's components; the runner submits one job array", x))
		case strings.HasPrefix(x, "--") && slices.ContainsFunc(sbatchReserved, func(r string) bool { return strings.HasPrefix(r, name) }):
			d.addElem(k, i, x, fmt.Sprintf("%q sets (or abbreviates) an option the runner sets itself or needs unset (--%s); remove it", x, strings.Join(sbatchReserved, ", --")))
		case !strings.HasPrefix(x, "--") && strings.Contains(sbatchReservedShort, name):
			d.addElem(k, i, x, fmt.Sprintf("%q is an option the runner sets itself or needs unset (-J, -a, -o, -W); remove it", x))
		}
	}
}
