package plans

import (
	"fmt"

	"github.com/BurntSushi/toml"
)

// nsys capture ranges on servers: with capture_range = "cudaProfilerApi" the
// server runs under `nsys profile --capture-range=cudaProfilerApi --capture-range-end=...` and
// nsys collects only between the application's cudaProfilerStart and cudaProfilerStop, which
// the runner's own /start_profile and /stop_profile make the server call.

// Capture ranges ([nsys] capture_range).
const (
	CaptureRangeNone    = "none"
	CaptureRangeCudaAPI = "cudaProfilerApi"
)

// CaptureRanges are the values of [nsys] capture_range.
var CaptureRanges = []string{CaptureRangeNone, CaptureRangeCudaAPI}

// CaptureRangeEnds are the values of [nsys] capture_range_end the runner accepts: "stop"
// (the first range only) and "repeat" (every start/stop pair). nsys's own default,
// "stop-shutdown", and "repeat-shutdown:N" end the application when the range closes, which
// would kill the server the runner still talks to, so the runner always passes the flag.
var CaptureRangeEnds = []string{"stop", "repeat"}

type rawNSysCapture struct {
	CaptureRange    toml.Primitive `toml:"capture_range"`
	CaptureRangeEnd toml.Primitive `toml:"capture_range_end"`
}

// decodeNSysCapture decodes the capture-range keys of [nsys] (prim is the table).
func (d *decoder) decodeNSysCapture(prim toml.Primitive, n *NSys) {
	var rc rawNSysCapture
	if d.md.PrimitiveDecode(prim, &rc) != nil {
		return // decodeNSys reported the table
	}
	decodeField(d, path("nsys", "capture_range"), rc.CaptureRange, &n.CaptureRange, `a string: "none" or "cudaProfilerApi"`)
	decodeField(d, path("nsys", "capture_range_end"), rc.CaptureRangeEnd, &n.CaptureRangeEnd, `a string: "stop" or "repeat"`)
}

// validateNSysCapture checks capture_range and capture_range_end, and fills the default end.
func (d *decoder) validateNSysCapture(p *Plan) {
	ns := &p.NSys
	k := path("nsys", "capture_range")
	rangeOK := d.check(k...)
	if rangeOK && ns.CaptureRange != "" && !oneOf(ns.CaptureRange, CaptureRanges) {
		d.addKey(k, fmt.Sprintf("unknown value %q; use %s (cudaProfilerApi: collect only between the server's cudaProfilerStart and cudaProfilerStop, which the runner's /start_profile and /stop_profile trigger)", ns.CaptureRange, quoteList(CaptureRanges)))
		rangeOK = false
	}
	cuda := rangeOK && ns.CaptureRange == CaptureRangeCudaAPI
	if ek := path("nsys", "capture_range_end"); d.check(ek...) && d.md.IsDefined(ek...) {
		switch {
		case !oneOf(ns.CaptureRangeEnd, CaptureRangeEnds):
			d.addKey(ek, fmt.Sprintf("unsupported value %q; use %s (the -shutdown variants end the server when the range closes, while the runner still talks to it)", ns.CaptureRangeEnd, quoteList(CaptureRangeEnds)))
		case rangeOK && !cuda:
			d.addKey(ek, `only used with capture_range = "cudaProfilerApi"; set it, or drop the key`)
		}
	}
	if !cuda {
		return
	}
	if ns.CaptureRangeEnd == "" {
		ns.CaptureRangeEnd = "stop"
	}
	for _, w := range []string{"delay", "duration"} {
		if wk := path("nsys", w); d.check(wk...) && d.md.IsDefined(wk...) {
			d.addKey(wk, fmt.Sprintf(`with capture_range = "cudaProfilerApi" the window is the server's profiler start and stop, not a time; drop %s`, w))
		}
	}
}
