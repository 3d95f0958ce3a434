package sim

import (
	"math"
	"path"
	"strings"
)

// KnownModels are the hub ids the simulated sglang resolves natively; any other model falls
// back to the diffusers backend (unless --backend sglang), as real sglang does for models its
// registry does not know.
var KnownModels = []string{
	"Qwen/Qwen-Image",
	"black-forest-labs/FLUX.1-dev",
	"Tongyi-MAI/Z-Image-Turbo",
	"Wan-AI/Wan2.1-T2V-1.3B-Diffusers",
}

// modelProfile holds the timings of one model on an H100 at its default resolution; the
// figures are plausible public ones, not measurements of ours.
type modelProfile struct {
	id        string
	pipeline  string
	video     bool
	w, h      int
	frames    int
	steps     int
	stepMS    float64 // one denoising step at w x h (x frames)
	layers    int
	textMS    float64
	vaeMS     float64 // at w x h (x frames)
	loadS     float64 // weights load + pipeline init
	peakGB    float64
	residentG float64 // allocated after load
}

var profiles = map[string]modelProfile{
	"Qwen/Qwen-Image":                  {id: "Qwen/Qwen-Image", pipeline: "QwenImagePipeline", w: 1024, h: 1024, frames: 1, steps: 50, stepMS: 400, layers: 60, textMS: 180, vaeMS: 120, loadS: 7.5, peakGB: 57.62, residentG: 53.8},
	"black-forest-labs/FLUX.1-dev":     {id: "black-forest-labs/FLUX.1-dev", pipeline: "FluxPipeline", w: 1024, h: 1024, frames: 1, steps: 50, stepMS: 265, layers: 57, textMS: 45, vaeMS: 95, loadS: 6.0, peakGB: 33.84, residentG: 31.4},
	"Tongyi-MAI/Z-Image-Turbo":         {id: "Tongyi-MAI/Z-Image-Turbo", pipeline: "ZImagePipeline", w: 1024, h: 1024, frames: 1, steps: 9, stepMS: 95, layers: 30, textMS: 60, vaeMS: 95, loadS: 4.0, peakGB: 21.37, residentG: 19.6},
	"Wan-AI/Wan2.1-T2V-1.3B-Diffusers": {id: "Wan-AI/Wan2.1-T2V-1.3B-Diffusers", pipeline: "WanPipeline", video: true, w: 832, h: 480, frames: 81, steps: 50, stepMS: 520, layers: 30, textMS: 35, vaeMS: 2400, loadS: 5.0, peakGB: 18.92, residentG: 12.1},
}

var diffusersProfile = modelProfile{pipeline: "DiffusionPipeline", w: 1024, h: 1024, frames: 1, steps: 50, stepMS: 450, layers: 40, textMS: 150, vaeMS: 130, loadS: 9.0, peakGB: 41.3, residentG: 38.2}

// resolveModel mirrors the registry: an exact hub id, or a local path whose last element is
// the repository name of a known model; --model-id overrides what is matched.
func resolveModel(modelPath, modelID string) (modelProfile, bool) {
	key := modelPath
	if modelID != "" {
		key = modelID
	}
	if p, ok := profiles[key]; ok {
		return p, true
	}
	base := path.Base(strings.TrimRight(key, "/"))
	for id, p := range profiles {
		if path.Base(id) == base {
			return p, true
		}
	}
	return modelProfile{}, false
}

func quantized(modelPath string) bool {
	l := strings.ToLower(modelPath)
	return strings.Contains(l, "-4bit") || strings.Contains(l, "-awq") || strings.Contains(l, "-gptq")
}

// pixelFactor scales a time measured at the model's default size to w x h x frames:
// token count grows with pixels and attention a bit faster than linearly.
func (m modelProfile) pixelFactor(w, h, frames int) float64 {
	ref := float64(m.w * m.h * max(m.frames, 1))
	px := float64(w * h * max(frames, 1))
	if ref <= 0 || px <= 0 {
		return 1
	}
	return math.Pow(px/ref, 1.1)
}
