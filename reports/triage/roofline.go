package triage

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/sglprof/runner/reports/trace"
)

// The roofline: FLOPs and bytes of the CPU op that launched a kernel, computed from the shapes
// the profiler recorded (record_shapes: "Input Dims", "Input type", "Concrete Inputs"), and,
// per kernel row, the achieved TFLOP/s and GB/s, the arithmetic intensity and, on a GPU of the
// peak table, the percentage of the roof and whether the row is compute- or memory-bound.
//
// A CPU op's cost goes to the first kernel it launched on the analysed device (a split-K GEMM's
// reduction kernel then shows time without FLOPs rather than the GEMM's FLOPs counted twice);
// memcpy and memset ops carry their own byte counts. Ops without recorded shapes, ops of a
// graph replay (no CPU op), and ops this file has no formula for carry nothing: a row's
// figures are over the launches that had a cost (RooflineUS), never guessed for the rest.

// opCost is the modelled work of one CPU op.
type opCost struct {
	flops, bytes float64
	class        string // dtypeClass of the operands that set the compute peak ("" unknown)
	ok           bool
	// link marks a copy bound by a link (PCIe, NVLink, host memory), not the device's HBM:
	// its bandwidth is shown, but a percentage of the HBM roof would mislead.
	link bool
}

// roofAgg is a kernel row's roofline sums.
type roofAgg struct {
	flops, bytes float64
	ns           int64 // summed duration of the ops that had a cost
	class        string
	mixed        bool // the costed ops had different dtype classes
	link         bool // some costed op was a link-bound copy (no HBM roof)
	n            int  // ops that had a cost
}

func (r *roofAgg) add(c opCost, d int64) {
	r.flops += c.flops
	r.bytes += c.bytes
	r.ns += d
	r.n++
	r.link = r.link || c.link
	if c.class != "" {
		if r.class == "" {
			r.class = c.class
		} else if r.class != c.class {
			r.mixed = true
		}
	}
}

// roofCtx is one trace's roofline state: the cost cache per (CPU op name, shape) and which CPU
// ops already gave their cost to a kernel.
type roofCtx struct {
	t        *trace.Trace
	costs    map[uint64]opCost
	credited []uint64 // bit per CPU op
}

func newRoofCtx(t *trace.Trace) *roofCtx {
	if t.Shapes == nil || len(t.CPUOpShapes) == 0 {
		return nil
	}
	return &roofCtx{t: t, costs: map[uint64]opCost{}, credited: make([]uint64, (len(t.CPUOps)+63)/64)}
}

// opCost returns the cost GPU op op adds to its row g: its CPU op's, the first time a kernel of
// that CPU op is seen; a memcpy's or memset's own bytes, weighted by the row's copyTraffic.
func (r *roofCtx) opCost(op *trace.GPUOp, g *kagg) (opCost, bool) {
	if op.Kind != trace.OpKernel {
		if op.Bytes <= 0 {
			return opCost{}, false
		}
		if op.Kind == trace.OpMemcpy {
			return opCost{bytes: g.copyFactor * float64(op.Bytes), link: g.copyLink, ok: true}, true
		}
		return opCost{bytes: float64(op.Bytes), ok: true}, true // a memset writes its bytes once
	}
	if r == nil || op.CPUOp < 0 || int(op.CPUOp) >= len(r.t.CPUOps) {
		return opCost{}, false
	}
	text, shape := r.t.Shape(op.CPUOp)
	if shape == 0 {
		return opCost{}, false
	}
	w, bit := op.CPUOp>>6, uint64(1)<<(op.CPUOp&63)
	if r.credited[w]&bit != 0 {
		return opCost{}, false
	}
	co := &r.t.CPUOps[op.CPUOp]
	key := uint64(co.Name)<<32 | uint64(shape)
	c, seen := r.costs[key]
	if !seen {
		c = costOf(r.t.Name(co.Name), text)
		r.costs[key] = c
	}
	if !c.ok {
		return opCost{}, false
	}
	r.credited[w] |= bit
	return c, true
}

// copyTraffic is how a copy named name loads the roofline: the factor its byte count is
// multiplied by for the memory traffic it causes, and whether a link rather than the device's
// HBM bounds it. A device-to-device copy on one GPU reads and writes every byte in HBM (the
// profiler's own bandwidth figure counts them once, so a copy at the HBM roof would read as
// half of it); copies to or from the host or another GPU move each byte once over PCIe,
// NVLink or host memory, whose peaks the table does not hold. Names are Kineto's ("Memcpy
// DtoD (Device -> Device)", "Memcpy PtoP (...)") and nsys's ("[CUDA memcpy
// Device-to-Device]"); a name of neither form keeps factor 1 against HBM.
func copyTraffic(name string) (factor float64, link bool) {
	switch {
	case strings.Contains(name, "DtoD"), strings.HasSuffix(name, " Device-to-Device]") && !strings.Contains(name, "Unified"):
		return 2, false
	case strings.Contains(name, "HtoD"), strings.Contains(name, "DtoH"), strings.Contains(name, "HtoH"),
		strings.Contains(name, "PtoP"), strings.Contains(name, "Host"), strings.Contains(name, "Peer-to-Peer"),
		strings.Contains(name, "Unified"):
		return 1, true
	}
	return 1, false
}

// shapeArgs are one CPU op's recorded inputs.
type shapeArgs struct {
	dims     [][]int64 // nil where the input is not a tensor (a scalar, a list, None)
	types    []string
	concrete []string
}

func parseShape(s string) (shapeArgs, bool) {
	parts := strings.Split(s, string(trace.ShapeSep))
	var a shapeArgs
	if len(parts) != 3 || parts[0] == "" {
		return a, false
	}
	var raw []json.RawMessage
	if json.Unmarshal([]byte(parts[0]), &raw) != nil {
		return a, false
	}
	a.dims = make([][]int64, len(raw))
	for i, r := range raw {
		var d []int64
		if json.Unmarshal(r, &d) == nil && len(r) > 0 && r[0] == '[' && !slices.ContainsFunc(d, func(x int64) bool { return x < 0 }) {
			if d == nil {
				d = []int64{} // a 0-d tensor or an empty list: both read "[]"
			}
			a.dims[i] = d
		}
	}
	if parts[1] != "" {
		_ = json.Unmarshal([]byte(parts[1]), &a.types)
	}
	if parts[2] != "" {
		_ = json.Unmarshal([]byte(parts[2]), &a.concrete)
	}
	return a, true
}

func (a *shapeArgs) dim(i int) []int64 {
	if i < len(a.dims) {
		return a.dims[i]
	}
	return nil
}

func (a *shapeArgs) typ(i int) string {
	if i < len(a.types) {
		return a.types[i]
	}
	return ""
}

// tensor reports whether input i is a tensor with a known element type.
func (a *shapeArgs) tensor(i int) bool {
	return a.dim(i) != nil && eltSize(a.typ(i)) > 0
}

func (a *shapeArgs) bytes(i int) float64 {
	if !a.tensor(i) {
		return 0
	}
	return numel(a.dim(i)) * eltSize(a.typ(i))
}

// concreteInts parses concrete input i as integers: "2" or a list "[2, 2]" (nil when it is
// neither).
func (a *shapeArgs) concreteInts(i int) []int64 {
	if i >= len(a.concrete) {
		return nil
	}
	s := strings.Trim(strings.TrimSpace(a.concrete[i]), "[]")
	if s == "" {
		return nil
	}
	var out []int64
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil {
			return nil
		}
		out = append(out, n)
	}
	return out
}

// concreteTrue reports whether concrete input i is the boolean true ("True", "true" or "1").
func (a *shapeArgs) concreteTrue(i int) bool {
	if i >= len(a.concrete) {
		return false
	}
	switch strings.TrimSpace(a.concrete[i]) {
	case "True", "true", "1":
		return true
	}
	return false
}

func numel(d []int64) float64 {
	n := 1.0
	for _, x := range d {
		n *= float64(x)
	}
	return n
}

// eltSize is the bytes of one element of a recorded input type, 0 when not a tensor type.
func eltSize(t string) float64 {
	switch t {
	case "c10::BFloat16", "c10::Half", "short", "short int":
		return 2
	case "float", "int", "unsigned int":
		return 4
	case "double", "long", "long int", "long long", "c10::complex<float>":
		return 8
	case "bool", "signed char", "unsigned char", "c10::Float8_e4m3fn", "c10::Float8_e5m2",
		"c10::Float8_e4m3fnuz", "c10::Float8_e5m2fnuz", "c10::Float8_e8m0fnu":
		return 1
	}
	return 0
}

// dtypeClass names the peak an input type runs against ("" when the table has none for it).
func dtypeClass(t string) string {
	switch t {
	case "c10::BFloat16":
		return "bf16"
	case "c10::Half":
		return "fp16"
	case "float":
		return "fp32"
	case "c10::Float8_e4m3fn", "c10::Float8_e5m2", "c10::Float8_e4m3fnuz", "c10::Float8_e5m2fnuz":
		return "fp8"
	}
	return ""
}

// gemmOperands gives, per GEMM-like op, the input positions of A and B (and of an added bias,
// -1 for none). 2-D B may be [K, N] or [N, K] (a weight stored transposed): gemm2D finds K.
var gemmOperands = map[string][3]int{
	"aten::mm":                            {0, 1, -1},
	"aten::_int_mm":                       {0, 1, -1},
	"aten::_scaled_mm":                    {0, 1, -1},
	"aten::addmm":                         {1, 2, 0},
	"aten::_addmm_activation":             {1, 2, 0},
	"aten::bmm":                           {0, 1, -1},
	"aten::baddbmm":                       {1, 2, 0},
	"aten::matmul":                        {0, 1, -1},
	"aten::linear":                        {0, 1, 2},
	"_C::cutlass_scaled_mm":               {1, 2, -1}, // vLLM: (out, a, b, a_scales, b_scales, bias)
	"sgl_kernel::fp8_scaled_mm":           {0, 1, -1},
	"sgl_kernel::int8_scaled_mm":          {0, 1, -1},
	"sgl_kernel::fp8_blockwise_scaled_mm": {0, 1, -1},
}

// attnLayout describes an attention op: q, k, v at inputs 0-2, laid out [B, H, S, D] (bhsd)
// or [B, S, H, D]; causal is the Concrete Inputs position of its causal flag (-1: none);
// varlen is the position of a cumulative-sequence-length input whose presence makes the op
// ragged (per-sequence lengths unknown from shapes: no cost), -1 for none.
type attnLayout struct {
	bhsd           bool
	causal, varlen int
	topLeft        bool // the causal mask is aligned to the top-left corner (SDPA's is_causal)
}

var attnOps = map[string]attnLayout{
	"aten::scaled_dot_product_attention":            {bhsd: true, causal: 5, varlen: -1, topLeft: true},
	"aten::_scaled_dot_product_flash_attention":     {bhsd: true, causal: 4, varlen: -1, topLeft: true},
	"aten::_scaled_dot_product_efficient_attention": {bhsd: true, causal: 6, varlen: -1, topLeft: true},
	"aten::_scaled_dot_product_cudnn_attention":     {bhsd: true, causal: 6, varlen: -1, topLeft: true},
	// The op under SDPA's cuDNN backend that launches the kernel (PyTorch 2.11 on H100 picks
	// this backend by default): (q, k, v, attn_bias, cum_seq_q, cum_seq_k, max_q, max_k,
	// compute_log_sumexp, dropout_p, is_causal, ...); batched inputs are [B, H, S, D].
	"aten::_cudnn_attention_forward":     {bhsd: true, causal: 10, varlen: 4, topLeft: true},
	"aten::_flash_attention_forward":     {causal: 8, varlen: 3},
	"aten::_efficient_attention_forward": {causal: -2, varlen: 4}, // custom_mask_type at 9
	"flash_attn::_flash_attn_forward":    {causal: 5, varlen: -1},
}

// costOf computes a CPU op's cost from its shape text (ok false: no formula, or the shapes do
// not fit it).
func costOf(name, shape string) opCost {
	a, ok := parseShape(shape)
	if !ok {
		return opCost{}
	}
	if ops, ok := gemmOperands[name]; ok {
		return gemmCost(&a, ops)
	}
	if l, ok := attnOps[name]; ok {
		return attnCost(&a, l)
	}
	switch name {
	case "aten::convolution", "aten::_convolution":
		return convCost(&a, 3, 4, 5, 6, 7, 8)
	case "aten::cudnn_convolution":
		return convCost(&a, 3, 2, 4, -1, -1, 5)
	case "aten::copy_":
		return bytesCost(a.bytes(0) + a.bytes(1))
	case "aten::clone", "aten::contiguous":
		return bytesCost(2 * a.bytes(0))
	case "aten::native_layer_norm", "aten::native_group_norm", "aten::native_batch_norm", "aten::_fused_rms_norm":
		// read the input, write the output, read the affine parameters (and running stats)
		return bytesCost(2*a.bytes(0) + a.bytes(1) + a.bytes(2) + a.bytes(3) + a.bytes(4))
	case "_C::rms_norm", "sgl_kernel::rmsnorm": // (out, input, weight, ...)
		return bytesCost(a.bytes(0) + a.bytes(1) + a.bytes(2))
	case "_C::fused_add_rms_norm", "sgl_kernel::fused_add_rmsnorm": // (input, residual, weight, ...), both updated in place
		return bytesCost(2*a.bytes(0) + 2*a.bytes(1) + a.bytes(2))
	}
	if base, ok := strings.CutPrefix(name, "aten::"); ok {
		if elementwiseOps[strings.TrimSuffix(base, "_")] {
			return eltwiseCost(&a, strings.HasSuffix(base, "_"))
		}
	}
	return opCost{}
}

// elementwiseOps are the aten ops (without a trailing "_" for the in-place form) costed as
// one FLOP per output element, reading every tensor input and writing the broadcast output.
var elementwiseOps = map[string]bool{
	"add": true, "sub": true, "mul": true, "div": true, "rsub": true, "neg": true, "abs": true,
	"exp": true, "log": true, "sqrt": true, "rsqrt": true, "reciprocal": true, "pow": true,
	"relu": true, "gelu": true, "silu": true, "sigmoid": true, "tanh": true, "sin": true, "cos": true,
	"erf": true, "clamp": true, "clamp_min": true, "clamp_max": true, "where": true, "maximum": true,
	"minimum": true, "masked_fill": true, "fill": true, "zero": true,
}

func bytesCost(b float64) opCost {
	if b <= 0 {
		return opCost{}
	}
	return opCost{bytes: b, ok: true}
}

// gemmCost: 2·M·N·K (times the batch) FLOPs; bytes read A, B (and the bias) once and write C
// once in A's type (an FP8 GEMM's output is taken as 2-byte: FP8 GEMMs write BF16/FP16).
func gemmCost(a *shapeArgs, ops [3]int) opCost {
	A, B := a.dim(ops[0]), a.dim(ops[1])
	if !a.tensor(ops[0]) || !a.tensor(ops[1]) || len(A) == 0 || len(B) == 0 {
		return opCost{}
	}
	k := A[len(A)-1]
	m := numel(A[:len(A)-1]) // rows of A; for batched A this includes the batch
	var n float64
	batch := 1.0
	switch {
	case len(B) == 1: // matrix-vector
		if B[0] != k {
			return opCost{}
		}
		n = 1
	case len(B) == 2:
		switch {
		case B[0] == k:
			n = float64(B[1])
		case B[1] == k:
			n = float64(B[0])
		default:
			return opCost{}
		}
	default: // batched B [..., K, N]: A's leading dims are the batch
		if B[len(B)-2] != k || len(A) < 2 {
			return opCost{}
		}
		n = float64(B[len(B)-1])
		m = float64(A[len(A)-2])
		batch = math.Max(numel(A[:len(A)-2]), numel(B[:len(B)-2]))
	}
	kf := float64(k)
	eA, eB := eltSize(a.typ(ops[0])), eltSize(a.typ(ops[1]))
	eC := eA
	if dtypeClass(a.typ(ops[0])) == "fp8" {
		eC = 2
	}
	b := batch * (m*kf*eA + kf*n*eB + m*n*eC)
	if ops[2] >= 0 {
		b += a.bytes(ops[2])
	}
	return opCost{flops: 2 * batch * m * n * kf, bytes: b, class: dtypeClass(a.typ(ops[0])), ok: true}
}

// causalPairs counts the (query, key) pairs a causal mask keeps: top-left alignment keeps
// key j ≤ query i; bottom-right (FlashAttention ≥ 2.1) keeps j ≤ i + sk − sq.
func causalPairs(sq, sk int64, topLeft bool) float64 {
	off := int64(0)
	if !topLeft {
		off = sk - sq
	}
	// query i keeps min(sk, max(0, i+off+1)) keys
	var n float64
	for i := int64(0); i < sq; i++ {
		n += float64(min(sk, max(0, i+off+1)))
	}
	return n
}

// attnCost: QKᵀ and PV are 2·B·H·Sq·Sk·D and 2·B·H·Sq·Sk·Dv FLOPs over the kept pairs; bytes
// read q, k, v once and write an output of q's size (with Dv).
func attnCost(a *shapeArgs, l attnLayout) opCost {
	if !a.tensor(0) || !a.tensor(1) || !a.tensor(2) {
		return opCost{}
	}
	if l.varlen >= 0 && len(a.dim(l.varlen)) > 0 {
		return opCost{}
	}
	q, k, v := a.dim(0), a.dim(1), a.dim(2)
	if len(q) != 4 || len(k) != 4 || len(v) != 4 {
		return opCost{}
	}
	var b, h, sq, sk, d, dv int64
	if l.bhsd {
		b, h, sq, d, sk, dv = q[0], q[1], q[2], q[3], k[2], v[3]
	} else {
		b, sq, h, d, sk, dv = q[0], q[1], q[2], q[3], k[1], v[3]
	}
	causal := false
	switch {
	case l.causal >= 0:
		causal = a.concreteTrue(l.causal)
	case l.causal == -2: // _efficient_attention_forward's custom_mask_type: 1 top-left, 2 bottom-right
		if m := a.concreteInts(9); len(m) == 1 && m[0] != 0 {
			causal, l.topLeft = true, m[0] == 1
		}
	}
	pairs := float64(sq) * float64(sk)
	if causal {
		pairs = causalPairs(sq, sk, l.topLeft)
	}
	flops := 2 * float64(b) * float64(h) * pairs * float64(d+dv)
	out := float64(b) * float64(h) * float64(sq) * float64(dv) * eltSize(a.typ(0))
	return opCost{flops: flops, bytes: a.bytes(0) + a.bytes(1) + a.bytes(2) + out, class: dtypeClass(a.typ(0)), ok: flops > 0}
}

// convCost: 2·N·Cout·(output positions)·(Cin/groups)·(kernel positions) FLOPs; bytes read the
// input, weight and bias and write the output. The arguments are Concrete Inputs positions of
// stride, padding, dilation, transposed, output_padding and groups (-1: absent, default).
func convCost(a *shapeArgs, iStride, iPad, iDil, iTrans, iOutPad, iGroups int) opCost {
	in, w := a.dim(0), a.dim(1)
	if !a.tensor(0) || !a.tensor(1) || len(in) < 3 || len(w) != len(in) {
		return opCost{}
	}
	sp := len(in) - 2
	get := func(i int, def int64) ([]int64, bool) {
		if i < 0 {
			out := make([]int64, sp)
			for j := range out {
				out[j] = def
			}
			return out, true
		}
		v := a.concreteInts(i)
		if len(v) == 1 {
			for len(v) < sp {
				v = append(v, v[0])
			}
		}
		return v, len(v) == sp
	}
	stride, ok1 := get(iStride, 1)
	pad, ok2 := get(iPad, 0)
	dil, ok3 := get(iDil, 1)
	outPad, ok4 := get(iOutPad, 0)
	groups := int64(1)
	if g := a.concreteInts(iGroups); len(g) == 1 && g[0] > 0 {
		groups = g[0]
	} else if iGroups >= 0 {
		return opCost{}
	}
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return opCost{}
	}
	trans := iTrans >= 0 && a.concreteTrue(iTrans)
	n, cin := float64(in[0]), float64(in[1])
	outPos, kPos := 1.0, 1.0
	for i := 0; i < sp; i++ {
		x, kk := in[2+i], w[2+i]
		if stride[i] <= 0 || dil[i] <= 0 || x <= 0 || kk <= 0 {
			return opCost{}
		}
		var o int64
		if trans {
			o = (x-1)*stride[i] - 2*pad[i] + dil[i]*(kk-1) + outPad[i] + 1
		} else {
			o = (x+2*pad[i]-dil[i]*(kk-1)-1)/stride[i] + 1
		}
		if o <= 0 {
			return opCost{}
		}
		outPos *= float64(o)
		kPos *= float64(kk)
	}
	var flops, cout float64
	inPos := numel(in[2:])
	if trans { // weight [Cin, Cout/groups, k...]
		cout = float64(w[1]) * float64(groups)
		flops = 2 * n * cin * inPos * float64(w[1]) * kPos
	} else { // weight [Cout, Cin/groups, k...]
		cout = float64(w[0])
		flops = 2 * n * cout * outPos * float64(w[1]) * kPos
	}
	out := n * cout * outPos * eltSize(a.typ(0))
	bias := 0.0
	if iStride == 3 { // aten::convolution and _convolution take the bias at 2
		bias = a.bytes(2)
	}
	return opCost{flops: flops, bytes: a.bytes(0) + a.bytes(1) + bias + out, class: dtypeClass(a.typ(0)), ok: flops > 0}
}

// eltwiseCost: reads every tensor input, writes the broadcast shape (in place: the first
// input) in the first input's type; one FLOP per output element.
func eltwiseCost(a *shapeArgs, inPlace bool) opCost {
	var read float64
	var shape []int64
	first := -1
	for i := range a.dims {
		if !a.tensor(i) {
			continue
		}
		if first < 0 {
			first = i
		}
		read += a.bytes(i)
		shape = broadcast(shape, a.dims[i])
	}
	if first < 0 {
		return opCost{}
	}
	if inPlace {
		shape = a.dims[first]
	}
	out := numel(shape)
	return opCost{flops: out, bytes: read + out*eltSize(a.typ(first)), ok: read+out > 0}
}

// broadcast is the NumPy broadcast of two shapes (the larger extent per aligned dimension).
func broadcast(x, y []int64) []int64 {
	if len(x) < len(y) {
		x, y = y, x
	}
	out := append([]int64(nil), x...)
	off := len(x) - len(y)
	for i, v := range y {
		if v > out[off+i] {
			out[off+i] = v
		}
	}
	return out
}

// Bound verdicts of KernelRow.Bound.
const (
	BoundCompute = "compute"
	BoundMemory  = "memory"
)

// RooflineFromMapping is KernelRow.RooflineFrom for figures taken from the mapping trace.
const RooflineFromMapping = "mapping"

// setRoofline fills a kernel row's roofline fields from its sums and the device's peak.
func setRoofline(row *KernelRow, r *roofAgg, peak *Peak) {
	if r.ns <= 0 || r.flops <= 0 && r.bytes <= 0 {
		return
	}
	secs := float64(r.ns) / 1e9
	row.FLOPs, row.Bytes, row.RooflineUS = r.flops, r.bytes, float64(r.ns)/1e3
	row.TFLOPS = r.flops / secs / 1e12
	row.GBps = r.bytes / secs / 1e9
	if r.bytes > 0 && r.flops > 0 {
		row.Intensity = r.flops / r.bytes
	}
	if !r.mixed {
		row.Dtype = r.class
	}
	if peak == nil {
		return
	}
	if r.flops <= 0 { // bytes only (a copy, a norm, a memcpy): the bandwidth roof
		if !r.link {
			row.Bound, row.PctOfPeak = BoundMemory, row.GBps/peak.HBMGBps*100
		}
		return
	}
	pf := peak.TFLOPS(r.class)
	if r.mixed || pf <= 0 {
		// No compute roof for these operands (elementwise work, integer types): an intensity
		// under the ridge of the slowest roof we know (FP32 without tensor cores) is
		// memory-bound whatever the roof; otherwise achieved figures only.
		if peak.FP32 > 0 && row.Intensity < peak.FP32*1e3/peak.HBMGBps {
			row.Bound, row.PctOfPeak = BoundMemory, row.GBps/peak.HBMGBps*100
		}
		return
	}
	ridge := pf * 1e3 / peak.HBMGBps // FLOP per byte where the roofs meet
	if r.bytes <= 0 || row.Intensity >= ridge {
		row.Bound, row.PctOfPeak = BoundCompute, row.TFLOPS/pf*100
	} else {
		row.Bound, row.PctOfPeak = BoundMemory, row.GBps/peak.HBMGBps*100
	}
}

// devicePeak finds the analysed device of t in the peak table; name is the device's name
// as the trace gives it ("" when the trace has none).
func devicePeak(t *trace.Trace, dev int32) (name string, p *Peak) {
	for _, d := range t.Devices {
		if d.ID == dev {
			name = d.Name
			break
		}
	}
	if name == "" && len(t.Devices) > 0 {
		// every GPU of a job is normally one model: a trace whose device ids do not match its
		// GPU ops (a merged trace) still names it
		name = t.Devices[0].Name
		for _, d := range t.Devices[1:] {
			if d.Name != name {
				return "", nil
			}
		}
	}
	if pk, ok := PeakFor(name); ok {
		return name, &pk
	}
	return name, nil
}
