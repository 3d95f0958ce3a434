package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/sglprof/runner/reports/kineto/kinetogen"
)

const (
	kinetogenTextEncoding = kinetogen.StageTextEncoding
	kinetogenDecoding     = kinetogen.StageDecoding
)

func kinetogenStageFactor(stage string, slow map[string]float64) float64 {
	return kinetogen.StageFactor(kinetogen.FlavorDiffusion, stage, slow)
}

// traceConfig is the kinetogen configuration matching this run.
func (g *gen) traceConfig() kinetogen.Config {
	return kinetogen.Config{
		Flavor:     kinetogen.FlavorDiffusion,
		Layers:     g.prof.layers,
		CommStream: g.tp > 1,
		WorldSize:  g.tp,
		WithStack:  true, // sglang's diffusion profiler always records stacks
		Seed:       int64(g.seed),
		Model:      g.model,
		StepScale:  g.k.slow,
		StepNS:     int64(g.prof.stepMS * 1e6),
	}
}

// traceDir resolves the profiler output directory as the current diffusion profiler does.
func (g *gen) traceDir() string {
	for _, k := range []string{"SGLANG_DIFFUSION_TORCH_PROFILER_DIR", "SGLANG_TORCH_PROFILER_DIR"} {
		if v := g.env[k]; v != "" {
			return g.abs(v)
		}
	}
	return g.abs("logs")
}

// saveProfiled exports the denoise-only window: the active steps recorded after the warmup
// step, as `<request_id>-<N>_steps-global-rank0.trace.json.gz`.
func (g *gen) saveProfiled(r *request, start int64, first int, steps []int64, nProf int) error {
	cfg := g.traceConfig()
	cfg.FirstStep = first
	cfg.Steps = max(len(steps), 1)
	cfg.StepDurNS = steps
	cfg.BaseTimeNS = start - 50_000
	return g.writeTrace(r, r.id+"-"+strconv.Itoa(nProf)+"_steps-global-rank0.trace.json.gz", cfg)
}

// saveTrace exports the whole pipeline (--profile-all-stages).
func (g *gen) saveTrace(r *request, steps int) error {
	cfg := g.traceConfig()
	cfg.AllStages = true
	cfg.Steps = steps
	factor := g.stageFactor("DenoisingStage")
	for _, d := range r.stepsMS {
		cfg.StepDurNS = append(cfg.StepDurNS, int64(d/factor*1e6))
	}
	cfg.StageNS = map[string]int64{
		kinetogen.StageTextEncoding: int64(g.prof.textMS * 1e6),
		kinetogen.StageDecoding:     int64(g.prof.vaeMS * g.prof.pixelFactor(g.w, g.h, g.frames) * 1e6),
	}
	cfg.BaseTimeNS = r.startAbs - 50_000
	return g.writeTrace(r, r.id+"-full_stages-global-rank0.trace.json.gz", cfg)
}

// writeTrace writes the trace of a per-request profile. Upstream's pipeline executor profiles
// such a request on rank 0 only and exports `…-global-rank0.trace.json.gz` from it, whatever
// --num-gpus or --tp-size say (docs/upstream.md); every rank exports only in the server's
// /start_profile window (window.go).
func (g *gen) writeTrace(r *request, name string, cfg kinetogen.Config) error {
	c := cfg
	c.Rank = 0
	c.StepScale = rankScale(cfg.StepScale, 0, g.k.slowRank, g.k.slowRankF)
	return g.writeRankTrace(r, name, c)
}

// rankScale is rank's kernel slowdown: the straggler's compute kernels run factor times longer,
// and on the other ranks the collectives last longer by the time they wait for it (a
// collective ends together on every rank).
// slowGroups are the kernel groups a straggler rank runs slower: its compute.
var slowGroups = []string{kinetogen.GroupGEMM, kinetogen.GroupAttention, kinetogen.GroupNorm, kinetogen.GroupModulation, kinetogen.GroupActivation}

func rankScale(base map[string]float64, rank, slowRank int, factor float64) map[string]float64 {
	if slowRank < 0 || factor == 1 {
		return base
	}
	out := make(map[string]float64, len(base)+4)
	for k, v := range base {
		out[k] = v
	}
	mul := func(k string, f float64) {
		if v, ok := out[k]; ok {
			out[k] = v * f
		} else {
			out[k] = f
		}
	}
	if rank == slowRank {
		for _, grp := range slowGroups {
			mul(grp, factor)
		}
	} else {
		// The others' all-reduces last as long as the straggler's extra compute before them,
		// and the kernels after an all-reduce wait for it, so their stage windows end about
		// when the straggler's does (a real TP run: fast ranks wait inside NCCL kernels).
		mul(kinetogen.GroupComm, kinetogen.CommStretch(kinetogen.FlavorDiffusion, slowGroups, factor))
	}
	return out
}

func (g *gen) writeRankTrace(r *request, name string, cfg kinetogen.Config) error {
	dir := g.traceDir()
	path := filepath.Join(dir, name)
	cfg.TraceName = filepath.Join(dir, "tmp"+r.id+".json")
	if g.k.fail["trace-fail"] {
		g.log.log("Failed to save trace: [Errno 28] No space left on device: '%s'", path)
		return nil
	}
	err := func() error {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		bw := bufio.NewWriterSize(f, 1<<20)
		// The fastest level: compressing the trace at the default level was a fifth of a
		// simulated torch cell's CPU (the tests run hundreds), and no reader depends on the ratio.
		zw, _ := gzip.NewWriterLevel(bw, gzip.BestSpeed)
		if _, err := kinetogen.Write(zw, cfg); err != nil {
			f.Close()
			return err
		}
		if err := zw.Close(); err != nil {
			f.Close()
			return err
		}
		if err := bw.Flush(); err != nil {
			f.Close()
			return err
		}
		if g.k.fail["trace-truncated"] {
			if st, err := f.Stat(); err == nil {
				f.Truncate(st.Size() / 2)
			}
		}
		return f.Close()
	}()
	if err != nil {
		g.log.log("Failed to save trace: %v", err)
		return nil
	}
	if cfg.Rank == 0 {
		r.trace = path
	}
	g.log.log("Saved profiler traces to: %s%s%s", ansiCyan, path, ansiReset)
	return nil
}

// emitStep appends one denoising step's GPU activity to the nsys activity file.
func (g *gen) emitStep(i int, abs int64, baseMS float64) {
	if g.act == nil {
		return
	}
	cfg := g.traceConfig()
	cfg.Steps = 1
	cfg.StepDurNS = []int64{int64(baseMS * 1e6)}
	cfg.BaseTimeNS = abs - 50_000
	cfg.Seed = int64(g.seed)*1000 + int64(i)
	cfg.WithStack = false
	g.emit(cfg)
}

// emitStage appends a text-encoding or VAE-decoding stage's activity.
func (g *gen) emitStage(stage string, abs int64, baseMS float64) {
	if g.act == nil {
		return
	}
	cfg := g.traceConfig()
	cfg.StageOnly = stage
	cfg.StageNS = map[string]int64{stage: int64(baseMS * 1e6)}
	cfg.BaseTimeNS = abs - 50_000
	cfg.WithStack = false
	g.emit(cfg)
}

func (g *gen) emit(cfg kinetogen.Config) {
	a := g.act
	pid := int32(os.Getpid())
	base := g.corr
	var top int64
	kinetogen.Walk(cfg, func(op *kinetogen.Op) {
		corr := base + op.Correlation
		top = max(top, op.Correlation)
		switch op.Kind {
		case kinetogen.OpKernel:
			a.put(&actRec{K: "kernel", S: op.StartNS, E: op.StartNS + op.DurNS, Dev: int32(op.Device), Str: int32(op.Stream), Corr: corr,
				N: a.name(op.Name), G: op.Grid, B: op.Block})
		case kinetogen.OpMemcpy:
			ck := int32(1)
			if op.CopyKind == "DtoH" {
				ck = 2
			}
			a.put(&actRec{K: "mem", S: op.StartNS, E: op.StartNS + op.DurNS, Dev: int32(op.Device), Str: int32(op.Stream), Corr: corr, Bytes: op.Bytes, CK: ck})
		case kinetogen.OpRuntime:
			a.put(&actRec{K: "rt", S: op.StartNS, E: op.StartNS + op.DurNS, PID: pid, TID: pid, Corr: corr, N: a.name(op.Name)})
		}
	})
	g.corr = base + top + 1
}

func (g *gen) nvtx(text string, s, e int64) {
	if g.act == nil {
		return
	}
	pid := int32(os.Getpid())
	g.act.put(&actRec{K: "nvtx", S: s, E: e, PID: pid, TID: pid, Text: text})
}

// perfDump is the current --perf-dump-path schema (§A.4), fields in sglang's order.
type perfDump struct {
	Timestamp         string        `json:"timestamp"`
	RequestID         string        `json:"request_id"`
	CommitHash        string        `json:"commit_hash"`
	Tag               string        `json:"tag"`
	TotalDurationMS   float64       `json:"total_duration_ms"`
	Steps             []perfStep    `json:"steps"`
	DenoiseStepsMS    []perfDenoise `json:"denoise_steps_ms"`
	MemoryCheckpoints orderedMem    `json:"memory_checkpoints"`
	Meta              perfMeta      `json:"meta"`
}

type perfStep struct {
	Name       string  `json:"name"`
	DurationMS float64 `json:"duration_ms"`
}

type perfDenoise struct {
	Step       int     `json:"step"`
	DurationMS float64 `json:"duration_ms"`
}

type perfMeta struct {
	Prompt string `json:"prompt"`
	Model  string `json:"model"`
}

type memEntry struct {
	AllocatedMB     float64 `json:"allocated_mb"`
	ReservedMB      float64 `json:"reserved_mb"`
	PeakAllocatedMB float64 `json:"peak_allocated_mb"`
	PeakReservedMB  float64 `json:"peak_reserved_mb"`
}

// orderedMem keeps the checkpoints in stage order, as Python's dict does.
type orderedMem []memCheckpoint

func (o orderedMem) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteString(", ")
		}
		k, _ := json.Marshal("after_" + m.stage)
		v, err := json.Marshal(memEntry{round2(m.alloc), round2(m.reserved), round2(m.peakA), round2(m.peakRe)})
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteString(": ")
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }
func round4(f float64) float64 { return math.Round(f*1e4) / 1e4 }

func writePerfDump(path string, r *request, g *gen) error {
	commit := g.env["SGLANG_GIT_COMMIT"]
	if commit == "" {
		commit = sglangCommit
	}
	d := perfDump{
		Timestamp:         time.Now().UTC().Format("2006-01-02T15:04:05.000000+00:00"),
		RequestID:         r.id,
		CommitHash:        commit,
		Tag:               "cli_generate",
		TotalDurationMS:   round4(r.totalMS),
		Steps:             []perfStep{},
		DenoiseStepsMS:    []perfDenoise{},
		MemoryCheckpoints: r.mem,
		Meta:              perfMeta{Prompt: r.prompt, Model: g.model},
	}
	for _, s := range r.stages {
		d.Steps = append(d.Steps, perfStep{s.name, round4(s.ms)})
	}
	for i, s := range r.stepsMS {
		d.DenoiseStepsMS = append(d.DenoiseStepsMS, perfDenoise{i, round4(s)})
	}
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create perf dump directory: %w", err)
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// jpegImage is pngImage's gradient as a JPEG, for output names ending in .jpg.
func jpegImage(seed int) []byte {
	var b bytes.Buffer
	jpeg.Encode(&b, gradient(seed), nil)
	return b.Bytes()
}

// pngImage is a small deterministic gradient, a valid PNG any viewer opens.
func pngImage(seed int) []byte {
	var b bytes.Buffer
	png.Encode(&b, gradient(seed))
	return b.Bytes()
}

func gradient(seed int) image.Image {
	img := image.NewRGBA(image.Rect(0, 0, 64, 64))
	for y := 0; y < 64; y++ {
		for x := 0; x < 64; x++ {
			img.Set(x, y, color.RGBA{uint8(x*4 + seed), uint8(y * 4), uint8((x + y + seed*7) * 2), 255})
		}
	}
	return img
}

// fakeMP4 is an ISO-BMFF header (ftyp + empty mdat): recognisable as MP4, not playable.
func fakeMP4() []byte {
	return []byte{
		0, 0, 0, 0x18, 'f', 't', 'y', 'p', 'i', 's', 'o', 'm', 0, 0, 2, 0, 'i', 's', 'o', 'm', 'm', 'p', '4', '1',
		0, 0, 0, 8, 'm', 'd', 'a', 't',
	}
}
