package sglang

import (
	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/plans"
)

// ParitySettings are the settings of the cell's SGLang LLM server that change results, read
// from its flags with SGLang's defaults: the radix (prefix) cache on unless
// --disable-radix-cache, the model's context length unless --context-length, chunked prefill
// in chunks of --chunked-prefill-size (default chosen by GPU memory; -1 turns it off), and the
// request's sampling parameters with SGLang's defaults for the rest.
func ParitySettings(c plans.Cell) []backends.Setting {
	args := c.Backend.ExtraArgs
	var out []backends.Setting
	_, off := backends.FlagValue(args, "--disable-radix-cache")
	if off {
		out = append(out, backends.Setting{Name: backends.SettingPrefixCache, Value: "off (--disable-radix-cache)", Same: "off"})
	} else {
		out = append(out, backends.Setting{Name: backends.SettingPrefixCache, Value: "on (radix cache, default)", Same: "on"})
	}
	out = append(out, backends.CacheResetSetting(c, !off, FlushCachePath, ""))
	if v, ok := backends.FlagValue(args, "--context-length"); ok {
		out = append(out, backends.Setting{Name: backends.SettingMaxLen, Value: v + " (--context-length)", Same: v})
	} else {
		out = append(out, backends.Setting{Name: backends.SettingMaxLen, Value: "the model's (default)", Same: "model"})
	}
	switch v, ok := backends.FlagValue(args, "--chunked-prefill-size"); {
	case ok && v == "-1":
		out = append(out, backends.Setting{Name: backends.SettingChunked, Value: "off (--chunked-prefill-size -1)", Same: "off"})
	case ok:
		out = append(out, backends.Setting{Name: backends.SettingChunked, Value: "on, chunks of " + v + " tokens (--chunked-prefill-size)", Same: "on:" + v})
	default:
		out = append(out, backends.Setting{Name: backends.SettingChunked, Value: "on, SGLang's default chunk (by GPU memory)", Same: "on:sglang-default"})
	}
	out = append(out, backends.RequestSettings()...)
	out = append(out, backends.Setting{Name: backends.SettingSampling, Value: "temperature 0; the rest SGLang's defaults", Same: "greedy"})
	tp := "1"
	if v, ok := backends.FlagValue(args, "--tp-size", "--tensor-parallel-size", "--tp"); ok {
		tp = v
	}
	out = append(out, backends.Setting{Name: backends.SettingTP, Value: tp, Same: tp})
	return out
}
