package triage

import (
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/sglprof/runner/reports/trace"
)

var reDiffusionStage = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Z][A-Za-z0-9]*Stage$`) })

// annotationStage maps an annotation name to a stage label, or "" when it names no stage.
// LLM: SGLang's step[EXTEND ...]/step[DECODE ...] (and the anchor generator's prefill_step_N /
// decode_step_N); diffusion: pipeline stage classes (DenoisingStage, DecodingStage, ...) and
// the denoising_step_N ranges inside the denoising stage.
func annotationStage(name string) string {
	l := strings.ToLower(name)
	switch {
	case strings.HasPrefix(l, "step[extend"), strings.HasPrefix(l, "step[prefill"),
		strings.HasPrefix(l, "prefill_step"), strings.HasPrefix(l, "extend_step"):
		return StageExtend
	case strings.HasPrefix(l, "step[decode"), strings.HasPrefix(l, "decode_step"):
		return StageDecode
	case strings.HasPrefix(l, "step[mixed"):
		return StageMixed
	case strings.HasPrefix(l, "denoising_step_"):
		return "DenoisingStage"
	case reDiffusionStage().MatchString(name):
		return name
	}
	return ""
}

// IsStageAnnotation says an annotation named name marks a stage (its ops' stage label is the
// stage it names): a reader that holds only some annotations keeps these.
func IsStageAnnotation(name string) bool { return annotationStage(name) != "" }

type window struct {
	start, end int64
	stage      string
}

// windowSet answers "which stage window contains t" in O(log n) with nested windows allowed:
// the innermost (latest-starting) containing window wins. find remembers where its last
// search ended, so one windowSet serves one goroutine.
type windowSet struct {
	w      []window
	maxEnd []int64
	near   int // the last search's answer, where the next starts (ops come mostly in time order)
}

func newWindowSet(w []window) *windowSet {
	sort.Slice(w, func(i, j int) bool {
		if w[i].start != w[j].start {
			return w[i].start < w[j].start
		}
		return w[i].end > w[j].end
	})
	me := make([]int64, len(w))
	var m int64
	for i, x := range w {
		if i == 0 || x.end > m {
			m = x.end
		}
		me[i] = m
	}
	return &windowSet{w: w, maxEnd: me}
}

func (s *windowSet) find(t int64) string {
	if s == nil || len(s.w) == 0 {
		return ""
	}
	i := trace.SearchNear(len(s.w), s.near, func(i int) bool { return s.w[i].start > t })
	s.near = i
	i--
	for j := i; j >= 0 && s.maxEnd[j] > t; j-- {
		if s.w[j].start <= t && t < s.w[j].end {
			return s.w[j].stage
		}
	}
	return ""
}

// AnnotationStages is the stage of every GPU op of t (same index) from the trace's stage
// annotations, as Analyze assigns them when Options.Stages does not answer; nil when t has no
// stage annotation. Only GPU-side annotations of device count (all of them for trace.NoID).
// The nsys triage computes it up front, so that it can drop the launch times that the
// CPU-side stage windows are otherwise looked up with (see runner.compactLaunches).
func AnnotationStages(t *trace.Trace, device int32) []string {
	ops := make([]int32, len(t.GPUOps))
	for i := range ops {
		ops[i] = int32(i)
	}
	return opStages(t, ops, device)
}

// opStages assigns every op in ops (indices into t.GPUOps) a stage from the trace's
// annotations. It returns nil when the trace has no stage annotations at all.
func opStages(t *trace.Trace, ops []int32, device int32) []string {
	gpu, cpu := stageWindows(t, device)
	if len(gpu) == 0 && len(cpu) == 0 {
		return nil
	}
	gs, cs := newWindowSet(gpu), newWindowSet(cpu)
	out := make([]string, len(ops))
	for i, oi := range ops {
		op := &t.GPUOps[oi]
		st := gs.find(op.Start)
		if st == "" && len(cpu) > 0 {
			ct := op.Start
			if op.Launch >= 0 && int(op.Launch) < len(t.Launches) {
				ct = t.Launches[op.Launch].Start
			} else if op.CPUOp >= 0 && int(op.CPUOp) < len(t.CPUOps) {
				ct = t.CPUOps[op.CPUOp].Start
			}
			st = cs.find(ct)
		}
		if st == "" {
			st = StageUnannotated
		}
		out[i] = st
	}
	return out
}

// stageWindows are t's stage annotations as windows: the GPU-side ones of device (all of them
// for trace.NoID), and the CPU-side ones, which contain an op's launch call.
func stageWindows(t *trace.Trace, device int32) (gpu, cpu []window) {
	cache := map[trace.NameID]string{}
	for _, a := range t.Annotations {
		st, ok := cache[a.Name]
		if !ok {
			st = annotationStage(t.Name(a.Name))
			cache[a.Name] = st
		}
		if st == "" || a.End <= a.Start {
			continue
		}
		if a.GPU {
			if a.Device == device || a.Device == trace.NoID {
				gpu = append(gpu, window{a.Start, a.End, st})
			}
		} else {
			cpu = append(cpu, window{a.Start, a.End, st})
		}
	}
	return gpu, cpu
}
