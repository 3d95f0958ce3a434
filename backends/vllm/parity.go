package vllm

import (
	"fmt"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/plans"
)

// ParitySettings are the settings of the cell's vLLM server that change results, read from its
// flags with vLLM's defaults (V1 engine): prefix caching on unless --no-enable-prefix-caching,
// the model's context length unless --max-model-len, chunked prefill on (its token budget
// --max-num-batched-tokens) unless --no-enable-chunked-prefill, and --generation-config auto,
// which fills what a request leaves out (repetition_penalty, top_p, top_k) from the model's
// generation_config.json.
func ParitySettings(c plans.Cell) []backends.Setting {
	args := c.Backend.ExtraArgs
	on := func(flag string, def bool) bool {
		_, yes := backends.FlagValue(args, "--"+flag)
		_, no := backends.FlagValue(args, "--no-"+flag)
		switch {
		case no && !yes:
			return false
		case yes:
			return true
		}
		return def
	}
	var out []backends.Setting
	cached := on("enable-prefix-caching", true)
	if cached {
		out = append(out, backends.Setting{Name: backends.SettingPrefixCache, Value: "on (V1 default)", Same: "on"})
	} else {
		out = append(out, backends.Setting{Name: backends.SettingPrefixCache, Value: "off (--no-enable-prefix-caching)", Same: "off"})
	}
	out = append(out, backends.CacheResetSetting(c, cached, ResetPrefixCachePath, devModeBlocked(c)))
	if v, ok := backends.FlagValue(args, "--max-model-len"); ok {
		out = append(out, backends.Setting{Name: backends.SettingMaxLen, Value: v + " (--max-model-len)", Same: v})
	} else {
		out = append(out, backends.Setting{Name: backends.SettingMaxLen, Value: "the model's (default)", Same: "model"})
	}
	switch v, ok := backends.FlagValue(args, "--max-num-batched-tokens"); {
	case !on("enable-chunked-prefill", true):
		out = append(out, backends.Setting{Name: backends.SettingChunked, Value: "off (--no-enable-chunked-prefill)", Same: "off"})
	case ok:
		out = append(out, backends.Setting{Name: backends.SettingChunked, Value: "on, " + v + " tokens a step (--max-num-batched-tokens)", Same: "on:" + v})
	default:
		out = append(out, backends.Setting{Name: backends.SettingChunked, Value: "on, vLLM's default token budget", Same: "on:vllm-default"})
	}
	out = append(out, backends.RequestSettings()...)
	if v, ok := backends.FlagValue(args, "--generation-config"); ok && v == "vllm" {
		out = append(out, backends.Setting{Name: backends.SettingSampling, Value: "temperature 0; the rest vLLM's neutral defaults (--generation-config vllm)", Same: "greedy"})
	} else {
		out = append(out, backends.Setting{Name: backends.SettingSampling, Value: "temperature 0; the rest from the model's generation_config.json (--generation-config auto, default)", Same: "greedy+model-config"})
	}
	tp := "1"
	if v, ok := backends.FlagValue(args, "--tensor-parallel-size", "-tp"); ok {
		tp = v
	}
	out = append(out, backends.Setting{Name: backends.SettingTP, Value: tp, Same: tp})
	return out
}

// devModeBlocked is why the cell's vLLM server will have no reset route: a backend.env value of
// VLLM_SERVER_DEV_MODE that is false or unreadable (ServerCommand sets 1 only when the plan
// sets none). Empty when the route will be there, or cannot be known (an attached server).
func devModeBlocked(c plans.Cell) string {
	if c.Backend.URL != "" {
		return ""
	}
	v, set := c.Backend.Env[EnvDevMode]
	if !set {
		return ""
	}
	switch on, valid := DevMode(c.Backend.Env); {
	case !valid:
		return fmt.Sprintf("backend.env %s = %q is not an integer, which stops vLLM", EnvDevMode, v)
	case !on:
		return fmt.Sprintf("backend.env %s = %q hides %s", EnvDevMode, v, ResetPrefixCachePath)
	}
	return ""
}
