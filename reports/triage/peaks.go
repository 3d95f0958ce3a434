package triage

import "strings"

// Peak is one GPU's dense (no 2:4 sparsity) datasheet peaks: tensor-core TFLOP/s per input
// type and HBM bandwidth. A zero figure is one the datasheet does not give (or a type the GPU
// has no tensor-core path for); a kernel of that type gets achieved figures without a
// percentage.
type Peak struct {
	// GPU names the table entry ("H100 SXM").
	GPU string `json:"gpu"`
	// BF16, FP16, FP8 and FP32 are dense TFLOP/s; FP32 is the non-tensor-core rate (PyTorch
	// runs float32 matmuls without TF32 unless allow_tf32 is set).
	BF16 float64 `json:"bf16_tflops"`
	FP16 float64 `json:"fp16_tflops"`
	FP8  float64 `json:"fp8_tflops,omitempty"`
	FP32 float64 `json:"fp32_tflops,omitempty"`
	// HBMGBps is the memory bandwidth in GB/s (1e9 bytes per second).
	HBMGBps float64 `json:"hbm_gbps"`
	// Source names the vendor document the figures come from. Where the datasheet prints
	// only with-sparsity tensor figures, the dense figure is half of it (the datasheets say so
	// in their footnotes).
	Source string `json:"source"`
}

// TFLOPS returns the peak for an input type (as dtypeClass names it), 0 when unknown.
func (p Peak) TFLOPS(class string) float64 {
	switch class {
	case "bf16":
		return p.BF16
	case "fp16":
		return p.FP16
	case "fp8":
		return p.FP8
	case "fp32":
		return p.FP32
	}
	return 0
}

const (
	srcH100 = "NVIDIA H100 Tensor Core GPU datasheet (SXM and PCIe columns; tensor figures printed with sparsity, dense = 1/2)"
	srcH200 = "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM column; tensor figures printed with sparsity, dense = 1/2)"
	srcB200 = "NVIDIA HGX B200 datasheet (8-GPU system figures / 8; tensor figures printed with sparsity, dense = 1/2)"
	srcGB   = "NVIDIA GB200 NVL72 datasheet (72-GPU rack figures / 72; tensor figures printed with sparsity, dense = 1/2)"
	srcA100 = "NVIDIA A100 Tensor Core GPU datasheet (dense tensor figures; bandwidth per memory/form factor)"
	srcL40S = "NVIDIA L40S GPU datasheet (tensor figures printed with sparsity, dense = 1/2)"
	srcM300 = "AMD Instinct MI300X accelerator data sheet (dense peak figures)"
	srcM325 = "AMD Instinct MI325X accelerator data sheet (dense peak figures)"
	srcM355 = "AMD Instinct MI355X GPU data sheet (dense peak figures)"
)

// peakTable is the GPUs the roofline knows, most specific match rule first (see PeakFor).
var peakTable = []struct {
	all  []string // every one of these must occur in the lower-cased device name
	none []string // and none of these
	peak Peak
}{
	{[]string{"gb200"}, nil, Peak{GPU: "GB200", BF16: 2500, FP16: 2500, FP8: 5000, FP32: 80, HBMGBps: 8000, Source: srcGB}},
	{[]string{"b200"}, []string{"gb200"}, Peak{GPU: "B200", BF16: 2250, FP16: 2250, FP8: 4500, FP32: 75, HBMGBps: 8000, Source: srcB200}},
	{[]string{"h200"}, []string{"nvl"}, Peak{GPU: "H200 SXM", BF16: 989.5, FP16: 989.5, FP8: 1979, FP32: 67, HBMGBps: 4800, Source: srcH200}},
	{[]string{"h100", "pcie"}, nil, Peak{GPU: "H100 PCIe", BF16: 756.5, FP16: 756.5, FP8: 1513, FP32: 51, HBMGBps: 2000, Source: srcH100}},
	{[]string{"h100", "hbm3"}, []string{"nvl", "pcie"}, Peak{GPU: "H100 SXM", BF16: 989.5, FP16: 989.5, FP8: 1979, FP32: 67, HBMGBps: 3350, Source: srcH100}},
	{[]string{"h100", "sxm"}, []string{"nvl", "pcie"}, Peak{GPU: "H100 SXM", BF16: 989.5, FP16: 989.5, FP8: 1979, FP32: 67, HBMGBps: 3350, Source: srcH100}},
	{[]string{"a100", "pcie", "40gb"}, nil, Peak{GPU: "A100 PCIe 40GB", BF16: 312, FP16: 312, FP32: 19.5, HBMGBps: 1555, Source: srcA100}},
	{[]string{"a100", "pcie"}, nil, Peak{GPU: "A100 PCIe 80GB", BF16: 312, FP16: 312, FP32: 19.5, HBMGBps: 1935, Source: srcA100}},
	{[]string{"a100", "40gb"}, nil, Peak{GPU: "A100 SXM 40GB", BF16: 312, FP16: 312, FP32: 19.5, HBMGBps: 1555, Source: srcA100}},
	{[]string{"a100", "80gb"}, nil, Peak{GPU: "A100 SXM 80GB", BF16: 312, FP16: 312, FP32: 19.5, HBMGBps: 2039, Source: srcA100}},
	{[]string{"l40s"}, nil, Peak{GPU: "L40S", BF16: 362.05, FP16: 362.05, FP8: 733, FP32: 91.6, HBMGBps: 864, Source: srcL40S}},
	{[]string{"mi300x"}, nil, Peak{GPU: "MI300X", BF16: 1307.4, FP16: 1307.4, FP8: 2614.9, FP32: 163.4, HBMGBps: 5300, Source: srcM300}},
	{[]string{"mi325x"}, nil, Peak{GPU: "MI325X", BF16: 1307.4, FP16: 1307.4, FP8: 2614.9, FP32: 163.4, HBMGBps: 6000, Source: srcM325}},
	{[]string{"mi355x"}, nil, Peak{GPU: "MI355X", BF16: 2516.6, FP16: 2516.6, FP8: 5033.2, FP32: 157.3, HBMGBps: 8000, Source: srcM355}},
}

// PeakFor finds a device name (Kineto's deviceProperties name, the nsys export's GPU name) in
// the peak table. Names that could be two products (a bare "H100", "H100 NVL", "H200 NVL")
// are not matched: a wrong peak is worse than none.
func PeakFor(device string) (Peak, bool) {
	low := strings.ToLower(device)
	for _, e := range peakTable {
		ok := true
		for _, s := range e.all {
			ok = ok && strings.Contains(low, s)
		}
		for _, s := range e.none {
			ok = ok && !strings.Contains(low, s)
		}
		if ok {
			return e.peak, true
		}
	}
	return Peak{}, false
}

// Peaks lists the table (for docs and tests).
func Peaks() []Peak {
	out := make([]Peak, len(peakTable))
	for i, e := range peakTable {
		out[i] = e.peak
	}
	return out
}
