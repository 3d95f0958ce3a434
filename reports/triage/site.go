package triage

import (
	"math"
	"strings"

	"github.com/sglprof/runner/reports/trace"
)

// Site scores: the deepest frame with the highest score is a kernel's Python location (W11:
// framework and model code beat torch/nn/modules wrappers whatever sys.path trimming did).
const (
	scoreNoise     = -1 // threading, asyncio, built-ins, nn.Module markers: never a location if anything else exists
	scoreTorch     = 0  // torch/, triton/ internals
	scoreWrapper   = 1  // framework frames that only forward the call (__call__, _call_impl, parameter.py, ...)
	scoreUserCode  = 2  // other Python files (model code outside the known frameworks)
	scoreFramework = 3  // sglang, vllm, sgl_kernel, tensorrt_llm, tokenspeed, vllm_omni, diffusers
)

// frameworkMarkers are path fragments after which a path is shown repo-relative, in the
// anchor v2 order; the first that occurs wins.
var frameworkMarkers = []string{"python/sglang/", "sgl_kernel/", "vllm_omni/", "vllm/", "python/tokenspeed/", "tokenspeed/", "tensorrt_llm/", "diffusers/"}

var noisePrefixes = []string{"threading.py", "multiprocessing/", "contextlib.py", "torch/utils/_contextlib.py", "runpy.py", "asyncio/", "selectors.py", "queue.py", "socket.py", "tqdm/", "<string>", "<built-in", "nn.module:", "concurrent/futures/", "logging/", "uvicorn/", "fastapi/", "starlette/"}

var lowSignal = []string{"__torch_function__", "__torch_dispatch__", " __call__", " _call_impl", " _wrapped_call_impl", "model_executor/parameter.py:", "compilation/cuda_graph.py:", "torch/fx/graph_module.py:", "_torch/utils.py:"}

// siteName normalises a Python frame name "<path>(<line>): <func>" to "<repo path>:<line> <func>".
// Names without that shape (built-ins, nn.Module markers) are returned trimmed.
func siteName(raw string) string {
	s := strings.TrimSpace(strings.ReplaceAll(raw, `\`, "/"))
	i := strings.Index(s, ".py(")
	if i < 0 {
		return s
	}
	path := s[:i+3]
	rest := s[i+4:]
	line, fn, ok := strings.Cut(rest, "):")
	if !ok {
		return s
	}
	return repoPath(path) + ":" + line + " " + strings.TrimSpace(fn)
}

func repoPath(p string) string {
	lp := strings.ToLower(p)
	for _, m := range frameworkMarkers {
		if i := strings.Index(lp, m); i >= 0 {
			return p[i:]
		}
	}
	if i := strings.Index(lp, "sglang/"); i >= 0 {
		return "python/" + p[i:]
	}
	if i := strings.LastIndex(lp, "site-packages/"); i >= 0 {
		return p[i+len("site-packages/"):]
	}
	if i := strings.LastIndex(lp, "dist-packages/"); i >= 0 {
		return p[i+len("dist-packages/"):]
	}
	return strings.TrimLeft(p, "/")
}

// siteScore ranks a normalised site name.
func siteScore(site string) int {
	l := strings.ToLower(site)
	for _, p := range noisePrefixes {
		if strings.HasPrefix(l, p) {
			return scoreNoise
		}
	}
	if !strings.Contains(l, ".py:") {
		return scoreNoise
	}
	fw := false
	for _, m := range frameworkMarkers {
		if strings.HasPrefix(l, m) {
			fw = true
			break
		}
	}
	if strings.HasPrefix(l, "torch/") || strings.HasPrefix(l, "triton/") || strings.HasPrefix(l, "torch_") {
		return scoreTorch
	}
	for _, w := range lowSignal {
		if strings.Contains(l, w) {
			return scoreWrapper
		}
	}
	if fw {
		return scoreFramework
	}
	return scoreUserCode
}

// siteFinder memoises, per frame, the best site of the frame's chain so that attributing
// millions of ops costs O(frames), not O(ops × depth).
type siteFinder struct {
	t       *trace.Trace
	names   []siteInfo // per frame name id (info); score scoreUnknown: not computed yet
	best    []int32    // per frame: index of the best frame on its chain; -2 = not computed
	scratch []int32
}

// scoreUnknown marks a name whose siteInfo is not computed yet; no score is this low.
const scoreUnknown = math.MinInt

type siteInfo struct {
	name  string
	score int
}

func newSiteFinder(t *trace.Trace) *siteFinder {
	b := make([]int32, len(t.Frames))
	for i := range b {
		b[i] = -2
	}
	return &siteFinder{t: t, best: b}
}

// info is the site name and score of frame f's name, computed once per name. The cache is a
// table by name id, not a map: the triage asks it once per GPU op.
func (s *siteFinder) info(f int32) siteInfo {
	id := s.t.Frames[f].Name
	if int(id) >= len(s.names) {
		grown := make([]siteInfo, max(s.t.Names.Len(), int(id)+1))
		for i := copy(grown, s.names); i < len(grown); i++ {
			grown[i].score = scoreUnknown
		}
		s.names = grown
	}
	if si := s.names[id]; si.score != scoreUnknown {
		return si
	}
	n := siteName(s.t.Name(id))
	si := siteInfo{name: n, score: siteScore(n)}
	s.names[id] = si
	return si
}

// bestFrame returns the deepest frame with the highest score on the chain from f to the root.
func (s *siteFinder) bestFrame(f int32) int32 {
	if f < 0 || int(f) >= len(s.best) {
		return trace.NoID
	}
	if s.best[f] != -2 {
		return s.best[f]
	}
	chain := s.scratch[:0]
	cur := f
	for cur >= 0 && int(cur) < len(s.best) && s.best[cur] == -2 {
		chain = append(chain, cur)
		p := s.t.Frames[cur].Parent
		if p == cur || len(chain) > 4096 { // a cycle in bad input: stop
			break
		}
		cur = p
	}
	above := int32(trace.NoID)
	if cur >= 0 && int(cur) < len(s.best) && s.best[cur] != -2 {
		above = s.best[cur]
	}
	for i := len(chain) - 1; i >= 0; i-- {
		fr := chain[i]
		if above < 0 || s.info(fr).score >= s.info(above).score {
			above = fr
		}
		s.best[fr] = above
	}
	s.scratch = chain
	return s.best[f]
}
