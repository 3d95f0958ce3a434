package backends

import (
	"strconv"
	"strings"

	"github.com/sglprof/runner/plans"
)

// Setting is one server setting that changes benchmark results, as an engine's server is
// configured for a cell: what the parity check of an engine axis lays side by side (SGLang and
// vLLM spell and default these differently, so the same plan can measure different things).
type Setting struct {
	// Name is the setting in words ("prefix caching"), the same for every engine.
	Name string
	// Value is what this server does, with where it comes from ("on (radix cache, default)").
	Value string
	// Same is what must be equal between two engines for the setting to match: a normal form
	// of Value. Two engines' defaults that are not the same thing get different forms.
	Same string
}

// Parity setting names, in the order the parity table lists them.
const (
	SettingPrefixCache = "prefix caching"
	SettingCacheReset  = "prefix cache reset"
	SettingMaxLen      = "max model length"
	SettingChunked     = "chunked prefill"
	SettingIgnoreEOS   = "ignore_eos"
	SettingSampling    = "sampling"
	SettingTP          = "tensor parallel size"
)

// ParitySettings lists every setting name in table order.
var ParitySettings = []string{SettingPrefixCache, SettingCacheReset, SettingMaxLen, SettingChunked, SettingIgnoreEOS, SettingSampling, SettingTP}

// RequestSettings are the settings the runner's own client fixes for every engine: each
// request asks for ignore_eos and greedy sampling (temperature 0) on every API.
func RequestSettings() []Setting {
	return []Setting{
		{Name: SettingIgnoreEOS, Value: "true (every request)", Same: "true"},
	}
}

// CacheResetSetting is whether each cell of the server starts with an empty prefix cache
// ([load] flush_cache): cached says the server caches prefixes at all, route is its reset
// route, and blocked (empty when none) why the server will not have it. A cache that is off
// and one reset before every cell are the same thing: no cell finds another's prompts.
func CacheResetSetting(c plans.Cell, cached bool, route, blocked string) Setting {
	switch {
	case !cached:
		return Setting{Name: SettingCacheReset, Value: "nothing to reset (prefix caching off)", Same: "cold"}
	case !c.Load.FlushCache:
		return Setting{Name: SettingCacheReset, Value: "off ([load] flush_cache = false): a cell finds earlier cells' prompts cached", Same: "warm"}
	case blocked != "":
		return Setting{Name: SettingCacheReset, Value: "not possible: " + blocked, Same: "warm"}
	}
	return Setting{Name: SettingCacheReset, Value: "before each cell (POST " + route + ")", Same: "cold"}
}

// FlagValue is the value of the last of the given flags in argv ("--flag V" or "--flag=V"),
// and whether one was there; a bare flag (no value follows) has value "". A negative number
// after the flag is its value, as argparse reads it (--chunked-prefill-size -1).
func FlagValue(argv []string, names ...string) (string, bool) {
	val, found := "", false
	for i := 0; i < len(argv); i++ {
		name, v, hasV := strings.Cut(argv[i], "=")
		for _, n := range names {
			if name != n {
				continue
			}
			found, val = true, v
			if !hasV {
				val = ""
				if i+1 < len(argv) && (!strings.HasPrefix(argv[i+1], "-") || isNumber(argv[i+1])) {
					val = argv[i+1]
					i++
				}
			}
		}
	}
	return val, found
}

// isNumber reports whether s is a number: argparse takes "-1" as an option's value, not as an
// option (a parser has no options that look like negative numbers).
func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}
