package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/sglprof/runner/reports/kineto/kinetogen"
)

// The diffusion server's profiling window (multimodal_gen/runtime/entrypoints/http_server.py):
// POST (or GET) /start_profile starts a full-stage torch profiler in the HTTP process and, via
// StartProfileReq, in every GPU worker; /stop_profile stops them with dump_rank=None, so every
// rank exports `<profile_id>-full_stages-global-rank<r>.trace.json.gz` into output_dir. It is
// the one way to profile a request on /v1/images/generations: ImageGenerationsRequest has no
// profiling fields and the image handler forwards none (extra fields are allowed and ignored).

// diffusionWindow is an open diffusion profiling window.
type diffusionWindow struct {
	id      string
	dir     string
	firstNS int64 // simulated start of the first request in the window (0: none yet)
	steps   int   // denoising steps run in the window
	stepNS  int64 // GPU time of one step of the last request
	textNS  int64
	vaeNS   int64
	stack   bool // with_stack (default true)
}

// diffusionProfileReq is the diffusion ProfileReqInput.
type diffusionProfileReq struct {
	OutputDir    *string  `json:"output_dir"`
	Activities   []string `json:"activities"`
	WithStack    *bool    `json:"with_stack"`
	RecordShapes *bool    `json:"record_shapes"`
}

func plainText(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	io.WriteString(w, msg)
}

// diffusionStartProfile is /start_profile of the diffusion server.
func (s *server) diffusionStartProfile(w http.ResponseWriter, r *http.Request) {
	var q diffusionProfileReq
	if r.Method == http.MethodPost {
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&q); err != nil && !errors.Is(err, io.EOF) {
			writeJSON(w, 422, map[string]any{"detail": []map[string]any{{"type": "json_invalid", "loc": []string{"body"}, "msg": err.Error()}}})
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dwin != nil {
		plainText(w, 400, "Profiling is already in progress. Call /stop_profile first.\n")
		return
	}
	dir := s.env["SGLANG_TORCH_PROFILER_DIR"] // envs.SGLANG_TORCH_PROFILER_DIR, default /tmp
	if dir == "" {
		dir = "/tmp"
	}
	if q.OutputDir != nil && *q.OutputDir != "" {
		dir = *q.OutputDir
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(s.cwd, dir)
	}
	id := strconv.FormatInt(time.Now().Unix(), 10)
	if q.Activities == nil {
		q.Activities = []string{"CPU", "GPU"}
	}
	// SGLDiffusionProfiler records CPU and CUDA whatever activities say: its resolver maps
	// cpu/gpu/cuda, warns "Unknown profiler activity ...; ignoring." for anything else (MEM,
	// CUDA_PROFILER) and falls back to CPU+CUDA when nothing is left.
	for _, a := range q.Activities {
		if l := strings.ToLower(a); l != "cpu" && l != "gpu" && l != "cuda" {
			s.log.log("Unknown profiler activity: '%s'; ignoring.", a)
		}
	}
	// with_stack = obj.with_stack or envs.SGLANG_PROFILE_WITH_STACK.get() (same for
	// record_shapes), both variables default true: a false in the body changes nothing, only
	// the server's environment turns them off.
	stack := (q.WithStack != nil && *q.WithStack) || s.envBool("SGLANG_PROFILE_WITH_STACK", true)
	shapes := (q.RecordShapes != nil && *q.RecordShapes) || s.envBool("SGLANG_PROFILE_RECORD_SHAPES", true)
	s.dwin = &diffusionWindow{id: id, dir: dir, stack: stack}
	s.log.log("[sim] profiler options: activities=%v with_stack=%v record_shapes=%v", q.Activities, stack, shapes)
	s.log.log("Profiling request: %s for full stages...", id)
	s.log.log("Profilers started with profile_id=%s. Output: %s", id, dir)
	plainText(w, 200, fmt.Sprintf("Profiling started (profile_id=%s). Traces will be saved to: %s\n", id, dir))
}

// diffusionStopProfile is /stop_profile of the diffusion server: it waits for the request on
// the GPU (the scheduler handles StopProfileReq after it), then every rank exports its trace.
func (s *server) diffusionStopProfile(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	win := s.dwin
	s.mu.Unlock()
	if win == nil {
		plainText(w, 400, "Profiling is not in progress. Call /start_profile first.\n")
		return
	}
	s.gpu.Lock()
	s.mu.Lock()
	s.dwin = nil
	s.mu.Unlock()
	defer s.gpu.Unlock()
	ranks := max(s.p.intv("num_gpus", 1), s.p.intv("tp_size", 1), 1)
	var errs []string
	for rank := range ranks {
		path := filepath.Join(win.dir, win.id+"-full_stages-global-rank"+strconv.Itoa(rank)+".trace.json.gz")
		var err error
		if win.steps == 0 {
			err = writeEmptyTrace(path) // nothing ran: a trace without GPU work
		} else {
			err = writeGzTrace(path, s.windowRankConfig(win, rank, ranks))
		}
		if err != nil {
			s.log.log("Failed to export trace: %v", err)
			errs = append(errs, err.Error())
			continue
		}
		s.log.log("Saved profiler traces to: %s%s%s", ansiCyan, path, ansiReset)
	}
	s.log.log("Profilers stopped (profile_id=%s). Traces saved.", win.id)
	if len(errs) > 0 {
		plainText(w, 200, fmt.Sprintf("Profiling stopped (profile_id=%s) with warnings: GPU Worker: %s\n", win.id, errs[0]))
		return
	}
	plainText(w, 200, fmt.Sprintf("Profiling stopped (profile_id=%s). Traces saved to SGLANG_TORCH_PROFILER_DIR.\n", win.id))
}

// windowRankConfig is the trace of one rank of a /start_profile window of ranks ranks.
func (s *server) windowRankConfig(win *diffusionWindow, rank, ranks int) kinetogen.Config {
	late, wait := s.k.lateComm(rank, ranks)
	return kinetogen.Config{Flavor: kinetogen.FlavorDiffusion, Layers: s.prof.layers, WithStack: win.stack,
		Model: s.model, StepScale: rankScale(s.k.slow, rank, s.k.slowRank, s.k.slowRankF), StepNS: win.stepNS, BaseTimeNS: win.firstNS, AllStages: true, Steps: win.steps,
		StageNS: map[string]int64{kinetogen.StageTextEncoding: win.textNS, kinetogen.StageDecoding: win.vaeNS},
		Rank:    rank, WorldSize: ranks, CommStream: ranks > 1, CommLateNS: late, CommWaitNS: wait}
}

// recordWindow adds a request's GPU work to the open window, if any.
func (s *server) recordWindow(startNS int64, steps int, stepNS, textNS, vaeNS int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dwin == nil {
		return
	}
	if s.dwin.firstNS == 0 {
		s.dwin.firstNS = startNS
	}
	s.dwin.steps += steps
	s.dwin.stepNS, s.dwin.textNS, s.dwin.vaeNS = stepNS, textNS, vaeNS
}

// envBool reads a boolean variable of the server's environment as sglang's EnvBool does:
// true/1/yes/y and false/0/no/n in any case; unset or anything else is def (sglang warns
// "Invalid value for NAME" and uses the default).
func (s *server) envBool(name string, def bool) bool {
	v, ok := s.env[name]
	if !ok {
		return def
	}
	switch strings.ToLower(v) {
	case "true", "1", "yes", "y":
		return true
	case "false", "0", "no", "n":
		return false
	}
	s.log.log("UserWarning: Invalid value for %s: \"%s\" is not a valid boolean value, using default \"%v\"", name, strings.ToLower(v), pyBool(def))
	return def
}

func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

// writeEmptyTrace writes a gzip trace with no events.
func writeEmptyTrace(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestSpeed)
	zw.Write([]byte(`{"schemaVersion": 1, "traceEvents": []}`))
	zw.Close()
	return os.WriteFile(path, b.Bytes(), 0o644)
}
