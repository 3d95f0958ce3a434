// Package trace is the profiler-neutral model of one GPU trace: kernels and memory operations,
// their launches, CPU ops, Python frames and annotations, all with times in int64 nanoseconds.
// The Kineto reader (reports/kineto) and the Nsight Systems reader (nsys) both produce it, so
// the triage tables are computed by one piece of code whatever the profiler was.
//
// Records are pointer-free and names are interned to NameID, so a trace of millions of events
// costs tens of bytes per event and the garbage collector never scans the slices.
package trace

// NameID is an interned string; 0 is the empty string.
type NameID uint32

// Names interns strings. The zero value is not ready: use NewNames.
type Names struct {
	ids  map[string]NameID
	strs []string
}

// NewNames returns an interner holding only the empty string (id 0).
func NewNames() *Names {
	return &Names{ids: map[string]NameID{"": 0}, strs: []string{""}}
}

// Intern returns the id of s, adding it if new. The map lookup with string(b) does not
// allocate when b is already known, which is the common case on a hot path.
func (n *Names) Intern(b []byte) NameID {
	if id, ok := n.ids[string(b)]; ok {
		return id
	}
	s := string(b)
	id := NameID(len(n.strs))
	n.strs = append(n.strs, s)
	n.ids[s] = id
	return id
}

// InternString is Intern for a string.
func (n *Names) InternString(s string) NameID {
	if id, ok := n.ids[s]; ok {
		return id
	}
	id := NameID(len(n.strs))
	n.strs = append(n.strs, s)
	n.ids[s] = id
	return id
}

// Lookup returns the id of s without adding it.
func (n *Names) Lookup(s string) (NameID, bool) {
	id, ok := n.ids[s]
	return id, ok
}

// String returns the text of id ("" for an unknown id).
func (n *Names) String(id NameID) string {
	if int(id) < len(n.strs) {
		return n.strs[id]
	}
	return ""
}

// Len is the number of distinct names, the empty string included.
func (n *Names) Len() int { return len(n.strs) }

// OpKind is the kind of a GPU operation.
type OpKind uint8

// GPU operation kinds.
const (
	OpKernel OpKind = iota
	OpMemcpy
	OpMemset
)

// String names the kind as the JSON output does.
func (k OpKind) String() string {
	switch k {
	case OpMemcpy:
		return "memcpy"
	case OpMemset:
		return "memset"
	default:
		return "kernel"
	}
}

// NoID marks an absent correlation, External id, Python id or index.
const NoID = -1

// GPUOp is one kernel, memcpy or memset on a device stream.
type GPUOp struct {
	Start, End  int64 // ns, in the trace's own clock (see Trace.BaseNS)
	Correlation int64 // launch correlation id (CUPTI correlationId); NoID when absent
	ExternalID  int64 // Kineto "External id" of the enclosing CPU op; NoID when absent
	Bytes       int64 // memcpy/memset bytes; 0 for kernels
	Name        NameID
	Device      int32
	Stream      int32
	Kind        OpKind
	// Links filled by Link: index into Trace.Launches and Trace.CPUOps, or NoID.
	Launch int32
	CPUOp  int32
}

// Dur is End-Start.
func (o *GPUOp) Dur() int64 { return o.End - o.Start }

// Launch is a runtime or driver API call on the CPU (cudaLaunchKernel, cudaGraphLaunch,
// cudaMemcpyAsync, cudaStreamSynchronize, ...). GPU ops point to it by correlation id.
type Launch struct {
	Start, End  int64
	Correlation int64
	ExternalID  int64
	Name        NameID
	PID, TID    int32
	// Graph is true when the call replays a CUDA/HIP graph (one launch, many GPU ops).
	Graph bool
	// Frame is the innermost Python frame enclosing the call on its thread (filled by Link), or
	// NoID. For a graph replay this is the replay site.
	Frame int32
}

// CPUOp is a framework-level CPU operation (Kineto cpu_op, e.g. aten::mm).
type CPUOp struct {
	Start, End int64
	ExternalID int64
	Name       NameID
	PID, TID   int32
	// Frame is the innermost Python frame enclosing the op (filled by Link), or NoID.
	Frame int32
}

// Frame is one Python function call (Kineto python_function, recorded with with_stack=True).
type Frame struct {
	Start, End int64
	ID         int64 // "Python id"; NoID when absent
	ParentID   int64 // "Python parent id"; NoID when absent
	Name       NameID
	PID, TID   int32
	// Parent is the index of the enclosing frame in Trace.Frames (filled by Link), or NoID.
	Parent int32
}

// Annotation is a named range: a CPU user annotation (record_function, NVTX range) or its
// GPU-side projection (gpu_user_annotation).
type Annotation struct {
	Start, End int64
	Name       NameID
	PID, TID   int32
	Device     int32 // for GPU annotations; NoID otherwise
	GPU        bool
	// ExternalID is Kineto's "External id" (it ties a gpu_user_annotation to its CPU
	// user_annotation and to the kernels launched inside it); NoID when absent. Readers that
	// have no such id (nsys) leave it 0 or NoID.
	ExternalID int64
}

// Flow is one end of a Kineto CPU-to-GPU flow arrow (cat "ac2g"): the start ("s") sits on the
// launching runtime call, the finish ("f") on the GPU op it binds to, and the id is the launch's
// correlation id. Link uses flows only as a cross-check of the correlation join.
type Flow struct {
	TS       int64
	ID       int64
	PID, TID int32
	Start    bool // true for "s", false for "f"
}

// Process describes one pid of the trace.
type Process struct {
	PID   int32
	Name  string // process_name, e.g. "python3" or "sglang::scheduler"
	Label string // process_labels, e.g. "GPU 0"; for merged SGLang traces the "[TP00] ..." prefix
	// Rank is the distributed rank when known (distributedInfo, "[TPnn]" prefix, file name); NoID otherwise.
	Rank int32
}

// Device is one GPU described by the trace.
type Device struct {
	ID   int32
	Name string
}

// Comm is the collective a communication kernel ran, as the profiler recorded its arguments
// (PyTorch's NCCL profiling puts them on the kernel: "Collective name", "In msg nelems",
// "Out msg nelems", "Group size", "dtype", "In split size", "Out split size"). Only kernels
// with such arguments have one, so the slice stays small.
type Comm struct {
	Op                int32  // index of the kernel in Trace.GPUOps
	Name              NameID // the collective as PyTorch names it ("allreduce", "_allgather_base", ...)
	DType             NameID // the element type ("Float", "BFloat16", ...)
	InElems, OutElems int64  // elements in and out on this rank
	GroupSize         int32  // ranks in the process group; 0 when not recorded
	// InSplit and OutSplit are the all-to-all split sizes as recorded ("[1024, 1024]"); 0 for "".
	InSplit, OutSplit NameID
}

// Trace is one trace file in the profiler-neutral model.
type Trace struct {
	Path   string // the file it came from
	Format string // "kineto" or "nsys"
	// BaseNS is the Unix-epoch nanosecond time that op times are relative to (0 when the op
	// times are themselves absolute, as in old Kineto traces and nsys exports).
	BaseNS int64

	Names *Names
	// CPUOpShapes holds, per CPU op (same index as CPUOps), its recorded input shapes (the
	// profiler's record_shapes) as an id in Shapes, 0 for none; nil when no op has shapes, so
	// a trace without them costs nothing more. Ops of one shape share the id, so whoever
	// derives costs from shapes does it once per distinct shape, not per op.
	CPUOpShapes []NameID
	// Shapes interns the CPUOpShapes texts: the compact JSON of the op's "Input Dims", "Input
	// type" and "Concrete Inputs" args, separated by ShapeSep (an absent one is empty).
	Shapes      *Names
	GPUOps      []GPUOp
	Launches    []Launch
	CPUOps      []CPUOp
	Frames      []Frame
	Annotations []Annotation
	Flows       []Flow
	Processes   []Process
	Devices     []Device
	// Comms are the recorded arguments of communication kernels, in GPUOps order.
	Comms []Comm
	// Meta holds top-level scalar metadata worth showing (schemaVersion, distributedInfo.rank, ...).
	Meta map[string]string
	// Warnings are problems found while reading that did not stop it (truncation, bad events).
	Warnings []string
	// LaunchTimesDropped says Launches hold one call per API name (and graph flag), shared by
	// every GPU op whose own call has that name, so their Start and End are no op's own call's
	// (an nsys reader that saves memory so); what needs a launch call's time must not read them.
	LaunchTimesDropped bool
	// Events is the number of trace events the reader saw (all phases and categories, kept or
	// not), so callers can report coverage.
	Events int64
}

// ShapeSep separates the three JSON texts of a Trace.Shapes entry (it cannot occur unescaped
// in JSON).
const ShapeSep = '\x1f'

// Shape returns the recorded-shape text of CPU op i and its id in Shapes ("" and 0 when none).
func (t *Trace) Shape(i int32) (string, NameID) {
	if i < 0 || int(i) >= len(t.CPUOpShapes) || t.CPUOpShapes[i] == 0 || t.Shapes == nil {
		return "", 0
	}
	return t.Shapes.String(t.CPUOpShapes[i]), t.CPUOpShapes[i]
}

// New returns an empty trace with its interner ready.
func New(path, format string) *Trace {
	return &Trace{Path: path, Format: format, Names: NewNames(), Meta: map[string]string{}}
}

// Name returns the text of a NameID of this trace.
func (t *Trace) Name(id NameID) string { return t.Names.String(id) }
